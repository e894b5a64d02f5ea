package scenario_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/pgtest"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/lab/realnode"
	"github.com/drainscope/drainscope/lab/scenario"
	"github.com/drainscope/drainscope/store"
)

// The chart's agent capabilities (deploy/helm/drainscope/templates/
// agent-daemonset.yaml), by their bit in a capability set.
var chartCaps = map[string]uint{"BPF": 39, "PERFMON": 38, "SYS_RESOURCE": 24}

// TestChartAgentOnRealNode installs the Helm chart into the real node's
// cluster, its store the host's throwaway Postgres through the chart's
// external-database values (a Service without selector and an
// EndpointSlice to the bridge, relayed to Postgres on loopback), and checks
// that the agent runs as the DaemonSet pod with exactly the chart's
// capabilities, loads every kernel program the lab's own capture (with all
// of root's) loads, and records into Postgres the exit run's SIGTERMs and
// exits attributed to the replaced pods through containerd's cgroup paths.
func TestChartAgentOnRealNode(t *testing.T) {
	testenv.RequireRoot(t)
	bins, err := controlplane.CheckBinaries("", "kubelet", "helm")
	if err != nil {
		testenv.Unavailable(t, err.Error()+" (scripts/k8s-binaries.sh, scripts/helm-binary.sh)")
	}
	if err := scenario.Preflight(""); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	if err := realnode.Available(bins["kubelet"]); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	dsn := pgtest.Schema(t)
	if testing.Short() {
		t.Skip("the chart on the real node takes about two minutes")
	}
	bin := buildStatic(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	// The lab's own recording goes elsewhere: what Postgres holds, the
	// agent pod wrote.
	labStore, err := store.Open(ctx, filepath.Join(t.TempDir(), "lab.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer labStore.Close()
	// The schema exists and is migrated before the agent connects.
	pg, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()

	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := scenario.Up(ctx, scenario.Options{
		Node: scenario.NodeKubelet, Binary: bin, Store: labStore,
		WaitForLock: true, Log: log, Progress: testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Down()
	cs := c.Client
	gw := c.ClientSource()

	// Postgres for the pods: the bridge's address relayed to loopback,
	// behind a Service without selector.
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pgAddr, err := netip.ParseAddrPort(u.Host)
	if err != nil {
		t.Fatalf("DSN host %q: %v", u.Host, err)
	}
	stop, err := scenario.Forward(ctx, netip.AddrPortFrom(gw, pgAddr.Port()), pgAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	const ns = "drainscope"
	if err := c.CP.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "host-postgres"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "postgres", Port: 5432, TargetPort: intstr.FromInt32(int32(pgAddr.Port()))}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	port, ready, tcp := int32(pgAddr.Port()), true, corev1.ProtocolTCP
	pname := "postgres"
	if _, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "host-postgres", Labels: map[string]string{discoveryv1.LabelServiceName: "host-postgres"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{gw.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &pname, Port: &port, Protocol: &tcp}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podDSN := *u
	podDSN.Host = svc.Spec.ClusterIP + ":5432"
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "drainscope-store"},
		StringData: map[string]string{"dsn": podDSN.String()},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	repo, tag, _ := strings.Cut(scenario.AgentImage, ":")
	helmEnv := append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	helm := func(verb string, extra ...string) {
		args := append([]string{verb, "drainscope", "../../deploy/helm/drainscope",
			"--kubeconfig", c.CP.Kubeconfig(), "--namespace", ns,
			"--set", "image.repository=" + repo, "--set", "image.tag=" + tag,
			"--set", "postgres.enabled=false", "--set", "store.existingSecret=drainscope-store",
			// The agent writes to the store: the chart's default, through
			// the server's TLS port, names the server by its Service's DNS
			// name, and the lab runs no cluster DNS. The TLS path of the
			// real binaries is TestAgentThroughServer's (cmd/drainscope).
			"--set", "agent.server=false",
			// containerd's network namespaces, where the chart mounts the
			// runtime's /run/netns from.
			"--set", "agent.netnsDir=" + filepath.Join(scenario.RealNodeDir(), "containerd/state/io.containerd.grpc.v1.cri/netns")}, extra...)
		cmd := exec.CommandContext(ctx, bins["helm"], args...)
		cmd.Env = helmEnv
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("helm %s: %v\n%s", verb, err, out)
		}
	}
	helm("install")

	want := chartCaps
	agent, failed := waitAgent(ctx, t, c, ns, "")
	if !hostHasCap(t, chartCaps["SYS_RESOURCE"]) {
		// This machine's root has no CAP_SYS_RESOURCE (not in its
		// bounding set), so no runtime can grant it to a container: runc
		// refuses the chart's set. On a node whose root has it, the
		// branch above is taken and the chart runs as it is.
		const refusal = "unable to apply caps: operation not permitted"
		if !strings.Contains(failed, refusal) {
			t.Fatalf("without CAP_SYS_RESOURCE on the host, want the agent container refused with %q, got ready=%v %q", refusal, agent != nil, failed)
		}
		t.Logf("the chart's agent as it is cannot start here: %s (this host's root lacks CAP_SYS_RESOURCE); "+
			"going on with the chart minus SYS_RESOURCE, which kernels since 5.11 do not need for BPF maps", failed)
		post := filepath.Join(t.TempDir(), "drop-sys-resource")
		if err := os.WriteFile(post, []byte("#!/bin/sh\nexec sed '/^[[:space:]]*- SYS_RESOURCE$/d'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		helm("upgrade", "--post-renderer", post)
		want = maps.Clone(chartCaps)
		delete(want, "SYS_RESOURCE")
		if agent, failed = waitAgent(ctx, t, c, ns, "SYS_RESOURCE"); agent == nil {
			t.Fatalf("the agent without SYS_RESOURCE did not become ready: %s", failed)
		}
	} else if agent == nil {
		t.Fatalf("the chart's agent did not become ready: %s", failed)
	}
	checkAgentPod(t, agent, want)
	agentLog := containerLog(agent, "agent")
	for _, p := range c.KernelPrograms() {
		if p.Loaded && !strings.Contains(agentLog, p.Name) {
			t.Errorf("the agent pod did not load %s, which this kernel runs (its log: %s)", p.Name, grepLine(agentLog, "kernel programs loaded"))
		}
	}
	t.Logf("agent pod %s ready: %s", agent.Name, grepLine(agentLog, "kernel programs loaded"))

	runs, _ := scenario.SelectRuns("exit")
	results, err := scenario.Execute(ctx, c, scenario.Config{Profile: scenario.Profiles["ci"], Runs: runs, Progress: testWriter{t}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	// The agent flushes every 200 ms; give it a few.
	time.Sleep(2 * time.Second)
	events, err := store.Events(ctx, pg, store.Query{})
	if err != nil {
		t.Fatal(err)
	}
	var caps *event.Event
	for i, e := range events {
		if e.Kind == event.KernelCapabilities {
			caps = &events[i]
		}
		if e.Node != scenario.NodeName {
			t.Errorf("event %s in Postgres from node %q, want the agent pod's node %s", e.Kind, e.Node, scenario.NodeName)
			break
		}
	}
	if caps == nil {
		t.Error("no kernel_capabilities event from the agent pod")
	} else if caps.Reason != "" {
		t.Errorf("the agent pod lacks kernel evidence: %s", caps.Reason)
	}
	r := results[0]
	for _, pod := range r.Replaced {
		app := pod.Containers["app"]
		var sigterm, exit, deletion bool
		for _, e := range events {
			if e.Pod.UID != pod.UID {
				continue
			}
			switch {
			case e.Kind == event.PodDeletion:
				deletion = true
			case e.Kind == event.Signal && e.Signal == int32(syscall.SIGTERM) && e.Source == event.SourceKernel && e.Pod.Container == app && e.PeerComm == "runc":
				sigterm = e.Pod.Name == pod.Name && e.Workload.Name == r.Deployment
			case e.Kind == event.ProcessExit && e.Source == event.SourceKernel && e.Pod.Container == app:
				exit = true
			}
		}
		if !deletion || !sigterm || !exit {
			t.Errorf("pod %s: the agent pod recorded deletion %v, runc's SIGTERM to container %.12s with the pod named %v, its exit %v", pod.Name, deletion, app, sigterm, exit)
		}
	}
	t.Logf("Postgres holds %d events from the agent pod", len(events))
}

// waitAgent waits for the DaemonSet's pod (one whose agent container does
// not add the capability without, when given) to be Ready, and returns it;
// or returns nil and why its container failed to start, once it has.
func waitAgent(ctx context.Context, t *testing.T, c *scenario.Cluster, ns, without string) (*corev1.Pod, string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	last := "no agent pod"
	for time.Now().Before(deadline) {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
		if err != nil {
			last = err.Error()
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp != nil || (without != "" && slices.Contains(p.Spec.Containers[0].SecurityContext.Capabilities.Add, corev1.Capability(without))) {
				continue
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					return p, ""
				}
			}
			last = fmt.Sprintf("pod %s: %+v; log: %s", p.Name, p.Status.ContainerStatuses, containerLog(p, "agent"))
			for _, s := range p.Status.ContainerStatuses {
				if tm := s.LastTerminationState.Terminated; tm != nil && tm.Reason == "StartError" {
					return nil, tm.Message
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("the agent pod neither became ready nor failed to start in 3 minutes: %s", last)
	return nil, ""
}

// hostHasCap reports whether this process's bounding set holds the
// capability numbered bit: whether a runtime here can grant it.
func hostHasCap(t *testing.T, bit uint) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapBnd:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && n&(1<<bit) != 0
		}
	}
	return false
}

// checkAgentPod checks the agent's container as the runtime runs it: root,
// with exactly the capabilities caps effective, permitted and bounding,
// no more.
func checkAgentPod(t *testing.T, p *corev1.Pod, caps map[string]uint) {
	t.Helper()
	var want uint64
	for _, b := range caps {
		want |= 1 << b
	}
	var cid string
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == "agent" {
			_, cid, _ = strings.Cut(s.ContainerID, "://")
		}
	}
	pids := cgroupProcs(t, string(p.UID), cid)
	if len(pids) == 0 {
		t.Fatalf("no process in the agent container %s's cgroup", cid)
	}
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(l, ":")
			if k != "CapEff" && k != "CapPrm" && k != "CapBnd" && k != "Uid" {
				continue
			}
			v = strings.TrimSpace(v)
			if k == "Uid" {
				if f := strings.Fields(v); len(f) == 0 || f[0] != "0" {
					t.Errorf("agent process %d runs as uid %s, the chart says root", pid, v)
				}
				continue
			}
			got, err := strconv.ParseUint(v, 16, 64)
			if err != nil || got != want {
				t.Errorf("agent process %d: %s %s, want exactly %v (%x)", pid, k, v, slices.Sorted(maps.Keys(caps)), want)
			}
		}
	}
}

// cgroupProcs lists the processes of a container by its cgroup on the
// real node.
func cgroupProcs(t *testing.T, uid, cid string) []int {
	t.Helper()
	var out []int
	_ = filepath.WalkDir("/sys/fs/cgroup/pids/drainscope-lab/kubepods", func(p string, e os.DirEntry, err error) error {
		if err != nil || !e.IsDir() || filepath.Base(p) != cid || !strings.Contains(p, "pod"+uid) {
			return nil
		}
		b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
		return nil
	})
	return out
}

// containerLog reads a container's log where the real node's kubelet
// writes it (the API server's log proxy would need the kubelet's port on
// the node address; the lab's kubelet serves on loopback only).
func containerLog(p *corev1.Pod, container string) string {
	dir := filepath.Join(scenario.RealNodeDir(), "kubelet", "pods", p.Namespace+"_"+p.Name+"_"+string(p.UID), container)
	ents, _ := os.ReadDir(dir)
	var b strings.Builder
	for _, e := range ents {
		x, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		b.Write(x)
	}
	return b.String()
}

func grepLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return "(no line with " + sub + ")"
}
