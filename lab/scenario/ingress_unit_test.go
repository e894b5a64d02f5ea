package scenario

import (
	"net/netip"
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
