package watcher

import (
	"context"
	"flag"
	"maps"
	"net/netip"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"

	"github.com/drainscope/drainscope/event"
)

// collector is a sink that keeps what it gets.
type collector struct {
	mu     sync.Mutex
	events []event.Event
	notify chan struct{}
}

func newCollector() *collector { return &collector{notify: make(chan struct{}, 1)} }

func (c *collector) sink(e event.Event) {
	c.mu.Lock()
	c.events = append(c.events, e)
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

func (c *collector) snapshot() []event.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]event.Event(nil), c.events...)
}

// waitFor waits until match holds for the collected events.
func (c *collector) waitFor(t testing.TB, timeout time.Duration, what string, match func([]event.Event) bool) []event.Event {
	t.Helper()
	deadline := time.After(timeout)
	for {
		evs := c.snapshot()
		if match(evs) {
			return evs
		}
		select {
		case <-c.notify:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s; have %d events:\n%s", what, len(evs), describe(evs))
		}
	}
}

func hasKinds(want ...event.Kind) func([]event.Event) bool {
	return func(evs []event.Event) bool {
		i := 0
		for _, e := range evs {
			if i < len(want) && e.Kind == want[i] {
				i++
			}
		}
		return i == len(want)
	}
}

func describe(evs []event.Event) string {
	s := ""
	for _, e := range evs {
		s += e.At().Format("15:04:05.000000") + " " + string(e.Kind) + " " + e.Pod.String() + " " + e.Local.String()
		if e.Flags.Has(event.FlagRelist) {
			s += " relist"
		}
		s += "\n"
	}
	return s
}

// waitWatching waits until the fake clientset has been asked to watch each
// resource: it delivers only changes made after the watch started.
func waitWatching(t *testing.T, cs *fake.Clientset, resources ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		seen := map[string]bool{}
		for _, a := range cs.Actions() {
			if a.GetVerb() == "watch" {
				seen[a.GetResource().Resource] = true
			}
		}
		all := true
		for _, r := range resources {
			all = all && seen[r]
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no watch on %v", resources)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWatcherFakeClientset(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	old := pod("old", "1", "10.244.0.2", true)
	old.OwnerReferences[0].Name = "web-rs" // not DEPLOYMENT-HASH: only the ReplicaSet says whose it is
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-rs", Namespace: "ns",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", Controller: ptr.To(true)}}}}
	sl := slice("web-1", "web", "1", ep("old", "10.244.0.2", true, true, false))
	cs := fake.NewClientset(old, rs, sl)
	cs.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: "v1.37.2"}

	c := newCollector()
	w, err := New(cs, Options{Node: "node-a", Sink: c.sink})
	if err != nil {
		t.Fatal(err)
	}
	go w.Run(ctx)
	if err := w.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	waitWatching(t, cs, "pods", "endpointslices")
	if ref, wl, ok := w.Pods().PodByUID("uid-old"); !ok || ref.Name != "old" || wl != (event.Workload{Kind: "Deployment", Name: "web"}) {
		t.Fatalf("PodByUID = %v %v %v", ref, wl, ok)
	}
	// The initial lists are recorded as observed state, not transitions,
	// and the API server's version once they are done.
	initial := c.waitFor(t, 5*time.Second, "initial state", func(evs []event.Event) bool {
		return hasKinds(event.EndpointReady)(evs) && hasKinds(event.NodeInfo)(evs)
	})
	observed := map[event.Kind]event.Event{}
	for _, e := range initial {
		if e.Flags != event.FlagObserved {
			t.Errorf("initial %s flags %b, want observed", e.Kind, e.Flags)
		}
		observed[e.Kind] = e
	}
	if e, ok := observed[event.EndpointReady]; !ok || e.Service != "web" || e.Slice != "web-1" || e.Pod.Name != "old" ||
		e.Attrs[event.AttrConditions] != "ready=true,serving=true,terminating=false" || e.Local != netip.MustParseAddrPort("10.244.0.2:8080") {
		t.Errorf("observed endpoint %+v", e)
	}
	if e, ok := observed[event.PodReady]; !ok || e.Local != netip.MustParseAddrPort("10.244.0.2:0") {
		t.Errorf("observed pod %+v", e)
	}
	if e, ok := observed[event.ContainerStarted]; !ok || e.Attrs[AttrContainerID] != "c0ffee-old" || e.Pod.Container != "app" {
		t.Errorf("observed container %+v", e)
	}
	// Cluster-wide (no PodNode): the API server's version, no Node's.
	if e, ok := observed[event.NodeInfo]; !ok || e.Reason != event.ChangeObserved || !e.Pod.IsZero() ||
		!maps.Equal(e.Attrs, map[string]string{event.AttrAPIServerVersion: "v1.37.2"}) {
		t.Errorf("observed node_info %+v", e)
	}
	if len(initial) != 4 {
		t.Errorf("initial state: %d events, want 4:\n%s", len(initial), describe(initial))
	}
	c.mu.Lock()
	c.events = nil
	c.mu.Unlock()

	// The API marks the pod deleted; the EndpointSlice controller marks
	// its endpoint terminating, then removes it.
	del := old.DeepCopy()
	del.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	del.DeletionGracePeriodSeconds = ptr.To(int64(30))
	del.ResourceVersion = "2" // the fake clientset keeps whatever version it is given
	if _, err := cs.CoreV1().Pods("ns").Update(ctx, del, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, 5*time.Second, "pod deletion", hasKinds(event.PodDeletion))
	term := slice("web-1", "web", "2", ep("old", "10.244.0.2", false, true, true))
	if _, err := cs.DiscoveryV1().EndpointSlices("ns").Update(ctx, term, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	gone := slice("web-1", "web", "3")
	if _, err := cs.DiscoveryV1().EndpointSlices("ns").Update(ctx, gone, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods("ns").Delete(ctx, "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []event.Kind{event.PodDeletion, event.EndpointNotReady, event.EndpointTerminating, event.EndpointRemoved}
	evs := c.waitFor(t, 5*time.Second, "endpoint removal", hasKinds(want...))
	if len(evs) != len(want) {
		t.Fatalf("got %d events, want %d:\n%s", len(evs), len(want), describe(evs))
	}
	for i, e := range evs {
		if e.Kind != want[i] {
			t.Errorf("event %d is %s, want %s", i, e.Kind, want[i])
		}
		if err := e.Validate(); err != nil {
			t.Errorf("event %d: %v", i, err)
		}
		if e.Node != "node-a" || e.Source != event.SourceWatcher {
			t.Errorf("event %d: node %q source %q", i, e.Node, e.Source)
		}
		if e.Workload != (event.Workload{Kind: "Deployment", Name: "web"}) {
			t.Errorf("event %d (%s): workload %v", i, e.Kind, e.Workload)
		}
		if i > 0 && e.Time <= evs[i-1].Time {
			t.Errorf("event %d time %d not after %d", i, e.Time, evs[i-1].Time)
		}
	}
	if e := evs[1]; e.Service != "web" || e.Slice != "web-1" || e.Attrs[event.AttrLastChangeTriggerTime] == "" ||
		e.Attrs[event.AttrConditions] != "ready=false,serving=true,terminating=true" {
		t.Errorf("endpoint event %+v", e)
	}
	deadline := time.Now().Add(5 * time.Second)
	for w.Stats().Pods != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	st := w.Stats()
	if st.Events != 4+4 || st.Pods != 0 || st.Endpoints != 0 || st.Slices != 1 || !st.Leader {
		t.Errorf("stats %+v", st)
	}
}

func TestWatcherPodNodeAndSelector(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newCollector()
	cs := fake.NewClientset()
	w, err := New(cs, Options{Node: "node-a", Sink: c.sink, PodNode: "node-a", NoSlices: true})
	if err != nil {
		t.Fatal(err)
	}
	go w.Run(ctx)
	if err := w.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	// The fake clientset does not filter by field; check that the
	// selector reaches the list the informer makes.
	found := false
	for _, a := range cs.Actions() {
		if l, ok := a.(k8stesting.ListAction); ok && a.GetResource().Resource == "pods" {
			found = true
			if f := l.GetListRestrictions().Fields.String(); f != "spec.nodeName=node-a" {
				t.Errorf("pod list field selector %q, want spec.nodeName=node-a", f)
			}
		}
	}
	if !found {
		t.Error("no pod list")
	}
	if _, err := New(cs, Options{Node: "n", Sink: c.sink, SliceSelector: "a in ("}); err == nil {
		t.Error("bad selector accepted")
	}
	if _, err := New(cs, Options{Sink: c.sink}); err == nil {
		t.Error("missing node accepted")
	}
}

func TestLeaderTakeOverDeliversUnrecordedEvents(t *testing.T) {
	c := newCollector()
	w, err := New(fake.NewClientset(), Options{Node: "node-b", Sink: c.sink, Mode: Leader})
	if err != nil {
		t.Fatal(err)
	}
	base := time.Unix(1_800_000_000, 0)
	w.sliceMu.Lock()
	w.slices.at = base
	w.slices.apply(slice("web-1", "web", "1", ep("a", "10.244.0.2", true, true, false)), 0, false)
	w.slices.at = base.Add(5 * time.Second)
	w.slices.apply(slice("web-1", "web", "2", ep("a", "10.244.0.2", false, true, true)), 0, false)
	w.sliceMu.Unlock()
	if n := len(c.snapshot()); n != 0 {
		t.Fatalf("standby delivered %d events", n)
	}
	// The old leader last renewed between the two: only the later
	// transitions are delivered on takeover.
	prev := resourcelock.LeaderElectionRecord{HolderIdentity: "node-a", RenewTime: metav1.Time{Time: base.Add(time.Second)}}
	w.takeOver(prev)
	evs := c.snapshot()
	if !hasKinds(event.EndpointNotReady, event.EndpointTerminating)(evs) || len(evs) != 2 {
		t.Fatalf("takeover delivered:\n%s", describe(evs))
	}
	if !w.Stats().Leader {
		t.Error("not leading after takeover")
	}
}

func TestLeaderElectionWithFakeLease(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset()
	c := newCollector()
	w, err := New(cs, Options{Node: "node-a", Sink: c.sink, Mode: Leader, NoPods: true,
		Lease: LeaseOptions{Namespace: "kube-system", LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	go w.Run(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for !w.Stats().Leader {
		if time.Now().After(deadline) {
			t.Fatal("never became leader")
		}
		time.Sleep(20 * time.Millisecond)
	}
	l, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, "drainscope-endpointslices", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "node-a" {
		t.Fatalf("lease %v, %v", l, err)
	}
	waitWatching(t, cs, "endpointslices")
	if _, err := cs.DiscoveryV1().EndpointSlices("ns").Create(ctx, slice("web-1", "web", "", ep("a", "10.244.0.2", true, true, false)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, 5*time.Second, "endpoint added", hasKinds(event.EndpointAdded))
}

func TestFlags(t *testing.T) {
	var f Flags
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	f.Register(fs)
	if err := fs.Parse([]string{"--kubeconfig=/nonexistent", "--context=lab", "--node=n1",
		"--endpoints-mode=leader", "--namespace=shop"}); err != nil {
		t.Fatal(err)
	}
	o, err := f.Options()
	if err != nil {
		t.Fatal(err)
	}
	if o.Node != "n1" || o.PodNode != "n1" || o.Mode != Leader || o.Namespace != "shop" {
		t.Errorf("options %+v", o)
	}
	if f.Client.Kubeconfig != "/nonexistent" || f.Client.Context != "lab" {
		t.Errorf("client flags %+v", f.Client)
	}
	if _, err := f.Client.RESTConfig(); err == nil {
		t.Error("a missing kubeconfig gave a config")
	}
	f.Mode = "sometimes"
	if _, err := f.Options(); err == nil {
		t.Error("bad mode accepted")
	}
}

// TestWatcherObservesPeriodically: every ObserveInterval the state of
// every endpoint, pod, container and Service is recorded again, flagged
// observed, with nothing having changed.
func TestWatcherObservesPeriodically(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := pod("old", "1", "10.244.0.2", true)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"},
		Spec: corev1.ServiceSpec{ClusterIPs: []string{"10.96.0.10"}, Ports: []corev1.ServicePort{{Port: 80}}}}
	cs := fake.NewClientset(p, svc, slice("web-1", "web", "1", ep("old", "10.244.0.2", false, true, true)))
	c := newCollector()
	w, err := New(cs, Options{Node: "node-a", Sink: c.sink, ObserveInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	go w.Run(ctx)
	count := func(evs []event.Event) map[event.Kind]int {
		n := map[event.Kind]int{}
		for _, e := range evs {
			if e.Flags.Has(event.FlagObserved) {
				n[e.Kind]++
			}
		}
		return n
	}
	evs := c.waitFor(t, 10*time.Second, "three observations", func(evs []event.Event) bool {
		n := count(evs)
		return n[event.EndpointTerminating] >= 3 && n[event.PodReady] >= 3 && n[event.ContainerStarted] >= 3 && n[event.ServiceChanged] >= 3
	})
	for _, e := range evs {
		if !e.Flags.Has(event.FlagObserved) {
			t.Errorf("nothing changed, yet %s was reported without the observed flag", e.Kind)
		}
	}
	if _, err := New(cs, Options{Node: "n", Sink: c.sink, ObserveInterval: -time.Second}); err == nil {
		t.Error("a negative ObserveInterval was accepted")
	}
}
