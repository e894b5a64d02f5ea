package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/google/pprof/profile"
)

// serverHeap fetches the server's heap profile (after a collection),
// keeps it in file for go tool pprof, and reads it into row.
func serverHeap(ctx context.Context, srv *server, file string, row *Row, logf func(string, ...any)) error {
	b, err := get(ctx, srv.pprof+"heap?gc=1")
	if err != nil {
		return err
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		return err
	}
	sites, total, err := heapSites(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	row.HeapInuse, row.HeapSites = total, sites
	logf("  the server's live heap once the writes ended: %d MiB (go tool pprof -sample_index=inuse_space %s)", total>>20, file)
	return nil
}

// HeapSite is the live heap one function of drainscope's allocated.
type HeapSite struct {
	Func  string
	Bytes int64
}

// ownPrefix names drainscope's own functions in a profile.
const ownPrefix = "github.com/drainscope/drainscope/"

// heapSites parses a heap profile and sums its in-use bytes by the
// innermost drainscope function on each allocation's stack (the leaf
// when none is), largest first: which of the server's own code holds the
// heap. The total is the profile's in-use bytes in all.
func heapSites(r io.Reader) (sites []HeapSite, total int64, err error) {
	p, err := profile.Parse(r)
	if err != nil {
		return nil, 0, err
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "inuse_space" {
			idx = i
		}
	}
	if idx < 0 {
		return nil, 0, errors.New("not a heap profile (no inuse_space)")
	}
	by := map[string]int64{}
	for _, s := range p.Sample {
		v := s.Value[idx]
		total += v
		by[ownFrame(s)] += v
	}
	for fn, b := range by {
		sites = append(sites, HeapSite{fn, b})
	}
	sort.Slice(sites, func(i, j int) bool { return sites[i].Bytes > sites[j].Bytes })
	return sites, total, nil
}

// ownFrame is the innermost drainscope function on s's stack, else its
// leaf.
func ownFrame(s *profile.Sample) string {
	leaf := "?"
	for i, loc := range s.Location {
		for _, l := range loc.Line { // innermost first, inlined callees before callers
			if l.Function == nil {
				continue
			}
			if i == 0 && leaf == "?" {
				leaf = l.Function.Name
			}
			if strings.HasPrefix(l.Function.Name, ownPrefix) {
				return shortFunc(strings.TrimPrefix(l.Function.Name, ownPrefix))
			}
		}
	}
	return leaf
}

// shortFunc leaves out a generic function's type arguments, which spell
// out whole struct types: analysis.(*ring[…]).push.
func shortFunc(name string) string {
	i, j := strings.IndexByte(name, '['), strings.LastIndexByte(name, ']')
	if i < 0 || j < i {
		return name
	}
	return name[:i+1] + "…" + name[j:]
}
