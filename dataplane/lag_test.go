package dataplane

import (
	"net/netip"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

// The lag runs from the first watch event that took the endpoint out
// since it was last ready to the node's removal; a removal with no leave
// before it measures nothing.
func TestLagMeter(t *testing.T) {
	m := NewLagMeter()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	addr := netip.MustParseAddrPort("10.244.0.11:8080")
	ev := func(off time.Duration, k event.Kind, node string) *event.Event {
		return &event.Event{Time: t0 + int64(off), Kind: k, Node: node, Pod: event.PodRef{Namespace: "dp"}, Service: "web", Local: addr}
	}
	if _, _, ok := m.Observe(ev(0, event.DataplaneEndpointRemoved, "node-a")); ok {
		t.Error("a removal without a leave measured a lag")
	}
	m.Observe(ev(time.Second, event.EndpointReady, "node-a"))
	m.Observe(ev(2*time.Second, event.EndpointNotReady, "node-a"))
	m.Observe(ev(2*time.Second+time.Millisecond, event.EndpointTerminating, "node-a"))
	m.Observe(ev(3*time.Second, event.EndpointRemoved, "node-a"))
	for _, c := range []struct {
		node string
		at   time.Duration
	}{{"node-a", 2*time.Second + 40*time.Millisecond}, {"node-b", 4 * time.Second}} {
		node, lag, ok := m.Observe(ev(c.at, event.DataplaneEndpointRemoved, c.node))
		if !ok || node != c.node || lag != c.at-2*time.Second {
			t.Errorf("%s: %v %v %v, want %v from the not-ready", c.node, node, lag, ok, c.at-2*time.Second)
		}
	}
	m.Observe(ev(10*time.Second, event.EndpointReady, "node-a"))
	if _, _, ok := m.Observe(ev(11*time.Second, event.DataplaneEndpointRemoved, "node-a")); ok {
		t.Error("a removal after the endpoint was ready again paired with the old leave")
	}
}
