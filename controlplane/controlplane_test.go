package controlplane

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/lab/lock"
)

func need(t *testing.T, names ...string) {
	t.Helper()
	if _, err := CheckBinaries("", names...); err != nil {
		testenv.Unavailable(t, err.Error())
	}
}

func TestCheckBinariesNamesTheScript(t *testing.T) {
	_, err := CheckBinaries(t.TempDir(), "etcd")
	if !errors.Is(err, ErrMissingBinaries) || !strings.Contains(err.Error(), "scripts/k8s-binaries.sh") {
		t.Errorf("error %v should wrap ErrMissingBinaries and name the script", err)
	}
	t.Setenv(EnvBinDir, "/opt/k8s")
	if BinDir() != "/opt/k8s" {
		t.Errorf("BinDir ignores %s", EnvBinDir)
	}
}

// TestAPIServerRestart starts etcd and kube-apiserver only, writes, restarts
// the API server on the same address and reads the write back, then stops
// everything and checks nothing is left.
func TestAPIServerRestart(t *testing.T) {
	need(t, "etcd", "kube-apiserver")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp, err := Start(ctx, Options{NoControllerManager: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	cs := cp.Client()
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "before-restart"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cp.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver restarted in %v", time.Since(start).Round(time.Millisecond))
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "before-restart", metav1.GetOptions{}); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if _, err := os.Stat(cp.Kubeconfig()); err != nil {
		t.Error(err)
	}
	if _, err := CheckBinaries(cp.BinDir(), "kubectl"); err == nil {
		cmd, err := cp.Kubectl(ctx, "get", "configmap", "before-restart", "-o", "name")
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "configmap/before-restart" {
			t.Errorf("kubectl: %v: %s", err, out)
		}
	}
	dir, host := cp.Dir(), strings.TrimPrefix(cp.Host(), "https://")
	cp.Stop()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("directory %s left behind (%v)", dir, err)
	}
	if c, err := net.DialTimeout("tcp", host, time.Second); err == nil {
		c.Close()
		t.Errorf("something still listens on %s", host)
	}
}

// TestControllerManager starts the whole control plane and checks that the
// controllers pods need ran: the default ServiceAccount of a new namespace
// appears, and a pod can be created.
func TestControllerManager(t *testing.T) {
	need(t, "etcd", "kube-apiserver", "kube-controller-manager")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	if err := cp.EnsureNamespace(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.RegisterNode(ctx, NodeOptions{Name: "node-a", InternalIP: "10.244.0.1", PodCIDR: "10.244.0.0/24"}); err != nil {
		t.Fatal(err)
	}
	n, err := cp.Client().CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil || len(n.Status.Addresses) != 2 {
		t.Fatalf("node %v, %v", n, err)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "app"},
		Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "drainscope.invalid/c"}}},
	}
	if _, err := cp.Client().CoreV1().Pods("app").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a pod: %v", err)
	}
}

// TestKubeProxy starts kube-proxy in nftables mode against a registered
// Node and checks that it becomes healthy and programs its table, then that
// Stop removes the table. It needs root and nft (scripts/deps.sh installs
// nftables), so CI runs it. It changes the host's packet filter: the table
// ip kube-proxy, which a running lab's kube-proxy also owns, so it holds the
// lab lock meanwhile.
func TestKubeProxy(t *testing.T) {
	testenv.RequireRoot(t)
	nft := testenv.RequireBinary(t, "nft")
	need(t, "etcd", "kube-apiserver", "kube-controller-manager", "kube-proxy")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l, err := lock.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	cp, err := Start(ctx, Options{Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	if _, err := cp.RegisterNode(ctx, NodeOptions{Name: "node-a", InternalIP: "10.244.0.1", PodCIDR: "10.244.0.0/24"}); err != nil {
		t.Fatal(err)
	}
	if err := cp.StartKubeProxy(ctx, ProxyOptions{NodeName: "node-a"}); err != nil {
		t.Fatal(err)
	}
	// Healthy comes before the first sync; the table follows.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command(nft, "list", "table", "ip", "kube-proxy").CombinedOutput()
		if err == nil && strings.Contains(string(out), "chain") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-proxy's table: %v\n%s\n%s", err, out, cp.Logs("kube-proxy-node-a", 3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	cp.Stop()
	if out, err := exec.Command(nft, "list", "table", "ip", "kube-proxy").CombinedOutput(); err == nil {
		t.Errorf("kube-proxy's table left after Stop:\n%s", out)
	}
}

// Version names the directory scripts/k8s-binaries.sh fills, which follows
// the Kubernetes version hack/k8sbin requires: the two must agree.
func TestVersionMatchesTheBinaryModule(t *testing.T) {
	b, err := os.ReadFile("../hack/k8sbin/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	want := "require k8s.io/kubernetes " + Version + "\n"
	if !strings.Contains(string(b), want) {
		t.Errorf("hack/k8sbin/go.mod does not say %q: update controlplane.Version with it", strings.TrimSpace(want))
	}
}
