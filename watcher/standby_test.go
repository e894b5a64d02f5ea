package watcher

import (
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

// The standby keeps exactly the events of the last window, in order, and
// hands over those after the old leader's last renewal.
func TestStandbyBufferKeepsTheWindow(t *testing.T) {
	ms := int64(time.Millisecond)
	fill := func() *standbyBuffer {
		b := &standbyBuffer{window: 100 * time.Millisecond}
		for i := int64(0); i < 1000; i++ {
			b.add(event.Event{Time: i * ms})
		}
		return b
	}
	if n := len(fill().after(-1)); n != 101 {
		t.Errorf("%d events held, want the 101 of the last 100 ms", n)
	}
	b := fill()
	late := b.after(949 * ms)
	if len(late) != 50 || late[0].Time != 950*ms || late[49].Time != 999*ms {
		t.Errorf("after 949 ms: %d events from %d to %d, want 50 from 950 ms to 999 ms", len(late), late[0].Time/ms, late[len(late)-1].Time/ms)
	}
	if len(b.after(0)) != 0 {
		t.Error("after hands events over once")
	}
}

// BenchmarkStandbyAdd is the cost per endpoint event a standby sees with a
// full window (the lease duration plus the renew deadline, 25 s by
// default) at 1,000 events/s.
//
//	go test ./watcher -run '^$' -bench StandbyAdd
func BenchmarkStandbyAdd(b *testing.B) {
	buf := &standbyBuffer{window: 25 * time.Second}
	step := int64(time.Millisecond)
	var now int64
	for range 25_000 {
		buf.add(event.Event{Time: now})
		now += step
	}
	for b.Loop() {
		buf.add(event.Event{Time: now})
		now += step
	}
}
