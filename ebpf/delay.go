package ebpf

import "github.com/drainscope/drainscope/event"

// delayLine holds events for a short window before they are emitted, so
// that a socket closed by a process in its final moments before exit can
// still be flagged FlagAtExit when the exit arrives: runtimes that close
// their sockets during their own teardown do it before the kernel's exit
// path, with PF_EXITING clear. Events leave in the order they came, which
// is the kernel's order, once they are older than the window. The ring is
// allocated once; when it is full the oldest event leaves early.
type delayLine struct {
	window int64 // ns
	buf    []event.Event
	head   int // index of the oldest event
	n      int
}

func newDelayLine(window int64, capacity int) *delayLine {
	return &delayLine{window: window, buf: make([]event.Event, capacity)}
}

// push copies e in, first emitting the oldest event if the ring is full.
// A process exit flags the events of that process within the window.
func (d *delayLine) push(e *event.Event, emit func(*event.Event)) {
	if d.n == len(d.buf) {
		emit(&d.buf[d.head])
		d.head = (d.head + 1) % len(d.buf)
		d.n--
	}
	if e.Kind == event.ProcessExit && e.PID != 0 {
		d.flagExit(e.PID, e.Time)
	}
	d.buf[(d.head+d.n)%len(d.buf)] = *e
	d.n++
}

func (d *delayLine) flagExit(pid int32, at int64) {
	for i := 0; i < d.n; i++ {
		x := &d.buf[(d.head+i)%len(d.buf)]
		if x.PID != pid || x.Flags.Has(event.FlagAtExit) || at-x.Time > d.window {
			continue
		}
		switch x.Kind {
		case event.ListenerClosed, event.ConnClosed, event.RSTSent:
			x.Flags |= event.FlagAtExit | event.FlagNearExit // by its timing: see FlagNearExit
			if x.ID != 0 {                                   // sealed: seal again
				x.Seal()
			}
		}
	}
}

// release emits the events that happened at or before cutoff (UTC ns).
func (d *delayLine) release(cutoff int64, emit func(*event.Event)) {
	for d.n > 0 && d.buf[d.head].Time <= cutoff {
		emit(&d.buf[d.head])
		d.head = (d.head + 1) % len(d.buf)
		d.n--
	}
}

// flush emits everything.
func (d *delayLine) flush(emit func(*event.Event)) {
	d.release(1<<63-1, emit)
}
