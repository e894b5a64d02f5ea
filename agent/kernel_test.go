package agent_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/drainscope/drainscope/agent"
	"github.com/drainscope/drainscope/ebpf"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/store"
)

// TestKernelCaptureOfAPodCgroup runs the agent with its kernel capture on a
// cgroup laid out as the kubelet's cgroupfs driver lays them out: a process
// in a pod's container cgroup is signalled and exits, and the agent records
// both, attributed to the pod UID and container ID of the path, plus the
// close of a listener in a network namespace it tracks from a netns
// directory.
func TestKernelCaptureOfAPodCgroup(t *testing.T) {
	testenv.RequireRoot(t)
	mount := ""
	for _, m := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} { // unified or hybrid
		var sfs unix.Statfs_t
		if unix.Statfs(m, &sfs) == nil && sfs.Type == unix.CGROUP2_SUPER_MAGIC {
			mount = m
			break
		}
	}
	if mount == "" {
		testenv.Unavailable(t, "no cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified")
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		testenv.Unavailable(t, "no kernel BTF")
	}
	base := fmt.Sprintf("%s/drainscope-agent-test-%d", mount, os.Getpid())
	const uid, cid = "3c4e2a1b-5d6f-4a8b-9c0d-1e2f3a4b5c6d", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	podDir := filepath.Join(base, "kubepods", "burstable", "pod"+uid, cid)
	if err := os.MkdirAll(podDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for d := podDir; strings.HasPrefix(d, base); d = filepath.Dir(d) {
			os.Remove(d)
		}
	})

	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got := make(chan event.Event, 1000)
	a, err := agent.New(agent.Config{
		Node: "node-k", Client: fake.NewClientset(pod(uid, "web-0", "node-k")), Store: st,
		Kernel: agent.KernelConfig{CgroupRoots: []string{filepath.Join(base, "kubepods")}, NetNSDir: "-", Rescan: 100 * time.Millisecond},
		Sink:   func(e event.Event) { got <- e },
		Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitFor(t, time.Minute, "the agent to be ready", func() bool { return a.Ready() == nil })

	// A process that moves itself into the container's cgroup, then waits.
	cmd := exec.Command("sh", "-c", "echo $$ > "+podDir+"/cgroup.procs && exec sleep 60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the process to be in the pod's cgroup", func() bool {
		b, _ := os.ReadFile(filepath.Join(podDir, "cgroup.procs"))
		return strings.TrimSpace(string(b)) != ""
	})
	time.Sleep(100 * time.Millisecond) // exec sleep
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()

	var sig, exit *event.Event
	deadline := time.After(10 * time.Second)
	for sig == nil || exit == nil {
		select {
		case e := <-got:
			if e.Pod.UID != uid {
				continue
			}
			switch {
			case e.Kind == event.Signal && e.Signal == int32(syscall.SIGTERM):
				sig = &e
			case e.Kind == event.ProcessExit:
				exit = &e
			}
		case <-deadline:
			t.Fatalf("no SIGTERM and exit recorded for pod %s (signal %v, exit %v)", uid, sig, exit)
		}
	}
	// The pod informer (this node's pods only) feeds the resolver: the
	// cgroup path's UID becomes the pod's name and workload.
	if sig.Pod.Container != cid || sig.Node != "node-k" || sig.Source != event.SourceKernel ||
		sig.Pod.Name != "web-0" || sig.Pod.Namespace != "shop" || sig.Workload.String() != "StatefulSet/web" {
		t.Errorf("signal event %+v: want pod shop/web-0 of StatefulSet/web, container %s, node node-k, source kernel", sig, cid)
	}

	if exit.Signal != int32(syscall.SIGTERM) {
		t.Errorf("exit by signal %d, want SIGTERM", exit.Signal)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s := a.Stats()
	if s.Writer.Written != s.Writer.Received || s.Writer.Received < 2 {
		t.Fatalf("writer %+v: want everything written at shutdown", s.Writer)
	}
	n := 0
	st.Scan(context.Background(), store.Query{PodUIDs: []string{uid}}, func(*event.Event) error { n++; return nil })
	if n < 2 {
		t.Fatalf("%d events of the pod stored, want the signal and the exit", n)
	}
}

// TestKernelEvidenceReported: an agent on a kernel without no-socket resets
// and without either refused-connection fallback (withheld here, as on an
// arm64 5.15) says so at start: a kernel_capabilities
// event naming the node and the missing evidence, stored, and a 0 for it on
// /metrics.
func TestKernelEvidenceReported(t *testing.T) {
	testenv.RequireRoot(t)
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		testenv.Unavailable(t, "no kernel BTF")
	}
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got := make(chan event.Event, 1000)
	a, err := agent.New(agent.Config{
		Node: "node-old", Client: fake.NewClientset(), Store: st,
		Kernel: agent.KernelConfig{CgroupRoots: []string{filepath.Join(t.TempDir(), "no-pods-here")}, NetNSDir: "-", Rescan: 100 * time.Millisecond,
			Collector: ebpf.Config{WithoutFeatures: []ebpf.Feature{ebpf.FeatureNoSocketResets, ebpf.FeatureResetFentry, ebpf.FeatureDropReasonNoSocket}}},
		Sink:   func(e event.Event) { got <- e },
		Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var caps *event.Event
	deadline := time.After(time.Minute)
	for caps == nil {
		select {
		case e := <-got:
			if e.Kind == event.KernelCapabilities {
				caps = &e
			}
		case <-deadline:
			t.Fatal("no kernel_capabilities event")
		}
	}
	if caps.Node != "node-old" || caps.Reason != "refused_connections,resets_without_socket" ||
		caps.Attrs[event.AttrKernelRelease] == "" || strings.Contains(caps.Attrs[event.AttrKernelFeatures], "no_socket_resets") ||
		!strings.Contains(caps.Attrs[event.AttrKernelFeatures], event.FeatureMainProcess) {
		t.Errorf("kernel_capabilities event %+v", caps)
	}
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		`drainscope_kernel_evidence_available{evidence="refused_connections"} 0`,
		`drainscope_kernel_evidence_available{evidence="signals"} 1`,
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	n := 0
	st.Scan(context.Background(), store.Query{Kinds: []event.Kind{event.KernelCapabilities}}, func(e *event.Event) error {
		if e.Node == "node-old" && e.Reason == caps.Reason {
			n++
		}
		return nil
	})
	if n != 1 {
		t.Errorf("%d kernel_capabilities events stored, want 1", n)
	}
}

func pod(uid, name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID(uid),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: "ss-1", Controller: ptr(true)}}},
		Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "web:1"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.9"},
	}
}

func TestScanNetNS(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	ns := filepath.Join(dir, "cni-1234")
	if err := os.WriteFile(ns, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "stale"), nil, 0o444) // not a namespace
	if err := unix.Mount("/proc/self/ns/net", ns, "", unix.MS_BIND, ""); err != nil {
		testenv.Unavailable(t, "bind-mounting a network namespace: "+err.Error())
	}
	defer unix.Unmount(ns, unix.MNT_DETACH)
	got, err := agent.ScanNetNS(dir, "cni-*")
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	unix.Stat("/proc/self/ns/net", &st)
	if len(got) != 1 || got["cni-1234"] != st.Ino {
		t.Fatalf("ScanNetNS = %v, want cni-1234 → %d", got, st.Ino)
	}
	if got, _ := agent.ScanNetNS(dir, "*"); len(got) != 1 {
		t.Fatalf("the stale file was taken for a namespace: %v", got)
	}
	if got, err := agent.ScanNetNS(filepath.Join(dir, "missing"), "*"); err != nil || len(got) != 0 {
		t.Fatalf("missing dir: %v, %v", got, err)
	}
}
