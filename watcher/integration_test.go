package watcher

// Tests against a real kube-apiserver and the real EndpointSlice controller
// (kube-controller-manager), started by package controlplane from the
// binaries scripts/k8s-binaries.sh builds. Pods are API objects only: the
// test plays the kubelet's part (bind, status with a pod IP, readiness,
// container termination, final deletion). No traffic goes anywhere.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
)

var (
	cpOnce   sync.Once
	cpShared *controlplane.ControlPlane
	cpErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cpShared != nil {
		cpShared.Stop()
	}
	os.Exit(code)
}

// controlPlane starts (once per test binary) etcd, kube-apiserver and
// kube-controller-manager, or skips the test when the binaries are not
// built (fails under CI=true).
func controlPlane(t testing.TB) *controlplane.ControlPlane {
	t.Helper()
	if _, err := controlplane.CheckBinaries("", "etcd", "kube-apiserver", "kube-controller-manager"); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	cpOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		var logger *slog.Logger
		if testing.Verbose() {
			logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
		}
		cpShared, cpErr = controlplane.Start(ctx, controlplane.Options{Logger: logger})
	})
	if cpErr != nil {
		t.Fatalf("starting the control plane: %v", cpErr)
	}
	return cpShared
}

// kubelet plays the kubelet's part for pods of one node.
type kubelet struct {
	t    testing.TB
	cs   kubernetes.Interface
	ns   string
	node string
	// edit, when set, changes each pod's spec before it is created.
	edit func(*corev1.Pod)
}

func (k *kubelet) podSpec(name, app, ip string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns, Labels: map[string]string{"app": app},
			Annotations: map[string]string{"drainscope.test/ip": ip}},
		Spec: corev1.PodSpec{
			NodeName:                      k.node,
			TerminationGracePeriodSeconds: ptr.To(int64(30)),
			Containers: []corev1.Container{{Name: "app", Image: "drainscope.invalid/app:1",
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}},
		},
	}
	if k.edit != nil {
		k.edit(p)
	}
	return p
}

// start creates the pod and reports it running and ready at ip.
func (k *kubelet) start(ctx context.Context, name, app, ip string) *corev1.Pod {
	k.t.Helper()
	p, err := k.cs.CoreV1().Pods(k.ns).Create(ctx, k.podSpec(name, app, ip), metav1.CreateOptions{})
	if err != nil {
		k.t.Fatalf("creating pod %s: %v", name, err)
	}
	now := metav1.Now()
	p.Status = corev1.PodStatus{
		Phase:  corev1.PodRunning,
		HostIP: "10.244.0.1", PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "app", Image: "drainscope.invalid/app:1", ImageID: "drainscope.invalid/app@sha256:0",
			ContainerID: "containerd://" + string(p.UID)[:8] + "-app",
			Ready:       true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}},
	}
	p, err = k.cs.CoreV1().Pods(k.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		k.t.Fatalf("setting pod %s running: %v", name, err)
	}
	return p
}

// stop does what the kubelet does after a pod's deletion was requested:
// the pod goes not ready and its container exits; then the kubelet deletes
// the pod for good (grace period 0).
func (k *kubelet) terminate(ctx context.Context, name string) {
	k.t.Helper()
	p, err := k.cs.CoreV1().Pods(k.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		k.t.Fatalf("getting pod %s: %v", name, err)
	}
	now := metav1.Now()
	for i := range p.Status.Conditions {
		if c := &p.Status.Conditions[i]; c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			c.Status, c.LastTransitionTime = corev1.ConditionFalse, now
		}
	}
	cs := &p.Status.ContainerStatuses[0]
	started := cs.State.Running.StartedAt
	cs.Ready, cs.Started = false, ptr.To(false)
	cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 0, Reason: "Completed", StartedAt: started, FinishedAt: now, ContainerID: cs.ContainerID,
	}}
	p.Status.Phase = corev1.PodSucceeded
	if _, err := k.cs.CoreV1().Pods(k.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		k.t.Fatalf("setting pod %s terminated: %v", name, err)
	}
}

func (k *kubelet) finalDelete(ctx context.Context, name string) {
	k.t.Helper()
	if err := k.cs.CoreV1().Pods(k.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		k.t.Fatalf("deleting pod %s: %v", name, err)
	}
}

// setup creates a namespace, the node and a Service "web" selecting app=web.
func setup(t *testing.T, cp *controlplane.ControlPlane, ns string) *kubelet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.RegisterNode(ctx, controlplane.NodeOptions{Name: "node-a", InternalIP: "10.244.0.1", PodCIDR: "10.244.0.0/24"}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := cp.Client().CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &kubelet{t: t, cs: cp.Client(), ns: ns, node: "node-a"}
}

// waitReadyEndpoints waits until the API's EndpointSlices of Service web
// list exactly the given pods, all ready.
func waitReadyEndpoints(t *testing.T, cs kubernetes.Interface, ns string, pods ...string) {
	t.Helper()
	want := strings.Join(pods, ",")
	deadline := time.Now().Add(60 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		l, err := cs.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
		if err == nil {
			var names []string
			for _, s := range l.Items {
				for _, e := range s.Endpoints {
					if e.TargetRef != nil && (e.Conditions.Ready == nil || *e.Conditions.Ready) {
						names = append(names, e.TargetRef.Name)
					}
				}
			}
			sortStrings(names)
			got = strings.Join(names, ",")
			if got == want {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("ready endpoints of web: %q, want %q", got, want)
}

// waitEndpointTerminating waits until the API shows pod's endpoint
// terminating.
func waitEndpointTerminating(t *testing.T, cs kubernetes.Interface, ns, pod string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		l, err := cs.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
		if err == nil {
			for _, s := range l.Items {
				for _, e := range s.Endpoints {
					if e.TargetRef != nil && e.TargetRef.Name == pod && e.Conditions.Terminating != nil && *e.Conditions.Terminating {
						return
					}
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the endpoint of %s never turned terminating", pod)
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func startWatcher(t *testing.T, cfg *rest.Config, ns string) (*Watcher, *collector) {
	t.Helper()
	return startWatcherWith(t, cfg, Options{Node: "node-a", Namespace: ns, PodNode: "node-a"})
}

// startWatcherWith runs a watcher with o (Sink and Logger set here) until
// the test ends, and waits for its initial lists.
func startWatcherWith(t *testing.T, cfg *rest.Config, o Options) (*Watcher, *collector) {
	t.Helper()
	w, c, stop := startWatcherStop(t, cfg, o)
	t.Cleanup(stop)
	return w, c
}

func startWatcherStop(t *testing.T, cfg *rest.Config, o Options) (*Watcher, *collector, func()) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := newCollector()
	var logger *slog.Logger
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	o.Sink, o.Logger = c.sink, logger
	w, err := New(cs, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	stop := func() { cancel(); <-done }
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if err := w.WaitForSync(wctx); err != nil {
		stop()
		t.Fatal(err)
	}
	return w, c, stop
}

func ofPod(evs []event.Event, name string) []event.Event {
	var out []event.Event
	for _, e := range evs {
		if e.Pod.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// ofKind keeps the events of kind k that keep accepts (nil: all of them).
func ofKind(evs []event.Event, k event.Kind, keep func(*event.Event) bool) []event.Event {
	var out []event.Event
	for i := range evs {
		if evs[i].Kind == k && (keep == nil || keep(&evs[i])) {
			out = append(out, evs[i])
		}
	}
	return out
}

// waitKind waits until sel picks at least n of the events and returns them.
func (c *collector) waitKind(t testing.TB, n int, what string, sel func([]event.Event) []event.Event) []event.Event {
	t.Helper()
	return sel(c.waitFor(t, time.Minute, what, func(evs []event.Event) bool { return len(sel(evs)) >= n }))
}

func count(evs []event.Event, k event.Kind) int {
	n := 0
	for _, e := range evs {
		if e.Kind == k {
			n++
		}
	}
	return n
}

func first(evs []event.Event, k event.Kind) *event.Event {
	for i := range evs {
		if evs[i].Kind == k {
			return &evs[i]
		}
	}
	return nil
}

func TestIntegrationPodDeletion(t *testing.T) {
	cp := controlPlane(t)
	ns := "deletion"
	k := setup(t, cp, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	w, c := startWatcher(t, cp.Config(), ns)
	for i := range 3 {
		k.start(ctx, fmt.Sprintf("web-%d", i), "web", fmt.Sprintf("10.244.0.%d", 10+i))
	}
	waitReadyEndpoints(t, cp.Client(), ns, "web-0", "web-1", "web-2")
	c.waitFor(t, 30*time.Second, "three ready endpoints", func(evs []event.Event) bool {
		ready := map[string]bool{}
		for _, e := range evs {
			if (e.Kind == event.EndpointAdded && strings.HasPrefix(e.Attrs[event.AttrConditions], "ready=true")) || e.Kind == event.EndpointReady {
				ready[e.Pod.Name] = true
			}
		}
		return len(ready) == 3
	})
	mark := len(c.snapshot())
	// The controller stamps the slice with the change's trigger time (the
	// API's whole seconds) when it knows it, as it does for pods turning
	// ready; the events keep it as an attribute.
	withTrigger := 0
	for _, e := range c.snapshot() {
		if e.Kind.IsEndpoint() && e.Attrs[event.AttrLastChangeTriggerTime] != "" {
			withTrigger++
		}
	}
	if withTrigger == 0 {
		t.Error("no endpoint event carries the slice's last-change-trigger-time")
	}

	// Delete web-0 with its 30 s grace period. The kubelet, seeing the
	// deletion, takes the pod out of readiness, the container exits, and
	// the kubelet removes the pod.
	if err := cp.Client().CoreV1().Pods(ns).Delete(ctx, "web-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, 30*time.Second, "endpoint terminating", func(evs []event.Event) bool {
		return first(ofPod(evs[mark:], "web-0"), event.EndpointTerminating) != nil
	})
	k.terminate(ctx, "web-0")
	c.waitFor(t, 30*time.Second, "container terminated", func(evs []event.Event) bool {
		return first(ofPod(evs[mark:], "web-0"), event.ContainerTerminated) != nil
	})
	k.finalDelete(ctx, "web-0")
	waitReadyEndpoints(t, cp.Client(), ns, "web-1", "web-2")
	c.waitFor(t, 30*time.Second, "endpoint removed", func(evs []event.Event) bool {
		return first(ofPod(evs[mark:], "web-0"), event.EndpointRemoved) != nil
	})
	time.Sleep(500 * time.Millisecond) // let anything doubled arrive

	all := c.snapshot()
	evs := all[mark:]
	t.Logf("recorded after the deletion:\n%s", describeRel(evs))
	if other := len(evs) - len(ofPod(evs, "web-0")); other != 0 {
		t.Errorf("%d events for pods that were not touched", other)
	}
	mine := ofPod(evs, "web-0")
	for _, k := range []event.Kind{event.PodDeletion, event.EndpointNotReady, event.EndpointTerminating,
		event.PodNotReady, event.ContainerTerminated, event.EndpointRemoved} {
		if n := count(mine, k); n != 1 {
			t.Errorf("%s recorded %d times, want once", k, n)
		}
	}
	del, notReady, term, removed := first(mine, event.PodDeletion), first(mine, event.EndpointNotReady),
		first(mine, event.EndpointTerminating), first(mine, event.EndpointRemoved)
	if del == nil || notReady == nil || term == nil || removed == nil {
		t.FailNow()
	}
	if !(del.Time < notReady.Time && notReady.Time < term.Time && term.Time < removed.Time) {
		t.Errorf("order: deletion %d, not ready %d, terminating %d, removed %d; want increasing",
			del.Time, notReady.Time, term.Time, removed.Time)
	}
	if del.Duration != int64(30*time.Second) || del.Attrs[event.AttrDeletionTimestamp] == "" {
		t.Errorf("deletion: grace %v, attrs %v", time.Duration(del.Duration), del.Attrs)
	}
	if term.Service != "web" || term.Local.String() != "10.244.0.10:8080" ||
		term.Attrs[event.AttrConditions] != "ready=false,serving=true,terminating=true" {
		t.Errorf("terminating event: service %q local %v attrs %v", term.Service, term.Local, term.Attrs)
	}
	// Times are the handlers' clock, finer than the API's seconds, and
	// strictly increasing in the order the sink got them.
	subSecond := false
	for i, e := range all {
		if e.Time%int64(time.Second) != 0 {
			subSecond = true
		}
		if i > 0 && e.Time <= all[i-1].Time {
			t.Errorf("event %d (%s) at %d not after the previous at %d", i, e.Kind, e.Time, all[i-1].Time)
		}
		if err := e.Validate(); err != nil {
			t.Errorf("event %d: %v", i, err)
		}
	}
	if !subSecond {
		t.Error("every event time is a whole second")
	}
	if ref, _, ok := w.Pods().PodByIP(netip.MustParseAddr("10.244.0.11")); !ok || ref.Name != "web-1" {
		t.Errorf("PodByIP(10.244.0.11) = %v, %v", ref, ok)
	}
}

func describeRel(evs []event.Event) string {
	if len(evs) == 0 {
		return ""
	}
	var b strings.Builder
	t0 := evs[0].Time
	for _, e := range evs {
		fmt.Fprintf(&b, "  +%8.3f ms  %-22s %-8s %s", float64(e.Time-t0)/1e6, e.Kind, e.Pod.Name, e.Local)
		if c := e.Attrs[event.AttrConditions]; c != "" {
			b.WriteString("  " + c)
		}
		if c := e.Attrs[event.AttrLastChangeTriggerTime]; c != "" {
			b.WriteString("  trigger " + c)
		}
		if e.Flags.Has(event.FlagRelist) {
			b.WriteString("  [relist]")
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// cutProxy is a loopback TCP proxy whose connections the test can cut, to
// break the watcher's watches while other clients keep writing.
type cutProxy struct {
	l        net.Listener
	upstream string
	mu       sync.Mutex
	cut      bool
	conns    map[net.Conn]bool
}

func newCutProxy(t *testing.T, upstream string) *cutProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l, upstream: upstream, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() { l.Close(); p.setCut(true) })
	return p
}

func (p *cutProxy) addr() string { return p.l.Addr().String() }

func (p *cutProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c] = true
		p.mu.Unlock()
		go p.pipe(c)
	}
}

func (p *cutProxy) pipe(c net.Conn) {
	u, err := net.Dial("tcp", p.upstream)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		c.Close()
		u.Close()
		return
	}
	p.conns[u] = true
	p.mu.Unlock()
	go func() { io.Copy(u, c); u.Close() }()
	io.Copy(c, u)
	c.Close()
}

// setCut closes every connection and refuses new ones (true), or lets
// them through again (false).
func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		p.conns = map[net.Conn]bool{}
	}
}

// epMachine replays endpoint events per endpoint and fails on any event
// that is not a change of the state the previous events left: a doubled
// or impossible transition.
func checkEndpointSequences(t *testing.T, evs []event.Event) map[string]string {
	t.Helper()
	type st struct {
		present, ready, serving, terminating bool
	}
	state := map[string]*st{}
	for _, e := range evs {
		if !e.Kind.IsEndpoint() {
			continue
		}
		key := e.Pod.Name + "@" + e.Local.String()
		s := state[key]
		if s == nil {
			s = &st{}
			state[key] = s
		}
		bad := false
		switch e.Kind {
		case event.EndpointAdded:
			bad = s.present
			c := e.Attrs[event.AttrConditions]
			*s = st{present: true, ready: strings.Contains(c, "ready=true"), serving: strings.Contains(c, "serving=true"),
				terminating: strings.Contains(c, "terminating=true")}
		case event.EndpointRemoved:
			bad = !s.present
			*s = st{}
		case event.EndpointReady:
			bad = !s.present || s.ready
			s.ready = true
		case event.EndpointNotReady:
			bad = !s.present || !s.ready
			s.ready = false
		case event.EndpointServing:
			bad = !s.present || s.serving
			s.serving = true
		case event.EndpointNotServing:
			bad = !s.present || !s.serving
			s.serving = false
		case event.EndpointTerminating:
			bad = !s.present || s.terminating
			s.terminating = true
		}
		if bad {
			t.Errorf("%s of %s does not follow the endpoint's recorded state", e.Kind, key)
		}
	}
	final := map[string]string{}
	for k, s := range state {
		if s.present {
			final[k] = fmt.Sprintf("ready=%v", s.ready)
		}
	}
	return final
}

func TestIntegrationAPIServerRestartMidRollout(t *testing.T) {
	cp := controlPlane(t)
	ns := "restart"
	k := setup(t, cp, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	// The watcher reaches the API server through a proxy the test can cut,
	// so that changes happen while its watches are down.
	host := strings.TrimPrefix(cp.Host(), "https://")
	proxy := newCutProxy(t, host)
	cfg := cp.Config()
	cfg.Host = "https://" + proxy.addr()
	w, c := startWatcher(t, cfg, ns)

	ip := map[string]string{}
	for i := range 3 {
		name := fmt.Sprintf("v1-%d", i)
		ip[name] = fmt.Sprintf("10.244.0.%d", 20+i)
		k.start(ctx, name, "web", ip[name])
	}
	waitReadyEndpoints(t, cp.Client(), ns, "v1-0", "v1-1", "v1-2")

	// One rollout step, as a Deployment with maxSurge 1 and
	// maxUnavailable 0 does it: a new pod becomes ready, then an old one
	// is deleted, goes not ready, exits and is removed. midway runs after
	// the deletion request.
	step := func(i int, midway func(old string)) {
		nw, old := fmt.Sprintf("v2-%d", i), fmt.Sprintf("v1-%d", i)
		ip[nw] = fmt.Sprintf("10.244.0.%d", 30+i)
		k.start(ctx, nw, "web", ip[nw])
		if err := cp.Client().CoreV1().Pods(ns).Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// As a preStop hook would, give the EndpointSlice controller
		// time to publish the terminating endpoint; without it the
		// controller may go from ready straight to removed.
		waitEndpointTerminating(t, cp.Client(), ns, old)
		if midway != nil {
			midway(old)
		}
		k.terminate(ctx, old)
		k.finalDelete(ctx, old)
	}
	step(0, nil)
	waitReadyEndpoints(t, cp.Client(), ns, "v1-1", "v1-2", "v2-0")

	// Step 1 begins while the watcher is cut off: v2-1 is created and
	// becomes ready, v1-1's deletion is requested and its endpoint turns
	// terminating. kube-apiserver is restarted, then the watcher
	// reconnects, and the rest of the step happens while it watches.
	proxy.setCut(true)
	t.Log("watcher cut off")
	step(1, func(old string) {
		start := time.Now()
		if err := cp.RestartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("kube-apiserver restarted in %v", time.Since(start).Round(time.Millisecond))
		proxy.setCut(false)
		t.Log("watcher may reconnect")
		c.waitFor(t, 2*time.Minute, "the watcher to catch up", func(evs []event.Event) bool {
			return first(ofPod(evs, old), event.EndpointTerminating) != nil && first(ofPod(evs, "v2-1"), event.EndpointAdded) != nil &&
				first(ofPod(evs, old), event.PodDeletion) != nil && first(ofPod(evs, "v2-1"), event.PodCreated) != nil
		})
	})
	waitReadyEndpoints(t, cp.Client(), ns, "v1-2", "v2-0", "v2-1")

	step(2, nil)
	waitReadyEndpoints(t, cp.Client(), ns, "v2-0", "v2-1", "v2-2")

	// Wait until the watcher's view matches the API's.
	wantFinal := map[string]string{}
	for _, p := range []string{"v2-0", "v2-1", "v2-2"} {
		wantFinal[p+"@"+ip[p]+":8080"] = "ready=true"
	}
	c.waitFor(t, 2*time.Minute, "the final state", func(evs []event.Event) bool {
		for _, p := range []string{"v1-0", "v1-1", "v1-2"} {
			if first(ofPod(evs, p), event.EndpointRemoved) == nil {
				return false
			}
		}
		return count(evs, event.EndpointAdded) >= 3 && first(ofPod(evs, "v2-2"), event.EndpointAdded) != nil
	})
	time.Sleep(time.Second) // let anything doubled arrive
	// The relists also record the state they found (FlagObserved): that
	// says what was, not what changed, and is left out of the sequences.
	var evs []event.Event
	for _, e := range c.snapshot() {
		if !e.Flags.Has(event.FlagObserved) {
			evs = append(evs, e)
		}
	}
	t.Logf("recorded:\n%s", describeRel(evs))

	final := checkEndpointSequences(t, evs)
	if fmt.Sprint(final) != fmt.Sprint(wantFinal) {
		t.Errorf("endpoints at the end: %v, want %v", final, wantFinal)
	}
	for _, p := range []string{"v1-0", "v1-1", "v1-2", "v2-0", "v2-1", "v2-2"} {
		mine := ofPod(evs, p)
		once := []event.Kind{event.EndpointAdded}
		if strings.HasPrefix(p, "v1") {
			once = []event.Kind{event.PodDeletion, event.EndpointTerminating, event.EndpointNotReady, event.EndpointRemoved}
		} else {
			once = append(once, event.PodCreated)
		}
		for _, k := range once {
			if n := count(mine, k); n != 1 {
				t.Errorf("%s: %s recorded %d times, want once", p, k, n)
			}
		}
		if n := count(mine, event.ContainerTerminated); n > 1 {
			t.Errorf("%s: container_terminated recorded %d times", p, n)
		}
	}
	// v1-0 and v1-2 went while the watcher watched: every transition
	// was seen live, none relisted.
	for _, p := range []string{"v1-0", "v1-2", "v2-2"} {
		for _, e := range ofPod(evs, p) {
			if e.Flags.Has(event.FlagRelist) {
				t.Errorf("%s: %s flagged relist though it happened while watching", p, e.Kind)
			}
		}
	}
	st := w.Stats()
	t.Logf("stats: %+v", st)
	if st.Rewatches == 0 {
		t.Error("no reconnected watch counted")
	}
	// Step 1's changes happened while cut off. After the restart the API
	// server's watch cache no longer reaches back to the watcher's
	// resource version, so the watcher relisted and recovered them.
	if st.Relists == 0 || st.RelistEvent == 0 {
		t.Errorf("no relist recovered step 1 (relists %d, relisted events %d)", st.Relists, st.RelistEvent)
	}
	for _, c := range []struct {
		pod  string
		kind event.Kind
	}{{"v2-1", event.PodCreated}, {"v2-1", event.EndpointAdded}, {"v1-1", event.PodDeletion}, {"v1-1", event.EndpointTerminating}} {
		if e := first(ofPod(evs, c.pod), c.kind); e != nil && !e.Flags.Has(event.FlagRelist) {
			t.Errorf("%s: %s happened while the watcher was cut off, but is not flagged relist", c.pod, c.kind)
		}
	}
	if e := first(ofPod(evs, "v1-1"), event.EndpointRemoved); e != nil && e.Flags.Has(event.FlagRelist) {
		t.Error("v1-1: endpoint_removed happened while watching, but is flagged relist")
	}
}

func TestIntegrationDeploymentWorkload(t *testing.T) {
	cp := controlPlane(t)
	ns := "workload"
	setup(t, cp, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Cluster-wide pods: the Deployment's pod is never bound to a node.
	w, c := startWatcherWith(t, cp.Config(), Options{Node: "node-a", Namespace: ns})
	labels := map[string]string{"app": "shop"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "drainscope.invalid/shop:1"}}},
			},
		},
	}
	if _, err := cp.Client().AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	evs := c.waitFor(t, time.Minute, "the Deployment's pod", hasKinds(event.PodCreated))
	e := first(evs, event.PodCreated)
	if e.Workload != (event.Workload{Kind: "Deployment", Name: "shop"}) {
		t.Errorf("pod %s: workload %v, want Deployment/shop", e.Pod, e.Workload)
	}
	if _, wl, ok := w.Pods().PodByUID(e.Pod.UID); !ok || wl.Name != "shop" {
		t.Errorf("PodByUID(%s) = %v, %v", e.Pod.UID, wl, ok)
	}

	// The Deployment's own changes are the triggers of its pods' ends: a
	// new template, a change of replicas, its deletion; beside them what a
	// user did to its rollout (pause, resume, undo) and the rollouts'
	// ends. The controllers' status updates in between are none of these.
	deps := cp.Client().AppsV1().Deployments(ns)
	changes := func(evs []event.Event) []event.Event { return ofKind(evs, event.WorkloadChanged, nil) }
	waitChanges := func(n int, what string) []event.Event { t.Helper(); return c.waitKind(t, n, what, changes) }
	waitChanges(1, "the Deployment's creation")
	patch := func(body string) {
		t.Helper()
		if _, err := deps.Patch(ctx, "shop", types.StrategicMergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The kubelet's part for the Deployment's pods: each one running and
	// ready, until the rollout is done (the ReplicaSet controller then
	// counts them available, the Deployment controller moves on).
	rollOut := func(n int, what string) {
		t.Helper()
		completes := func(evs []event.Event) bool {
			return len(ofKind(evs, event.WorkloadChanged, func(e *event.Event) bool { return e.Reason == event.ChangeComplete })) >= n
		}
		deadline := time.Now().Add(time.Minute)
		for !completes(c.snapshot()) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s:\n%s", what, describe(changes(c.snapshot())))
			}
			readyPods(t, ctx, cp.Client(), ns, "app=shop")
			time.Sleep(100 * time.Millisecond)
		}
	}
	rollOut(1, "the first rollout's end")
	patch(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"drainscope.invalid/shop:2"}]}}}}`)
	waitChanges(3, "the template change")
	patch(`{"spec":{"paused":true}}`)
	waitChanges(4, "the pause")
	patch(`{"spec":{"paused":false}}`)
	waitChanges(5, "the resume")
	rollOut(2, "the second rollout's end")
	undo(t, ctx, cp.Client(), ns, "shop", "1")
	waitChanges(7, "the rollback")
	rollOut(3, "the rollback's end")
	patch(`{"spec":{"replicas":3}}`)
	waitChanges(9, "the change of replicas")
	if err := deps.Delete(ctx, "shop", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitChanges(10, "the deletion")
	// Let the controllers' status updates arrive: they must add nothing.
	time.Sleep(500 * time.Millisecond)
	got := changes(c.snapshot())
	want := []struct {
		reason, from, to string
		rollback         bool
		since            int // the index of the change whose time rollout_since holds, -1 for none
	}{
		{event.ChangeCreated, "", "1", false, -1},
		{event.ChangeComplete, "", "", false, -1}, // the creation's pods: no template change began them
		{event.ChangeTemplate, "", "", false, 2},
		{event.ChangePaused, "", "", false, 2},
		{event.ChangeResumed, "", "", false, 2},
		{event.ChangeComplete, "", "", false, 2},
		{event.ChangeTemplate, "", "", true, 6}, // kubectl rollout undo
		{event.ChangeComplete, "", "", false, 6},
		{event.ChangeScale, "1", "3", false, -1},  // the new pods never become ready: still scaling when deleted
		{event.ChangeDeleted, "3", "", false, -1}, // and a scale begins no rollout
	}
	if len(got) != len(want) {
		t.Fatalf("%d workload changes, want %d:\n%s", len(got), len(want), describe(got))
	}
	for i, e := range got {
		w := want[i]
		if e.Reason != w.reason || e.Attrs[event.AttrReplicasFrom] != w.from || e.Attrs[event.AttrReplicasTo] != w.to ||
			e.Workload != (event.Workload{Kind: "Deployment", Name: "shop"}) || e.Pod.Namespace != ns || e.Node != "node-a" {
			t.Errorf("change %d: %s %s/%v from %q to %q on %s; want %s from %q to %q", i, e.Reason, e.Pod.Namespace, e.Workload,
				e.Attrs[event.AttrReplicasFrom], e.Attrs[event.AttrReplicasTo], e.Node, w.reason, w.from, w.to)
		}
		if rb := e.Attrs[event.AttrRollback] == "true"; rb != w.rollback {
			t.Errorf("change %d (%s): rollback %q, want %v", i, e.Reason, e.Attrs[event.AttrRollback], w.rollback)
		}
		since := ""
		if w.since >= 0 {
			since = strconv.FormatInt(got[w.since].Time, 10)
		}
		if s := e.Attrs[event.AttrRolloutSince]; s != since {
			t.Errorf("change %d (%s): rollout_since %q, want %q", i, e.Reason, s, since)
		}
		if i > 0 && e.Time <= got[i-1].Time {
			t.Errorf("change %d at %d, not after %d", i, e.Time, got[i-1].Time)
		}
	}
	for i, g := range map[int]string{2: "2", 3: "3", 4: "4", 6: "5"} {
		if e := got[i]; e.Attrs[event.AttrGeneration] != g {
			t.Errorf("change %d (%s): generation %q, want %s", i, e.Reason, e.Attrs[event.AttrGeneration], g)
		}
	}
	// An Event about the workload must name its UID, or kubectl describe
	// does not show it; the deletion still knows the UID it had.
	for i, e := range got {
		if uid := e.Attrs[event.AttrWorkloadUID]; uid == "" || uid != got[0].Attrs[event.AttrWorkloadUID] {
			t.Errorf("change %d (%s): workload uid %q, want the Deployment's, the same in every change", i, e.Reason, uid)
		}
	}
}

// readyPods plays the kubelet for the pods the selector picks: each one
// not being deleted and not yet ready is reported running and ready.
func readyPods(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, selector string) {
	t.Helper()
	l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatalf("listing pods %s: %v", selector, err)
	}
	for i := range l.Items {
		p := &l.Items[i]
		if ready, _ := podReady(p); ready || p.DeletionTimestamp != nil {
			continue
		}
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
		// A conflict (the controller wrote meanwhile) or a pod gone is
		// taken up at the next round.
		if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Logf("setting pod %s ready: %v", p.Name, err)
		}
	}
}

// undo does what kubectl rollout undo --to-revision does: it puts the
// template of the revision's ReplicaSet, less the pod-template-hash label
// the controller added, back into the Deployment, with the ReplicaSet's
// annotations (k8s.io/kubectl's DeploymentRollbacker).
func undo(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, name, revision string) {
	t.Helper()
	const revAnn = "deployment.kubernetes.io/revision"
	d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var rs *appsv1.ReplicaSet
	for i := range l.Items {
		if o := metav1.GetControllerOf(&l.Items[i]); o != nil && o.UID == d.UID && l.Items[i].Annotations[revAnn] == revision {
			rs = &l.Items[i]
		}
	}
	if rs == nil {
		t.Fatalf("no ReplicaSet of %s at revision %s", name, revision)
	}
	tmpl := rs.Spec.Template.DeepCopy()
	delete(tmpl.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	ann := map[string]string{}
	skip := map[string]bool{corev1.LastAppliedConfigAnnotation: true, revAnn: true,
		"deployment.kubernetes.io/revision-history": true, "deployment.kubernetes.io/desired-replicas": true,
		"deployment.kubernetes.io/max-replicas": true, appsv1.DeprecatedRollbackTo: true}
	for k := range skip {
		if v, ok := d.Annotations[k]; ok {
			ann[k] = v
		}
	}
	for k, v := range rs.Annotations {
		if !skip[k] {
			ann[k] = v
		}
	}
	body, err := json.Marshal([]any{
		map[string]any{"op": "replace", "path": "/spec/template", "value": tmpl},
		map[string]any{"op": "replace", "path": "/metadata/annotations", "value": ann},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AppsV1().Deployments(ns).Patch(ctx, name, types.JSONPatchType, body, metav1.PatchOptions{}); err != nil {
		t.Fatalf("rolling %s back to revision %s: %v", name, revision, err)
	}
}

func TestIntegrationLeaderElection(t *testing.T) {
	cp := controlPlane(t)
	ns := "leader"
	k := setup(t, cp, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lease := LeaseOptions{Namespace: ns, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}
	wa, ca, stopA := startWatcherStop(t, cp.Config(), Options{Node: "node-a", Namespace: ns, NoPods: true, Mode: Leader, Lease: lease})
	defer stopA()
	wb, cb, stopB := startWatcherStop(t, cp.Config(), Options{Node: "node-b", Namespace: ns, NoPods: true, Mode: Leader, Lease: lease})
	defer stopB()
	waitLeader := func(want ...*Watcher) *Watcher {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			for _, w := range want {
				if w.Stats().Leader {
					return w
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatal("no leader elected")
		return nil
	}
	leader := waitLeader(wa, wb)
	lc, fc, stopLeader, follower := ca, cb, stopA, wb
	if leader == wb {
		lc, fc, stopLeader, follower = cb, ca, stopB, wa
	}

	k.start(ctx, "web-0", "web", "10.244.0.50")
	lc.waitFor(t, 30*time.Second, "the leader to record web-0", hasKinds(event.EndpointAdded))
	time.Sleep(300 * time.Millisecond)
	// The follower records nothing of the cluster-wide watches; its own
	// node's versions (node_info) are its to record in either mode.
	if evs := fc.snapshot(); len(evs) != count(evs, event.NodeInfo) {
		t.Errorf("the follower recorded %d events:\n%s", len(evs)-count(evs, event.NodeInfo), describe(evs))
	}

	// The leader goes away and releases the Lease; the follower takes
	// over and records what follows.
	stopLeader()
	waitLeader(follower)
	k.start(ctx, "web-1", "web", "10.244.0.51")
	evs := fc.waitFor(t, 30*time.Second, "the new leader to record web-1", func(evs []event.Event) bool {
		return first(ofPod(evs, "web-1"), event.EndpointAdded) != nil
	})
	if n := count(ofPod(evs, "web-0"), event.EndpointAdded); n != 0 {
		t.Errorf("the new leader recorded web-0's addition, which the old leader had recorded before releasing the Lease")
	}
	if n := count(ofPod(lc.snapshot(), "web-1"), event.EndpointAdded); n != 0 {
		t.Errorf("the stopped leader recorded web-1")
	}
}

// TestIntegrationFarStandby: a far standby (LeaseOptions.Standby) reads
// the Lease once a period while a candidate holds it, not every
// RetryPeriod, and takes over within a period once the candidate is gone,
// recording what follows.
func TestIntegrationFarStandby(t *testing.T) {
	cp := controlPlane(t)
	ns := "farstandby"
	k := setup(t, cp, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lease := LeaseOptions{Namespace: ns, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}
	// Each watcher's requests for the Lease, counted at its transport.
	counted := func(n *atomic.Int64) *rest.Config {
		cfg := rest.CopyConfig(cp.Config())
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if strings.Contains(r.URL.Path, "/leases/") {
					n.Add(1)
				}
				return rt.RoundTrip(r)
			})
		}
		return cfg
	}
	var candReads, farReads atomic.Int64
	wa, ca, stopA := startWatcherStop(t, counted(&candReads), Options{Node: "node-a", Namespace: ns, NoPods: true, Mode: Leader, Lease: lease})
	defer stopA()
	waitLeading(t, wa, 30*time.Second, "the candidate did not take the lease")

	far := lease
	far.Standby = time.Second
	wc, cc, stopC := startWatcherStop(t, counted(&farReads), Options{Node: "node-c", Namespace: ns, NoPods: true, Mode: Leader, Lease: far})
	defer stopC()
	const watch = 6 * time.Second
	cand0 := candReads.Load()
	time.Sleep(watch)
	// The holder renews every RetryPeriod (200 ms: about 30 reads and 30
	// updates in 6 s, as each candidate read); a far standby reads once a
	// second, give or take the jitter.
	n, c := farReads.Load(), candReads.Load()-cand0
	t.Logf("requests for the lease in %v: the far standby %d, the candidate holding it %d", watch, n, c)
	if n < 3 || n > 9 {
		t.Errorf("the far standby read the lease %d times in %v while the candidate held it, want about one a second", n, watch)
	}
	if wc.Stats().Leader {
		t.Fatal("the far standby leads while the candidate holds the lease")
	}

	stopA() // releases the lease
	waitLeading(t, wc, 2*far.Standby+lease.LeaseDuration+10*time.Second, "the far standby did not take over once the candidate was gone")
	k.start(ctx, "web-1", "web", "10.244.0.61")
	cc.waitFor(t, 30*time.Second, "the far standby, now leading, to record web-1", func(evs []event.Event) bool {
		return first(ofPod(evs, "web-1"), event.EndpointAdded) != nil
	})
	if n := count(ofPod(ca.snapshot(), "web-1"), event.EndpointAdded); n != 0 {
		t.Errorf("the stopped candidate recorded web-1")
	}
}

// TestIntegrationFarStandbyDeadHolder: a holder that died without
// releasing the Lease (a node gone) leaves a lease that is never renewed;
// a far standby takes it once it has stayed unrenewed for its duration by
// the standby's own clock, though the election first reports the dead
// holder as the leader.
func TestIntegrationFarStandbyDeadHolder(t *testing.T) {
	cp := controlPlane(t)
	ns := "deadholder"
	setup(t, cp, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lease := LeaseOptions{Namespace: ns, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second,
		RetryPeriod: 200 * time.Millisecond, Standby: time.Second}
	now := metav1.NewMicroTime(time.Now())
	_, err := cp.Client().CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "drainscope-endpointslices", Namespace: ns},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-gone"), LeaseDurationSeconds: ptr.To[int32](3),
			AcquireTime: &now, RenewTime: &now},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wc, _, stopC := startWatcherStop(t, cp.Config(), Options{Node: "node-c", Namespace: ns, NoPods: true, Mode: Leader, Lease: lease})
	defer stopC()
	waitLeading(t, wc, 45*time.Second, "the far standby did not take the lease its dead holder stopped renewing")
}

// waitLeading waits for w to hold the Lease, failing with why after within.
func waitLeading(t *testing.T, w *Watcher, within time.Duration, why string) {
	t.Helper()
	for deadline := time.Now().Add(within); !w.Stats().Leader; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(why)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestIntegrationServices: the Services there when the watch starts are
// recorded as observed, and a Service's creation, change of ports and
// deletion as they happen, each with its ClusterIPs and ports.
func TestIntegrationServices(t *testing.T) {
	cp := controlPlane(t)
	ns := "services"
	setup(t, cp, ns) // creates Service web before the watch starts
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, c := startWatcherWith(t, cp.Config(), Options{Node: "node-a", Namespace: ns})
	svcEvents := func(evs []event.Event) []event.Event { return ofKind(evs, event.ServiceChanged, nil) }
	wait := func(n int, what string) []event.Event { t.Helper(); return c.waitKind(t, n, what, svcEvents) }
	wait(1, "Service web as observed")
	svcs := cp.Client().CoreV1().Services(ns)
	api := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "api"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	created, err := svcs.Create(ctx, api, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wait(2, "Service api created")
	created.Spec.Ports = append(created.Spec.Ports, corev1.ServicePort{Name: "metrics", Port: 9090, TargetPort: intstr.FromInt32(9090)})
	if _, err := svcs.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait(3, "Service api updated")
	if err := svcs.Delete(ctx, "api", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got := wait(4, "Service api deleted")
	want := []struct{ name, reason, ports string }{
		{"web", event.ChangeObserved, "80/TCP"},
		{"api", event.ChangeCreated, "80/TCP"},
		{"api", event.ChangeUpdated, "80/TCP,9090/TCP"},
		{"api", event.ChangeDeleted, "80/TCP,9090/TCP"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d Service events, want %d:\n%s", len(got), len(want), describe(got))
	}
	for i, e := range got {
		w := want[i]
		ips := e.Attrs[event.AttrClusterIPs]
		if e.Service != w.name || e.Reason != w.reason || e.Attrs[event.AttrServicePorts] != w.ports || e.Pod.Namespace != ns || ips == "" {
			t.Errorf("event %d: %s %s/%s ports %q ips %q; want %s %s ports %q with its ClusterIP", i, e.Reason, e.Pod.Namespace, e.Service,
				e.Attrs[event.AttrServicePorts], ips, w.reason, w.name, w.ports)
		}
	}
	if got[1].Attrs[event.AttrClusterIPs] != strings.Join(created.Spec.ClusterIPs, ",") {
		t.Errorf("api's ClusterIPs %q, the API says %v", got[1].Attrs[event.AttrClusterIPs], created.Spec.ClusterIPs)
	}
}

// TestIntegrationEviction: a pod evicted through the Eviction API (what a
// node drain does) carries the reason the API server set in its
// DisruptionTarget condition on its pod_deletion; a plain deletion carries
// none.
func TestIntegrationEviction(t *testing.T) {
	cp := controlPlane(t)
	ns := "eviction"
	k := setup(t, cp, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, c := startWatcher(t, cp.Config(), ns)
	k.start(ctx, "evicted", "web", "10.244.0.31")
	k.start(ctx, "deleted", "web", "10.244.0.32")
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "evicted", Namespace: ns}}
	if err := cp.Client().CoreV1().Pods(ns).EvictV1(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client().CoreV1().Pods(ns).Delete(ctx, "deleted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	evs := c.waitFor(t, time.Minute, "both deletions", func(evs []event.Event) bool {
		return first(ofPod(evs, "evicted"), event.PodDeletion) != nil && first(ofPod(evs, "deleted"), event.PodDeletion) != nil
	})
	if r := first(ofPod(evs, "evicted"), event.PodDeletion).Attrs[event.AttrDisruption]; r != "EvictionByEvictionAPI" {
		t.Errorf("evicted pod's deletion: disruption %q, want EvictionByEvictionAPI", r)
	}
	if r, ok := first(ofPod(evs, "deleted"), event.PodDeletion).Attrs[event.AttrDisruption]; ok {
		t.Errorf("deleted pod's deletion: disruption %q, want none", r)
	}
}

// TestIntegrationNodePressureEviction: the kubelet's node-pressure
// eviction leaves the pod object in place, failed, with no deletion: the
// watcher records its end from the status the kubelet writes
// (k8s.io/kubernetes pkg/kubelet/eviction), as the API serves it back.
func TestIntegrationNodePressureEviction(t *testing.T) {
	cp := controlPlane(t)
	ns := "pressure"
	k := setup(t, cp, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, c := startWatcher(t, cp.Config(), ns)
	p := k.start(ctx, "hungry", "web", "10.244.0.41")
	const msg = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 82Mi. Container app was using 900Mi, request is 0, has larger consumption of memory. "
	now := metav1.Now()
	for i := range p.Status.Conditions {
		if cd := &p.Status.Conditions[i]; cd.Type == corev1.PodReady || cd.Type == corev1.ContainersReady {
			cd.Status, cd.LastTransitionTime = corev1.ConditionFalse, now
		}
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: corev1.PodReasonTerminationByKubelet, Message: msg, LastTransitionTime: now})
	p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Evicted", msg
	cs := &p.Status.ContainerStatuses[0]
	cs.Ready, cs.Started = false, ptr.To(false)
	cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error",
		StartedAt: cs.State.Running.StartedAt, FinishedAt: now, ContainerID: cs.ContainerID}}
	if _, err := cp.Client().CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	evs := ofPod(c.waitFor(t, time.Minute, "the pod's end", func(evs []event.Event) bool {
		return first(ofPod(evs, "hungry"), event.ContainerTerminated) != nil
	}), "hungry")
	e := first(evs, event.PodFinished)
	if e == nil {
		t.Fatalf("no pod_finished:\n%s", describe(evs))
	}
	if e.Reason != "Evicted" || e.Attrs[event.AttrPhase] != "Failed" || e.Attrs[event.AttrMessage] != msg ||
		e.Attrs[event.AttrDisruption] != corev1.PodReasonTerminationByKubelet || e.Flags != 0 {
		t.Errorf("pod_finished: reason %q attrs %v flags %b", e.Reason, e.Attrs, e.Flags)
	}
	if n := count(evs, event.PodFinished); n != 1 {
		t.Errorf("%d pod_finished, want 1", n)
	}
	if d := first(evs, event.PodDeletion); d != nil {
		t.Errorf("pod_deletion recorded, yet nothing deleted the pod")
	}
}

// TestIntegrationSidecar: a native sidecar (an init container restarted
// Always) is read from the API's initContainerStatuses as the app's
// container is from containerStatuses: its start, its role, its ports,
// and its container ID resolves to the pod.
func TestIntegrationSidecar(t *testing.T) {
	cp := controlPlane(t)
	ns := "sidecar"
	k := setup(t, cp, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, c := startWatcher(t, cp.Config(), ns)
	spec := k.podSpec("meshed", "web", "10.244.0.51")
	spec.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: "drainscope.invalid/proxy:1",
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Ports:         []corev1.ContainerPort{{ContainerPort: 15001}, {ContainerPort: 15090, Protocol: corev1.ProtocolTCP}}}}
	p, err := cp.Client().CoreV1().Pods(ns).Create(ctx, spec, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	running := func(name string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Image: "drainscope.invalid/" + name + ":1", ImageID: "drainscope.invalid/" + name + "@sha256:0",
			ContainerID: "containerd://" + string(p.UID)[:8] + "-" + name, Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "10.244.0.1", PodIP: "10.244.0.51",
		PodIPs: []corev1.PodIP{{IP: "10.244.0.51"}}, StartTime: &now,
		InitContainerStatuses: []corev1.ContainerStatus{running("proxy")},
		ContainerStatuses:     []corev1.ContainerStatus{running("app")}}
	if _, err := cp.Client().CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	evs := c.waitKind(t, 2, "both containers' starts", func(evs []event.Event) []event.Event {
		return ofKind(ofPod(evs, "meshed"), event.ContainerStarted, func(e *event.Event) bool { return !e.Flags.Has(event.FlagObserved) })
	})
	got := map[string][2]string{}
	for _, e := range evs {
		got[e.Pod.Container] = [2]string{e.Attrs[event.AttrContainerRole], e.Attrs[event.AttrContainerPorts]}
	}
	want := map[string][2]string{"proxy": {event.ContainerRoleSidecar, "15001/TCP,15090/TCP"}, "app": {event.ContainerRoleApp, "8080/TCP"}}
	if !maps.Equal(got, want) {
		t.Errorf("containers started (role, ports): %v, want %v", got, want)
	}
	if ref, _, ok := w.Pods().PodByContainerID(string(p.UID)[:8] + "-proxy"); !ok || ref.Name != "meshed" || ref.Container != "proxy" {
		t.Errorf("the sidecar's container ID resolves to %v, %v", ref, ok)
	}
}

// TestIntegrationStatefulSetWorkload: a StatefulSet's template change,
// scale and deletion are recorded as a Deployment's are.
func TestIntegrationStatefulSetWorkload(t *testing.T) {
	cp := controlPlane(t)
	ns := "statefulset"
	setup(t, cp, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, c := startWatcherWith(t, cp.Config(), Options{Node: "node-a", Namespace: ns})
	labels := map[string]string{"app": "db"}
	set := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(int32(2)), ServiceName: "web",
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "drainscope.invalid/db:1"}}},
			},
		},
	}
	sets := cp.Client().AppsV1().StatefulSets(ns)
	if _, err := sets.Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	changes := func(evs []event.Event) []event.Event {
		return ofKind(evs, event.WorkloadChanged, func(e *event.Event) bool { return e.Workload.Kind == "StatefulSet" })
	}
	wait := func(n int, what string) { t.Helper(); c.waitKind(t, n, what, changes) }
	wait(1, "the StatefulSet's creation")
	if _, err := sets.Patch(ctx, "db", types.StrategicMergePatchType,
		[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"db","image":"drainscope.invalid/db:2"}]}}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	wait(2, "the template change")
	if _, err := sets.Patch(ctx, "db", types.StrategicMergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	wait(3, "the scale-down")
	if err := sets.Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait(4, "the deletion")
	got := changes(c.snapshot())
	want := []string{event.ChangeCreated, event.ChangeTemplate, event.ChangeScale, event.ChangeDeleted}
	if len(got) != len(want) {
		t.Fatalf("%d StatefulSet changes, want %d:\n%s", len(got), len(want), describe(got))
	}
	for i, e := range got {
		if e.Reason != want[i] || e.Workload.Name != "db" {
			t.Errorf("change %d: %s of %v, want %s of StatefulSet/db", i, e.Reason, e.Workload, want[i])
		}
	}
	if f, to := got[2].Attrs[event.AttrReplicasFrom], got[2].Attrs[event.AttrReplicasTo]; f != "2" || to != "1" {
		t.Errorf("scale-down from %q to %q, want 2 to 1", f, to)
	}
}

// kubeletEventOf is the Event the kubelet's recorder writes about pod p
// (core/v1, named as the recorder names it): about its container when
// container is not "", else the pod itself.
func kubeletEventOf(p *corev1.Pod, reason, container, message string, at time.Time) *corev1.Event {
	ts := metav1.NewTime(at.Truncate(time.Second))
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", p.Name, at.UnixNano()), Namespace: p.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name,
			UID: p.UID, ResourceVersion: p.ResourceVersion},
		Reason: reason, Message: message, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "kubelet", Host: p.Spec.NodeName},
		FirstTimestamp: ts, LastTimestamp: ts, Count: 1,
	}
	if container != "" {
		ev.InvolvedObject.FieldPath = "spec.containers{" + container + "}"
	}
	return ev
}

// TestIntegrationKubeletEvents: the kubelet's FailedPreStopHook Event about
// a pod of the agent's node, created as the kubelet's recorder creates it
// and then updated as it counts a repeat, is recorded twice (count 1, then
// 2) with the pod's UID and the container its fieldPath names; an update
// that counts nothing is not recorded, and neither is the same Event about
// a pod on another node, which that node's agent records. The pod's
// container_started carries the hook its spec gives it, as the API serves
// the spec back.
func TestIntegrationKubeletEvents(t *testing.T) {
	cp := controlPlane(t)
	ns := "kubelet-events"
	k := setup(t, cp, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cp.RegisterNode(ctx, controlplane.NodeOptions{Name: "node-b", InternalIP: "10.244.1.1", PodCIDR: "10.244.1.0/24"}); err != nil {
		t.Fatal(err)
	}
	_, c := startWatcher(t, cp.Config(), ns)
	k.edit = func(p *corev1.Pod) {
		p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", "sleep 5"}}}}
	}
	p := k.start(ctx, "stopping", "web", "10.244.0.61")
	other := (&kubelet{t: t, cs: cp.Client(), ns: ns, node: "node-b"}).start(ctx, "elsewhere", "api", "10.244.1.61")
	// The kubelet writes of a pod it runs: the watcher knows the pod first.
	started := c.waitFor(t, time.Minute, "the pod's start", func(evs []event.Event) bool {
		return first(ofPod(evs, "stopping"), event.ContainerStarted) != nil
	})
	stop := map[string]string{}
	for key, v := range first(ofPod(started, "stopping"), event.ContainerStarted).Attrs {
		if key == event.AttrPreStop || key == event.AttrPreStopSleep || key == event.AttrGracePeriod {
			stop[key] = v
		}
	}
	if want := map[string]string{event.AttrPreStop: event.PreStopExec, event.AttrPreStopSleep: "5", event.AttrGracePeriod: "30"}; !maps.Equal(stop, want) {
		t.Errorf("container_started: the spec's stop %v, want %v", stop, want)
	}

	evs := cp.Client().CoreV1().Events(ns)
	at := time.Now()
	ev, err := evs.Create(ctx, kubeletEventOf(p, event.KubeletFailedPreStopHook, "app", "PreStopHook failed", at), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := evs.Create(ctx, kubeletEventOf(other, event.KubeletFailedPreStopHook, "app", "PreStopHook failed", at), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev.Labels = map[string]string{"drainscope.test/touched": "true"}
	if ev, err = evs.Update(ctx, ev, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev.Count, ev.LastTimestamp = 2, metav1.NewTime(at.Truncate(time.Second).Add(2*time.Second))
	if _, err := evs.Update(ctx, ev, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeletEvents := func(evs []event.Event) []event.Event { return ofKind(evs, event.KubeletEvent, nil) }
	c.waitKind(t, 2, "the Event and its repeat", kubeletEvents)
	// One watch, in order: the other node's Event, created before the
	// repeat, was seen before it; give a stray record a moment anyway.
	time.Sleep(200 * time.Millisecond)
	got := kubeletEvents(c.snapshot())
	if len(got) != 2 {
		t.Fatalf("%d kubelet_event, want 2:\n%s", len(got), describe(got))
	}
	for i, e := range got {
		last := at.Truncate(time.Second).Add(time.Duration(2*i) * time.Second).UTC().Format(time.RFC3339Nano)
		want := event.PodRef{Namespace: ns, Name: "stopping", UID: string(p.UID), Container: "app"}
		if e.Pod != want || e.Reason != event.KubeletFailedPreStopHook || e.Node != "node-a" || e.Flags != 0 ||
			e.Attrs[event.AttrCount] != strconv.Itoa(i+1) || e.Attrs[event.AttrMessage] != "PreStopHook failed" ||
			e.Attrs[event.AttrLastTimestamp] != last {
			t.Errorf("kubelet_event %d: %s %v on %s flags %b attrs %v; want %s %v count %d last_timestamp %s",
				i, e.Reason, e.Pod, e.Node, e.Flags, e.Attrs, event.KubeletFailedPreStopHook, want, i+1, last)
		}
	}
}

// TestIntegrationKubeletEventsAtList: an Event the kubelet wrote before
// the watch began (a pod's failed kill, about the pod itself) is recorded
// from the list, flagged observed.
func TestIntegrationKubeletEventsAtList(t *testing.T) {
	cp := controlPlane(t)
	ns := "kubelet-events-list"
	k := setup(t, cp, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := k.start(ctx, "stuck", "web", "10.244.0.71")
	const msg = "error killing pod: failed to \"KillContainer\" for \"app\" with KillContainerError: \"rpc error: code = DeadlineExceeded\""
	if _, err := cp.Client().CoreV1().Events(ns).Create(ctx, kubeletEventOf(p, event.KubeletFailedKillPod, "", msg, time.Now()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, c := startWatcher(t, cp.Config(), ns)
	got := c.waitKind(t, 1, "the listed Event", func(evs []event.Event) []event.Event { return ofKind(evs, event.KubeletEvent, nil) })
	e := got[0]
	if want := (event.PodRef{Namespace: ns, Name: "stuck", UID: string(p.UID)}); e.Pod != want || e.Reason != event.KubeletFailedKillPod ||
		e.Flags != event.FlagObserved || e.Attrs[event.AttrMessage] != msg || e.Attrs[event.AttrCount] != "1" {
		t.Errorf("listed kubelet_event: %s %v flags %b attrs %v", e.Reason, e.Pod, e.Flags, e.Attrs)
	}
}

// TestIntegrationNodeInfo: node_info carries the API server's version, as
// its /version says, and the agent's Node's versions from its
// status.nodeInfo.
func TestIntegrationNodeInfo(t *testing.T) {
	cp := controlPlane(t)
	ns := "node-info"
	setup(t, cp, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodes := cp.Client().CoreV1().Nodes()
	n, err := nodes.Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.NodeInfo.KubeletVersion, n.Status.NodeInfo.ContainerRuntimeVersion = "v1.37.2", "containerd://2.1.4"
	if _, err := nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := cp.Client().Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	_, c := startWatcher(t, cp.Config(), ns)
	e := c.waitKind(t, 1, "node_info", func(evs []event.Event) []event.Event { return ofKind(evs, event.NodeInfo, nil) })[0]
	want := map[string]string{event.AttrAPIServerVersion: v.GitVersion, event.AttrKubeletVersion: "v1.37.2",
		event.AttrContainerRuntime: "containerd://2.1.4"}
	if !maps.Equal(e.Attrs, want) || e.Node != "node-a" || e.Reason != event.ChangeObserved || e.Flags != event.FlagObserved {
		t.Errorf("node_info on %s, %s, flags %b, attrs %v; want attrs %v", e.Node, e.Reason, e.Flags, e.Attrs, want)
	}
	if v.GitVersion == "" {
		t.Error("the API server gave no version")
	}
}
