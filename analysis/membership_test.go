package analysis

import (
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
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

// TestAddressOfTheRequestsStart: a 5 s timeout began while 10.244.0.10
// was web-a's, and was logged at its end, after the address went to a
// pod of another namespace. It is web-a's, in the whole cluster's read
// and in its namespace's.
func TestAddressOfTheRequestsStart(t *testing.T) {
	r := newRec()
	a := r.running("web-a", "10.244.0.10")
	r.deletion(a, 0, 30*time.Second)
	r.leave(a, 5*ms, ms)
	r.signal(a, 10*ms, 15)
	r.exit(a, 20*ms, 0, 15)
	r.removed(a, 40*ms, ms)
	// The address goes to a pod of another namespace.
	b := r.pod("db-0", "10.244.0.10")
	b.ref.Namespace, b.wl, b.svc = "data", event.Workload{Kind: "StatefulSet", Name: "db"}, "db"
	r.created(b, 2*s)
	r.ready(b, 3*s)
	// Begun 10 ms before the deletion, while web-a was in rotation;
	// logged 5 s later.
	r.failure(5*s-10*ms, client(1), event.FailTimeout, backend(a), took(5*time.Second))
	for _, q := range []store.Query{{}, {Namespace: "default"}} {
		res, err := AnalyzeEvents(r.events, q, Options{MaxFailures: -1})
		if err != nil {
			t.Fatal(err)
		}
		fs := clientFailures(res)
		if len(fs) != 1 || fs[0].Pod == nil || fs[0].Pod.Name != "web-a" {
			var got []string
			for _, f := range fs {
				got = append(got, f.Pod.String())
			}
			t.Errorf("read %+v: the timeout went to %v, want web-a (the address's holder when it began)", q, got)
		}
	}
}
