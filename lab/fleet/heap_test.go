package fleet

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
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
	file := filepath.Join(t.TempDir(), "heap.pb.gz")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	sites, total, err := heapSites(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(sites) == 0 || sites[0].Func != "lab/fleet.holdHeap" {
		t.Fatalf("top sites %+v, want lab/fleet.holdHeap first", sites[:min(3, len(sites))])
	}
	if sites[0].Bytes < 48<<20 || total < sites[0].Bytes {
		t.Errorf("holdHeap holds %d bytes of %d in all; want about 64 MiB", sites[0].Bytes, total)
	}
	if _, _, err := heapSites(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("a missing profile read without error")
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
