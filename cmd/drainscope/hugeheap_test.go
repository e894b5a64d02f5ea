package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// TestHugeHeap runs a fresh process (this test binary) that touches 64 MiB
// of new heap a page at a time, before hugeHeap and after it, and counts
// the page faults of each: after it the heap must come in huge pages, a
// fault per 2 MiB, and with GODEBUG=disablethp=1 in 4 KiB pages, a fault
// each.
func TestHugeHeap(t *testing.T) {
	if os.Getenv("DRAINSCOPE_TEST_HUGEHEAP") == "1" {
		hugeHeapChild()
		return
	}
	mode := thpModeOrSkip(t)
	child := func(godebug string) (before, after, pages, fallbacks int64) {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^TestHugeHeap$")
		cmd.Env = append(os.Environ(), "DRAINSCOPE_TEST_HUGEHEAP=1", "GODEBUG="+godebug, "GOGC=100")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		if _, err := fmt.Sscanf(string(out), "faults %d %d pages %d fallbacks %d", &before, &after, &pages, &fallbacks); err != nil {
			t.Fatalf("child's output %q: %v", out, err)
		}
		return
	}
	madvise := mode == "madvise"
	before, after, pages, fallbacks := child("")
	t.Logf("64 MiB touched: %d faults before hugeHeap, %d after (%d pages; transparent_hugepage %s)", before, after, pages, mode)
	if after > pages/16 {
		t.Errorf("after hugeHeap, %d faults for %d pages, want at most %d (huge pages; the kernel fell back to small ones %d times)", after, pages, pages/16, fallbacks)
	}
	if madvise && before < pages/2 {
		t.Errorf("before hugeHeap, %d faults for %d pages, want 4 KiB pages (at least %d) where the kernel gives huge ones only where asked", before, pages, pages/2)
	}
	if _, off, pages, _ := child("disablethp=1"); madvise && off < pages/2 {
		t.Errorf("with GODEBUG=disablethp=1, %d faults for %d pages after hugeHeap, want 4 KiB pages (at least %d)", off, pages, pages/2)
	}
}

// thpModeOrSkip is the kernel's transparent huge page mode ("always" or
// "madvise"); it skips tb, saying why, where there are none to compare.
func thpModeOrSkip(tb testing.TB) string {
	tb.Helper()
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	_, mode, _ := strings.Cut(string(b), "[")
	mode, _, _ = strings.Cut(mode, "]")
	if err != nil || mode == "" || mode == "never" {
		tb.Skipf("this kernel gives no transparent huge pages (/sys/kernel/mm/transparent_hugepage/enabled: %q, %v)", strings.TrimSpace(string(b)), err)
	}
	return mode
}

// hugeHeapChild prints the page faults of touching 64 MiB of new heap,
// before and after hugeHeap, the pages that is, and the kernel's count of
// huge page faults that fell back to small pages meanwhile.
func hugeHeapChild() {
	const n = 64 << 20
	faults := func() int64 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			panic(err)
		}
		return ru.Minflt
	}
	touch := func(b []byte) {
		for i := 0; i < len(b); i += os.Getpagesize() {
			b[i] = 1
		}
	}
	fb := thpFallbacks()
	f0 := faults()
	before := make([]byte, n)
	touch(before)
	f1 := faults()
	hugeHeap(256 << 20)
	f2 := faults()
	after := make([]byte, n)
	touch(after)
	f3 := faults()
	fmt.Printf("faults %d %d pages %d fallbacks %d\n", f1-f0, f3-f2, n/os.Getpagesize(), thpFallbacks()-fb)
	runtime.KeepAlive(before)
	runtime.KeepAlive(after)
}

// thpFallbacks is /proc/vmstat's thp_fault_fallback, or -1.
func thpFallbacks() int64 {
	b, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(b)) {
		var n int64
		if _, err := fmt.Sscanf(line, "thp_fault_fallback %d", &n); err == nil {
			return n
		}
	}
	return -1
}

func TestGodebugHas(t *testing.T) {
	for _, c := range []struct {
		godebug string
		want    bool
	}{
		{"", false},
		{"disablethp=1", true},
		{"madvdontneed=1,disablethp=1", true},
		{"disablethp=0", false},
		{"disablethp=1,disablethp=0", false},
		{"disablethp=0,disablethp=1", true},
		{"xdisablethp=1", false},
	} {
		t.Setenv("GODEBUG", c.godebug)
		if got := godebugHas("disablethp=1"); got != c.want {
			t.Errorf("GODEBUG=%q: godebugHas(disablethp=1) = %v, want %v", c.godebug, got, c.want)
		}
	}
}
