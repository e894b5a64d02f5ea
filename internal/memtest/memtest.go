// Package memtest measures the memory a piece of work takes in this process.
// Tests and benchmarks that bound it read the peak heap in use and the peak
// resident memory above what was in use before.
package memtest

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Peak runs fn and returns the most heap in use and the most resident
// memory seen above what was in use before it: HeapInuse sampled every
// 2 ms, and VmHWM from /proc/self/status after resetting it through
// /proc/self/clear_refs (rss is 0 where /proc does not say).
func Peak(fn func()) (heap, rss uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	baseRSS := procKB("VmRSS")
	var peak atomic.Uint64
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > base && m.HeapInuse-base > peak.Load() {
				peak.Store(m.HeapInuse - base)
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	fn()
	close(done)
	<-stopped
	if hwm := procKB("VmHWM"); hwm > baseRSS {
		rss = (hwm - baseRSS) << 10
	}
	return peak.Load(), rss
}

func procKB(field string) uint64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}
