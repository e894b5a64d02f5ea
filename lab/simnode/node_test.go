package simnode

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/lab/cgroup"
	"github.com/drainscope/drainscope/lab/lock"
	"github.com/drainscope/drainscope/lab/netns"
)

func TestCommandCombinesImageAndSpec(t *testing.T) {
	n := &Node{cfg: Config{
		Name:    "n1",
		Network: netns.Default,
		Images:  map[string]Image{"app:1": {Entrypoint: []string{"/bin/app", "serve"}, Env: []string{"IMAGE=1"}}},
	}}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u-1", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: "n1"},
	}
	spec := corev1.Container{Image: "app:1", Args: []string{"--x"}, Env: []corev1.EnvVar{
		{Name: "A", Value: "a"},
		{Name: "NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "APP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
	}}
	argv, env, err := n.command(p, spec, netip.MustParseAddr("10.244.0.9"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(argv, []string{"/bin/app", "serve", "--x"}) {
		t.Errorf("argv %q", argv)
	}
	for _, want := range []string{"IMAGE=1", "A=a", "NAME=p", "IP=10.244.0.9", "APP=web", "HOSTNAME=p"} {
		if !slices.Contains(env, want) {
			t.Errorf("env lacks %s: %q", want, env)
		}
	}
	spec.Command = []string{"sh", "-c"}
	if argv, _, _ := n.command(p, spec, netip.Addr{}); !slices.Equal(argv, []string{"sh", "-c", "--x"}) {
		t.Errorf("command should replace the entrypoint: %q", argv)
	}
	spec.Command, spec.Image = nil, "unknown:1"
	if _, _, err := n.command(p, spec, netip.Addr{}); err == nil {
		t.Error("unknown image: want an error")
	}
}

func TestGracePeriod(t *testing.T) {
	five, ten := int64(5), int64(10)
	p := &corev1.Pod{}
	if g := gracePeriod(p); g != 30*time.Second {
		t.Errorf("default %v", g)
	}
	p.Spec.TerminationGracePeriodSeconds = &ten
	if g := gracePeriod(p); g != 10*time.Second {
		t.Errorf("spec %v", g)
	}
	p.DeletionGracePeriodSeconds = &five
	if g := gracePeriod(p); g != 5*time.Second {
		t.Errorf("deletion %v", g)
	}
}

// harness is a real API server (no controllers) with the lab node running
// against it.
type harness struct {
	cp     *controlplane.ControlPlane
	node   *Node
	events chan event.Event
}

func startHarness(t *testing.T) *harness {
	t.Helper()
	testenv.RequireRoot(t)
	if _, err := controlplane.CheckBinaries("", "etcd", "kube-apiserver"); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	if err := netns.Available(); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	tree, err := cgroup.Detect()
	if err != nil {
		testenv.Unavailable(t, err.Error())
	}
	tree.Base = "drainscope-lab-nodetest"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute) // mostly waiting for the lab lock
	t.Cleanup(cancel)
	l, err := lock.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release() })
	network := netns.Network{Bridge: netns.Prefix + "n0", Gateway: netns.Default.Gateway, ServiceCIDR: netns.Default.ServiceCIDR}
	if err := network.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = tree.Cleanup(5 * time.Second)
		_ = netns.Cleanup(context.Background())
	})
	cp, err := controlplane.Start(ctx, controlplane.Options{NoControllerManager: true, ServiceCIDR: "10.96.0.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	h := &harness{cp: cp, events: make(chan event.Event, 100)}
	h.node, err = New(Config{
		Name: "node-test", Client: cp.Client(), Network: network, Cgroups: tree,
		Images: map[string]Image{"shell": {Entrypoint: []string{"sh", "-c"}}},
		LogDir: t.TempDir(),
		Log:    slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Record: func(e event.Event) { h.events <- e },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.node.Register(ctx); err != nil {
		t.Fatal(err)
	}
	nctx, ncancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.node.Run(nctx) }()
	t.Cleanup(func() { ncancel(); <-done })
	if _, err := cp.Client().CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return h
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// waitPod polls the pod until cond holds.
func (h *harness) waitPod(t *testing.T, name string, what string, cond func(*corev1.Pod, error) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		p, err := h.cp.Client().CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if cond(p, err) {
			return p
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("pod %s: timed out waiting until %s", name, what)
	return nil
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestPodLifecycle runs a pod through the kubelet's whole lifecycle against
// a real API server: binding, a process in its own network namespace and
// cgroup, a readiness probe, then deletion with a preStop sleep and a
// process that ignores SIGTERM, so the grace period (counted from before
// the hook) ends in SIGKILL.
func TestPodLifecycle(t *testing.T) {
	h := startHarness(t)
	cs := h.cp.Client()
	grace, preStop := int64(3), int64(2)
	// Ignores SIGTERM, listens on 8080 with a tiny shell server made of
	// nothing but sleep: readiness uses an exec probe instead.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "lifecycle", Namespace: "default"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:  "main",
				Image: "shell",
				Args:  []string{`trap "" TERM; echo started; while true; do sleep 0.1; done`},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "ip -4 -o addr show eth0 | grep -q 10.244.0."}}},
					PeriodSeconds: 1,
				},
				Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: preStop}}},
				Ports:     []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := h.waitPod(t, "lifecycle", "ready", func(p *corev1.Pod, err error) bool { return err == nil && ready(p) })
	if p.Spec.NodeName != "node-test" {
		t.Errorf("bound to %q", p.Spec.NodeName)
	}
	ip, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil || !netns.Default.PodCIDR().Contains(ip) {
		t.Fatalf("pod IP %q: want one from %s", p.Status.PodIP, netns.Default.PodCIDR())
	}
	cs0 := p.Status.ContainerStatuses[0]
	if cs0.State.Running == nil || !cs0.Ready || !strings.HasPrefix(cs0.ContainerID, runtimeName+"://") {
		t.Errorf("container status %+v", cs0)
	}
	// The process lives in the pod's cgroup, as a kubelet lays it out.
	info := h.node.Pods()
	if len(info) != 1 || info[0].IP != ip || info[0].NetNS == 0 {
		t.Fatalf("node pods %+v", info)
	}
	cid := strings.TrimPrefix(cs0.ContainerID, runtimeName+"://")
	procs, err := os.ReadFile(info[0].Cgroup + "/" + cid + "/cgroup.procs")
	if err != nil || len(strings.Fields(string(procs))) == 0 {
		t.Fatalf("container cgroup %s/%s: %q %v", info[0].Cgroup, cid, procs, err)
	}
	if !strings.Contains(info[0].Cgroup, "/kubepods/besteffort/pod"+string(p.UID)) {
		t.Errorf("pod cgroup %s: want kubepods/besteffort/pod<uid>", info[0].Cgroup)
	}
	if ref, _, ok := h.node.PodByIP(ip); !ok || ref.Name != "lifecycle" {
		t.Errorf("PodByIP: %+v %v", ref, ok)
	}

	w, err := cs.CoreV1().Pods("default").Watch(context.Background(), metav1.ListOptions{
		FieldSelector: "metadata.name=lifecycle", ResourceVersion: p.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	deleted := time.Now()
	if err := cs.CoreV1().Pods("default").Delete(context.Background(), "lifecycle", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The kubelet's own observations: SIGTERM after the preStop sleep,
	// SIGKILL when the grace period ran out, exit by signal 9.
	var got []event.Event
	timeout := time.After(20 * time.Second)
	for len(got) < 3 {
		select {
		case e := <-h.events:
			got = append(got, e)
		case <-timeout:
			t.Fatalf("events so far: %+v", got)
		}
	}
	// The kill and the exit are reported from different goroutines, so
	// they may reach the sink in either order; their times must not.
	sort.SliceStable(got, func(i, j int) bool { return got[i].Time < got[j].Time })
	term, kill, exit := got[0], got[1], got[2]
	if term.Kind != event.Signal || term.Signal != int32(syscall.SIGTERM) || kill.Kind != event.Signal || kill.Signal != int32(syscall.SIGKILL) ||
		exit.Kind != event.ProcessExit || exit.Signal != int32(syscall.SIGKILL) {
		t.Fatalf("want SIGTERM, SIGKILL, exit by SIGKILL; got %+v", got)
	}
	for _, e := range got {
		if e.Pod.UID != string(p.UID) || e.Pod.Name != "lifecycle" || e.Node != "node-test" || e.Source != event.SourceLab || e.ID == 0 {
			t.Errorf("event %+v: want the pod, the node, source lab, sealed", e)
		}
	}
	at := func(e event.Event) time.Duration { return time.Unix(0, e.Time).Sub(deleted) }
	// SIGTERM after the 2 s hook; SIGKILL at the 3 s grace period or, as
	// the hook left less than the kubelet's 2 s minimum, 2 s after SIGTERM.
	// The lower bounds carry the meaning; the upper ones only catch a
	// wait that never ended, with room for a loaded machine.
	if d := at(term); d < 1900*time.Millisecond || d > 7*time.Second {
		t.Errorf("SIGTERM %v after deletion, want about the preStop sleep (2s)", d)
	}
	if d := kill.Time - term.Time; d < int64(1900*time.Millisecond) || d > int64(7*time.Second) {
		t.Errorf("SIGKILL %v after SIGTERM, want the 2s minimum", time.Duration(d))
	}
	// The pod's last status records the termination, then the pod is
	// deleted with a grace period of zero.
	var terminated *corev1.ContainerStateTerminated
	var phase corev1.PodPhase
	gone := false
	for !gone {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed before the pod was deleted")
			}
			wp, _ := ev.Object.(*corev1.Pod)
			if wp == nil {
				continue
			}
			if ev.Type == "DELETED" {
				gone = true
			}
			if len(wp.Status.ContainerStatuses) == 1 && wp.Status.ContainerStatuses[0].State.Terminated != nil && terminated == nil {
				terminated, phase = wp.Status.ContainerStatuses[0].State.Terminated, wp.Status.Phase
			}
		case <-time.After(20 * time.Second):
			t.Fatal("pod not deleted")
		}
	}
	if terminated == nil || terminated.ExitCode != 137 || terminated.Reason != "Error" || phase != corev1.PodFailed {
		t.Errorf("terminated state %+v, phase %s: want exit code 137, reason Error, phase Failed", terminated, phase)
	}
	// The sandbox is gone too.
	deadline := time.Now().Add(5 * time.Second)
	for len(h.node.Pods()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	nsName, veth := netns.Names(string(p.UID))
	if _, err := os.Stat(netns.RunDir + "/" + nsName); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("network namespace %s still exists", nsName)
	}
	if _, err := os.Stat("/sys/class/net/" + veth); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("link %s still exists", veth)
	}
	if _, err := os.Stat(info[0].Cgroup); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pod cgroup %s still exists", info[0].Cgroup)
	}
}
