package fleet

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"

	"github.com/google/pprof/profile"
)

// saveProfile fetches a runtime profile from url (a server's --pprof
// endpoint) into file.
func saveProfile(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return f.Close()
}

// serverHeap saves the server's heap profile (after a collection) into
// file and reads it into row.
func serverHeap(ctx context.Context, srv *server, file string, row *Row, logf func(string, ...any)) error {
	if err := saveProfile(ctx, srv.pprof+"heap?gc=1", file); err != nil {
		return err
	}
	sites, total, err := heapSites(file)
	if err != nil {
		return err
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

// heapSites reads a heap profile and sums its in-use bytes by the
// innermost drainscope function on each allocation's stack (the leaf
// when none is), largest first: which of the server's own code holds the
// heap. The total is the profile's in-use bytes in all.
func heapSites(file string) (sites []HeapSite, total int64, err error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", file, err)
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "inuse_space" {
			idx = i
		}
	}
	if idx < 0 {
		return nil, 0, fmt.Errorf("%s: not a heap profile (no inuse_space)", file)
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
