package cilium

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
)

// BenchmarkPoll: one poll of maps holding N frontends of 10 backends
// each (11 service entries and 10 backend entries a frontend), nothing
// changed: the reader's steady CPU cost per --cilium-interval, per map
// entry and as the share of a core it takes at the default 250 ms.
func BenchmarkPoll(b *testing.B) {
	testenv.RequireRoot(b)
	for _, n := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("frontends=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			if err := unix.Mount("bpf", dir, "bpf", 0, ""); err != nil {
				testenv.Unavailable(b, "mounting a bpffs: "+err.Error())
			}
			defer unix.Unmount(dir, unix.MNT_DETACH)
			w, err := NewWriter(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			for i := 0; i < n; i++ {
				fe := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}), 80)
				var bes []netip.AddrPort
				for j := 0; j < 10; j++ {
					bes = append(bes, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)}), uint16(8000+j)))
				}
				if err := w.SetService(fe, 6, bes); err != nil {
					b.Fatal(err)
				}
			}
			r, _ := New(Options{Node: "n", Dir: dir, Emit: func(event.Event) {}})
			if err := r.Open(); err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			r.Poll()
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				if _, err := r.Poll(); err != nil {
					b.Fatal(err)
				}
			}
			// CPU time, not wall time: on a loaded machine the wall time
			// is mostly waiting for a core.
			per := (cpuTime() - cpu0) / time.Duration(b.N)
			b.ReportMetric(float64(per.Nanoseconds())/float64(n*21), "cpu-ns/entry")
			b.ReportMetric(per.Seconds()/0.25, "cores@250ms")
		})
	}
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
