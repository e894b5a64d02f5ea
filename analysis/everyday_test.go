package analysis

import (
	"net/netip"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// What a cluster that has run for days does every day, a few events
// each: a pod in two Services, an address reused, a sidecar beside the
// app, a restart the watcher missed, a client whose clock is off.

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

// A pod of two containers: the app, serving the Service's port, and a
// log shipper beside it. Their kernel events name their containers by
// the runtime's IDs, as the cgroup paths give them; the watcher's name
// them by their spec's names too.
type twoContainers struct {
	app, shipper *tpod
}

func (r *rec) twoContainers(name, ip string) twoContainers {
	app := r.running(name, ip)
	app.ref.Container = "cid-app"
	shipper := *app
	shipper.ref.Container, shipper.pid = "cid-log", 5151
	for _, c := range []struct {
		p          *tpod
		name, port string
	}{{app, "app", "8080/TCP"}, {&shipper, "log-shipper", ""}} {
		e := r.podEvent(c.p, -2*time.Hour.Nanoseconds()+500*ms, event.ContainerStarted)
		e.Pod.Container = c.name
		e.Attrs = map[string]string{event.AttrContainerID: c.p.ref.Container, event.AttrContainerRole: "app"}
		if c.port != "" {
			e.Attrs[event.AttrContainerPorts] = c.port
		}
		r.add(e)
	}
	// The app serves: a client's connection closes, on the Service's port.
	r.connClosed(app, -30*s, client(99), "peer", 0)
	return twoContainers{app, &shipper}
}

// TestSidecarExitIsNotTheApps: the log shipper exits 60 ms after SIGTERM;
// the app drains for 10 s more. A timeout that began 1 s in was an
// endpoint race "whose process had exited 940 ms before": the shipper's
// exit. It is no cause the app's end explains.
func TestSidecarExitIsNotTheApps(t *testing.T) {
	for _, named := range []bool{false, true} {
		r := newRec()
		pc := r.twoContainers("web-a", "10.244.0.10")
		a := pc.app
		r.deletion(a, 0, 30*time.Second)
		r.leave(a, 5*ms, ms)
		r.signal(a, 10*ms, 15)
		r.signal(pc.shipper, 10*ms, 15)
		r.exit(pc.shipper, 70*ms, 0, 0)
		r.connClosed(a, 5*s, client(98), "peer", 0) // still serving
		r.exit(a, 10*s, 0, 0)
		r.removed(a, 10*s+50*ms, ms)
		opts := []fopt{took(2 * time.Second)}
		if named {
			opts = append(opts, backend(a))
		}
		r.failure(3*s, client(1), event.FailTimeout, opts...)
		res := analyzeAll(t, r)
		fs := clientFailures(res)
		if len(fs) != 1 {
			t.Fatalf("%d failures, want 1", len(fs))
		}
		if c := fs[0].Cause; c == CauseEndpointRace || c == CauseEndpointRaceLikely || c == CauseDied || c == CauseDiedLikely {
			t.Errorf("named=%v: the timeout is %s (%s): the shipper's exit taken for the app's", named, c, fs[0].Explanation)
		}
		var tl *PodTimeline
		for i := range res.Timelines {
			if res.Timelines[i].Pod.Name == "web-a" {
				tl = &res.Timelines[i]
			}
		}
		if tl == nil || tl.Exit == nil || tl.Exit.Time != r.at(10*s) {
			t.Fatalf("named=%v: web-a's exit %+v, want the app's at +10 s", named, tl)
		}
		if len(tl.Containers) != 2 || !tl.Containers[0].App || tl.Containers[0].Name != "app" ||
			tl.Containers[1].Name != "log-shipper" || tl.Containers[1].Exit == nil || tl.Containers[1].Exit.Time != r.at(70*ms) {
			t.Errorf("named=%v: containers %+v, want the app, and the log shipper exiting at +70 ms", named, tl.Containers)
		}
	}
}

// TestCrashLoopingSidecarBesideAHealthyApp: the log shipper crashes and
// restarts while the app serves; a timeout meanwhile is no container
// that died in rotation, and no disruption ended the pod.
func TestCrashLoopingSidecarBesideAHealthyApp(t *testing.T) {
	r := newRec()
	pc := r.twoContainers("web-a", "10.244.0.10")
	for i := int64(0); i < 3; i++ {
		r.exit(pc.shipper, i*20*s, 1, 0)
		x := r.podEvent(pc.shipper, i*20*s+200*ms, event.ContainerTerminated)
		x.Pod.Container, x.Reason, x.Code = "log-shipper", "Error", 1
		x.Attrs = map[string]string{event.AttrContainerID: pc.shipper.ref.Container}
		if i > 0 {
			x.Attrs[event.AttrContainerID] = "cid-log-" + string(rune('a'+i))
		}
		r.add(x)
		e := r.podEvent(pc.shipper, i*20*s+10*s, event.ContainerStarted)
		e.Pod.Container = "log-shipper"
		e.Attrs = map[string]string{event.AttrContainerID: "cid-log-" + string(rune('b'+i)), event.AttrContainerRole: "app"}
		r.add(e)
	}
	r.failure(25*s, client(1), event.FailTimeout, backend(pc.app), took(2*time.Second))
	res := analyzeAll(t, r)
	fs := clientFailures(res)
	if len(fs) != 1 || fs[0].Cause != CauseUnexplained {
		t.Errorf("the timeout: %+v, want one unexplained: the app never died", fs)
	}
	if len(res.Disruptions) != 0 {
		t.Errorf("disruptions %+v, want none: the app never ended", res.Disruptions)
	}
}

// TestRestartSeenOnlyByItsEndpoint: the kubelet restarts the app in place
// (a liveness kill), and the watcher misses its pod_ready and
// container_started (its agent was down): only the endpoint leaving and
// coming back shows it. The old life's SIGTERM and exit end nothing of the
// new one: a timeout 20 min later is no endpoint race.
func TestRestartSeenOnlyByItsEndpoint(t *testing.T) {
	for _, observed := range []bool{false, true} {
		r := newRec()
		a := r.running("web-a", "10.244.0.10")
		r.signal(a, 0, 15)
		r.exit(a, 10*ms, 0, 15)
		r.leave(a, 1*s, ms)
		if observed {
			// Seen again only at the watcher's next re-observation.
			r.observed(a, 10*minute)
		} else {
			r.endpoint(a, 20*s, event.EndpointReady, "lab")
		}
		// The app serves again: its clients' connections close now and
		// then.
		for m := int64(1); m < 20; m++ {
			r.connClosed(a, m*minute, client(int(100+m)), "peer", 0)
		}
		r.failure(20*minute, client(1), event.FailTimeout, backend(a), took(2*time.Second))
		res := analyzeAll(t, r)
		fs := clientFailures(res)
		if len(fs) != 1 || fs[0].Pod == nil || fs[0].Pod.Name != "web-a" || fs[0].Cause != CauseUnexplained {
			t.Errorf("observed=%v: %+v, want one unexplained on web-a: the old life's end is not the new one's", observed, fs)
		}
	}
}

// TestClientClockSkew: held. A client's clock 300 ms off the nodes': its
// refusal while the endpoint was still in rotation is the endpoint race
// either way (likely, with its pod the one candidate, when the log is
// late), and its EOF 300 ms late on a keep-alive connection the exit
// cut is still that cut. (An EOF logged 300 ms before the exit that cut
// it is left unexplained, as it was: the rules do not move a failure
// past the exit by more than ExitBefore.)
func TestClientClockSkew(t *testing.T) {
	for _, skew := range []int64{-300 * ms, 300 * ms} {
		r := newRec("node-a", "node-b")
		a := r.running("web-a", "10.244.0.10")
		r.deletion(a, 0, 30*time.Second)
		r.leave(a, 5*ms, 1500*ms) // node-b lags 1.5 s
		r.signal(a, 10*ms, 15)
		r.listenerClosed(a, 11*ms)
		r.exit(a, 20*ms, 0, 15)
		r.refused(a, 800*ms, client(1))
		r.failure(800*ms+1*ms+skew, client(1), event.FailRefused)
		r.removed(a, 2*s, ms)
		fs := clientFailures(analyzeAll(t, r))
		// Logged late, the kernel's refusal is older than a new
		// connection's start allows: the same race, named likely, with
		// web-a its candidate.
		ok := len(fs) == 1 && (fs[0].Cause == CauseEndpointRace && fs[0].Pod != nil && fs[0].Pod.Name == "web-a" ||
			fs[0].Cause == CauseEndpointRaceLikely && len(fs[0].Candidates) == 1 && fs[0].Candidates[0].Name == "web-a")
		if !ok {
			t.Errorf("refusal, skew %v: %+v, want one endpoint race on web-a", time.Duration(skew), fs)
		}
	}
	r := newRec()
	a := r.running("web-a", "10.244.0.10")
	exit := r.gracefulPreStop(a, 0, []netip.AddrPort{client(1)})
	r.failure(exit+2*ms+300*ms, client(1), event.FailEOF)
	fs := clientFailures(analyzeAll(t, r))
	if len(fs) != 1 || fs[0].Cause != CauseKeepAliveAtExit || fs[0].Pod == nil || fs[0].Pod.Name != "web-a" {
		t.Errorf("EOF 300 ms late: %+v, want one keep-alive cut at exit on web-a", fs)
	}
}
