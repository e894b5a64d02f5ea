package fleet

import (
	"bytes"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
)

var held [][]byte

//go:noinline
func holdHeap(n int) {
	for range 64 {
		held = append(held, make([]byte, n/64))
	}
}

// heapSites puts the live heap under the drainscope function that
// allocated it: 64 MiB held by holdHeap come first, with at least what
// the profile's sampling can miss of them (a quarter, at most).
func TestHeapSites(t *testing.T) {
	holdHeap(64 << 20)
	defer func() { held = nil }()
	runtime.GC()
	var buf bytes.Buffer
	if err := pprof.Lookup("heap").WriteTo(&buf, 0); err != nil {
		t.Fatal(err)
	}
	sites, total, err := heapSites(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(sites) == 0 || sites[0].Func != "lab/fleet.holdHeap" {
		t.Fatalf("top sites %+v, want lab/fleet.holdHeap first", sites[:min(3, len(sites))])
	}
	if sites[0].Bytes < 48<<20 || total < sites[0].Bytes {
		t.Errorf("holdHeap holds %d bytes of %d in all; want about 64 MiB", sites[0].Bytes, total)
	}
	// Not a profile, and a profile that is not a heap's.
	if _, _, err := heapSites(strings.NewReader("metrics")); err == nil {
		t.Error("text read as a heap profile")
	}
	buf.Reset()
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := heapSites(&buf); err == nil || !strings.Contains(err.Error(), "inuse_space") {
		t.Errorf("a goroutine profile read as a heap's: %v", err)
	}
}

func TestShortFunc(t *testing.T) {
	for in, want := range map[string]string{
		"analysis.(*ring[go.shape.struct { a map[string]int; b int }]).push": "analysis.(*ring[…]).push",
		"analysis.(*Aligner).dataplane":                                      "analysis.(*Aligner).dataplane",
	} {
		if got := shortFunc(in); got != want {
			t.Errorf("shortFunc(%q) = %q, want %q", in, got, want)
		}
	}
}
