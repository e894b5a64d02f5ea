package ebpf

import (
	"testing"

	"github.com/drainscope/drainscope/event"
)

func TestDelayLine(t *testing.T) {
	const ms = int64(1e6)
	d := newDelayLine(50*ms, 4)
	var got []event.Event
	emit := func(e *event.Event) { got = append(got, *e) }
	push := func(e event.Event) {
		e.Seal()
		d.push(&e, emit)
		d.release(e.Time-d.window, emit)
	}

	push(event.Event{Time: 1000 * ms, Kind: event.ConnClosed, PID: 7})     // 30 ms before exit: flagged
	push(event.Event{Time: 1010 * ms, Kind: event.ConnClosed, PID: 8})     // another process
	push(event.Event{Time: 1020 * ms, Kind: event.Signal, PID: 7})         // not a socket event
	push(event.Event{Time: 1030 * ms, Kind: event.ProcessExit, PID: 7})    // flags, emits nothing yet
	push(event.Event{Time: 1100 * ms, Kind: event.ListenerClosed, PID: 9}) // releases the first four
	push(event.Event{Time: 1200 * ms, Kind: event.ProcessExit, PID: 9})    // 100 ms later: not flagged
	if len(got) != 5 {
		t.Fatalf("emitted %d events, want 5", len(got))
	}
	for i := 1; i < len(got); i++ {
		if got[i].Time < got[i-1].Time {
			t.Errorf("out of order at %d", i)
		}
	}
	if !got[0].Flags.Has(event.FlagAtExit|event.FlagNearExit) || got[1].Flags.Has(event.FlagAtExit) || got[2].Flags.Has(event.FlagAtExit) {
		t.Errorf("flags: %v %v %v", got[0].Flags, got[1].Flags, got[2].Flags)
	}
	want := got[0]
	want.Seal()
	if got[0].ID != want.ID {
		t.Error("flagged event not sealed again")
	}
	d.flush(emit)
	if len(got) != 6 || got[4].Flags.Has(event.FlagAtExit) {
		t.Errorf("after flush: %d events, listener flags %v", len(got), got[4].Flags)
	}

	// A full ring lets the oldest go early.
	got = nil
	for i := int64(0); i < 6; i++ {
		e := event.Event{Time: 2000*ms + i, Kind: event.ConnClosed}
		d.push(&e, emit)
	}
	if len(got) != 2 || got[0].Time != 2000*ms || d.n != 4 {
		t.Errorf("full ring emitted %d, holds %d", len(got), d.n)
	}

	// Holding and releasing does not allocate.
	e := event.Event{Time: 3000 * ms, Kind: event.ConnClosed}
	if n := testing.AllocsPerRun(100, func() {
		e.Time += ms
		d.push(&e, func(*event.Event) {})
		d.release(e.Time-d.window, func(*event.Event) {})
	}); n != 0 {
		t.Errorf("push and release allocate %v times", n)
	}
}
