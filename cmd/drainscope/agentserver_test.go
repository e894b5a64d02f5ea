package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/store"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestAgentThroughServer runs drainscope serve --agent-service-account and
// two drainscope agent --server (watches only) against a real etcd and
// kube-apiserver, over TLS as the Helm chart runs them (serve
// --agent-listen, agent --server https://… --server-ca): the agent of node
// A, with the token of its pod on node A, stores node A's events; an agent
// that calls itself node B but holds node A's token is refused (403) and
// stores nothing.
func TestAgentThroughServer(t *testing.T) {
	if _, err := controlplane.CheckBinaries("", "etcd", "kube-apiserver"); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{NoControllerManager: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	cs := cp.Client()
	const ns, sa = "drainscope", "drainscope-agent"
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var agentA *corev1.Pod
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := cp.RegisterNode(ctx, controlplane.NodeOptions{Name: n}); err != nil {
			t.Fatal(err)
		}
		p, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-" + n},
			Spec: corev1.PodSpec{NodeName: n, ServiceAccountName: sa, AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{Name: "agent", Image: "drainscope.invalid/agent:1"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n == "node-a" {
			agentA = p
		}
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences:      []string{"drainscope"},
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: agentA.Name, UID: agentA.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}

	db := filepath.Join(t.TempDir(), "events.db")
	addr, maddr, tlsAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	certs := t.TempDir()
	issue(t, certs, "drainscope-server")
	var (
		scancel context.CancelFunc
		served  chan error
	)
	serve := func() {
		var sctx context.Context
		sctx, scancel = context.WithCancel(ctx)
		served = make(chan error, 1)
		go func() {
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			served <- runServe(sctx, fs, []string{"--listen", addr, "--metrics-listen", maddr, "--store", db, "--kubeconfig", cp.Kubeconfig(),
				"--agent-service-account", ns + "/" + sa, "--agent-audiences", "drainscope",
				"--agent-listen", tlsAddr, "--agent-tls-cert", filepath.Join(certs, "tls.crt"), "--agent-tls-key", filepath.Join(certs, "tls.key")})
		}()
		for deadline := time.Now().Add(20 * time.Second); ; {
			res, err := http.Get("http://" + addr + "/healthz")
			if err == nil {
				res.Body.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("server did not come up: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	serve()
	defer func() { scancel() }()

	actx, acancel := context.WithCancel(ctx)
	agents := make(chan error, 2)
	for _, node := range []string{"node-a", "node-b"} {
		go func() {
			fs := flag.NewFlagSet("agent", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			agents <- runAgent(actx, fs, []string{"--server", "https://" + tlsAddr, "--server-ca", filepath.Join(certs, "ca.crt"), "--token-file", tokFile, "--kubeconfig", cp.Kubeconfig(),
				"--node", node, "--no-kernel", "--dataplane=off", "--cilium-maps=off", "--metrics-listen=", "--coverage-interval=1s"})
		}()
	}
	st, err := store.OpenSQLite(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	count := func(node string) int {
		evs, err := store.Events(ctx, st, store.Query{Node: node})
		if err != nil {
			t.Fatal(err)
		}
		return len(evs)
	}
	refused := func() bool {
		res, err := http.Get("http://" + maddr + "/metrics")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "drainscope_http_requests_total{") && strings.Contains(l, `code="403"`) {
				return true
			}
		}
		return false
	}
	spans := func() int {
		evs, err := store.Events(ctx, st, store.Query{Node: "node-a", Kinds: []event.Kind{event.RecorderCoverage}})
		if err != nil {
			t.Fatal(err)
		}
		return len(evs)
	}
	for deadline := time.Now().Add(60 * time.Second); count("node-a") == 0 || !refused() || spans() < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s: %d events of node-a stored, node-b's agent refused: %v", count("node-a"), refused())
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The server restarted (a rolling update) while node-a's pods change:
	// the agent holds what it records meanwhile and stores it once the
	// server is back, each event once, with no gap in its record.
	scancel()
	if err := <-served; err != nil {
		t.Errorf("serve: %v", err)
	}
	downAt := time.Now()
	var made []string
	for i := range 3 {
		name := fmt.Sprintf("while-down-%d", i)
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: "node-a", ServiceAccountName: sa, AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{Name: "app", Image: "drainscope.invalid/app:1"}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		made = append(made, name)
	}
	time.Sleep(10 * time.Second)
	serve()
	upAt := time.Now()
	createdOnce := func() (n int, twice bool) {
		evs, err := store.Events(ctx, st, store.Query{Kinds: []event.Kind{event.PodCreated}, Node: "node-a"})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, e := range evs {
			if slices.Contains(made, e.Pod.Name) && !e.Flags.Has(event.FlagObserved) {
				seen[e.Pod.Name]++
			}
		}
		for _, c := range seen {
			twice = twice || c > 1
		}
		return len(seen), twice
	}
	for deadline := time.Now().Add(60 * time.Second); ; {
		if n, _ := createdOnce(); n == len(made) {
			break
		}
		if time.Now().After(deadline) {
			n, _ := createdOnce()
			t.Fatalf("60 s after the server came back, %d of the %d pods created while it was down are stored", n, len(made))
		}
		time.Sleep(200 * time.Millisecond)
	}
	acancel()
	for range 2 {
		if err := <-agents; err != nil {
			t.Errorf("agent: %v", err)
		}
	}
	a, b := count("node-a"), count("node-b")
	t.Logf("stored through the server: node-a %d events, node-b %d", a, b)
	if b != 0 {
		t.Errorf("node-b's agent with node-a's token stored %d events", b)
	}
	if _, twice := createdOnce(); twice {
		t.Errorf("a pod created while the server was down is stored twice")
	}
	all, err := store.Events(ctx, st, store.Query{})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[event.ID]bool{}
	for _, e := range all {
		ids[e.ID] = true
	}
	cov, err := analysis.ReadCoverage(ctx, st, downAt.UnixNano(), upAt.Add(2*time.Second).UnixNano())
	if err != nil {
		t.Fatal(err)
	}
	var gaps []analysis.RecorderGap
	for _, g := range cov.Gaps("node-a", downAt.UnixNano(), upAt.Add(2*time.Second).UnixNano(), false) {
		if g.What != analysis.GapKernelOff { // --no-kernel: the watches only
			gaps = append(gaps, g)
		}
	}
	t.Logf("reliability row: | drainscope serve restarted while an agent writes through it | %.1f s | %d stored, %d distinct | 0 | %d | %d pods created while it was down, %d stored once | gaps: %v |",
		upAt.Sub(downAt).Seconds(), len(all), len(ids), len(all)-len(ids), len(made), len(made), gaps)
	if len(ids) != len(all) {
		t.Errorf("%d events stored, %d distinct: some stored twice across the restart", len(all), len(ids))
	}
	if len(gaps) != 0 {
		t.Errorf("node-a's record has gaps across the server's restart, whose buffer held: %v", gaps)
	}
	scancel()
	if err := <-served; err != nil {
		t.Errorf("serve: %v", err)
	}
}
