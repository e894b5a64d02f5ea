package analysis

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// The cases here reproduce what a cluster that has run for days shows and
// a minutes-old lab does not: state older than the read, exec probes and
// workers exiting in a ready pod, containers restarted in place, answered
// statuses, pods ended by their own reasons after an unrelated workload
// change, client ports reused across Services, timeouts into exited pods.
// Each failed before the change that fixed it.

// mainProc marks the pod's kernel events as its container's main
// process's, as the capture does on a node that knows main processes.
func (r *rec) mainExit(p *tpod, d int64, code, sig int32) {
	e := r.kernel(p, d, event.ProcessExit)
	e.Code, e.Signal, e.Flags = code, sig, event.FlagMain
	r.add(e)
}

func (r *rec) mainSignal(p *tpod, d int64, sig int32) {
	e := r.kernel(p, d, event.Signal)
	e.Signal, e.PeerPID, e.PeerComm, e.Reason, e.Flags = sig, 7001, "runc", "delivered", event.FlagMain
	r.add(e)
}

// probeExit is an exec probe's process ending in the pod's container: in
// its cgroup, not its main process.
func (r *rec) probeExit(p *tpod, d int64) {
	e := r.kernel(p, d, event.ProcessExit)
	e.PID, e.Comm = p.pid+int32(d/s)%1000+1, "drainscope"
	r.add(e)
}

// capabilities is the node's kernel_capabilities, naming the features its
// capture has.
func (r *rec) capabilities(node string, d int64, features ...string) {
	r.add(event.Event{Time: r.at(d), Kind: event.KernelCapabilities, Node: node, Source: event.SourceKernel,
		Attrs: map[string]string{event.AttrKernelRelease: "6.18.0", event.AttrKernelFeatures: strings.Join(features, ",")}})
}

func (r *rec) workloadChange(p *tpod, d int64, reason string, from, to int) {
	r.add(event.Event{Time: r.at(d), Kind: event.WorkloadChanged, Node: r.nodes[0], Source: event.SourceWatcher,
		Pod: event.PodRef{Namespace: p.ref.Namespace}, Workload: p.wl, Reason: reason,
		Attrs: map[string]string{event.AttrReplicasFrom: strconv.Itoa(from), event.AttrReplicasTo: strconv.Itoa(to)}})
}

func (r *rec) terminated(p *tpod, d int64, reason string, code int32) {
	e := r.podEvent(p, d, event.ContainerTerminated)
	e.Reason, e.Code = reason, code
	r.add(e)
}

func (r *rec) evicted(p *tpod, d int64) {
	e := r.podEvent(p, d, event.PodDeletion)
	e.Duration = int64(30 * time.Second)
	e.Attrs = map[string]string{event.AttrDisruption: "EvictionByEvictionAPI"}
	r.add(e)
}

// observed is the watcher's re-observation of a pod and its endpoint on
// every node, as a list finds them (event.FlagObserved).
func (r *rec) observed(p *tpod, d int64) {
	e := r.podEvent(p, d, event.PodReady)
	e.Local, e.Flags = netip.AddrPortFrom(p.ip, 0), event.FlagObserved
	r.add(e)
	for _, n := range r.nodes {
		x := r.podEvent(p, d, event.EndpointReady)
		x.Node, x.Local, x.Service, x.Slice, x.Flags = n, p.addr(), p.svc, p.svc+"-abcde", event.FlagObserved
		x.Attrs = map[string]string{event.AttrConditions: "ready,serving"}
		r.add(x)
	}
}

func decided(t *testing.T, res *Result) []AlignedFailure {
	t.Helper()
	fs := clientFailures(res)
	if len(fs) == 0 {
		t.Fatal("no client failure was decided")
	}
	return fs
}

func TestLongLivedStateBeforeTheRead(t *testing.T) {
	// Three pods ready 40 minutes before a scale-down of one: the read's
	// lead (15 min) holds only the scale-down. A timeout to a healthy pod
	// after it was named "no ready endpoints … 0 ready".
	r := newRec()
	a, b, c := r.pod("web-a", "10.244.0.11"), r.pod("web-b", "10.244.0.12"), r.pod("web-c", "10.244.0.13")
	for _, p := range []*tpod{a, b, c} {
		r.ready(p, -40*60*s)
	}
	r.deletion(c, 0, 30*time.Second)
	r.leave(c, 100*ms, 10*ms)
	r.mainSignal(c, 200*ms, 15)
	r.mainExit(c, 210*ms, 0, 0)
	r.removed(c, 300*ms, 10*ms)
	r.failure(10*s, client(1), event.FailTimeout, backend(a), took(5*time.Second))

	st := embeddedStore(t, r.events)
	q := store.Query{Window: event.Window{From: r.at(-60 * s), To: r.at(60 * s)}}
	res, err := AnalyzeWith(context.Background(), st, q, Options{MaxFailures: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range decided(t, res) {
		if f.Cause != CauseUnexplained {
			t.Errorf("a timeout on a healthy pod after a scale-down was named %s: %s", f.Cause, f.Explanation)
		}
		if f.Pod == nil || f.Pod.Name != "web-a" {
			t.Errorf("the timeout went on %v, want web-a (the backend the client logged)", f.Pod)
		}
	}
}

func TestLongLivedQuietPodNotForgotten(t *testing.T) {
	// A pod ready 30 minutes before, quiet since (no event), then the
	// Service's other pod scaled away: a proxy's 502 on it was "no ready
	// endpoints" once the aligner forgot the quiet pod.
	r := newRec()
	a, c := r.pod("web-a", "10.244.0.11"), r.pod("web-c", "10.244.0.13")
	r.ready(a, -30*60*s)
	r.ready(c, -30*60*s)
	r.deletion(c, 0, 30*time.Second)
	r.leave(c, 100*ms, 10*ms)
	r.mainExit(c, 210*ms, 0, 0)
	r.removed(c, 300*ms, 10*ms)
	r.failure(10*s, client(1), event.FailTimeout, backend(a), took(5*time.Second))
	for _, f := range decided(t, analyzeAll(t, r)) {
		if f.Cause != CauseUnexplained || f.Pod == nil || f.Pod.Name != "web-a" {
			t.Errorf("timeout on a pod ready 30 min before: %s on %v (%s); want unexplained on web-a", f.Cause, f.Pod, f.Explanation)
		}
	}
}

func TestLongLivedExecProbeIsNotTheApp(t *testing.T) {
	for _, marks := range []bool{true, false} {
		name := "capture marks main processes"
		if !marks {
			name = "capture without main-process marks"
		}
		t.Run(name, func(t *testing.T) {
			r := newRec()
			if marks {
				r.capabilities("lab", -50*60*s, "ring_buffer", FeatureMainProcess)
			}
			p := r.pod("web-a", "10.244.0.11")
			r.ready(p, -40*60*s)
			// An exec readiness probe every 10 s, for minutes.
			for d := -5 * 60 * s; d < 60*s; d += 10 * s {
				r.probeExit(p, d)
			}
			r.connClosed(p, 20*s+1*ms, client(1), "local", 0)
			r.failure(20*s+3*ms, client(1), event.FailReset)
			r.failure(30*s+100*ms, client(2), event.FailEOF, backend(p), took(800*time.Millisecond))
			r.failure(40*s+500*ms, client(3), event.FailTimeout, backend(p), took(5*time.Second))
			res := analyzeAll(t, r)
			for _, f := range decided(t, res) {
				if f.Cause != CauseUnexplained {
					t.Errorf("%s on a ready pod whose exec probe exited was named %s: %s", f.Failure.Reason, f.Cause, f.Explanation)
				}
			}
			if len(res.Disruptions) != 0 {
				t.Errorf("exec probe exits made %d disruptions, first %q", len(res.Disruptions), res.Disruptions[0].Trigger)
			}
		})
	}
}

func TestLongLivedRestartStartsClean(t *testing.T) {
	// A liveness restart: SIGTERM, exit, the kubelet's report, ready
	// again. Twenty minutes later a timeout on the same pod was still an
	// endpoint race ("its process had exited 20m before").
	r := newRec()
	r.capabilities("lab", -50*60*s, FeatureMainProcess)
	p := r.pod("web-a", "10.244.0.11")
	r.ready(p, -40*60*s)
	r.endpoint(p, -1*s, event.EndpointNotReady, "lab")
	r.mainSignal(p, 0, 15)
	r.mainExit(p, 50*ms, 2, 0)
	r.terminated(p, 1*s, "Error", 2)
	e := r.podEvent(p, 2*s, event.ContainerStarted)
	e.Attrs = map[string]string{"container_id": "c2", "restart_count": "1"}
	r.add(e)
	r.ready(p, 8*s)
	// The watcher re-observes the pod every 10 minutes; clients keep
	// using it.
	r.observed(p, 10*60*s)
	r.observed(p, 20*60*s-5*s)
	for d := 60 * s; d < 20*60*s; d += 60 * s {
		r.connClosed(p, d, client(5), "peer", 0)
	}
	r.failure(20*60*s, client(1), event.FailTimeout, backend(p), took(5*time.Second))
	res := analyzeAll(t, r)
	for _, f := range decided(t, res) {
		if f.Cause != CauseUnexplained {
			t.Errorf("a timeout 20 min after a restart in place was named %s: %s", f.Cause, f.Explanation)
		}
	}
	if len(res.Disruptions) != 1 || res.Disruptions[0].Trigger != TriggerRestart {
		t.Errorf("disruptions: %+v, want one restart", res.Disruptions)
	}
}

func TestAnsweredStatusIsNotNoReadyEndpoints(t *testing.T) {
	// Every endpoint gone, then HTTP 500, 404 and 429 that a server
	// answered: named "no ready endpoints" before.
	r := newRec()
	p := r.pod("web-a", "10.244.0.11")
	r.ready(p, -60*s)
	r.deletion(p, 0, 30*time.Second)
	r.leave(p, 100*ms, 0)
	r.mainExit(p, 200*ms, 0, 0)
	r.removed(p, 300*ms, 0)
	for i, code := range []int32{500, 404, 429} {
		r.failure(2*s+int64(i)*ms, client(i), event.FailStatus, func(e *event.Event) { e.Code = code })
	}
	r.failure(3*s, client(9), event.FailRefused)
	fs := decided(t, analyzeAll(t, r))
	for _, f := range fs {
		switch {
		case f.Failure.Reason == event.FailRefused && f.Cause != CauseNoReadyEndpoints:
			t.Errorf("a refusal with no ready endpoint: %s, want no_ready_endpoints", f.Cause)
		case f.Failure.Reason == event.FailStatus && f.Cause != CauseUnexplained:
			t.Errorf("HTTP %d answered by a server was named %s", f.Failure.Code, f.Cause)
		}
	}
}

func TestDisruptionNamedByWhatEndedItsPods(t *testing.T) {
	t.Run("an OOM kill 5 min after a finished rollout", func(t *testing.T) {
		r := newRec()
		old, p := r.pod("web-old", "10.244.0.10"), r.pod("web-a", "10.244.0.11")
		r.ready(old, -20*60*s)
		r.workloadChange(p, -10*s, event.ChangeTemplate, 1, 1)
		r.created(p, -9*s)
		r.ready(p, -8*s)
		r.deletion(old, -7*s, 30*time.Second)
		r.mainExit(old, -7*s+100*ms, 0, 0)
		r.removed(old, -7*s+200*ms, 0)
		// Five minutes later the new pod's container is OOM-killed.
		k := r.kernel(p, 5*60*s, event.Signal)
		k.Signal, k.Flags = 9, event.FlagMain
		r.add(k)
		r.mainExit(p, 5*60*s+1*ms, 0, 9)
		r.terminated(p, 5*60*s+1*s, "OOMKilled", 137)
		res := analyzeAll(t, r)
		got := triggers(res)
		if !equal(got, []string{"Deployment/web template", "Deployment/web oom"}) {
			t.Errorf("disruptions %v, want the rollout and then an oom", got)
		}
	})
	t.Run("a node-drain eviction 5 min after an HPA scale-up", func(t *testing.T) {
		r := newRec()
		a, b := r.pod("web-a", "10.244.0.11"), r.pod("web-b", "10.244.0.12")
		r.ready(a, -20*60*s)
		r.workloadChange(a, -5*60*s, event.ChangeScale, 1, 2)
		r.created(b, -5*60*s+1*s)
		r.ready(b, -5*60*s+5*s)
		r.evicted(a, 0)
		r.mainSignal(a, 10*ms, 15)
		r.mainExit(a, 20*ms, 0, 0)
		r.removed(a, 100*ms, 0)
		got := triggers(analyzeAll(t, r))
		if !equal(got, []string{"Deployment/web eviction"}) {
			t.Errorf("disruptions %v, want one eviction", got)
		}
	})
	t.Run("a scale-down names its pods; a scale-up does not", func(t *testing.T) {
		r := newRec()
		a := r.pod("web-a", "10.244.0.11")
		r.ready(a, -20*60*s)
		r.workloadChange(a, -2*s, event.ChangeScale, 2, 1)
		r.deletion(a, 0, 30*time.Second)
		r.mainExit(a, 20*ms, 0, 0)
		if got := triggers(analyzeAll(t, r)); !equal(got, []string{"Deployment/web scale"}) {
			t.Errorf("disruptions %v, want one scale", got)
		}
	})
}

func triggers(res *Result) []string {
	var out []string
	for _, ro := range res.Disruptions {
		out = append(out, ro.Workload()+" "+string(ro.Trigger))
	}
	return out
}

func equal(a, b []string) bool { return strings.Join(a, "|") == strings.Join(b, "|") }

func TestReusedClientPortOfAnotherServicesPod(t *testing.T) {
	// The client's port last carried a connection to a pod of another
	// Service that has been running since before the read (no endpoint
	// event in it). A refusal from the web Service went on that pod.
	r := newRec()
	web := r.pod("web-a", "10.244.0.11")
	other := r.pod("db-a", "10.244.0.20")
	other.svc, other.wl = "db", event.Workload{Kind: "Deployment", Name: "db"}
	r.ready(web, -60*s)
	r.add(event.Event{Time: r.at(-60 * s), Kind: event.ServiceChanged, Source: event.SourceWatcher,
		Pod: event.PodRef{Namespace: "default"}, Service: "web", Reason: event.ChangeCreated,
		Attrs: map[string]string{event.AttrClusterIPs: clusterIP.Addr().String(), event.AttrServicePorts: "80/TCP"}})
	// db-a deleted; its kernel recorded the client's port 3 s before.
	r.connClosed(other, -3*s, client(1), "peer", 0)
	r.deletion(other, -2*s, 30*time.Second)
	r.mainExit(other, -2*s+10*ms, 0, 0)
	r.failure(0, client(1), event.FailRefused)
	for _, f := range decided(t, analyzeAll(t, r)) {
		if f.Pod != nil && f.Pod.Name == "db-a" {
			t.Errorf("a failure to the web Service went on db-a, a pod of another Service: %s", f.Explanation)
		}
	}
}

func TestTimeoutIntoAnExitedPodInRotation(t *testing.T) {
	// vegeta's connect timeouts at a Service, no backend, no client
	// address the pods recorded: the pod had exited and node-b's proxy
	// still sent to it for 2 s. Unexplained before.
	r := newRec("node-a", "node-b")
	a, b := r.pod("web-a", "10.244.0.11"), r.pod("web-b", "10.244.0.12")
	r.ready(a, -60*s)
	r.ready(b, -60*s)
	r.deletion(a, 0, 30*time.Second)
	r.mainSignal(a, 10*ms, 15)
	r.mainExit(a, 20*ms, 0, 0)
	r.endpoint(a, 100*ms, event.EndpointNotReady, "node-a")
	r.endpoint(a, 2*s, event.EndpointNotReady, "node-b")
	// Began at 0.5 s (logged at its end, 5 s later).
	r.failure(5*s+500*ms, client(1), event.FailTimeout, took(5*time.Second), service("web"))
	// Began long after every node had dropped it: not the race.
	r.failure(15*s, client(2), event.FailTimeout, took(5*time.Second), service("web"))
	fs := decided(t, analyzeAll(t, r))
	sort.Slice(fs, func(i, j int) bool { return fs[i].Failure.Time < fs[j].Failure.Time })
	if fs[0].Cause != CauseEndpointRaceLikely || !fs[0].Likely || len(fs[0].Candidates) != 1 || fs[0].Candidates[0].Name != "web-a" {
		t.Errorf("timeout begun while node-b still routed to the exited web-a: %s likely=%v candidates=%v (%s)",
			fs[0].Cause, fs[0].Likely, fs[0].Candidates, fs[0].Explanation)
	}
	if !strings.Contains(fs[0].Explanation, "default/web-a") {
		t.Errorf("the explanation does not name the candidate: %s", fs[0].Explanation)
	}
	if fs[1].Cause != CauseUnexplained {
		t.Errorf("timeout begun after every node dropped web-a: %s, want unexplained", fs[1].Cause)
	}
}

func TestOOMKillIsNotTheGracePeriod(t *testing.T) {
	// The kernel's OOM killer: SIGKILL with no SIGTERM and no deletion.
	// Its cut connections were named "SIGKILL" with the fix "raise
	// terminationGracePeriodSeconds", which does nothing for it.
	r := newRec()
	p := r.pod("web-a", "10.244.0.11")
	r.ready(p, -60*s)
	k := r.kernel(p, 0, event.Signal)
	k.Signal, k.Flags = 9, event.FlagMain
	r.add(k)
	r.mainExit(p, 1*ms, 0, 9)
	r.connClosed(p, 2*ms, client(1), "local", event.FlagAtExit)
	r.failure(5*ms, client(1), event.FailEOF, backend(p))
	r.terminated(p, 1*s, "OOMKilled", 137)
	for _, f := range decided(t, analyzeAll(t, r)) {
		if f.Cause != CauseKilled {
			t.Errorf("EOF at an OOM kill: %s (%s), want %s", f.Cause, f.Explanation, CauseKilled)
		}
	}
}

func TestRefusedAfterAnOOMKillIsNotTheEndpointRace(t *testing.T) {
	// The app was OOM-killed; its endpoint stayed ready until the
	// readiness probe failed 4 s later, and the proxies kept sending new
	// connections to it. They were named the endpoint race, whose fix (a
	// longer preStop) never runs for a container that dies.
	for _, known := range []bool{true, false} {
		r := newRec("node-a")
		a, b := r.pod("web-a", "10.244.0.11"), r.pod("web-b", "10.244.0.12")
		r.ready(a, -60*s)
		r.ready(b, -60*s)
		k := r.kernel(a, 0, event.Signal)
		k.Signal, k.Flags = 9, event.FlagMain
		r.add(k)
		r.mainExit(a, 1*ms, 0, 9)
		r.terminated(a, 1*s, "OOMKilled", 137)
		if known {
			r.refused(a, 2*s, client(1))
			r.failure(2*s+1*ms, client(1), event.FailRefused, service("web"))
		} else {
			// A Service-only client: nothing ties the refusal to a pod.
			r.failure(2*s+1*ms, client(1), event.FailRefused, service("web"))
		}
		r.endpoint(a, 4*s, event.EndpointNotReady, "node-a")
		// After the probe took it out: nothing routes to it.
		r.failure(9*s, client(2), event.FailRefused, service("web"))
		fs := decided(t, analyzeAll(t, r))
		sort.Slice(fs, func(i, j int) bool { return fs[i].Failure.Time < fs[j].Failure.Time })
		want := CauseDied
		if !known {
			want = CauseDiedLikely
		}
		if fs[0].Cause != want {
			t.Errorf("known=%v: refused while the OOM-killed web-a was in rotation: %s (%s), want %s", known, fs[0].Cause, fs[0].Explanation, want)
		}
		if !known && (len(fs[0].Candidates) != 1 || fs[0].Candidates[0].Name != "web-a") {
			t.Errorf("candidates %v, want web-a", fs[0].Candidates)
		}
		for _, rule := range Rules {
			if rule.Cause == fs[0].Cause && strings.Contains(rule.Fix, "preStop delay") {
				t.Errorf("known=%v: the fix is a preStop delay: %s", known, rule.Fix)
			}
		}
		if fs[1].Cause != CauseUnexplained {
			t.Errorf("known=%v: refused after the probe took web-a out: %s (%s), want unexplained", known, fs[1].Cause, fs[1].Explanation)
		}
	}
}

func TestRefusedAfterACrashNamedWhenTheKubeletSawIt(t *testing.T) {
	// The app exits 3 on its own; the node does not mark main processes,
	// so its exit is the app's only when the kubelet reports the
	// container's termination.
	for _, reported := range []bool{true, false} {
		r := newRec("node-a")
		a := r.pod("web-a", "10.244.0.11")
		r.ready(a, -60*s)
		e := r.kernel(a, 0, event.ProcessExit)
		e.Code = 3
		r.add(e)
		if reported {
			r.terminated(a, 1*s, "Error", 3)
		}
		r.refused(a, 2*s, client(1))
		r.failure(2*s+1*ms, client(1), event.FailRefused, service("web"))
		fs := decided(t, analyzeAll(t, r))
		want := CauseDied
		if !reported {
			want = CauseUnexplained // an exit alone may be a probe's
		}
		if len(fs) != 1 || fs[0].Cause != want {
			t.Fatalf("reported=%v: %v, want one %s", reported, fs, want)
		}
	}
}

func TestProbeConnectionAtItsExitIsNoInferredFailure(t *testing.T) {
	// An exec probe (`app --check=http://127.0.0.1:8080/healthz`) is a
	// process in the app's container: its own request's connection,
	// closed by its exit a moment after the answer, was inferred to be a
	// client's keep-alive connection cut at the app's exit, every 2 s of
	// a healthy pod's life (134 in the long-lived lab's window). With
	// main-process marks the probe is not the app; without them, its side
	// of the connection (an ephemeral port) is not a port the pod serves.
	for _, marks := range []bool{true, false} {
		r := newRec()
		p := r.pod("web-a", "10.244.0.11")
		r.ready(p, -60*s)
		if marks {
			r.capabilities("lab", -120*s, "main_process")
		}
		probeSide := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 42712)
		app := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 8080)
		for i := int64(0); i < 5; i++ {
			e := r.kernel(p, i*2*s, event.ConnClosed)
			e.PID, e.Comm = p.pid+100+int32(i), "app"
			e.Local, e.Remote, e.Reason, e.Flags, e.Duration = probeSide, app, "local", event.FlagAtExit, int64(900*time.Microsecond)
			r.add(e)
			x := r.kernel(p, i*2*s, event.ProcessExit)
			x.PID, x.Comm = e.PID, "app"
			r.add(x)
		}
		// The app's own at-exit close of a client's connection, in use:
		// still inferred.
		r.mainSignal(p, 20*s, 15)
		r.mainExit(p, 20*s+1*ms, 0, 0)
		e := r.kernel(p, 20*s+1*ms, event.ConnClosed)
		e.Local, e.Remote, e.Reason, e.Flags, e.Duration = p.addr(), client(1), "local", event.FlagAtExit|event.FlagMain, int64(2*ms)
		r.add(e)
		n := 0
		for _, f := range analyzeAll(t, r).Failures {
			if !f.Inferred {
				continue
			}
			n++
			if f.Failure.Local != client(1).String() {
				t.Errorf("marks=%v: inferred %s on %s ↔ %s (%s); a probe's own connection is no client's", marks, f.Cause, f.Failure.Local, f.Failure.Remote, f.Explanation)
			}
		}
		if n != 1 {
			t.Errorf("marks=%v: %d inferred failures, want the app's one", marks, n)
		}
	}
}

// A sweep drops a pod Retain after it ended, and a deleted pod that never
// showed its end 6×Retain after its last event; a live pod, however quiet
// or old, stays until the stream ends. Only the first two count as
// evicted.
func TestSweepDropsOnlyEndedPods(t *testing.T) {
	r := newRec("node-a")
	live, ended, deleted := r.pod("live", "10.244.0.11"), r.pod("ended", "10.244.0.12"), r.pod("deleted", "10.244.0.13")
	for _, p := range []*tpod{live, ended, deleted} {
		r.created(p, 0)
	}
	for i, p := range []*tpod{live, ended, deleted} {
		r.ready(p, int64(i+1)*s)
	}
	r.deletion(ended, 60*s, 30*time.Second)
	r.deletion(deleted, 60*s, 30*time.Second)
	r.signal(ended, 60*s+10*ms, 15)
	r.exit(ended, 61*s, 0, 0)
	for m := int64(2); m <= 20; m++ {
		r.connClosed(live, m*60*s, client(int(m)), "peer", 0)
	}
	reported := map[string]int64{} // pod → the stream's time when its timeline came
	var now int64
	al := NewAligner(Options{Retain: time.Minute}, nil, func(tl *PodTimeline) { reported[tl.Pod.Name] = now })
	for i := range r.events {
		now = r.events[i].Time
		if err := al.Add(&r.events[i]); err != nil {
			t.Fatal(err)
		}
	}
	now = -1 // Flush
	al.Flush()
	at := func(name string) string {
		switch v, ok := reported[name]; {
		case !ok:
			return "never"
		case v < 0:
			return "at the end"
		default:
			return fmt.Sprintf("at +%ds", (v-r.t0)/s)
		}
	}
	if v, ok := reported["ended"]; !ok || v < 0 || v-r.at(61*s) < 60*s || v-r.at(61*s) > 3*60*s {
		t.Errorf("the pod that ended was dropped %s, want 1–3 min after its exit at +61s", at("ended"))
	}
	if v, ok := reported["deleted"]; !ok || v < 0 || v-r.at(60*s) < 6*60*s {
		t.Errorf("the deleted pod was dropped %s, want 6 min or more after its deletion at +60s", at("deleted"))
	}
	if v, ok := reported["live"]; !ok || v >= 0 {
		t.Errorf("the live pod was reported %s, want at the end", at("live"))
	}
	if n := al.Stats().PodsEvicted; n != 2 {
		t.Errorf("%d pods evicted, want 2", n)
	}
}

func TestRestartKeepsItsLandmarksThroughCompaction(t *testing.T) {
	// A crash-looping pod's landmarks reach maxLandmarks over days of
	// restarts. The life a restart ends keeps the landmarks it had, in
	// the same array the pod goes on filling; halving the pod's at the
	// bound wrote the newer half over the ended life's, whose failures
	// then found their nearest events out of time order.
	r := newRec()
	p := r.pod("web-a", "10.244.0.11")
	d := int64(0)
	// 400 landmarks: the array grows to hold 591.
	for range 400 {
		r.add(r.podEvent(p, d, event.PodNotReady))
		d += ms
	}
	r.mainExit(p, d, 2, 0)
	d += ms
	restart := r.at(d)
	r.ready(p, d) // ready again after the exit: restarted in place
	// The pod passes 512 in the array the ended life holds.
	for range 200 {
		d += ms
		r.add(r.podEvent(p, d, event.PodNotReady))
	}
	a := NewAligner(Options{}, nil, nil)
	for i := range r.events {
		if err := a.Add(&r.events[i]); err != nil {
			t.Fatal(err)
		}
	}
	ps := a.byUID[p.ref.UID]
	if ps == nil || ps.before == nil {
		t.Fatal("the pod did not restart in place")
	}
	old := ps.before.landmarks
	if len(old) < 400 {
		t.Fatalf("the ended life keeps %d landmarks, want its 400 and more", len(old))
	}
	for i, m := range old {
		if m.t >= restart || (i > 0 && m.t < old[i-1].t) {
			t.Fatalf("the ended life's landmark %d of %d is at %+d ms from the restart, after %+d ms: overwritten by the pod's later ones",
				i, len(old), (m.t-restart)/ms, (old[max(i-1, 0)].t-restart)/ms)
		}
	}
	if n := len(ps.landmarks); n > maxLandmarks {
		t.Errorf("the pod holds %d landmarks, more than %d", n, maxLandmarks)
	}
}
