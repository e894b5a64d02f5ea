package ebpf

import (
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/drainscope/drainscope/event"
)

// wallClock converts CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns) to UTC
// wall-clock nanoseconds with an offset sampled from both clocks.
//
// The offset drifts while NTP slews the wall clock (up to 0.5 ms per second)
// and jumps when the wall clock is stepped, so it is re-sampled every
// interval. Its uncertainty is half the narrowest window in which a sample
// read the wall clock around the monotonic one.
type wallClock struct {
	interval time.Duration

	// Written by the reader goroutine, read by Stats.
	offset      atomic.Int64
	uncertainty atomic.Int64

	sampledAt int64             // monotonic ns of the last sample; reader goroutine only
	attrs     map[string]string // shared, read-only Attrs carrying the uncertainty
}

func newWallClock(interval time.Duration) *wallClock {
	c := &wallClock{interval: interval}
	c.resample()
	return c
}

// sampleOffset reads REALTIME, MONOTONIC, REALTIME a few times and keeps
// the tightest bracket.
func sampleOffset() (offset, uncertainty, mono int64) {
	best := int64(-1)
	for i := 0; i < 5; i++ {
		var r1, m, r2 unix.Timespec
		unix.ClockGettime(unix.CLOCK_REALTIME, &r1)
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &m)
		unix.ClockGettime(unix.CLOCK_REALTIME, &r2)
		w := r2.Nano() - r1.Nano()
		if w < 0 {
			continue // the wall clock was stepped between the reads
		}
		if best < 0 || w < best {
			best = w
			offset = r1.Nano() + w/2 - m.Nano()
			uncertainty = (w + 1) / 2
			mono = m.Nano()
		}
	}
	return offset, uncertainty, mono
}

func (c *wallClock) resample() {
	off, unc, mono := sampleOffset()
	c.offset.Store(off)
	c.sampledAt = mono
	if c.attrs == nil || c.uncertainty.Load() != unc {
		c.attrs = map[string]string{event.AttrClockUncertainty: strconv.FormatInt(unc, 10)}
	}
	c.uncertainty.Store(unc)
}

// Wall converts a monotonic kernel timestamp, re-sampling the offset first
// when the last sample is older than the interval. Reader goroutine only.
func (c *wallClock) Wall(mono uint64) int64 {
	if int64(mono)-c.sampledAt > int64(c.interval) {
		c.resample()
	}
	return int64(mono) + c.offset.Load()
}
