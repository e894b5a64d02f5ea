package analysis

import (
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

type want struct {
	cause Cause
	pod   string // namespace/name, "" for none
	via   string
	// for unexplained: the kinds of the nearest events before and after
	before, after event.Kind
	// substring the explanation must hold
	says string
}

func analyzeAll(t *testing.T, r *rec) *Result {
	t.Helper()
	res, err := AnalyzeEvents(r.events, store.Query{}, Options{MaxFailures: -1})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func clientFailures(res *Result) []AlignedFailure {
	var out []AlignedFailure
	for _, f := range res.Failures {
		if !f.Inferred {
			out = append(out, f)
		}
	}
	return out
}

func TestCauses(t *testing.T) {
	cases := []struct {
		name  string
		build func(r *rec)
		want  []want
	}{
		{
			name: "keep-alive cut at exit, backend known (seed 000 graceful+preStop)",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				r.ready(p, -60*s)
				exit := r.gracefulPreStop(p, 0, []netip.AddrPort{client(1), client(2)})
				r.failure(exit+3*ms, client(1), event.FailEOF, backend(p))
				r.failure(exit+4*ms, client(2), event.FailEOF, backend(p))
			},
			want: []want{
				{cause: CauseKeepAliveAtExit, pod: "default/web-1", via: "backend", says: "the exit came 3.0 s after SIGTERM"},
				{cause: CauseKeepAliveAtExit, pod: "default/web-1", via: "backend"},
			},
		},
		{
			name: "keep-alive cut at exit, client knew only the ClusterIP: found by kernel evidence",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				q := r.pod("web-2", "10.244.0.12")
				r.ready(p, -60*s)
				r.ready(q, -60*s)
				exit := r.gracefulPreStop(p, 0, []netip.AddrPort{client(1)})
				r.failure(exit+3*ms, client(1), event.FailEOF)
			},
			want: []want{{cause: CauseKeepAliveAtExit, pod: "default/web-1", via: "kernel"}},
		},
		{
			name: "a reset, then the client's next connection from the same port to another pod, cut soon after: the failure stays on the first",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				q := r.pod("web-2", "10.244.0.12")
				r.ready(p, -60*s)
				r.ready(q, -60*s)
				exit := r.gracefulPreStop(p, 0, []netip.AddrPort{client(1)})
				r.failure(exit+300*ms, client(1), event.FailReset)
				// The kernel's record of the next connection on that port,
				// to web-2, comes 200 ms after the failure: nearer to it
				// than web-1's close, but not the connection that failed.
				r.connClosed(q, exit+500*ms, client(1), "local", 0)
			},
			want: []want{{cause: CauseKeepAliveAtExit, pod: "default/web-1", via: "kernel"}},
		},
		{
			name: "the same client port closed by another pod 5 s earlier: the failure is on the pod of its own connection",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				q := r.pod("web-2", "10.244.0.12")
				r.ready(p, -60*s)
				r.ready(q, -60*s)
				r.connClosed(q, 3*s, client(1), "peer", 0)
				exit := r.gracefulPreStop(p, 0, []netip.AddrPort{client(1)})
				r.failure(exit+3*ms, client(1), event.FailEOF)
			},
			want: []want{{cause: CauseKeepAliveAtExit, pod: "default/web-1", via: "kernel"}},
		},
		{
			name: "a reset with no pod (the pod's network gone) after the exit's close: the failure is on the pod that closed",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				q := r.pod("web-2", "10.244.0.12")
				r.ready(p, -60*s)
				r.ready(q, -60*s)
				exit := r.gracefulPreStop(p, 0, []netip.AddrPort{client(1)})
				e := r.kernel(p, exit+200*ms, event.RSTSent)
				e.Pod, e.PID, e.Comm = event.PodRef{}, 0, ""
				e.Local, e.Remote, e.Reason = p.addr(), client(1), "NOT_SPECIFIED"
				r.add(e)
				r.failure(exit+300*ms, client(1), event.FailEOF)
			},
			want: []want{{cause: CauseKeepAliveAtExit, pod: "default/web-1", via: "kernel"}},
		},
		{
			name: "keep-alive cut at exit noticed 4 s later by an idle client: the kernel close decides",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				r.ready(p, -60*s)
				exit := r.gracefulPreStop(p, 0, []netip.AddrPort{client(1)})
				r.failure(exit+4*s, client(1), event.FailReset)
			},
			want: []want{{cause: CauseKeepAliveAtExit, pod: "default/web-1", via: "kernel"}},
		},
		{
			name: "runtime closed its sockets 13 ms before exit, no at-exit flag",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				r.ready(p, -60*s)
				r.deletion(p, 0, 30*time.Second)
				r.leave(p, 400*ms, 0)
				r.signal(p, 5*s, 15)
				r.listenerClosed(p, 5*s)
				r.connClosed(p, 8*s-13*ms, client(1), "local", 0)
				r.exit(p, 8*s, 0, 0)
				r.failure(8*s+2*s, client(1), event.FailEOF)
			},
			want: []want{{cause: CauseKeepAliveAtExit, pod: "default/web-1", via: "kernel"}},
		},
		{
			name: "exit at SIGTERM: refused while the endpoint is still ready on another node",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				r.nodes = []string{"node-a", "node-b"}
				r.ready(p, -60*s)
				r.deletion(p, 0, 30*time.Second)
				r.signal(p, 30*ms, 15)
				r.exit(p, 31*ms, 0, 0)
				r.refused(p, 200*ms, client(7))
				r.failure(201*ms, client(7), event.FailRefused)
				r.leave(p, 300*ms, 400*ms) // node-b takes it out at 700 ms
			},
			want: []want{{cause: CauseEndpointRace, pod: "default/web-1", via: "kernel", says: "node node-b still routed to it until 501 ms later"}}, // the connection began 2 ms before the refusal reached the client,
		},
		{
			name: "refused 300 ms after the last node's removal: within proxy lag",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				r.ready(p, -60*s)
				r.deletion(p, 0, 30*time.Second)
				r.leave(p, 100*ms, 0)
				r.signal(p, 30*ms, 15)
				r.listenerClosed(p, 31*ms)
				r.failure(400*ms, client(7), event.FailRefused, backend(p))
			},
			want: []want{{cause: CauseEndpointRace, pod: "default/web-1", via: "backend", says: "only 298 ms before"}}, // judged when the connection began, 2 ms before,
		},
		{
			name: "refused 2 s after removal everywhere: not a race the data shows",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				r.ready(p, -60*s)
				r.deletion(p, 0, 30*time.Second)
				r.leave(p, 100*ms, 0)
				r.signal(p, 30*ms, 15)
				r.listenerClosed(p, 31*ms)
				r.failure(2100*ms, client(7), event.FailRefused, backend(p))
			},
			want: []want{{cause: CauseUnexplained, pod: "default/web-1", via: "backend", before: event.EndpointTerminating}},
		},
		{
			name: "reset with unread data at exit: in-flight cut",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				r.ready(p, -60*s)
				r.deletion(p, 0, 30*time.Second)
				r.signal(p, 0, 15)
				r.exit(p, 1*s, 0, 0)
				r.rst(p, 1*s+100_000, client(3), "TCP_ABORT_ON_CLOSE", event.FlagAtExit|event.FlagUnreadData)
				r.failure(1*s+1*ms, client(3), event.FailReset, backend(p))
			},
			want: []want{{cause: CauseInFlight, pod: "default/web-1", via: "backend"}},
		},
		{
			// What a real kubelet, containerd and runc add to the same exit:
			// the app, PID 1 of its container, dies of SIGTERM by raising it
			// again, which PID 1 ignores (Go then exits 2, its SIGKILLs to
			// its own threads ignored too); then the runtime SIGKILLs the
			// pod's sandbox (pause) container, which never got SIGTERM.
			// Neither is a kill of the app.
			name: "reset with unread data at exit on a real node: in-flight cut, not the sandbox's SIGKILL",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				r.ready(p, -60*s)
				r.deletion(p, 0, 30*time.Second)
				r.runtimeSignal(p, 30*ms, 15)
				r.selfSignal(p, 31*ms, 15, "ignored")
				r.exit(p, 32*ms, 2, 0)
				r.rst(p, 32*ms+100_000, client(3), "TCP_ABORT_ON_CLOSE", event.FlagAtExit|event.FlagUnreadData)
				r.selfSignal(p, 38*ms, 9, "ignored")
				r.failure(33*ms, client(3), event.FailReset, backend(p))
				r.sandboxKilled(p, 300*ms)
			},
			want: []want{{cause: CauseInFlight, pod: "default/web-1", via: "backend"}},
		},
		{
			name: "a 800 ms request failed at exit: in-flight cut by its duration",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				r.ready(p, -60*s)
				r.deletion(p, 0, 30*time.Second)
				r.signal(p, 0, 15)
				r.exit(p, 1*s, 0, 0)
				r.failure(1*s+2*ms, client(3), event.FailEOF, backend(p), took(800*time.Millisecond))
			},
			want: []want{{cause: CauseInFlight, pod: "default/web-1", via: "backend", says: "a request of 800 ms"}},
		},
		{
			name: "SIGKILL when preStop and drain outlast the grace period",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				r.ready(p, -60*s)
				r.deletion(p, 0, 10*time.Second)
				r.leave(p, 300*ms, 0)
				r.signal(p, 5*s, 15)
				r.listenerClosed(p, 5*s)
				r.signal(p, 10*s, 9)
				r.exit(p, 10*s+1*ms, 0, 9)
				r.connClosed(p, 10*s+2*ms, client(4), "local", event.FlagAtExit)
				r.failure(10*s+3*ms, client(4), event.FailEOF, backend(p))
			},
			want: []want{{cause: CauseSIGKILL, pod: "default/web-1", via: "backend", says: "grace period of 10.0 s"}},
		},
		{
			name: "no ready endpoint: the Service's only endpoint left, the proxy refused",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				r.nodes = []string{"node-a", "node-b"}
				r.ready(p, -60*s)
				r.deletion(p, 0, 30*time.Second)
				r.leave(p, 100*ms, 10*ms)
				r.failure(500*ms, client(5), event.FailRefused, service("web"))
			},
			want: []want{{cause: CauseNoReadyEndpoints, pod: "", via: ""}},
		},
		{
			name: "another endpoint still ready: a refusal no pod saw is unexplained",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				q := r.pod("web-2", "10.244.0.12")
				r.ready(p, -60*s)
				r.ready(q, -59*s)
				r.deletion(p, 0, 30*time.Second)
				r.leave(p, 100*ms, 10*ms)
				r.failure(500*ms, client(5), event.FailRefused, service("web.default.svc.cluster.local"))
			},
			want: []want{{cause: CauseUnexplained, before: event.EndpointTerminating}},
		},
		{
			name: "missing: no exit seen, EOF 3.0 s after SIGTERM",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				r.ready(p, -60*s)
				r.deletion(p, 0, 30*time.Second)
				r.leave(p, 400*ms, 0)
				r.signal(p, 5*s, 15)
				r.listenerClosed(p, 5*s+1*ms)
				r.failure(8*s+3*ms, client(1), event.FailEOF, backend(p))
				r.removed(p, 8*s+100*ms, 0)
			},
			want: []want{{cause: CauseUnexplained, pod: "default/web-1", via: "backend",
				before: event.ListenerClosed, after: event.EndpointRemoved, says: "at SIGTERM +3.003 s"}},
		},
		{
			name: "missing: no endpoint event seen, refused by an exited pod",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				e := r.podEvent(p, -60*s, event.PodReady)
				e.Local = netip.AddrPortFrom(p.ip, 0)
				r.add(e)
				r.deletion(p, 0, 30*time.Second)
				r.signal(p, 30*ms, 15)
				r.exit(p, 31*ms, 0, 0)
				r.refused(p, 200*ms, client(7))
				r.failure(201*ms, client(7), event.FailRefused)
			},
			want: []want{{cause: CauseUnexplained, pod: "default/web-1", via: "kernel", before: event.ProcessExit}},
		},
		{
			name: "missing: preStop sleep exits next to the failure, the server never exits",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				r.ready(p, -60*s)
				r.deletion(p, 0, 30*time.Second)
				r.leave(p, 400*ms, 0)
				r.helperExit(p, 5*s-1*ms)
				r.signal(p, 5*s, 15)
				r.failure(5*s+1*ms, client(1), event.FailEOF, backend(p))
			},
			want: []want{{cause: CauseUnexplained, pod: "default/web-1", via: "backend", before: event.Signal}},
		},
		{
			name: "tie: failure at the exit's nanosecond and at the window's edges",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				r.ready(p, -60*s)
				r.deletion(p, 0, 30*time.Second)
				r.leave(p, 400*ms, 0)
				r.signal(p, 5*s, 15)
				r.exit(p, 8*s, 0, 0)
				r.failure(8*s, client(1), event.FailEOF, backend(p))
				r.failure(8*s-250*ms, client(2), event.FailEOF, backend(p))
				r.failure(9*s, client(3), event.FailEOF, backend(p))
				r.failure(9*s+1, client(4), event.FailEOF, backend(p))
			},
			want: []want{
				{cause: CauseKeepAliveAtExit, pod: "default/web-1", via: "backend"}, // exit - 250 ms
				{cause: CauseKeepAliveAtExit, pod: "default/web-1", via: "backend"}, // exit
				{cause: CauseKeepAliveAtExit, pod: "default/web-1", via: "backend"}, // exit + 1 s
				{cause: CauseUnexplained, pod: "default/web-1", via: "backend", before: event.ProcessExit},
			},
		},
		{
			name: "tie: the last node takes the endpoint out at the failure's nanosecond",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				r.ready(p, -60*s)
				r.deletion(p, 0, 30*time.Second)
				r.signal(p, 0, 15)
				r.listenerClosed(p, 1*ms)
				r.leave(p, 2*s, 0)
				r.failure(2*s, client(7), event.FailRefused, backend(p))
			},
			want: []want{{cause: CauseEndpointRace, pod: "default/web-1", via: "backend"}},
		},
		{
			name: "timeout on a connection made after the exit, before the proxy caught up: endpoint race",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				r.ready(p, -60*s)
				r.deletion(p, 0, 30*time.Second)
				r.signal(p, 1*ms, 15)
				r.exit(p, 2*ms, 0, 0)
				r.removed(p, 30*ms, 0)
				// dialled 68 ms after the removal; gave up 5 s later
				r.failure(98*ms+5*s, client(7), event.FailTimeout, backend(p), took(5*time.Second))
			},
			want: []want{{cause: CauseEndpointRace, pod: "default/web-1", via: "backend", says: "its process had exited 96 ms before, while node lab had taken it out only 68 ms before"}},
		},
		{
			name: "timeout on a connection made before the exit: not an endpoint race",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				r.ready(p, -60*s)
				r.deletion(p, 0, 30*time.Second)
				r.signal(p, 1*ms, 15)
				r.exit(p, 2*ms, 0, 0)
				r.removed(p, 30*ms, 0)
				r.failure(1*ms+5*s, client(7), event.FailTimeout, backend(p), took(5*time.Second))
			},
			want: []want{{cause: CauseUnexplained, pod: "default/web-1", via: "backend", before: event.EndpointRemoved}},
		},
		{
			name: "timeout long after the proxy caught up: unexplained",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				r.ready(p, -60*s)
				r.deletion(p, 0, 30*time.Second)
				r.signal(p, 1*ms, 15)
				r.exit(p, 2*ms, 0, 0)
				r.removed(p, 30*ms, 0)
				r.failure(3*s+5*s, client(7), event.FailTimeout, backend(p), took(5*time.Second))
			},
			want: []want{{cause: CauseUnexplained, pod: "default/web-1", via: "backend", before: event.EndpointRemoved}},
		},
		{
			name: "tie: an IP reused by the next pod goes to the pod that had it then",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				r.ready(p, -60*s)
				exit := r.gracefulPreStop(p, 0, nil)
				q := r.pod("web-9", "10.244.0.11")
				r.ready(q, exit+20*s)
				r.failure(exit+5*ms, client(1), event.FailEOF, backend(p))
				r.failure(exit+25*s, client(2), event.FailEOF, backend(q))
			},
			want: []want{
				{cause: CauseKeepAliveAtExit, pod: "default/web-1", via: "backend"},
				{cause: CauseUnexplained, pod: "default/web-9", via: "backend", before: event.EndpointReady},
			},
		},
		{
			name: "no pod, no Service: unexplained with the nearest events of any pod",
			build: func(r *rec) {
				p := r.pod("web-1", "10.244.0.11")
				r.ready(p, -60*s)
				r.deletion(p, 0, 30*time.Second)
				r.failure(1*s, client(1), event.FailTimeout)
			},
			want: []want{{cause: CauseUnexplained, before: event.PodDeletion}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRec()
			tc.build(r)
			res := analyzeAll(t, r)
			checkProse(t, res)
			got := clientFailures(res)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d failures, want %d", len(got), len(tc.want))
			}
			for _, g := range got {
				t.Logf("%s via=%s | %s | missing=%v", g.Cause, g.Via, g.Explanation, g.Missing)
			}
			for i, w := range tc.want {
				g := got[i]
				ctx := func() string {
					return g.Explanation + " | missing: " + strings.Join(g.Missing, "; ")
				}
				if g.Cause != w.cause {
					t.Errorf("failure %d: cause %s, want %s (%s)", i, g.Cause, w.cause, ctx())
				}
				if g.Pod.String() != w.pod && !(w.pod == "" && g.Pod == nil) {
					t.Errorf("failure %d: pod %s, want %q", i, g.Pod, w.pod)
				}
				if g.Via != w.via {
					t.Errorf("failure %d: via %q, want %q", i, g.Via, w.via)
				}
				if w.says != "" && !strings.Contains(g.Explanation, w.says) {
					t.Errorf("failure %d: explanation %q lacks %q", i, g.Explanation, w.says)
				}
				if g.Cause != CauseUnexplained && len(g.Evidence) == 0 {
					t.Errorf("failure %d: cause %s without evidence", i, g.Cause)
				}
				if w.cause == CauseUnexplained {
					if len(g.Missing) == 0 {
						t.Errorf("failure %d: unexplained without the missing evidence listed", i)
					}
					if w.before != "" && (g.Before == nil || g.Before.Event.Kind != w.before) {
						t.Errorf("failure %d: nearest before %+v, want %s", i, g.Before, w.before)
					}
					if w.after != "" && (g.After == nil || g.After.Event.Kind != w.after) {
						t.Errorf("failure %d: nearest after %+v, want %s", i, g.After, w.after)
					}
				}
			}
		})
	}
}

// TestInference checks what the pod side proves with no client log: which
// kernel evidence becomes an inferred failure, which is likely rather than
// proven, and which is set aside.
func TestInference(t *testing.T) {
	cases := []struct {
		name    string
		build   func(r *rec, p *tpod)
		byProof map[string]int
		likely  int
		aside   int    // refused SYNs set aside
		cause   Cause  // of every inferred failure, when set
		role    string // a piece of evidence every inferred failure holds, when set
	}{
		{
			name: "refused while in rotation: proven",
			build: func(r *rec, p *tpod) {
				r.signal(p, 1*ms, 15)
				r.exit(p, 2*ms, 0, 0)
				r.refused(p, 100*ms, client(1))
				r.leave(p, 300*ms, 0)
			},
			byProof: map[string]int{ProofRefusedSYN: 1},
		},
		{
			name: "refused within the proxy lag after the last node took it out: likely (a lagging proxy or a probe)",
			build: func(r *rec, p *tpod) {
				r.leave(p, 50*ms, 0)
				r.signal(p, 500*ms, 15)
				r.listenerClosed(p, 501*ms)
				r.refused(p, 1000*ms, client(1)) // 0.95 s after leaving
			},
			byProof: map[string]int{ProofRefusedLagging: 1},
			likely:  1,
		},
		{
			name: "refused long after leaving rotation (readiness probes during preStop): set aside",
			build: func(r *rec, p *tpod) {
				r.leave(p, 50*ms, 0)
				r.signal(p, 5*s, 15)
				r.listenerClosed(p, 5*s+1*ms)
				for i := 0; i < 3; i++ {
					r.refused(p, 6*s+int64(i)*s, client(10+i))
				}
				r.exit(p, 8*s, 0, 0)
			},
			aside: 3,
		},
		{
			name: "keep-alive connection in use cut at exit: likely",
			build: func(r *rec, p *tpod) {
				r.signal(p, 1*ms, 15)
				r.exit(p, 2*ms, 0, 0)
				r.connClosedIdle(p, 2*ms+50_000, client(1), 20*ms)
			},
			byProof: map[string]int{ProofInUseAtExit: 1},
			likely:  1,
			cause:   CauseKeepAliveAtExit,
			role:    "pod side: a connection in use closed by the exit",
		},
		{
			name: "closed in use just before the exit, not in its path (an app's clean close, or its teardown's): nothing",
			build: func(r *rec, p *tpod) {
				r.signal(p, 1*ms, 15)
				r.connClosedIdle(p, 30*ms, client(1), 42_000)
				near := &r.events[len(r.events)-1]
				near.Flags |= event.FlagNearExit
				near.Seal()
				r.exit(p, 66*ms, 0, 0)
			},
		},
		{
			name: "in use, then the client's request met a reset: proven once",
			build: func(r *rec, p *tpod) {
				r.signal(p, 1*ms, 15)
				r.exit(p, 2*ms, 0, 0)
				r.connClosedIdle(p, 2*ms+50_000, client(1), 20*ms)
				r.rst(p, 15*ms, client(1), "TCP_ABORT_ON_DATA", 0)
			},
			byProof: map[string]int{ProofRSTAfterClose: 1},
			cause:   CauseKeepAliveAtExit,
			role:    "pod side proved a reset",
		},
		{
			name: "idle pooled connection cut at exit, or one of unknown idleness: nothing",
			build: func(r *rec, p *tpod) {
				r.signal(p, 1*ms, 15)
				r.exit(p, 2*ms, 0, 0)
				r.connClosedIdle(p, 2*ms+50_000, client(1), 30*time.Second.Nanoseconds())
				r.connClosed(p, 2*ms+60_000, client(2), "local", event.FlagAtExit)
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRec()
			p := r.pod("web-1", "10.244.0.11")
			r.ready(p, -60*s)
			r.deletion(p, 0, 30*time.Second)
			tc.build(r, p)
			res := analyzeAll(t, r)
			inf := res.Inference
			t.Logf("%+v", inf)
			if inf.Inferred != total(tc.byProof) || len(inf.ByProof) != len(tc.byProof) {
				t.Errorf("inferred %d %v, want %v", inf.Inferred, inf.ByProof, tc.byProof)
			}
			for k, n := range tc.byProof {
				if inf.ByProof[k] != n {
					t.Errorf("%s: %d, want %d", k, inf.ByProof[k], n)
				}
			}
			if inf.Likely != tc.likely {
				t.Errorf("likely %d, want %d", inf.Likely, tc.likely)
			}
			if inf.RefusedOutOfRotation != tc.aside {
				t.Errorf("refused SYNs set aside: %d, want %d", inf.RefusedOutOfRotation, tc.aside)
			}
			for _, f := range res.Failures {
				if !f.Inferred {
					continue
				}
				if tc.cause != "" && f.Cause != tc.cause {
					t.Errorf("inferred failure: cause %s, want %s (%s)", f.Cause, tc.cause, f.Explanation)
				}
				if tc.role != "" && !slices.ContainsFunc(f.Evidence, func(e EvidenceView) bool { return e.Role == tc.role }) {
					t.Errorf("inferred failure: no %q among its evidence %+v", tc.role, f.Evidence)
				}
			}
		})
	}
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestEveryRuleIsWhole: a cause is one row of the cause table, which
// holds everything said of it: a title, an explanation and a summary, a
// fix (but unexplained's), and a colour of its own that the web UI, its
// legend and its stylesheet take (web.causeColor, causes.css). Adding a
// cause without one of them fails here; the README's causes table is
// checked against the same rows by internal/repocheck.
func TestEveryRuleIsWhole(t *testing.T) {
	seen := map[string]Cause{}
	hex := regexp.MustCompile(`^#[0-9A-Fa-f]{6}$`)
	for _, r := range Rules {
		if r.Title == "" || r.Explain == "" || r.Summary == "" {
			t.Errorf("%s: title %q, explanation %q, summary %q: want all three", r.Cause, r.Title, r.Explain, r.Summary)
		}
		if r.Fix == "" && r.Cause != CauseUnexplained {
			t.Errorf("%s has no fix", r.Cause)
		}
		if !hex.MatchString(r.Color) {
			t.Errorf("%s: colour %q, want #RRGGBB", r.Cause, r.Color)
			continue
		}
		c := strings.ToUpper(r.Color)
		if other, ok := seen[c]; ok && other != r.Cause {
			t.Errorf("%s and %s share the colour %s", other, r.Cause, c)
		}
		seen[c] = r.Cause
	}
	if unexplained.Color != Rules[len(Rules)-1].Color {
		t.Errorf("the unexplained rule's colour %q differs from the table's last row's %q", unexplained.Color, Rules[len(Rules)-1].Color)
	}
}
