package analysis

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// TestNamespaceReadKeepsItsAnswers: a report of one namespace reads that
// namespace's state and re-observations, and of the others only their
// transitions (see AnalyzeWith). On a cluster that has run for an hour,
// with every pod re-observed every 10 minutes and a rollout in each of two
// namespaces, each failure of the report's namespace must get the same
// pod, cause and explanation as in the read of the whole cluster.
func TestNamespaceReadKeepsItsAnswers(t *testing.T) {
	r := newRec("node-a", "node-b")
	web := []*tpod{r.pod("web-a", "10.244.0.11"), r.pod("web-b", "10.244.0.12"), r.pod("web-c", "10.244.0.13")}
	var apps []*tpod
	for i := range 20 {
		p := r.pod(fmt.Sprintf("batch-%02d", i), fmt.Sprintf("10.244.1.%d", 10+i))
		p.ref.Namespace, p.wl.Name, p.svc, p.node = "apps", "batch", "batch", "node-b"
		apps = append(apps, p)
	}
	all := append(append([]*tpod(nil), web...), apps...)
	for _, p := range all {
		r.ready(p, -60*60*s)
	}
	// The watcher's re-observations, every 10 minutes, the last in the
	// window; none of the two pods that end. web-a is known from its state
	// alone (a watcher that re-observed nothing then), web-d from the
	// re-observations alone (a relist found it).
	gone := map[*tpod]bool{web[2]: true, apps[3]: true}
	d4 := r.pod("web-d", "10.244.0.14")
	for d := -54 * 60 * s; d < 7*60*s; d += 10 * 60 * s {
		for i, p := range all {
			if p != web[0] && (d < 0 || !gone[p]) {
				r.observed(p, d+int64(i)*ms)
			}
		}
		if d > -10*60*s {
			r.observed(d4, d)
		}
	}

	// The report's namespace: web-c's graceful rollout with two keep-alive
	// clients reset at its exit, and a timeout on a healthy pod.
	exit := r.gracefulPreStop(web[2], 0, []netip.AddrPort{client(1), client(2)})
	r.failure(exit+3*ms, client(1), event.FailReset)
	r.failure(exit+4*ms, client(2), event.FailReset, backend(web[2]))
	r.failure(20*s, client(3), event.FailTimeout, backend(web[0]), took(5*time.Second))
	r.failure(30*s, client(4), event.FailTimeout, backend(d4), took(5*time.Second))
	// Another namespace's pod killed without a drain while serving.
	b := apps[3]
	r.deletion(b, 2*s, 0)
	r.leave(b, 2*s+300*ms, 10*ms)
	r.signal(b, 2*s+10*ms, 9)
	r.exit(b, 2*s+20*ms, 0, 9)
	r.rst(b, 2*s+21*ms, client(7), "NO_SOCKET", event.FlagAtExit)
	r.failure(2*s+22*ms, client(7), event.FailReset, backend(b), target("http://batch.apps.svc/"))
	r.removed(b, 2*s+400*ms, 10*ms)

	st := embeddedStore(t, r.events)
	q := store.Query{Window: event.Window{From: r.at(-60 * s), To: r.at(7 * 60 * s)}}
	cluster, err := AnalyzeWith(context.Background(), st, q, Options{MaxFailures: -1})
	if err != nil {
		t.Fatal(err)
	}
	q.Namespace = "default"
	scoped, err := AnalyzeWith(context.Background(), st, q, Options{MaxFailures: -1})
	if err != nil {
		t.Fatal(err)
	}

	var want []AlignedFailure
	causes := map[Cause]bool{}
	for _, f := range clientFailures(cluster) {
		if f.Pod != nil && f.Pod.Namespace == "default" {
			want = append(want, f)
			causes[f.Cause] = true
		}
	}
	if len(want) != 4 || !causes[CauseUnexplained] || len(causes) < 2 {
		t.Fatalf("the whole cluster's read gave the namespace %d failures with causes %v; the case needs 4, one unexplained and one not", len(want), causes)
	}
	got := clientFailures(scoped)
	if len(got) != len(want) {
		t.Fatalf("the namespace's read gave %d failures, the whole cluster's %d", len(got), len(want))
	}
	for i := range want {
		w, g := want[i], got[i]
		if g.Failure.Time != w.Failure.Time || g.Cause != w.Cause || g.Pod == nil || g.Pod.Name != w.Pod.Name || g.Explanation != w.Explanation {
			t.Errorf("failure at %d: the namespace's read gave %s on %v (%s); the whole cluster's %s on %v (%s)",
				w.Failure.Time-r.t0, g.Cause, g.Pod, g.Explanation, w.Cause, w.Pod, w.Explanation)
		}
	}
	// What the read left out: the other namespace's state and
	// re-observations.
	if scoped.Stats.Events >= cluster.Stats.Events {
		t.Errorf("the namespace's read took %d events, the whole cluster's %d: nothing was left out", scoped.Stats.Events, cluster.Stats.Events)
	}
}

func target(url string) fopt { return func(e *event.Event) { e.Attrs[event.AttrTarget] = url } }

// TestEndedPodKeepsNoReusedAddress: a pod whose end was seen 12 minutes
// before but whose object stays (a finalizer), re-observed not ready with
// its old address, while a pod of another namespace has held that address
// since, unchanged. A failure to the address is the other pod's; the read
// of the first pod's namespace does not know the other pod, and must not
// give it to the pod that ended, whether the re-observations came often
// enough to keep the pod in memory (every minute) or not (every 5).
func TestEndedPodKeepsNoReusedAddress(t *testing.T) {
	for _, every := range []int64{60 * s, 5 * 60 * s} {
		t.Run(time.Duration(every).String(), func(t *testing.T) { endedPodReusedAddress(t, every) })
	}
}

func endedPodReusedAddress(t *testing.T, every int64) {
	r := newRec()
	old := r.pod("web-x", "10.244.0.21")
	r.ready(old, -60*60*s)
	r.endpoint(old, -19*60*s, event.EndpointNotReady, "lab")
	heir := r.pod("batch-0", "10.244.0.21")
	heir.ref.Namespace, heir.wl.Name, heir.svc = "apps", "batch", "batch"
	r.ready(heir, -17*60*s) // before the read's lead
	r.removed(old, -12*60*s, 0)
	for d := -10*60*s - 30*s; d <= 0; d += every {
		e := r.podEvent(old, d, event.PodNotReady)
		e.Local, e.Flags = netip.AddrPortFrom(old.ip, 0), event.FlagObserved
		r.add(e)
		r.observed(heir, d+ms)
	}
	r.failure(30*s, client(1), event.FailTimeout, backend(heir), took(5*time.Second), target("http://batch.apps.svc/"))

	q := store.Query{Window: event.Window{From: r.at(-60 * s), To: r.at(60 * s)}}
	for _, ns := range []string{"", "default"} {
		q.Namespace = ns
		res, err := AnalyzeEvents(r.events, q, Options{MaxFailures: -1})
		if err != nil {
			t.Fatal(err)
		}
		fs := clientFailures(res)
		for _, f := range fs {
			if f.Pod != nil && f.Pod.Name == old.ref.Name {
				t.Errorf("namespace %q: the failure to the reused address went to the pod that ended 12 min before: %s (%s)", ns, f.Cause, f.Explanation)
			}
		}
		if ns == "" && (len(fs) != 1 || fs[0].Pod == nil || fs[0].Pod.Name != heir.ref.Name) {
			t.Errorf("the whole cluster's read: %d failures, want one on %s", len(fs), heir)
		}
	}
	st := embeddedStore(t, r.events)
	q.Namespace = "default"
	res, err := AnalyzeWith(context.Background(), st, q, Options{MaxFailures: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range clientFailures(res) {
		t.Errorf("the namespace's read, which does not know the address's holder, kept a failure: %s on %v (%s)", f.Cause, f.Pod, f.Explanation)
	}
}

// embeddedStore is a new embedded store holding events, closed at the
// test's end.
func embeddedStore(t *testing.T, events []event.Event) store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Append(context.Background(), events); err != nil {
		t.Fatal(err)
	}
	return st
}
