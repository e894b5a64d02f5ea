package analysis

import (
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// A new pod's endpoint is added not ready and turns ready later; only its
// not-ready transition at termination takes it out of rotation.
func TestEndpointAddedNotReadyIsNotLeavingRotation(t *testing.T) {
	r := newRec("node-a", "node-b")
	p := r.pod("web-1", "10.244.0.11")
	r.created(p, 0)
	for _, n := range r.nodes {
		e := r.podEvent(p, 100*ms, event.EndpointAdded)
		e.Node, e.Local, e.Service, e.Slice = n, p.addr(), p.svc, p.svc+"-abcde"
		e.Attrs = map[string]string{event.AttrConditions: "ready=false,serving=false,terminating=false"}
		r.add(e)
	}
	r.ready(p, 2*s)
	r.deletion(p, 10*s, 30*time.Second)
	r.leave(p, 10*s+400*ms, 50*ms)
	r.signal(p, 10*s+500*ms, 15)
	r.exit(p, 11*s, 0, 0)
	r.removed(p, 11*s+100*ms, 10*ms)
	res, err := AnalyzeEvents(r.events, store.Query{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var tl *PodTimeline
	for i := range res.Timelines {
		if res.Timelines[i].Pod.Name == "web-1" {
			tl = &res.Timelines[i]
		}
	}
	if tl == nil || tl.OutOfRotation == nil {
		t.Fatalf("no out-of-rotation for web-1: %+v", tl)
	}
	if got, want := tl.OutOfRotation.First, r.at(10*s+400*ms); got != want {
		t.Errorf("out of rotation first seen at %+d ns from t0, want the not-ready at +10.4 s", got-r.t0)
	}
	if got, want := tl.OutOfRotation.Last, r.at(10*s+450*ms); got != want {
		t.Errorf("out of rotation last seen at %+d ns from t0, want +10.45 s", got-r.t0)
	}
}

// A Go process that dies by SIGTERM raises it again to itself, twice: the
// timeline keeps one SIGTERM, the kubelet's, and a later SIGTERM (a second
// kill, say) still shows.
func TestRepeatedSignalIsOneLandmark(t *testing.T) {
	r := newRec()
	p := r.pod("web-1", "10.244.0.11")
	r.created(p, 0)
	r.deletion(p, 10*s, 30*time.Second)
	r.signal(p, 10*s+1*ms, 15)
	for _, d := range []int64{10*s + 1*ms + 300_000, 10*s + 1*ms + 400_000} {
		e := r.kernel(p, d, event.Signal)
		e.Signal, e.PeerPID, e.PeerComm = 15, p.pid, "python3" // raised by the process itself
		r.add(e)
	}
	r.signal(p, 12*s, 15)
	r.exit(p, 12*s+1*ms, 0, 15)
	res, err := AnalyzeEvents(r.events, store.Query{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Timelines) != 1 {
		t.Fatalf("%d timelines", len(res.Timelines))
	}
	tl := res.Timelines[0]
	var senders []int32
	for _, e := range tl.Events {
		if e.Kind == event.Signal {
			senders = append(senders, e.PeerPID)
		}
	}
	if len(senders) != 2 || senders[0] != 1 || senders[1] != 1 {
		t.Errorf("SIGTERM landmarks from %v, want two, both from the kubelet (pid 1)", senders)
	}
	if tl.Sigterm == nil || tl.Sigterm.Time != r.at(10*s+1*ms) {
		t.Errorf("SIGTERM %+v, want the first one", tl.Sigterm)
	}
}
