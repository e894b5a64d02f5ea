package analysis

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

// A pod with a proxy beside the app, as a mesh injects it: inbound
// connections to the Service's port are redirected (iptables in the pod's
// network namespace) to the proxy's port 15006; the proxy connects to the
// app on loopback. The kernel's records of the clients' connections are
// the proxy container's sockets.
type meshedPod struct {
	app, proxy *tpod
}

func (r *rec) meshedPod(name, ip, proxyName, proxyRole string) meshedPod {
	app := r.running(name, ip)
	app.ref.Container = "cid-app"
	proxy := *app
	proxy.ref.Container, proxy.pid, proxy.port = "cid-proxy", 6161, 15006
	for _, c := range []struct {
		p                *tpod
		name, role, port string
	}{{app, "app", event.ContainerRoleApp, "8080/TCP"}, {&proxy, proxyName, proxyRole, "15090/TCP"}} {
		e := r.podEvent(c.p, -2*time.Hour.Nanoseconds()+500*ms, event.ContainerStarted)
		e.Pod.Container = c.name
		e.Attrs = map[string]string{event.AttrContainerID: c.p.ref.Container, event.AttrContainerRole: c.role, event.AttrContainerPorts: c.port}
		r.add(e)
	}
	// Serving: a client's connection, held by the proxy, closes; the
	// proxy's own connection to the app closes on the app's side.
	r.connClosed(&proxy, -30*s, client(99), "peer", 0)
	side := r.kernel(app, -30*s, event.ConnClosed)
	side.Local, side.Remote, side.Reason = app.addr(), netip.MustParseAddrPort("127.0.0.6:41000"), "peer"
	r.add(side)
	return meshedPod{app, &proxy}
}

// sidecarExitsFirst: the pod is deleted; both containers get SIGTERM; the
// proxy exits at once, cutting the clients' keep-alive connections it
// held, while the app drains behind a 5 s preStop and exits at 10 s.
// Meanwhile some node still sends new connections, which meet no
// listener on 15006.
func (r *rec) sidecarExitsFirst(m meshedPod, clients int) {
	a := m.app
	r.deletion(a, 0, 30*time.Second)
	r.leave(a, 400*ms, 0)
	r.signal(m.proxy, 10*ms, 15)
	r.exit(m.proxy, 42*ms, 0, 0)
	for i := 0; i < clients; i++ {
		c := client(i)
		r.connClosed(m.proxy, 42*ms+int64(i)*100_000, c, "local", event.FlagAtExit)
		r.rst(m.proxy, 60*ms+int64(i)*ms, c, "NO_SOCKET", 0)
		r.failure(61*ms+int64(i)*ms, c, event.FailEOF)
	}
	refusal := client(50)
	e := r.kernel(m.proxy, 200*ms, event.ConnRefused)
	e.PID, e.Comm, e.Pod.Container = 0, "", ""
	e.Local, e.Remote = netip.AddrPortFrom(a.ip, 15006), refusal
	r.add(e)
	r.failure(201*ms, refusal, event.FailRefused)
	r.signal(a, 5*s, 15)
	r.exit(a, 10*s, 0, 0)
	r.removed(a, 10*s+50*ms, 0)
}

// TestProxySidecarExitsBeforeItsApp: the clients' failures are the
// proxy's exit before its app, naming the proxy container, with the fix
// for what the pod is: a classic sidecar of no known mesh, Istio's,
// Linkerd's, or a native sidecar already.
func TestProxySidecarExitsBeforeItsApp(t *testing.T) {
	for _, tc := range []struct {
		name, proxy, role string
		fix               []string
	}{
		{"a classic sidecar", "proxy", event.ContainerRoleApp, []string{"make the proxy a native sidecar", "restartPolicy: Always", "1.29"}},
		{"Istio's", "istio-proxy", event.ContainerRoleApp, []string{"terminationDrainDuration", "EXIT_ON_ZERO_ACTIVE_CONNECTIONS", "ENABLE_NATIVE_SIDECARS"}},
		{"Linkerd's", "linkerd-proxy", event.ContainerRoleApp, []string{"proxy-wait-before-exit-seconds", "proxy-enable-native-sidecar"}},
		{"a native sidecar", "proxy", event.ContainerRoleSidecar, []string{"native sidecar, which the kubelet stops only after the app"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRec()
			m := r.meshedPod("web-a", "10.244.0.10", tc.proxy, tc.role)
			r.sidecarExitsFirst(m, 3)
			res := analyzeAll(t, r)
			checkProse(t, res)
			fs := clientFailures(res)
			if len(fs) != 4 {
				t.Fatalf("%d failures, want 4", len(fs))
			}
			for _, f := range fs {
				if f.Cause != CauseSidecarExit || f.Pod == nil || f.Pod.Name != "web-a" {
					t.Errorf("%s: %s on %v (%s), want the proxy's exit on web-a", f.Failure.Reason, f.Cause, f.Pod, f.Explanation)
					continue
				}
				// Decided 2 s after the failure, when the app had not
				// exited yet.
				for _, w := range []string{"container " + tc.proxy, "exited 32 ms after its SIGTERM", "while the app still ran"} {
					if !strings.Contains(f.Explanation, w) {
						t.Errorf("explanation %q lacks %q", f.Explanation, w)
					}
				}
			}
			var cs *CauseSummary
			for i := range res.Causes {
				if res.Causes[i].Cause == CauseSidecarExit {
					cs = &res.Causes[i]
				}
			}
			if cs == nil {
				t.Fatal("no summary of the proxy's exit")
			}
			if !strings.Contains(cs.Explanation, "("+tc.proxy+")") || !strings.Contains(cs.Explanation, "9.958 s before the app did") {
				t.Errorf("summary %q: want the proxy named and the app's 9.958 s", cs.Explanation)
			}
			for _, w := range tc.fix {
				if !strings.Contains(cs.Fix, w) {
					t.Errorf("fix %q lacks %q", cs.Fix, w)
				}
			}
			// The app drained as it should: no keep-alive cut is named.
			for _, c := range res.Causes {
				if c.Cause == CauseKeepAliveAtExit || c.Cause == CauseEndpointRace || c.Cause == CauseEndpointRaceLikely {
					t.Errorf("%d failures named %s: the app's drain was not what failed", c.Count, c.Cause)
				}
			}
			var tl *PodTimeline
			for i := range res.Timelines {
				if res.Timelines[i].Pod.Name == "web-a" {
					tl = &res.Timelines[i]
				}
			}
			if tl == nil || tl.Exit == nil || tl.Exit.Time != r.at(10*s) || len(tl.Containers) != 2 || !tl.Containers[0].App || !tl.Containers[1].Inbound {
				t.Errorf("timeline: exit %+v, containers %+v; want the app's exit at +10 s, the app and the inbound proxy", tl.Exit, tl.Containers)
			}
		})
	}
}

// TestProxyThatOutlivesItsAppIsNoCause: a native sidecar the kubelet
// stops after the app: the app's own keep-alive cut at its exit is the
// app's, and the proxy's later exit names nothing.
func TestProxyThatOutlivesItsAppIsNoCause(t *testing.T) {
	r := newRec()
	m := r.meshedPod("web-a", "10.244.0.10", "proxy", event.ContainerRoleSidecar)
	a := m.app
	r.deletion(a, 0, 30*time.Second)
	r.leave(a, 400*ms, 0)
	r.signal(a, 10*ms, 15)
	r.exit(a, 3*s, 0, 0)
	r.signal(m.proxy, 3*s+10*ms, 15)
	r.exit(m.proxy, 3*s+40*ms, 0, 0)
	r.connClosed(m.proxy, 3*s+40*ms, client(1), "local", event.FlagAtExit)
	r.failure(3*s+50*ms, client(1), event.FailEOF)
	fs := clientFailures(analyzeAll(t, r))
	if len(fs) != 1 || fs[0].Cause == CauseSidecarExit {
		t.Errorf("%+v: want no proxy exit named, the app exited first", fs)
	}
}

// TestProxyExitFromItsOwnLog: the node's capture saw the proxy's sockets
// cut at its exit but not the exit itself (its agent restarting, say);
// the proxy's log (imported as istio-proxy with --pod) says when it
// drained and exited. The log's exit stands for the missing one; it names
// no cause by itself: with no record of the node tying the connection to
// the proxy, the failure stays unexplained.
func TestProxyExitFromItsOwnLog(t *testing.T) {
	for _, tc := range []struct {
		name       string
		sockets    bool // the capture saw the proxy's sockets cut
		kernelExit bool // and the proxy's exit
		want       bool
	}{
		{"the log's exit with the proxy's sockets", true, false, true},
		{"the log's exit alone", false, false, false},
		{"the kernel's exit wins", true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRec()
			m := r.meshedPod("web-a", "10.244.0.10", "istio-proxy", event.ContainerRoleApp)
			a := m.app
			r.deletion(a, 0, 30*time.Second)
			r.leave(a, 400*ms, 0)
			for _, st := range []struct {
				d      int64
				reason string
			}{{5 * ms, event.ProxyDraining}, {40 * ms, event.ProxyTerminating}, {41 * ms, event.ProxyExited}} {
				e := r.podEvent(m.proxy, st.d, event.ProxyState)
				e.Source, e.Node, e.Reason = event.SourceClient, "", st.reason
				e.Pod = event.PodRef{Namespace: a.ref.Namespace, Name: a.ref.Name, Container: "istio-proxy"}
				r.add(e)
			}
			if tc.kernelExit {
				r.exit(m.proxy, 43*ms, 0, 0)
			}
			c := client(1)
			if tc.sockets {
				r.connClosed(m.proxy, 42*ms, c, "local", event.FlagAtExit)
				r.rst(m.proxy, 60*ms, c, "NO_SOCKET", 0)
			}
			r.failure(61*ms, c, event.FailEOF)
			r.exit(a, 10*s, 0, 0)
			res := analyzeAll(t, r)
			checkProse(t, res)
			fs := clientFailures(res)
			if len(fs) != 1 {
				t.Fatalf("%d failures, want 1", len(fs))
			}
			if got := fs[0].Cause == CauseSidecarExit; got != tc.want {
				t.Fatalf("cause %s (%s); want sidecar_exit %v", fs[0].Cause, fs[0].Explanation, tc.want)
			}
			var tl *PodTimeline
			for i := range res.Timelines {
				if res.Timelines[i].Pod.Name == "web-a" {
					tl = &res.Timelines[i]
				}
			}
			if tl == nil || len(tl.Containers) != 2 || tl.Containers[1].Exit == nil {
				t.Fatalf("timeline %+v: want the proxy's exit shown", tl)
			}
			px := tl.Containers[1]
			wantExit := r.at(41 * ms)
			if tc.kernelExit {
				wantExit = r.at(43 * ms)
			}
			if px.Name != "istio-proxy" || px.Sigterm != r.at(5*ms) || px.Exit.Time != wantExit {
				t.Errorf("proxy %+v exit %+v: want its drain at +5 ms and its exit at %d", px, px.Exit, wantExit-r.t0)
			}
		})
	}
}

// TestInitContainerExitIsNoEnd: a new pod's init container (a mesh's
// iptables redirect) runs to completion as the pod starts. The kernel
// sees its main process exit before the watcher names the container; the
// watcher then reports it started and Completed, role init; then the app
// and the proxy start and the pod turns ready. The pod has one life, not
// a first one ended by the init container's exit, and no disruption is a
// container's restart. As the lab's sidecar pods showed on the real
// kubelet.
func TestInitContainerExitIsNoEnd(t *testing.T) {
	// Named: the capture gave the exit its container's ID. Unnamed: it
	// gave none (the container's cgroup gone before it was read), as for
	// some of the lab's pods.
	for _, named := range []bool{true, false} {
		t.Run(map[bool]string{true: "named", false: "unnamed"}[named], func(t *testing.T) { testInitContainerExit(t, named) })
	}
}

func testInitContainerExit(t *testing.T, named bool) {
	r := newRec()
	p := r.pod("web-a", "10.244.0.10")
	p.ref.Container = "cid-app"
	initC := *p
	initC.ref.Container, initC.pid = "cid-redirect", 3131
	proxy := *p
	proxy.ref.Container, proxy.pid, proxy.port = "cid-proxy", 6161, 15006
	r.created(p, 0)
	x := r.kernel(&initC, 700*ms, event.ProcessExit)
	x.Flags = event.FlagMain
	if !named {
		x.Pod.Container = ""
	}
	r.add(x)
	for _, c := range []struct {
		d                int64
		k                event.Kind
		p                *tpod
		name, role, port string
	}{
		{750 * ms, event.ContainerStarted, &initC, "redirect", event.ContainerRoleInit, ""},
		{990 * ms, event.ContainerTerminated, &initC, "redirect", event.ContainerRoleInit, ""},
		{1300 * ms, event.ContainerStarted, p, "app", event.ContainerRoleApp, "8080/TCP"},
		{1300 * ms, event.ContainerStarted, &proxy, "proxy", event.ContainerRoleApp, ""},
	} {
		e := r.podEvent(c.p, c.d, c.k)
		e.Pod.Container = c.name
		e.Attrs = map[string]string{event.AttrContainerID: c.p.ref.Container, event.AttrContainerRole: c.role}
		if c.port != "" {
			e.Attrs[event.AttrContainerPorts] = c.port
		}
		if c.k == event.ContainerTerminated {
			e.Reason = "Completed"
		}
		r.add(e)
	}
	// Its endpoint is added not ready; the kubelet's readiness probe,
	// from the node's address, meets no listener on the proxy's port yet.
	r.endpoint(p, 760*ms, event.EndpointAdded, "lab")
	probe := r.kernel(&proxy, 1400*ms, event.ConnRefused)
	probe.PID, probe.Comm, probe.Pod.Container = 0, "", ""
	probe.Local, probe.Remote = proxy.addr(), netip.MustParseAddrPort("10.244.0.1:45716")
	r.add(probe)
	r.ready(p, 2*s)
	r.connClosed(&proxy, 5*s, client(1), "peer", 0)
	res := analyzeAll(t, r)
	if n := res.Inference.Inferred; n != 0 {
		t.Errorf("%d failures inferred: the probe refused before the pod was ever ready was in no rotation", n)
	}
	if len(res.Disruptions) != 0 {
		for _, d := range res.Disruptions {
			t.Errorf("disruption %s %v, want none: the init container's exit ended no life", d.Trigger, d.Replaced)
		}
	}
	for _, tl := range res.Timelines {
		if tl.Ended() {
			t.Errorf("timeline of %s from %d ended (exit %+v): the init container's exit taken for the app's", tl.Pod.Name, tl.Created, tl.Exit)
		}
	}
}

// TestListedPodIsNotStarting: after an agent's restart its list names
// every pod created, a pod long ready among them; one not ready at that
// moment (its readiness probe failing under load) is no pod still
// starting. Its app's crash, which the capture named no container for, is
// still the pod's end.
func TestListedPodIsNotStarting(t *testing.T) {
	r := newRec()
	p := r.pod("web-a", "10.244.0.10")
	listed := r.podEvent(p, 0, event.PodCreated)
	listed.Flags = event.FlagObserved
	r.add(listed)
	// It crashes: no deletion, an exit the capture named no container for.
	x := r.kernel(p, 2*s+40*ms, event.ProcessExit)
	x.Flags, x.Pod.Container, x.Code = event.FlagMain, "", 2
	r.add(x)
	res := analyzeAll(t, r)
	for _, tl := range res.Timelines {
		if tl.Pod.Name == "web-a" && (tl.Exit == nil || tl.Exit.Time != r.at(2*s+40*ms)) {
			t.Errorf("web-a's exit %+v, want the app's at +2.04 s", tl.Exit)
		}
	}
}
