package analysis

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// svc is a service_changed event as the watcher records it.
func (r *rec) svc(d int64, ns, name, reason, ips string) {
	r.add(event.Event{Time: r.at(d), Kind: event.ServiceChanged, Node: r.nodes[0], Source: event.SourceWatcher,
		Pod: event.PodRef{Namespace: ns}, Service: name, Reason: reason,
		Attrs: map[string]string{event.AttrClusterIPs: ips, event.AttrServicePorts: "80/TCP", event.AttrServiceType: "ClusterIP"}})
}

// refusedTo is a refused connection as a client that knows only its
// target logs it: no Service field, no backend.
func (r *rec) refusedTo(d int64, c netip.AddrPort, target string, remote netip.AddrPort) {
	r.add(event.Event{Time: r.at(d), Kind: event.ClientFailure, Source: event.SourceClient,
		Local: c, Remote: remote, Reason: event.FailRefused, Duration: int64(time.Millisecond),
		Attrs: map[string]string{event.AttrTarget: target}})
}

// TestTargetResolvesToService: a failure whose client knew only the
// Service's address or name is judged against that Service's endpoints at
// the time, for each form a client log holds it in.
func TestTargetResolvesToService(t *testing.T) {
	ip := netip.MustParseAddrPort("10.96.0.10:80")
	none := netip.AddrPort{}
	for _, tc := range []struct {
		name   string
		target string
		remote netip.AddrPort
	}{
		{"ClusterIP:port", "10.96.0.10:80", none},
		{"URL with a ClusterIP", "http://10.96.0.10/checkout", none},
		{"dialled ClusterIP only", "", ip},
		{"name.ns.svc.cluster.local:port", "http://web.default.svc.cluster.local:80/", none},
		{"name.ns.svc", "web.default.svc", none},
		{"name.ns", "http://web.default/x?y=1", none},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRec()
			p := r.pod("web-1", "10.244.0.11")
			r.svc(-10*s, "default", "web", event.ChangeObserved, "10.96.0.10")
			r.created(p, -5*s)
			r.ready(p, -4*s)
			r.leave(p, 0, ms)
			r.removed(p, 10*ms, ms)
			r.refusedTo(500*ms, client(1), tc.target, tc.remote)
			res, err := AnalyzeEvents(r.events, store.Query{}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := causesOf(res); len(got) != 1 || got[client(1).String()] != CauseNoReadyEndpoints {
				t.Errorf("causes %v; want the refusal from %v to be no ready endpoints, the Service having none", got, client(1))
			}
		})
	}
}

// TestTargetByTime: what an address or a name meant is what it meant when
// the request began: a Service recreated under its name with a new
// ClusterIP, and the old ClusterIP given later to another Service.
func TestTargetByTime(t *testing.T) {
	r := newRec()
	r.svc(-20*s, "default", "web", event.ChangeCreated, "10.96.0.10")
	// web has no endpoint yet: a refusal to its address is "no ready
	// endpoints", and its evidence is the Service's creation.
	r.refusedTo(-19*s, client(1), "10.96.0.10:80", netip.AddrPort{})
	p := r.pod("web-1", "10.244.0.11")
	r.created(p, -18*s)
	r.ready(p, -17*s)
	// Recreated: deleted, then created again with another address.
	r.svc(-10*s, "default", "web", event.ChangeDeleted, "10.96.0.10")
	r.svc(-10*s+ms, "default", "web", event.ChangeCreated, "10.96.0.20")
	// The old address now belongs to api, which has endpoints (a pod on
	// another workload) until it loses them at 0.
	r.svc(-5*s, "default", "api", event.ChangeCreated, "10.96.0.10")
	q := r.pod("api-1", "10.244.0.12")
	q.svc, q.wl = "api", event.Workload{Kind: "Deployment", Name: "api"}
	r.created(q, -4*s)
	r.ready(q, -3*s)
	r.leave(q, 0, ms)
	r.removed(q, 10*ms, ms)
	// web's pod leaves too, at 2 s.
	r.leave(p, 2*s, ms)
	r.removed(p, 2*s+10*ms, ms)
	// At 1 s the old address is api's (no ready endpoint); web's new
	// address still has one.
	r.refusedTo(1*s, client(2), "10.96.0.10:80", netip.AddrPort{})
	r.refusedTo(1*s+ms, client(3), "10.96.0.20:80", netip.AddrPort{})
	// At 3 s web has none either.
	r.refusedTo(3*s, client(4), "10.96.0.20:80", netip.AddrPort{})
	res, err := AnalyzeEvents(r.events, store.Query{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := causesOf(res)
	if len(got) != 4 {
		t.Fatalf("%d client failures reported, want 4: %v", len(got), got)
	}
	for _, c := range []netip.AddrPort{client(1), client(2), client(4)} {
		if got[c.String()] != CauseNoReadyEndpoints {
			t.Errorf("failure from %v: %s, want %s", c, got[c.String()], CauseNoReadyEndpoints)
		}
	}
	if got[client(3).String()] == CauseNoReadyEndpoints {
		t.Errorf("failure from %v at 1 s to web's new address: no ready endpoints, but web had one then", client(3))
	}
	for _, f := range res.Failures {
		if f.Failure.Local == client(1).String() {
			var roles []string
			for _, e := range f.Evidence {
				roles = append(roles, e.Role)
			}
			if !slices.ContainsFunc(roles, func(r string) bool { return strings.HasPrefix(r, "Service created, no endpoint since") }) {
				t.Errorf("evidence of the refusal before any endpoint: %v", roles)
			}
		}
	}
}

// causesOf maps each client-reported failure's client address to its cause.
func causesOf(res *Result) map[string]Cause {
	out := map[string]Cause{}
	for _, f := range res.Failures {
		if !f.Inferred {
			out[f.Failure.Local] = f.Cause
		}
	}
	return out
}

func TestTargetHost(t *testing.T) {
	for in, want := range map[string]string{
		"":                                   "",
		"10.96.0.10:80":                      "10.96.0.10",
		"http://10.96.0.10/x":                "10.96.0.10",
		"https://user:pw@web.shop.svc:8443/": "web.shop.svc",
		"web.shop":                           "web.shop",
		"[fd00::10]:80":                      "fd00::10",
		"http://[fd00::10]/":                 "fd00::10",
		"web.shop.svc.cluster.local?q=1":     "web.shop.svc.cluster.local",
	} {
		if got := targetHost(in); got != want {
			t.Errorf("targetHost(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestNoReadyAtAServicesStart: a new Service's clients are refused until
// its first endpoint is ready and the proxies have it: before any
// endpoint event (the Service's creation is the evidence, even once later
// endpoint events exist), and within the proxy lag after the first ready
// one. Past the lag a refusal is something else.
func TestNoReadyAtAServicesStart(t *testing.T) {
	r := newRec()
	r.svc(0, "default", "web", event.ChangeCreated, "10.96.0.10")
	r.refusedTo(200*ms, client(1), "10.96.0.10:80", netip.AddrPort{}) // before any endpoint event
	p := r.pod("web-1", "10.244.0.11")
	r.created(p, 500*ms)
	r.endpoint(p, 600*ms, event.EndpointAdded, r.nodes[0]) // added, not ready
	r.ready(p, 2*s)
	r.refusedTo(2*s+300*ms, client(2), "10.96.0.10:80", netip.AddrPort{}) // within the proxy lag
	r.refusedTo(3*s+500*ms, client(3), "10.96.0.10:80", netip.AddrPort{}) // past it
	res, err := AnalyzeEvents(r.events, store.Query{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := causesOf(res)
	if got[client(1).String()] != CauseNoReadyEndpoints || got[client(2).String()] != CauseNoReadyEndpoints {
		t.Errorf("causes %v; want no ready endpoints for %v and %v", got, client(1), client(2))
	}
	if got[client(3).String()] == CauseNoReadyEndpoints {
		t.Errorf("a refusal 1.5 s after the first ready endpoint: no ready endpoints, but the proxies had had it for longer than their lag")
	}
	for _, f := range res.Failures {
		if f.Failure.Local != client(2).String() {
			continue
		}
		var roles []string
		for _, e := range f.Evidence {
			roles = append(roles, e.Role)
		}
		if !slices.Contains(roles, "first ready endpoint, within the proxy lag") {
			t.Errorf("evidence of the refusal within the lag: %v", roles)
		}
	}
}

// TestNoReadyEvidenceCounts: the evidence of "no ready endpoints" says what
// the Service had instead: here one endpoint still serving while it
// terminates (a pod in its preStop), not ready.
func TestNoReadyEvidenceCounts(t *testing.T) {
	r := newRec()
	r.svc(-10*s, "default", "web", event.ChangeObserved, "10.96.0.10")
	p := r.pod("web-1", "10.244.0.11")
	r.created(p, -5*s)
	r.ready(p, -4*s)
	r.endpoint(p, -4*s+10*ms, event.EndpointServing, r.nodes[0])
	r.leave(p, 0, ms) // not ready, terminating; still serving
	r.refusedTo(500*ms, client(1), "10.96.0.10:80", netip.AddrPort{})
	res, err := AnalyzeEvents(r.events, store.Query{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Failures {
		if f.Inferred || f.Cause != CauseNoReadyEndpoints {
			continue
		}
		for _, e := range f.Evidence {
			if strings.Contains(e.Role, "endpoints then: 0 ready, 1 serving, 1 terminating") {
				return
			}
		}
		t.Fatalf("evidence %+v lacks the endpoint counts", f.Evidence)
	}
	t.Fatalf("no failure was no ready endpoints: %v", causesOf(res))
}

// TestRefusedByAPodNotReadyYet: a connection that reached a pod before its
// first readiness (a reused address's stale connection tracking) and was
// refused there failed for want of a ready endpoint, like one the proxy
// rejected.
func TestRefusedByAPodNotReadyYet(t *testing.T) {
	r := newRec()
	r.svc(0, "default", "web", event.ChangeCreated, "10.96.0.10")
	p := r.pod("web-1", "10.244.0.11")
	r.created(p, 100*ms)
	r.endpoint(p, 200*ms, event.EndpointAdded, r.nodes[0]) // not ready
	r.refused(p, 500*ms, client(1))
	r.refusedTo(500*ms+ms, client(1), "10.96.0.10:80", netip.AddrPort{})
	r.ready(p, 3*s)
	res, err := AnalyzeEvents(r.events, store.Query{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Failures {
		if !f.Inferred && f.Failure.Local == client(1).String() {
			if f.Pod == nil || f.Pod.Name != "web-1" || f.Cause != CauseNoReadyEndpoints {
				t.Errorf("refusal by the pod not ready yet: pod %v, cause %s; want web-1, no ready endpoints", f.Pod, f.Cause)
			}
			return
		}
	}
	t.Fatalf("the refusal was not reported: %v", causesOf(res))
}

// TestReusedClientPortOtherService: the kernel's record of an earlier
// connection from the same client address and port, to a pod of another
// Service, does not claim a failure whose client dialled this Service.
func TestReusedClientPortOtherService(t *testing.T) {
	r := newRec()
	r.svc(-20*s, "default", "web", event.ChangeObserved, "10.96.0.10")
	r.svc(-20*s, "default", "api", event.ChangeObserved, "10.96.0.20")
	web := r.pod("web-1", "10.244.0.11")
	api := r.pod("api-1", "10.244.0.12")
	api.svc, api.wl = "api", event.Workload{Kind: "Deployment", Name: "api"}
	for _, p := range []*tpod{web, api} {
		r.created(p, -10*s)
		r.ready(p, -9*s)
	}
	// api's pod closed a connection from client(1) a moment ago; the
	// client then dialled web from the same port and was cut.
	r.connClosed(api, -300*ms, client(1), "local", 0)
	r.add(event.Event{Time: r.at(0), Kind: event.ClientFailure, Source: event.SourceClient,
		Local: client(1), Reason: event.FailEOF, Duration: int64(time.Millisecond),
		Attrs: map[string]string{event.AttrTarget: "10.96.0.10:80"}})
	res, err := AnalyzeEvents(r.events, store.Query{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f := reportedFailure(t, res, client(1)); f.Pod != nil && f.Pod.Name == "api-1" {
		t.Errorf("the failure to web's ClusterIP was put on api's pod by a reused client port")
	}
}

// TestTargetServiceRecordedLate: the watch stamps a new Service when its
// event arrives, which may be after the first requests to it were refused
// for want of an endpoint; they are that Service's, with none ready.
func TestTargetServiceRecordedLate(t *testing.T) {
	r := newRec()
	r.refusedTo(0, client(1), "10.96.0.10:80", netip.AddrPort{})
	r.svc(40*ms, "default", "web", event.ChangeCreated, "10.96.0.10")
	p := r.pod("web-1", "10.244.0.11")
	r.created(p, 100*ms)
	r.ready(p, 2*s)
	// Long after the lookahead: an address no Service was recorded
	// holding stays unresolved.
	r.refusedTo(10*s, client(2), "10.96.0.99:80", netip.AddrPort{})
	r.svc(15*s, "default", "api", event.ChangeCreated, "10.96.0.99")
	res, err := AnalyzeEvents(r.events, store.Query{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := causesOf(res)
	if got[client(1).String()] != CauseNoReadyEndpoints {
		t.Errorf("refusal 40 ms before web was recorded: %s, want %s", got[client(1).String()], CauseNoReadyEndpoints)
	}
	if got[client(2).String()] == CauseNoReadyEndpoints {
		t.Errorf("refusal 5 s before api was recorded: %s; a Service recorded that much later is not the one it reached", got[client(2).String()])
	}
}

// TestTargetClusterIPGivenAgain: a Service deleted, its ClusterIP given at
// once to a new Service (the API server hands freed addresses out again),
// and a keep-alive connection of the old Service's cut just after: the
// proxies still routed the old address, and the pod side recorded the
// connection on the old Service's pod. The failure is that pod's, not
// set aside as the new Service's, whose pods never saw the connection.
func TestTargetClusterIPGivenAgain(t *testing.T) {
	r := newRec()
	r.svc(-20*s, "default", "web", event.ChangeObserved, "10.96.0.10")
	web := r.pod("web-1", "10.244.0.11")
	r.created(web, -10*s)
	r.ready(web, -9*s)
	r.svc(0, "default", "web", event.ChangeDeleted, "10.96.0.10")
	r.svc(150*ms, "default", "api", event.ChangeCreated, "10.96.0.10")
	r.signal(web, 100*ms, 15)
	r.exit(web, 101*ms, 0, 0)
	r.connClosedIdle(web, 101*ms+50_000, client(1), 20*ms)
	r.add(event.Event{Time: r.at(130 * ms), Kind: event.ClientFailure, Source: event.SourceClient,
		Local: client(1), Reason: event.FailEOF, Duration: int64(time.Millisecond),
		Attrs: map[string]string{event.AttrTarget: "10.96.0.10:80"}})
	res, err := AnalyzeEvents(r.events, store.Query{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f := reportedFailure(t, res, client(1)); f.Pod == nil || f.Pod.Name != "web-1" || f.Cause != CauseKeepAliveAtExit {
		t.Errorf("failure on pod %v, cause %s; want web-1's keep-alive connection cut at exit", f.Pod, f.Cause)
	}
}

// reportedFailure is the client-reported failure from c in res; the test
// fails when there is none.
func reportedFailure(t *testing.T, res *Result, c netip.AddrPort) AlignedFailure {
	t.Helper()
	for _, f := range res.Failures {
		if !f.Inferred && f.Failure.Local == c.String() {
			return f
		}
	}
	t.Fatalf("the failure from %s was not reported", c)
	return AlignedFailure{}
}
