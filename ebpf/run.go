package ebpf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/drainscope/drainscope/event"
)

// Run reads events until ctx is done or the collector is closed, and then
// returns nil. Events are emitted in the kernel's order, ExitWindow after
// they happened (plus up to FlushInterval while the kernel batches them).
// emit receives each event, complete and sealed (unless Config.Unsealed); the pointer
// and the event are reused for the next one, so emit must copy what it
// keeps. Attrs is shared between events and must not be modified. Only one
// Run may be active at a time.
func (c *Collector) Run(ctx context.Context, emit func(*event.Event)) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("collector is already running")
	}
	defer c.running.Store(false)
	c.runMu.Lock()
	defer c.runMu.Unlock()

	var (
		rec ringbuf.Record
		raw probesEvent
		ev  event.Event
		n   uint
	)
	out := func(e *event.Event) {
		emit(e)
		c.delivered.Add(1)
	}
	if c.delay == nil {
		c.delay = newDelayLine(int64(c.exitWindow), delayCapacity)
	}
	d := c.delay
	defer d.flush(out)
	c.rd.SetDeadline(time.Now().Add(c.flush))
	for {
		err := c.rd.ReadInto(&rec)
		if err != nil {
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				if ctx.Err() != nil {
					return nil
				}
				d.release(time.Now().UnixNano()-d.window, out)
				c.rd.SetDeadline(time.Now().Add(c.flush))
				continue
			case errors.Is(err, ringbuf.ErrClosed):
				return nil
			}
			return fmt.Errorf("reading ring buffer: %w", err)
		}
		if n++; n%4096 == 0 && ctx.Err() != nil {
			return nil
		}
		if err := c.handle(rec.RawSample, &raw, &ev); err != nil {
			if errors.Is(err, errDuplicateExit) {
				c.duplicateExits.Add(1)
				continue
			}
			c.decodeErrors.Add(1)
			c.log.Debug("dropping undecodable record", "err", err)
			continue
		}
		d.push(&ev, out)
		d.release(ev.Time-d.window, out)
	}
}

var errDuplicateExit = errors.New("second exit record of one process")

// recentExits remembers the last processes whose exit was emitted. Without
// sched_process_exit's group_dead (before Linux 6.16, where the tracepoint
// also comes after exit_mm) threads that exit together can each find the
// live count at zero; the second record of a process within a second is
// the same exit. A fixed ring: no allocation, bounded work per exit.
type recentExits struct {
	pid  [64]uint32
	ts   [64]uint64
	next int
}

func (r *recentExits) seen(pid uint32, ts uint64) bool {
	for i := range r.pid {
		// Records of different CPUs may arrive slightly out of order.
		if d := int64(ts - r.ts[i]); r.pid[i] == pid && pid != 0 && d < int64(time.Second) && d > -int64(time.Second) {
			return true
		}
	}
	r.pid[r.next], r.ts[r.next] = pid, ts
	r.next = (r.next + 1) % len(r.pid)
	return false
}

// delayCapacity bounds the events held for the exit window: 4096 events
// (about 1.3 MB) cover 50 ms at 80,000 events/s.
const delayCapacity = 4096

// handle decodes one record into ev.
func (c *Collector) handle(b []byte, raw *probesEvent, ev *event.Event) error {
	if err := decodeRaw(b, raw); err != nil {
		return err
	}
	if raw.Kind == kindExit && !c.features[FeatureExitGroupDead] && c.exits.seen(raw.Pid, raw.TsNs) {
		return errDuplicateExit
	}
	// Wall may resample the clock and replace attrs: call it first (Go
	// does not order a field read against a call in one argument list).
	wall := c.clock.Wall(raw.TsNs)
	if err := c.decoder.fill(ev, raw, wall, c.clock.attrs); err != nil {
		return err
	}
	c.resolver.Resolve(ev, raw.CgroupId, raw.Netns)
	if c.resolver.misses != c.unresolved.Load() {
		c.unresolved.Store(c.resolver.misses)
	}
	if !c.unsealed {
		ev.Seal()
	}
	return nil
}
