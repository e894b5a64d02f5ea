package agent_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/drainscope/drainscope/agent"
	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/pgtest"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/metrics"
	"github.com/drainscope/drainscope/store"
)

func TestFindPodCgroupRoots(t *testing.T) {
	for _, tc := range []struct {
		name string
		dirs []string
		want []string
	}{
		{"systemd driver", []string{"kubepods.slice/kubepods-burstable.slice", "system.slice"}, []string{"kubepods.slice"}},
		{"cgroupfs driver", []string{"kubepods/burstable/podabc", "user.slice"}, []string{"kubepods"}},
		{"kind, kubelet in its own slice", []string{"kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice"}, []string{"kubelet.slice/kubelet-kubepods.slice"}},
		{"nested cgroupfs", []string{"system/kubelet/kubepods/pod1", "system/other"}, []string{"system/kubelet/kubepods"}},
		{"v1 controller mount", []string{"kubepods/besteffort"}, []string{"kubepods"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, d := range tc.dirs {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			got, err := agent.FindPodCgroupRoots(root)
			if err != nil {
				t.Fatal(err)
			}
			var rel []string
			for _, g := range got {
				r, _ := filepath.Rel(root, g)
				rel = append(rel, r)
			}
			if strings.Join(rel, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("roots %v, want %v", rel, tc.want)
			}
		})
	}
	if _, err := agent.FindPodCgroupRoots(t.TempDir()); err == nil || !strings.Contains(err.Error(), "--cgroup-root") {
		t.Fatalf("no kubepods: err %v, want one naming --cgroup-root", err)
	}
}

// startControlPlane runs etcd, kube-apiserver and kube-controller-manager
// and registers a node, as a cluster the agent would run in.
func startControlPlane(t *testing.T, node string) *controlplane.ControlPlane {
	t.Helper()
	if _, err := controlplane.CheckBinaries("", "etcd", "kube-apiserver", "kube-controller-manager"); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{
		Logger:      testLogger(t),
		Controllers: []string{"deployment", "replicaset", "endpointslice", "serviceaccount", "serviceaccount-token", "garbagecollector"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	if _, err := cp.RegisterNode(ctx, controlplane.NodeOptions{Name: node, InternalIP: "10.244.0.1", PodCIDR: "10.244.0.0/24"}); err != nil {
		t.Fatal(err)
	}
	return cp
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func webDeployment(replicas int32) (*appsv1.Deployment, *corev1.Service) {
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{
					MaxSurge: ptr(intstr.FromInt32(1)), MaxUnavailable: ptr(intstr.FromInt32(0)),
				},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				// A grace period of 1 s: the fake kubelet's "SIGKILL" (exit
				// code 137) comes when it has run out.
				Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr(int64(1)), Containers: []corev1.Container{{
					Name: "app", Image: "web:1", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				}}},
			},
		},
	}
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")}}},
	}
	return d, s
}

// rollout changes the pod template and waits until every replica is a new
// pod and the old ones are gone.
func rollout(t *testing.T, cp *controlplane.ControlPlane, ns string, gen string, replicas int) {
	t.Helper()
	ctx := context.Background()
	patch := `{"spec":{"template":{"metadata":{"annotations":{"rollout":"` + gen + `"}}}}}`
	if _, err := cp.Client().AppsV1().Deployments(ns).Patch(ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "the rollout to "+gen, func() bool {
		d, err := cp.Client().AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil || d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != int32(replicas) ||
			d.Status.ReadyReplicas != int32(replicas) || d.Status.Replicas != int32(replicas) {
			return false
		}
		pods, err := cp.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == replicas
	})
}

// observed reads drainscope_events_observed_total of the watcher's events
// of kind k from a scrape.
func observed(body string, k event.Kind) int {
	prefix := `drainscope_events_observed_total{kind="` + string(k) + `",source="watcher"} `
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

func scrape(t testing.TB, m *metrics.Metrics) string {
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// TestAgentOnAControlPlane runs the agent the way the DaemonSet does (its
// node's pods, EndpointSlices from every node) against a real API server
// and EndpointSlice controller, with a fake kubelet, into Postgres behind a
// proxy that is stopped during a rollout: every event produced within the
// buffer bound is stored once the database is back; a second agent with a
// small bound drops the excess and reports it.
func TestAgentOnAControlPlane(t *testing.T) {
	dsnA, dsnB := pgtest.Schema(t), pgtest.Schema(t)
	const node, ns, replicas = "node-a", "shop", 3
	cp := startControlPlane(t, node)
	ctx := context.Background()
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	pxA, pxB := pgtest.NewProxy(t, dsnA), pgtest.NewProxy(t, dsnB)

	kctx, kcancel := context.WithCancel(ctx)
	defer kcancel()
	kubelet := &fakeKubelet{cs: cp.Client(), ns: ns, node: node}
	go kubelet.run(kctx, t)

	type running struct {
		a    *agent.Agent
		done chan error
		stop context.CancelFunc
	}
	start := func(dsn string, limit int) running {
		st, err := store.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		a, err := agent.New(agent.Config{
			Node: node, Client: cp.Client(), Store: st,
			Writer: store.WriterOptions{Limit: limit, Interval: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond},
			Kernel: agent.KernelConfig{Disabled: true},
			Logger: testLogger(t),
		})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		r := running{a: a, done: make(chan error, 1), stop: stop}
		go func() { r.done <- a.Run(rctx) }()
		return r
	}
	a := start(pxA.DSN(dsnA), 100_000)
	b := start(pxB.DSN(dsnB), 10)

	for _, r := range []running{a, b} {
		h := r.a.Handler()
		waitFor(t, time.Minute, "the agent to be ready", func() bool {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
			return rec.Code == 200
		})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
		if rec.Code != 200 {
			t.Fatalf("/healthz: %d %s", rec.Code, rec.Body)
		}
	}

	// A pod of another node, which the node-scoped pod watch must not see.
	other := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"},
		Spec:       corev1.PodSpec{NodeName: "node-b", Containers: []corev1.Container{{Name: "app", Image: "web:1"}}},
	}
	if _, err := cp.Client().CoreV1().Pods("default").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d, svc := webDeployment(replicas)
	if _, err := cp.Client().CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Client().AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rollout(t, cp, ns, "1", replicas)
	pods, _ := cp.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	kubelet.killOne(pods.Items[0].Name) // one pod of the next rollout ends by SIGKILL

	// The database goes away during a rollout and comes back.
	pxA.Stop()
	pxB.Stop()
	outage := time.Now()
	rollout(t, cp, ns, "2", replicas)
	waitFor(t, time.Minute, "failed writes during the outage", func() bool {
		return a.a.Stats().Writer.Failures > 0 && b.a.Stats().Writer.Dropped > 0
	})
	held := a.a.Stats().Writer.Pending
	time.Sleep(max(0, 30*time.Second-time.Since(outage))) // Postgres down ~30 s
	pxA.Start()
	pxB.Start()
	t.Logf("outage of %.1fs: agent A held %d events, agent B (bound 10) dropped %d",
		time.Since(outage).Seconds(), held, b.a.Stats().Writer.Dropped)
	rollout(t, cp, ns, "3", replicas)
	// The last transitions reach the agents: on a busy machine a watch
	// event can take seconds, and CI runs other packages' control planes
	// beside this one (this test took 116 s there, 38 s alone; a minute's
	// wait once ran out). A deletion never seen still fails it.
	for name, r := range map[string]running{"A": a, "B": b} {
		waitFor(t, 3*time.Minute, "agent "+name+" to see the three rollouts' deletions", func() bool {
			return observed(scrape(t, r.a.Metrics()), event.PodDeletion) >= 3*replicas
		})
	}
	time.Sleep(time.Second) // and the endpoints' last changes after them
	if n := a.a.Watcher().Stats().Pods; n != replicas {
		t.Errorf("the agent's pod cache holds %d pods, want the %d of its node", n, replicas)
	}

	for name, r := range map[string]running{"A": a, "B": b} {
		r.stop()
		if err := <-r.done; err != nil {
			t.Fatalf("agent %s: %v", name, err)
		}
	}

	// A: nothing lost.
	sa := a.a.Stats().Writer
	storedA, byKind := countStored(t, dsnA)
	t.Logf("agent A: produced %d, stored %d, dropped %d, failed writes %d; by kind %v", sa.Received, storedA, sa.Dropped, sa.Failures, byKind)
	if sa.Dropped != 0 || sa.Pending != 0 || int64(storedA) != sa.Received || sa.Written != sa.Received {
		t.Fatalf("agent A: %+v, %d stored; want every produced event stored", sa, storedA)
	}
	for _, k := range []event.Kind{event.PodCreated, event.PodReady, event.PodDeletion, event.PodNotReady,
		event.ContainerTerminated, event.EndpointAdded, event.EndpointNotReady, event.EndpointTerminating, event.EndpointRemoved} {
		if byKind[k] == 0 {
			t.Errorf("no %s event stored", k)
		}
	}
	if byKind[event.PodDeletion] < 3*replicas {
		t.Errorf("%d pod deletions stored, want %d (three rollouts)", byKind[event.PodDeletion], 3*replicas)
	}

	// B: the excess dropped, counted, the rest stored.
	sb := b.a.Stats().Writer
	storedB, _ := countStored(t, dsnB)
	t.Logf("agent B: produced %d, stored %d, dropped %d", sb.Received, storedB, sb.Dropped)
	if sb.Dropped == 0 || int64(storedB) != sb.Received-sb.Dropped {
		t.Fatalf("agent B: %+v, %d stored; want drops counted and produced - dropped stored", sb, storedB)
	}

	body := scrape(t, a.a.Metrics())
	for _, want := range []string{
		`drainscope_events_observed_total{kind="pod_deletion",source="watcher"}`,
		`drainscope_events_stored_total{kind="endpoint_removed"}`,
		`drainscope_events_dropped_total{reason="buffer_full"} 0`,
		`drainscope_events_dropped_total{reason="rejected_row"} 0`,
		`drainscope_store_backlog_events 0`,
		`drainscope_watch_synced 1`,
		`drainscope_endpointslice_recorder 1`,
		`drainscope_store_write_duration_seconds_count{outcome="error"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("agent A's metrics lack %s", want)
		}
	}
	// The rollout signals are the server's, from what the agent stored.
	if strings.Contains(body, "drainscope_rollout_pod_terminations_total{") {
		t.Errorf("the agent exports rollout signals; the server computes them")
	}
	signals := serverSignals(t, dsnA, time.Now().Add(-time.Hour))
	for _, want := range []string{
		`drainscope_rollout_pod_terminations_total{namespace="shop",workload="Deployment/web"} 9`,
		`drainscope_rollout_sigkills_after_grace_total{namespace="shop",workload="Deployment/web"} 1`,
	} {
		if !strings.Contains(signals, want) {
			t.Errorf("the server's signals from agent A's events lack %s", want)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", grepLines(body, "drainscope_"))
	}
	if body := scrape(t, b.a.Metrics()); !strings.Contains(body, `drainscope_events_dropped_total{reason="buffer_full"} `+itoa(sb.Dropped)) {
		t.Errorf("agent B's metrics do not report %d drops:\n%s", sb.Dropped, grepLines(body, "dropped"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// serverSignals computes the rollout signals from the events in the store
// dsn names since from, as drainscope serve does, and returns its metrics.
func serverSignals(t *testing.T, dsn string, from time.Time) string {
	t.Helper()
	st, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := metrics.New("serve", "test")
	r := m.NewRollouts(metrics.RolloutOptions{Delay: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- r.Tail(ctx, st, metrics.TailOptions{Poll: 50 * time.Millisecond, Start: from.UnixNano(), Logger: testLogger(t)})
	}()
	time.Sleep(200 * time.Millisecond)
	cancel() // a last read, then every pod reported
	<-done
	return scrape(t, m)
}
