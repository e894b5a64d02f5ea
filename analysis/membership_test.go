package analysis

import (
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

// A pod's membership is per Service, and an address belongs to the pod
// that held it when the request began.

// TestLeavingOneServiceEndsNoPod: a pod backs two Services; one is
// deleted, so its endpoint leaves that one. The pod runs on: five minutes
// later, during another pod's rollout, a proxy's timeout naming it as the
// upstream is its own, and a proxy's refusal naming it too. Before, the
// removal from the deleted Service marked the pod ended, it was forgotten
// two minutes later with its address, and the timeout went to the pod
// that was ending as a likely endpoint race.
func TestLeavingOneServiceEndsNoPod(t *testing.T) {
	r := newRec("node-a", "node-b")
	both := r.running("web-a", "10.244.0.10")
	other := r.running("web-b", "10.244.0.11")
	// web-a also backs the canary Service, which is then deleted.
	canary := *both
	canary.svc = "web-canary"
	for _, n := range r.nodes {
		r.endpoint(&canary, -time.Hour.Nanoseconds(), event.EndpointReady, n)
	}
	r.removed(&canary, 0, ms)
	// The rollout of web-b five minutes later.
	r.change(5*minute, other.wl, "template")
	r.end(other, 5*minute+s)
	r.failure(5*minute+s+500*ms, client(1), event.FailTimeout, backend(both), took(5*time.Second))
	r.failure(5*minute+2*s, client(2), event.FailRefused, backend(both))
	res := analyzeAll(t, r)
	fs := clientFailures(res)
	if len(fs) != 2 {
		t.Fatalf("%d client failures, want 2", len(fs))
	}
	for _, f := range fs {
		if f.Pod == nil || f.Pod.Name != "web-a" {
			t.Errorf("the %s naming web-a went to %v (%s), want web-a", f.Failure.Reason, f.Pod, f.Cause)
			continue
		}
		if f.Cause != CauseUnexplained {
			t.Errorf("the %s on web-a, which was not ending, is %s: a cause named for a healthy pod", f.Failure.Reason, f.Cause)
		}
	}
	for _, d := range res.Disruptions {
		for _, p := range d.Replaced {
			if p.Name == "web-a" {
				t.Errorf("web-a ended in %s (%s): leaving one of its Services ends no pod", d.ID, d.Trigger)
			}
		}
	}
}
