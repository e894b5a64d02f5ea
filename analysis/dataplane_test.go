package analysis

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// A node seen only through the watch gets its measured lag in place of
// ProxyLag: pod a's removal measured node-a's proxy 2.5 s behind the
// watch; pod b, whose own dataplane removal was not recorded, refuses a
// SYN 1.8 s after the watch saw it leave, which node-a's proxy may still
// have sent (likely), where the assumed 1 s would set it aside.
func TestMeasuredLagReplacesProxyLag(t *testing.T) {
	run := func(measured bool) Inference {
		r := newRec("node-a")
		a, b := r.pod("web-a", "10.244.0.11"), r.pod("web-b", "10.244.0.12")
		for _, p := range []*tpod{a, b} {
			r.created(p, -60*s)
			r.ready(p, -58*s)
		}
		r.deletion(a, -20*s, 30*time.Second)
		r.leave(a, -20*s+100*ms, 0)
		if measured {
			r.dataplane(a, -58*s+50*ms, "node-a", true)
			r.dataplane(a, -20*s+2600*ms, "node-a", false)
		}
		b.pid = 5000
		r.deletion(b, 0, 30*time.Second)
		r.signal(b, 10*ms, 15)
		r.exit(b, 12*ms, 0, 0)
		r.leave(b, 100*ms, 0)
		r.refused(b, 1900*ms, client(7))
		res, err := AnalyzeEvents(r.events, store.Query{Window: event.Window{From: r.t0 - 2*60*s, To: r.t0 + 2*60*s}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if measured && (len(res.DataplaneLag) != 1 || res.DataplaneLag[0].P99 != 2500*ms) {
			t.Errorf("measured lag: %+v, want node-a's 2.5 s", res.DataplaneLag)
		}
		return res.Inference
	}
	if inf := run(false); inf.RefusedOutOfRotation != 1 || inf.ByProof[ProofRefusedLagging] != 0 {
		t.Errorf("without a measured lag: %+v, want the refusal set aside (beyond the assumed 1 s)", inf)
	}
	if inf := run(true); inf.RefusedOutOfRotation != 0 || inf.ByProof[ProofRefusedLagging] != 1 {
		t.Errorf("with node-a's measured 2.5 s: %+v, want the refusal likely (within the lag)", inf)
	}
}

// Where a node's proxy recorded its removal, a refusal after it (plus
// DataplaneSlack) is set aside even within the assumed 1 s of the watch:
// the rules had changed; one before it is an endpoint race.
func TestDataplaneRemovalEndsRotation(t *testing.T) {
	r := newRec("node-a")
	p := r.pod("web-a", "10.244.0.11")
	r.created(p, -60*s)
	r.ready(p, -58*s)
	r.dataplane(p, -58*s+50*ms, "node-a", true)
	p.pid = 5000
	r.deletion(p, 0, 30*time.Second)
	r.signal(p, 10*ms, 15)
	r.exit(p, 12*ms, 0, 0)
	r.leave(p, 100*ms, 0)
	r.refused(p, 200*ms, client(1)) // the rules still sent there
	r.dataplane(p, 300*ms, "node-a", false)
	r.refused(p, 600*ms, client(2)) // 500 ms after the watch, 300 ms after the rules
	res, err := AnalyzeEvents(r.events, store.Query{Window: event.Window{From: r.t0 - 2*60*s, To: r.t0 + 2*60*s}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Inference.ByProof[ProofRefusedSYN] != 1 || res.Inference.RefusedOutOfRotation != 1 || res.Inference.ByProof[ProofRefusedLagging] != 0 {
		t.Errorf("inference %+v: want one refused SYN in rotation, one set aside", res.Inference)
	}
	tl := res.Timelines[0]
	if tl.OutOfRotation == nil || tl.OutOfRotation.Last != r.at(300*ms) {
		t.Errorf("out of rotation %+v, want the proxy's removal at +300 ms", tl.OutOfRotation)
	}
	if len(tl.Dataplane) != 2 || tl.Dataplane[1].InRotation || tl.Dataplane[1].Node != "node-a" {
		t.Errorf("timeline dataplane marks %+v", tl.Dataplane)
	}
}

// A dataplane transition is held once, in its node's view of the pod's
// endpoint, not also among the pod's landmarks; the pod's timeline and a
// failure's nearest events still show it, in time order beside the
// landmarks.
func TestDataplaneHeldOnce(t *testing.T) {
	r := newRec("node-a")
	p := r.pod("web-a", "10.244.0.11")
	r.created(p, -60*s)
	r.ready(p, -58*s)
	r.dataplane(p, -58*s+50*ms, "node-a", true)
	r.dataplane(p, -58*s+70*ms, "node-b", true)
	p.pid = 5000
	r.deletion(p, 0, 30*time.Second)
	r.dataplane(p, 300*ms, "node-b", false)
	r.failure(400*ms, client(1), event.FailTimeout, backend(p))
	r.signal(p, 1*s, 15)

	al := NewAligner(Options{}, nil, nil)
	for i := range r.events {
		if err := al.Add(&r.events[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, ps := range al.byUID {
		for _, m := range ps.landmarks {
			if e := m.ev; e.Kind.IsDataplane() {
				t.Errorf("a dataplane event among the landmarks: %s at %d", e.Kind, e.Time)
			}
		}
	}

	res, err := AnalyzeEvents(r.events, store.Query{Window: event.Window{From: r.t0 - 2*60*s, To: r.t0 + 2*60*s}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Timelines) != 1 {
		t.Fatalf("%d timelines, want 1", len(res.Timelines))
	}
	var kinds []event.Kind
	last := int64(0)
	for _, e := range res.Timelines[0].Events {
		if e.Time < last {
			t.Errorf("timeline out of time order at %s", e.Kind)
		}
		last = e.Time
		kinds = append(kinds, e.Kind)
	}
	dp := 0
	for _, k := range kinds {
		if k.IsDataplane() {
			dp++
		}
	}
	if dp != 3 {
		t.Errorf("timeline events %v: %d dataplane events, want all 3", kinds, dp)
	}
	if len(res.Failures) != 1 {
		t.Fatalf("%d failures, want 1", len(res.Failures))
	}
	f := res.Failures[0]
	if f.Before == nil || f.Before.Event.Kind != event.DataplaneEndpointRemoved || f.After == nil || f.After.Event.Kind != event.Signal {
		t.Errorf("nearest before %+v, after %+v: want node-b's removal at +300 ms and the SIGTERM at +1 s", f.Before, f.After)
	}
}

// A pod's timeline holds at most maxLandmarks events, as when dataplane
// transitions were landmarks too: every landmark, and the earliest
// transitions up to the bound.
func TestTimelineEventsBounded(t *testing.T) {
	r := newRec("node-a")
	p := r.pod("web-a", "10.244.0.11")
	r.created(p, -60*s)
	r.ready(p, -58*s)
	for n := range 40 {
		node := fmt.Sprintf("node-%02d", n)
		for k := range 20 {
			r.dataplane(p, int64(n*20+k)*ms, node, k%2 == 0)
		}
	}
	r.deletion(p, 10*s, 30*time.Second)
	res, err := AnalyzeEvents(r.events, store.Query{Window: event.Window{From: r.t0 - 2*60*s, To: r.t0 + 2*60*s}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	evs := res.Timelines[0].Events
	kinds := map[event.Kind]int{}
	for _, e := range evs {
		kinds[e.Kind]++
	}
	if len(evs) != maxLandmarks || kinds[event.PodCreated] != 1 || kinds[event.PodDeletion] != 1 {
		t.Errorf("%d timeline events (%v), want %d with the pod's creation and deletion", len(evs), kinds, maxLandmarks)
	}
	if last := evs[len(evs)-1]; last.Kind != event.PodDeletion {
		t.Errorf("last event %s, want the deletion: the latest transitions are the ones left out", last.Kind)
	}
}

// A report of one workload keeps no event for another workload's
// dataplane transitions and names no cause for its failures, yet reads
// the same from them: the proxies' lags (one measured at 0 from a watch
// leave that came after the proxy's removal), the counts, and the wanted
// pod's failure and timeline.
func TestScopedDataplaneWithoutEvents(t *testing.T) {
	r := newRec("node-a")
	web, api := r.pod("web-a", "10.244.0.11"), r.pod("api-a", "10.244.0.21")
	api.wl, api.svc = event.Workload{Kind: "Deployment", Name: "api"}, "api"
	for i, p := range []*tpod{web, api} {
		d := int64(i) * 100 * ms
		r.created(p, -60*s+d)
		r.ready(p, -58*s+d)
		r.dataplane(p, -58*s+50*ms+d, "node-a", true)
		r.dataplane(p, -58*s+60*ms+d, "node-b", true)
		r.deletion(p, d, 30*time.Second)
		r.dataplane(p, d+50*ms, "node-b", false) // before the watch saw it leave
		r.leave(p, d+100*ms, 0)
		r.failure(d+1*s, client(1+i), event.FailTimeout, backend(p))
		r.dataplane(p, d+2*s, "node-a", false)
	}
	for i := range r.events {
		if r.events[i].Kind.IsDataplane() {
			r.events[i].Attrs[event.AttrProxy] = event.ProxyIPTables // not the default a lost one would get
		}
	}
	w := event.Window{From: r.t0 - 2*60*s, To: r.t0 + 2*60*s}
	whole, err := AnalyzeEvents(r.events, store.Query{Window: w}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	scoped, err := AnalyzeEvents(r.events, store.Query{Window: w, Namespace: "default", Workload: web.wl}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(whole.DataplaneLag) != 2 || whole.DataplaneLag[1].Node != "node-b" || whole.DataplaneLag[1].Samples != 2 ||
		whole.DataplaneLag[1].Max != 0 || whole.DataplaneLag[1].Proxy != event.ProxyIPTables {
		t.Errorf("whole window's lags %+v: want node-b's two removals measured at 0, by iptables", whole.DataplaneLag)
	}
	if !reflect.DeepEqual(scoped.DataplaneLag, whole.DataplaneLag) {
		t.Errorf("scoped lags %+v, want the whole window's %+v", scoped.DataplaneLag, whole.DataplaneLag)
	}
	if scoped.Stats != whole.Stats {
		t.Errorf("scoped counts %+v, want the whole window's %+v", scoped.Stats, whole.Stats)
	}
	if len(whole.Failures) != 2 || len(scoped.Failures) != 1 || !reflect.DeepEqual(scoped.Failures[0], failureOf(whole, "web-a")) {
		t.Errorf("scoped failures %+v, want web-a's of the whole window's %+v", scoped.Failures, whole.Failures)
	}
	if len(scoped.Timelines) != 1 || !reflect.DeepEqual(scoped.Timelines[0], timelineOf(whole, "web-a")) {
		t.Errorf("scoped timelines %+v, want web-a's alone, as in the whole window", scoped.Timelines)
	}

	events := slices.Clone(r.events)
	slices.SortStableFunc(events, func(a, b event.Event) int { return cmp.Compare(a.Time, b.Time) })
	al := NewAligner(Options{}, nil, func(*PodTimeline) {})
	al.WantPods(func(_ string, wl event.Workload) bool { return wl == web.wl })
	for i := range events {
		if err := al.Add(&events[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range al.byUID {
		n, kept := 0, 0
		for _, v := range p.dp {
			for _, tr := range v.trans {
				n++
				if tr.ev != nil {
					kept++
				}
			}
		}
		if want := map[string]int{"web-a": n, "api-a": 0}[p.ref.Name]; n != 4 || kept != want {
			t.Errorf("%s: %d of %d dataplane transitions keep their event, want %d of 4", p.ref.Name, kept, n, want)
		}
	}
}

func failureOf(res *Result, pod string) AlignedFailure {
	for _, f := range res.Failures {
		if f.Pod.Name == pod {
			return f
		}
	}
	return AlignedFailure{}
}

func timelineOf(res *Result, pod string) PodTimeline {
	for _, tl := range res.Timelines {
		if tl.Pod.Name == pod {
			return tl
		}
	}
	return PodTimeline{}
}
