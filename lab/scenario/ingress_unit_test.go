package scenario

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/lab/load"
)

// The ingress's slots take the ready endpoints on the port named http,
// as ingress controllers do: a terminating or not-ready endpoint is out,
// one with no ready condition (the API's "unknown": ready) is in.
func TestReadyEndpoints(t *testing.T) {
	yes, no := true, false
	http, metrics := "http", "metrics"
	p8080, p9090 := int32(8080), int32(9090)
	sl := []*discoveryv1.EndpointSlice{{
		Ports: []discoveryv1.EndpointPort{{Name: &metrics, Port: &p9090}, {Name: &http, Port: &p8080}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.0.12"}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}},
			{Addresses: []string{"10.244.0.11"}},
			{Addresses: []string{"10.244.0.13"}, Conditions: discoveryv1.EndpointConditions{Ready: &no, Terminating: &yes, Serving: &yes}},
		},
	}, {
		Ports:     []discoveryv1.EndpointPort{{Name: &http, Port: &p8080}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.12"}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}}},
	}}
	got := readyEndpoints(sl)
	want := []netip.AddrPort{netip.MustParseAddrPort("10.244.0.11:8080"), netip.MustParseAddrPort("10.244.0.12:8080")}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("%v, want %v", got, want)
	}
}

// The ingress applies the EndpointSlices once at its start, then each
// change at once with no sync period, or the changes between two ticks
// together, and nothing at a tick with no change.
func TestApplyChanges(t *testing.T) {
	run := func(every time.Duration) (chan<- struct{}, *atomic.Int32) {
		ctx, cancel := context.WithCancel(context.Background())
		changed := make(chan struct{}) // unbuffered: a send returns once applyChanges has it
		var n atomic.Int32
		done := make(chan struct{})
		go func() { applyChanges(ctx, changed, every, func() { n.Add(1) }); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		return changed, &n
	}
	waitFor := func(n *atomic.Int32, want int32) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); n.Load() < want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("applied %d times, want %d", n.Load(), want)
			}
		}
	}

	changed, n := run(0)
	for range 3 {
		changed <- struct{}{}
	}
	waitFor(n, 4)

	changed, n = run(time.Hour) // no tick within the test
	for range 3 {
		changed <- struct{}{}
	}
	changed <- struct{}{} // received: the three before were handled
	if got := n.Load(); got != 1 {
		t.Errorf("with a sync period, %d applies before its first tick, want only the first", got)
	}

	changed, n = run(5 * time.Millisecond)
	waitFor(n, 1)
	changed <- struct{}{}
	waitFor(n, 2)
	time.Sleep(50 * time.Millisecond) // ten ticks, no change
	if got := n.Load(); got != 2 {
		t.Errorf("%d applies after ticks with no change, want 2", got)
	}
}

// A client failure is the proxy's failed request with the same client
// address and port whose end is within a second; each proxy record pairs
// with one client failure, the closest, and a client failure the proxy did
// not log stays the client's.
func TestSameRequests(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	a, b := netip.MustParseAddrPort("10.244.0.1:40001"), netip.MustParseAddrPort("10.244.0.1:40002")
	proxy := []IngressFailure{
		{Time: t0, Client: a, Status: 503, Termination: "SC--"},
		{Time: t0.Add(300 * time.Millisecond), Client: a, Status: 502, Termination: "SD--"},
	}
	client := []load.Failure{
		{Time: t0.Add(302 * time.Millisecond), Local: a, Class: event.FailStatus, Status: 502},
		{Time: t0.Add(2 * time.Millisecond), Local: a, Class: event.FailStatus, Status: 503},
		{Time: t0.Add(time.Millisecond), Local: b, Class: event.FailEOF},                       // another connection
		{Time: t0.Add(5 * time.Second), Local: a, Class: event.FailTimeout},                    // too late for either
		{Time: t0.Add(303 * time.Millisecond), Local: a, Class: event.FailStatus, Status: 502}, // both records taken
	}
	matched, kept := sameRequests(proxy, client)
	if matched != 2 || len(kept) != 3 || kept[0].Local != b || kept[1].Class != event.FailTimeout || kept[2].Time != client[4].Time {
		t.Fatalf("matched %d, kept %+v", matched, kept)
	}
}
