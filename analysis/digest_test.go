package analysis

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// TestAlignDigest pins everything the aligner decides on the benchmark's
// stream, so that work on its speed cannot change a cause, a pod's
// attribution, a piece of evidence or a timeline unnoticed: every
// decision (as Aligned renders it, with its proven, likely and terminating
// flags), every pod timeline, the counters and the whole Result are
// hashed, one digest per stream, and compared with
// testdata/align_digest.txt.
//
// The streams are the benchmark's (BenchmarkAlignMillion) at a size where
// pods are evicted, and the same stream perturbed, so that rarer paths run:
// events dropped at random, pods named only by UID or only by name, client
// failures without their backend or their address.
//
// The digests were made by the aligner before its speed work. A change
// that means to alter results (the other tests say why) rewrites them with
// -update; then `-run TestAlignDigest -v -digest-dump DIR` writes what is
// hashed, to compare the code before and after with diff.
func TestAlignDigest(t *testing.T) {
	if testing.Short() {
		t.Skip("hashes about 100,000 decisions; -short skips it")
	}
	streams := []struct {
		name    string
		pods    int
		perturb bool
		retain  time.Duration // 0: the default
	}{
		// A short Retain evicts pods from a short stream.
		{"synth-200", 200, false, 20 * time.Second},
		{"synth-perturbed-300", 300, true, 20 * time.Second},
		{"synth-perturbed-200-default", 200, true, 0},
	}
	var lines []string
	for _, s := range streams {
		d := digestStream(t, s.name, s.pods, s.perturb, Options{Retain: s.retain})
		lines = append(lines, s.name+" "+d)
	}
	got := strings.Join(lines, "\n") + "\n"
	path := filepath.Join("testdata", "align_digest.txt")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./analysis -run TestAlignDigest -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("the aligner's results changed:\ngot:\n%swant:\n%s(-digest-dump DIR writes what is hashed, to diff against the code before)", got, want)
	}
}

var digestDump = flag.String("digest-dump", "", "TestAlignDigest: write what it hashes under this directory")

// digestStream aligns one stream and returns the hash of every result.
func digestStream(t *testing.T, name string, pods int, perturb bool, opts Options) string {
	t.Helper()
	o := opts.WithDefaults()
	c := newCollector(o, store.Query{})
	h := sha256.New()
	var out *bufio.Writer
	if *digestDump != "" {
		f, err := os.Create(filepath.Join(*digestDump, name+".txt"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		out = bufio.NewWriter(f)
		defer out.Flush()
	}
	write := func(line []byte) {
		h.Write(line)
		h.Write([]byte{'\n'})
		if out != nil {
			out.Write(line)
			out.WriteByte('\n')
		}
	}
	mustJSON := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// Pods are reported in map order when evicted together: their lines
	// are sorted before hashing.
	var timelines []string
	al := NewAligner(o, func(d *Decision) {
		write(fmt.Appendf(mustJSON(d.Aligned()), " proven=%v likely=%v terminating=%v", d.Proven, d.Likely, d.Terminating))
		c.failure(d)
	}, func(tl *PodTimeline) {
		evs := make([]EventView, 0, len(tl.events))
		for _, e := range tl.events {
			evs = append(evs, View(e))
		}
		timelines = append(timelines, string(mustJSON(tl))+" "+string(mustJSON(evs)))
		c.pod(tl)
	})
	g := newSynth(pods)
	rng := rand.New(rand.NewPCG(26, uint64(pods)))
	g.each(func(e *event.Event) {
		if perturb && !perturbEvent(e, rng) {
			return
		}
		c.see(e)
		if err := al.Add(e); err != nil {
			t.Fatal(err)
		}
	})
	al.Flush()
	c.lags = al.DataplaneLags(event.Window{})
	slices.Sort(timelines)
	for _, l := range timelines {
		write([]byte(l))
	}
	write(mustJSON(al.Stats()))
	res := c.result(al.Stats())
	canonicalOrder(res, func(v any) string { return string(mustJSON(v)) })
	write(mustJSON(res))
	return fmt.Sprintf("%x", h.Sum(nil))
}

// perturbEvent changes e in place to exercise rarer paths, or reports
// false to drop it. Whether a pod loses its UID or its name depends on the
// pod, so that its events agree.
func perturbEvent(e *event.Event, rng *rand.Rand) bool {
	if rng.IntN(100) < 12 {
		return false
	}
	if e.Kind == event.ClientFailure {
		switch rng.IntN(20) {
		case 0:
			e.Attrs = nil // the map is shared: drop it, never change it
		case 1:
			e.Local = netip.AddrPort{}
		}
		return true
	}
	if e.Pod.UID == "" {
		return true
	}
	f := fnv.New32a()
	f.Write([]byte(e.Pod.UID))
	switch f.Sum32() % 7 {
	case 0:
		e.Pod.UID = ""
	case 1:
		if e.Kind.IsKernel() {
			e.Pod.Namespace, e.Pod.Name = "", ""
		}
	}
	return true
}

// canonicalOrder sorts the lists of r whose order follows the order in
// which pods evicted together were reported (map order): pods that tie.
func canonicalOrder(r *Result, key func(any) string) {
	byKey := func(a, b any) int { return strings.Compare(key(a), key(b)) }
	slices.SortFunc(r.Timelines, func(a, b PodTimeline) int { return byKey(a, b) })
	for i := range r.Disruptions {
		slices.SortFunc(r.Disruptions[i].Replaced, func(a, b PodView) int { return byKey(a, b) })
		slices.SortFunc(r.Disruptions[i].NewPods, func(a, b NewPod) int { return byKey(a, b) })
	}
}
