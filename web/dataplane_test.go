package web

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/drainscope/drainscope/event"
)

// The checkout rollout with each node's proxy rules recorded for its first
// old pod: its lane carries the nodes' dataplane marks and their spread.
func TestTimelineShowsDataplane(t *testing.T) {
	evs := recordFixture()
	ip := netip.MustParseAddr("10.244.0.11")
	var leave int64
	for _, e := range evs {
		if e.Local.Addr() == ip && e.Kind == event.EndpointNotReady && leave == 0 {
			leave = e.Time
		}
	}
	if leave == 0 {
		t.Fatal("the fixture's first old pod has no endpoint leaving rotation")
	}
	dp := func(at int64, node string, k event.Kind) event.Event {
		e := event.Event{Time: at, Kind: k, Node: node, Source: event.SourceDataplane, Pod: event.PodRef{Namespace: "shop"},
			Service: "checkout", Local: netip.AddrPortFrom(ip, 8080), Attrs: map[string]string{event.AttrProxy: event.ProxyNFTables}}
		e.Seal()
		return e
	}
	// Added before anything named the pod's address: tied to no pod.
	evs = append(evs, dp(leave-30*sec, "node-a", event.DataplaneEndpointAdded))
	evs = append(evs, dp(leave+40*ms, "node-a", event.DataplaneEndpointRemoved), dp(leave+900*ms, "node-b", event.DataplaneEndpointRemoved))
	s := newTestServer(t, storeWith(t, evs))
	tl := decode[Timeline](t, do(t, s, http.MethodGet, "/api/v1/rollouts/"+ids(t, s).checkout.ID+"/timeline"))
	var lane *LaneView
	for i := range tl.Lanes {
		if tl.Lanes[i].Pod.Name == "checkout-6d9f7c5b8-x2k4p" {
			lane = &tl.Lanes[i]
		}
	}
	if lane == nil {
		t.Fatal("no lane for checkout-6d9f7c5b8-x2k4p")
	}
	if len(lane.Dataplane) != 2 || lane.Dataplane[0].Node != "node-a" || lane.Dataplane[0].InRotation || lane.Dataplane[1].Node != "node-b" {
		t.Errorf("dataplane marks %+v, want node-a's and node-b's removals", lane.Dataplane)
	}
	var sp *SpreadView
	for i := range lane.Spreads {
		if lane.Spreads[i].Kind == "dataplane_removed" {
			sp = &lane.Spreads[i]
		}
	}
	if sp == nil || sp.NodeCount != 2 || sp.Last-sp.First != 860*ms {
		t.Errorf("dataplane_removed spread %+v, want node-a to node-b, 860 ms", sp)
	}
}
