package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drainscope/drainscope/agent"
	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/pgtest"
	"github.com/drainscope/drainscope/metrics"
	"github.com/drainscope/drainscope/store"
	"github.com/drainscope/drainscope/watcher"
)

// TestLeaderModeSignalsOnTheNonLeader runs two agents in leader mode
// against a real API server and EndpointSlice controller, both into one
// Postgres, as the DaemonSet does on a two-node cluster: node-a holds the
// Lease and records every EndpointSlice transition, node-b runs the
// Deployment's pods and records their pod transitions and kernel events. A
// rollout replaces node-b's pods, which exit at SIGTERM (sent when node-b
// sees the deletion, before the endpoint leaves rotation). The server's
// tail of the store reports those pods' terminations and the endpoint race
// (drainscope_rollout_sigterm_minus_endpoint_removal_seconds ≤ 0, what
// DrainscopeEndpointRemovalRace alerts on); node-b's agent alone has no
// endpoint event to compute it from, and exports no rollout signal.
//
// The capture is off (the fake kubelet runs no process): what node-b's
// kernel capture records at SIGTERM, the signal and the exit, is stored
// as node-b's agent would store it, stamped when that agent saw the
// deletion.
func TestLeaderModeSignalsOnTheNonLeader(t *testing.T) {
	dsn := pgtest.Schema(t)
	const ns, replicas = "shop", 2
	cp := startControlPlane(t, "node-a")
	ctx := context.Background()
	if _, err := cp.RegisterNode(ctx, controlplane.NodeOptions{Name: "node-b", InternalIP: "10.244.1.1", PodCIDR: "10.244.1.0/24"}); err != nil {
		t.Fatal(err)
	}
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	kctx, kcancel := context.WithCancel(ctx)
	defer kcancel()
	kubelet := &fakeKubelet{cs: cp.Client(), ns: ns, node: "node-b"}
	go kubelet.run(kctx, t)

	// node-b's kernel at SIGTERM: the signal and the exit of the pod's
	// process, as soon as node-b sees its deletion.
	kernel := make(chan event.Event, 64)
	sigterm := func(e event.Event) {
		if e.Kind != event.PodDeletion || e.Pod.Namespace != ns {
			return
		}
		for i, k := range []event.Kind{event.Signal, event.ProcessExit} {
			k := event.Event{Time: e.Time + int64(i+1)*int64(time.Microsecond), Kind: k, Node: "node-b", Source: event.SourceKernel,
				Pod: e.Pod, Workload: e.Workload, PID: 4242, Comm: "web"}
			if k.Kind == event.Signal {
				k.Signal = 15
			}
			k.Seal()
			kernel <- k
		}
	}
	go func() {
		for {
			select {
			case <-kctx.Done():
				return
			case e := <-kernel:
				if err := st.Append(kctx, []event.Event{e}); err != nil && kctx.Err() == nil {
					t.Errorf("storing node-b's kernel event: %v", err)
				}
			}
		}
	}()

	lease := watcher.LeaseOptions{Namespace: "default", LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}
	type running struct {
		a    *agent.Agent
		done chan error
		stop context.CancelFunc
	}
	start := func(node string, sink func(event.Event)) running {
		a, err := agent.New(agent.Config{
			Node: node, Client: cp.Client(), Store: st,
			Watch:  watcher.Options{Mode: watcher.Leader, Lease: lease},
			Writer: store.WriterOptions{Interval: 50 * time.Millisecond},
			Kernel: agent.KernelConfig{Disabled: true},
			Sink:   sink,
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
	a := start("node-a", nil)
	waitFor(t, time.Minute, "node-a to hold the Lease", func() bool { return a.a.Watcher().Stats().Leader })
	b := start("node-b", sigterm)
	for _, r := range []running{a, b} {
		waitFor(t, time.Minute, "the agents to be ready", func() bool { return r.a.Ready() == nil })
	}

	// The server, tailing the store.
	m := metrics.New("serve", "test")
	r := m.NewRollouts(metrics.RolloutOptions{Delay: time.Second, Analysis: analysisRetain(2 * time.Second)})
	tctx, tcancel := context.WithCancel(ctx)
	tdone := make(chan error, 1)
	go func() {
		tdone <- r.Tail(tctx, st, metrics.TailOptions{Poll: 100 * time.Millisecond, Logger: testLogger(t)})
	}()
	defer func() { tcancel(); <-tdone }()

	d, svc := webDeployment(replicas)
	if _, err := cp.Client().CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Client().AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rollout(t, cp, ns, "1", replicas)
	rollout(t, cp, ns, "2", replicas)

	wl := `namespace="shop",workload="Deployment/web"`
	var body string
	waitFor(t, time.Minute, "the server's signals for node-b's pods", func() bool {
		body = scrape(t, m)
		v, _ := metricValue(body, "drainscope_rollout_pod_terminations_total", wl)
		return v >= replicas
	})
	terms, _ := metricValue(body, "drainscope_rollout_pod_terminations_total", wl)
	gaps, _ := metricValue(body, "drainscope_rollout_sigterm_minus_endpoint_removal_seconds_count", wl)
	raced, _ := metricValue(body, "drainscope_rollout_sigterm_minus_endpoint_removal_seconds_bucket", wl, `le="0"`)
	sum, _ := metricValue(body, "drainscope_rollout_sigterm_minus_endpoint_removal_seconds_sum", wl)
	t.Logf("server: %v terminations, %v gaps, %v at or before the endpoint left rotation (summed gap %.3fs)", terms, gaps, raced, sum)
	if gaps < replicas || raced < 1 {
		t.Errorf("the server computed %v gaps and %v races for node-b's %d replaced pods, want a gap for each and the race", gaps, raced, replicas)
	}

	// Where each kind came from: the endpoints from node-a only.
	byNode := map[string]map[event.Kind]int{}
	if err := st.Scan(ctx, store.Query{Namespace: ns}, func(e *event.Event) error {
		if byNode[e.Node] == nil {
			byNode[e.Node] = map[event.Kind]int{}
		}
		byNode[e.Node][e.Kind]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("stored by node: %v", byNode)
	if byNode["node-a"][event.EndpointTerminating] == 0 || byNode["node-a"][event.PodDeletion] != 0 {
		t.Errorf("node-a (the leader, no pods) stored %v", byNode["node-a"])
	}
	for k := range byNode["node-b"] {
		if k.IsEndpoint() {
			t.Errorf("node-b, the non-leader, stored %s events", k)
		}
	}
	if byNode["node-b"][event.PodDeletion] < replicas {
		t.Errorf("node-b stored %d deletions", byNode["node-b"][event.PodDeletion])
	}

	for node, r := range map[string]running{"node-a": a, "node-b": b} {
		body := scrape(t, r.a.Metrics())
		if strings.Contains(body, "drainscope_rollout_pod_terminations_total{") {
			t.Errorf("%s's agent exports rollout signals; the server computes them", node)
		}
		want := map[string]string{"node-a": "drainscope_endpointslice_recorder 1", "node-b": "drainscope_endpointslice_recorder 0"}[node]
		if !strings.Contains(body, want) {
			t.Errorf("%s's metrics lack %s", node, want)
		}
		r.stop()
		if err := <-r.done; err != nil {
			t.Errorf("%s: %v", node, err)
		}
	}
}

func analysisRetain(d time.Duration) (o analysis.Options) {
	o.Retain = d
	return o
}
