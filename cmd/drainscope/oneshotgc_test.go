package main

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// collectFrom leaves the collector off below its limit and sets
// reportGCPercent at the first cycle past it.
func TestCollectFrom(t *testing.T) {
	pct, lim := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(pct); debug.SetMemoryLimit(lim) })
	debug.FreeOSMemory() // what an earlier run left is not held against the limit
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	gcs := ms.NumGC
	// The runtime's count against the limit: what it holds from the system.
	collectFrom(int64(ms.Sys-ms.HeapReleased) + 64<<20)
	var keep [][]byte
	for range 16 { // 16 MiB, far below the limit
		keep = append(keep, make([]byte, 1<<20))
	}
	runtime.ReadMemStats(&ms)
	if ms.NumGC != gcs {
		t.Fatalf("%d collections below the limit, want none", ms.NumGC-gcs)
	}
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Fatalf("GOGC below the limit is %d, want off (-1)", got)
	}
	for range 256 { // past the limit
		keep = append(keep, make([]byte, 1<<20))
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := debug.SetGCPercent(-1)
		debug.SetGCPercent(got)
		if got == reportGCPercent {
			break
		}
		if time.Now().After(deadline) {
			runtime.ReadMemStats(&ms)
			t.Fatalf("GOGC still %d after %d collections past the limit, want %d", got, ms.NumGC-gcs, reportGCPercent)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := debug.SetMemoryLimit(-1); got != lim {
		t.Errorf("memory limit after the first collection %d, want the one before, %d", got, lim)
	}
	runtime.KeepAlive(keep)
}

func TestCgroupMemoryMax(t *testing.T) {
	sys := t.TempDir()
	write := func(path, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(sys, "kubepods", "memory.max"), "2147483648\n")
	write(filepath.Join(sys, "kubepods", "pod1", "memory.max"), "max\n")
	write(filepath.Join(sys, "memory", "job", "memory.limit_in_bytes"), "1073741824\n")
	write(filepath.Join(sys, "memory", "memory.limit_in_bytes"), "9223372036854771712\n")
	for _, c := range []struct {
		self string
		want int64
	}{
		{"0::/kubepods/pod1\n", 2 << 30},           // v2: the parent's limit
		{"0::/\n", 0},                              // v2 root: none
		{"4:memory:/job\n0::/\n", 1 << 30},         // v1 (hybrid)
		{"4:memory:/other\n", 9223372036854771712}, // v1, no limit: a number past any memory
		{"", 0},
	} {
		if got := cgroupMemoryMaxIn(sys, c.self); got != c.want {
			t.Errorf("cgroup %q: %d, want %d", c.self, got, c.want)
		}
	}
}

// The machine's memory reads as a plausible size: more than 64 MiB.
func TestMemTotal(t *testing.T) {
	if _, err := os.Stat("/proc/meminfo"); err != nil {
		t.Skipf("no /proc/meminfo: %v", err)
	}
	if m := memTotal(); m < 64<<20 {
		t.Errorf("memTotal() = %d bytes, want the machine's memory", m)
	}
}
