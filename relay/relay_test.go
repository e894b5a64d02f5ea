package relay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/relay"
	"github.com/drainscope/drainscope/store"
)

const (
	ns      = "drainscope"
	agentSA = "drainscope-agent"
)

// cluster is a real etcd and kube-apiserver with two nodes and, on each,
// an agent pod of the agent's service account; on node A also a pod of
// another service account. The pods need not run: a pod object bound to
// a node is what a token is bound to.
type cluster struct {
	cs kubernetes.Interface
	// server is the server's identity: a service account granted only
	// what the Helm chart's server ClusterRole grants (create on
	// tokenreviews, list and watch on pods; deploy/deploy_test.go checks
	// the chart's), by impersonation.
	server kubernetes.Interface
	tokens map[string]string // agent-a, agent-b, unbound, other-a
	// Workload pods in namespace shop: web-1 on node A, web-9 on node B.
	web1, web9 *corev1.Pod
}

func startCluster(t *testing.T, ctx context.Context) *cluster {
	t.Helper()
	if _, err := controlplane.CheckBinaries("", "etcd", "kube-apiserver"); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	var logger *slog.Logger
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{NoControllerManager: true, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	cs := cp.Client()
	c := &cluster{cs: cs, tokens: map[string]string{}}
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := cp.EnsureNamespace(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts("shop").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{agentSA, "other"} {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "server"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "drainscope-server-tokenreviews"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}},
		}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "drainscope-server-tokenreviews"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "drainscope-server-tokenreviews"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "server", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := cp.Config()
	cfg.Impersonate.UserName = "system:serviceaccount:" + ns + ":server"
	if c.server, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := cp.RegisterNode(ctx, controlplane.NodeOptions{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	podIn := func(pns, name, node, sa string) *corev1.Pod {
		p, err := cs.CoreV1().Pods(pns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa, AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{Name: "agent", Image: "drainscope.invalid/agent:1"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	pod := func(name, node, sa string) *corev1.Pod { return podIn(ns, name, node, sa) }
	c.web1 = podIn("shop", "web-1", "node-a", "default")
	c.web9 = podIn("shop", "web-9", "node-b", "default")
	token := func(sa string, bound *corev1.Pod, audiences ...string) string {
		tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600)), Audiences: audiences}}
		if bound != nil {
			tr.Spec.BoundObjectRef = &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: bound.Name, UID: bound.UID}
		}
		got, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, tr, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token for %s: %v", sa, err)
		}
		return got.Status.Token
	}
	agentA := pod("agent-a", "node-a", agentSA)
	c.tokens["agent-a"] = token(agentSA, agentA)
	c.tokens["agent-a-drainscope"] = token(agentSA, agentA, "drainscope")
	c.tokens["agent-b"] = token(agentSA, pod("agent-b", "node-b", agentSA))
	c.tokens["unbound"] = token(agentSA, nil)
	c.tokens["other-a"] = token("other", pod("other-a", "node-a", "other"))
	return c
}

// events makes n kernel events of node, one per millisecond from base.
func events(node string, base time.Time, n int, pod string) []event.Event {
	out := make([]event.Event, n)
	for i := range out {
		e := &out[i]
		*e = event.Event{Time: base.Add(time.Duration(i) * time.Millisecond).UnixNano(), Kind: event.Signal, Node: node,
			Source: event.SourceKernel, Pod: event.PodRef{Namespace: "shop", Name: pod, UID: "uid-" + pod}, PID: 7, Signal: 15}
		e.Seal()
	}
	return out
}

// post sends evs as an agent does, in the wire form, and answers what the
// server said. A batch refused is sent again as JSON, which must be
// refused alike: both forms meet the same checks.
func post(t *testing.T, url, token string, evs []event.Event) (int, relay.Refusal) {
	t.Helper()
	code, ref := postAs(t, url, token, event.WireType, event.AppendWire(event.AppendWireHeader(nil, len(evs)), evs))
	if code != http.StatusOK {
		body, err := json.Marshal(relay.Batch{Events: evs})
		if err != nil {
			t.Fatal(err)
		}
		jcode, jref := postAs(t, url, token, "application/json", body)
		if jcode != code || (jref.Event == nil) != (ref.Event == nil) || (ref.Event != nil && *jref.Event != *ref.Event) {
			t.Errorf("the wire form was answered %d %+v, JSON %d %+v", code, ref, jcode, jref)
		}
	}
	return code, ref
}

func postAs(t *testing.T, url, token, ctype string, body []byte) (int, relay.Refusal) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+relay.EventsPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", ctype)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var ref relay.Refusal
	_ = json.Unmarshal(raw, &ref)
	t.Logf("%s: %d bytes → %d %s", ctype, len(body), resp.StatusCode, strings.TrimSpace(string(raw)))
	return resp.StatusCode, ref
}

func count(t *testing.T, st store.Store, node string) int {
	t.Helper()
	evs, err := store.Events(context.Background(), st, store.Query{Node: node})
	if err != nil {
		t.Fatal(err)
	}
	return len(evs)
}

// TestAgentWritesOnlyItsNode: a token bound to the agent pod on node A
// stores node A's events and cannot store node B's; tokens that are not an
// agent pod's are refused; the agent's client stores end to end through a
// store.Writer, dropping only the forged event.
func TestAgentWritesOnlyItsNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := startCluster(t, ctx)

	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	// The server as the chart grants it, no more.
	reviewer := &relay.TokenReviewer{Client: c.server.AuthenticationV1(), Namespace: ns, ServiceAccount: agentSA, Now: clock}
	pods := &relay.PodIndex{Client: c.server}
	go pods.Run(ctx)
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if err := pods.WaitForSync(sctx); err != nil {
		t.Fatalf("%v (can the server list and watch pods?)", err)
	}
	handler := &relay.Handler{Store: st, Auth: reviewer, Pods: pods}
	srv := httptest.NewServer(handler)
	defer srv.Close()
	base := time.Now().Add(-time.Minute)

	// Node A's agent stores node A's events, and those with no node,
	// stamped with node A.
	evs := events("node-a", base, 3, "web-1")
	evs[2].Node = ""
	if code, _ := post(t, srv.URL, c.tokens["agent-a"], evs); code != http.StatusOK {
		t.Fatalf("node A's batch: %d, want 200", code)
	}
	if n := count(t, st, "node-a"); n != 3 {
		t.Fatalf("stored for node-a: %d, want 3", n)
	}

	// One event of node B in node A's batch refuses the whole batch.
	mixed := append(events("node-a", base.Add(time.Second), 2, "web-2"), events("node-b", base.Add(time.Second), 1, "web-9")...)
	code, ref := post(t, srv.URL, c.tokens["agent-a"], mixed)
	if code != http.StatusForbidden || ref.Event == nil || *ref.Event != 2 ||
		!strings.Contains(ref.Error, `"node-b"`) || !strings.Contains(ref.Error, `"node-a"`) {
		t.Errorf("mixed batch: %d %+v, want 403 naming event 2, node-b and node-a", code, ref)
	}
	if n := count(t, st, "node-a"); n != 3 {
		t.Errorf("after the refused batch node-a has %d events, want still 3: nothing of it stored", n)
	}
	if n := count(t, st, "node-b"); n != 0 {
		t.Errorf("node-b has %d events, want 0", n)
	}
	// And node B's agent can store node B's, not node A's.
	if code, _ := post(t, srv.URL, c.tokens["agent-b"], events("node-b", base, 1, "web-9")); code != http.StatusOK {
		t.Errorf("node B's batch: %d, want 200", code)
	}
	if code, _ := post(t, srv.URL, c.tokens["agent-b"], events("node-a", base.Add(2*time.Second), 1, "web-3")); code != http.StatusForbidden {
		t.Errorf("node B's token with node A's event: %d, want 403", code)
	}
	// An agent cannot post client failures (they have their own token).
	cf := events("node-a", base, 1, "web-1")
	cf[0].Kind, cf[0].Source = event.ClientFailure, event.SourceClient
	if code, _ := post(t, srv.URL, c.tokens["agent-a"], cf); code != http.StatusForbidden {
		t.Errorf("client failure from an agent: %d, want 403", code)
	}

	// Tokens that are not an agent pod's.
	for _, tc := range []struct {
		name, token string
		want        int
		says        string
	}{
		{"no token", "", http.StatusUnauthorized, "no bearer token"},
		{"garbage", "not-a-token", http.StatusUnauthorized, "not valid"},
		{"agent's service account, bound to no pod", c.tokens["unbound"], http.StatusForbidden, "not bound to a pod"},
		{"another service account's pod on node A", c.tokens["other-a"], http.StatusForbidden, "system:serviceaccount:drainscope:other"},
	} {
		code, ref := post(t, srv.URL, tc.token, events("node-a", base.Add(3*time.Second), 1, "web-4"))
		if code != tc.want || !strings.Contains(ref.Error, tc.says) {
			t.Errorf("%s: %d %q, want %d saying %q", tc.name, code, ref.Error, tc.want, tc.says)
		}
	}
	if n := count(t, st, "node-a"); n != 3 {
		t.Errorf("node-a has %d events after the refused tokens, want 3", n)
	}

	// Reviews are cached per token: 6 distinct tokens so far, whatever the
	// number of batches.
	before := reviewer.Reviews()
	for range 5 {
		post(t, srv.URL, c.tokens["agent-a"], events("node-a", base, 1, "web-1"))
	}
	if got := reviewer.Reviews(); got != before {
		t.Errorf("5 more batches with a known token sent %d token reviews, want 0", got-before)
	}
	// What a review costs beside a cached answer (logged, not asserted).
	fresh := &relay.TokenReviewer{Client: c.cs.AuthenticationV1(), Namespace: ns, ServiceAccount: agentSA}
	t0 := time.Now()
	if _, err := fresh.Authenticate(ctx, c.tokens["agent-b"]); err != nil {
		t.Fatal(err)
	}
	reviewed := time.Since(t0)
	t0 = time.Now()
	fresh.Authenticate(ctx, c.tokens["agent-b"])
	t.Logf("a token review took %v, the cached answer %v", reviewed, time.Since(t0))

	mu.Lock()
	now = now.Add(relay.DefaultReviewTTL*3/2 + time.Second) // past the spread TTL
	mu.Unlock()
	post(t, srv.URL, c.tokens["agent-a"], events("node-a", base, 1, "web-1"))
	if got := reviewer.Reviews(); got != before+1 {
		t.Errorf("a batch past the review's TTL sent %d token reviews, want 1", got-before)
	}

	// A token for the audience "drainscope" (a projected volume's
	// audience), which the API server itself would not take: accepted
	// by a reviewer of that audience, refused by one of the API
	// server's, and the API server's own token refused by the former.
	aud := httptest.NewServer(&relay.Handler{Store: st, Auth: &relay.TokenReviewer{Client: c.cs.AuthenticationV1(),
		Namespace: ns, ServiceAccount: agentSA, Audiences: []string{"drainscope"}}})
	defer aud.Close()
	if code, _ := post(t, aud.URL, c.tokens["agent-a-drainscope"], events("node-a", base.Add(4*time.Second), 1, "web-7")); code != http.StatusOK {
		t.Errorf("audience drainscope, reviewed for it: %d, want 200", code)
	}
	if code, _ := post(t, srv.URL, c.tokens["agent-a-drainscope"], events("node-a", base.Add(5*time.Second), 1, "web-7")); code != http.StatusUnauthorized {
		t.Errorf("audience drainscope, reviewed for the API server: %d, want 401", code)
	}
	if code, _ := post(t, aud.URL, c.tokens["agent-a"], events("node-a", base.Add(5*time.Second), 1, "web-7")); code != http.StatusUnauthorized {
		t.Errorf("the API server's audience, reviewed for drainscope: %d, want 401", code)
	}
	if n := count(t, st, "node-a"); n != 4 {
		t.Errorf("node-a has %d events after the audience checks, want 4", n)
	}

	// End to end: the agent's client behind a store.Writer, as
	// drainscope agent --server runs it. The one forged event is isolated
	// and dropped; the others are stored.
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(c.tokens["agent-a"]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cl, err := relay.NewClient(srv.URL, tokFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := store.NewWriter(cl, store.WriterOptions{Batch: 100, Interval: 20 * time.Millisecond})
	w.Add(events("node-a", base.Add(10*time.Second), 250, "web-5")...)
	w.Add(events("node-b", base.Add(20*time.Second), 1, "web-9")...)
	w.Add(events("node-a", base.Add(30*time.Second), 49, "web-6")...)
	cctx, ccancel := context.WithTimeout(ctx, time.Minute)
	defer ccancel()
	if err := w.Close(cctx); err != nil {
		t.Fatal(err)
	}
	ws := w.Stats()
	t.Logf("writer through the server: %+v", ws)
	if ws.Written != 299 || ws.Rejected != 1 || ws.Dropped != 0 {
		t.Errorf("writer stats %+v: want 299 written, 1 rejected", ws)
	}
	if n := count(t, st, "node-a"); n != 4+299 {
		t.Errorf("node-a has %d events, want %d", n, 4+299)
	}
	if n := count(t, st, "node-b"); n != 1 {
		t.Errorf("node-b has %d events, want 1 (its own)", n)
	}

	agentCannotForgePodsElsewhere(t, ctx, c, srv.URL, handler, pods, st)
}

// agentCannotForgePodsElsewhere: under its own node's name, node A's agent
// cannot store a kernel event about a pod on node B (shop/web-9), by its
// UID, its name or both, nor after the pod is deleted, nor one on web-9's
// address; it can store one of its own pod (shop/web-1), and one of a pod
// the server cannot place.
func agentCannotForgePodsElsewhere(t *testing.T, ctx context.Context, c *cluster, url string, h *relay.Handler, pods *relay.PodIndex, st store.Store) {
	base := time.Now().Add(-30 * time.Second)
	kernel := func(at time.Duration, ref event.PodRef) event.Event {
		e := event.Event{Time: base.Add(at).UnixNano(), Kind: event.Signal, Node: "node-a", Source: event.SourceKernel, Pod: ref, PID: 7, Signal: 9}
		e.Seal()
		return e
	}
	ref := func(p *corev1.Pod) event.PodRef {
		return event.PodRef{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}
	}
	stored := func() int {
		evs, err := store.Events(ctx, st, store.Query{Node: "node-a", PodUIDs: []string{string(c.web1.UID), string(c.web9.UID), "made-up"}})
		if err != nil {
			t.Fatal(err)
		}
		return len(evs)
	}
	// Its own pod's SIGKILL is stored, and counted as placed.
	before := h.Stats()
	if code, _ := post(t, url, c.tokens["agent-a"], []event.Event{kernel(0, ref(c.web1))}); code != http.StatusOK {
		t.Fatalf("node A's kernel event of its own pod %s: %d, want 200", ref(c.web1), code)
	}
	if s := h.Stats(); s.Unplaced != before.Unplaced {
		t.Errorf("its own pod was not placed: %+v", s)
	}
	forged := []struct {
		name string
		ref  event.PodRef
		says []string
	}{
		{"node B's pod by name and UID", ref(c.web9), []string{"shop/web-9", `which is on node "node-b"`}},
		{"node B's pod by UID alone", event.PodRef{UID: string(c.web9.UID)}, []string{string(c.web9.UID), `"node-b"`}},
		{"node B's pod by name with a made-up UID", event.PodRef{Namespace: "shop", Name: "web-9", UID: "made-up"}, []string{"shop/web-9", `"node-b"`}},
		{"node B's pod by name alone", event.PodRef{Namespace: "shop", Name: "web-9"}, []string{"shop/web-9", `"node-b"`}},
		{"its own pod's UID under node B's pod's name", event.PodRef{Namespace: "shop", Name: "web-9", UID: string(c.web1.UID)}, []string{"shop/web-9", "shop/web-1"}},
	}
	check := func(when string) {
		for _, f := range forged {
			// Behind an event of its own pod: nothing of the batch is stored.
			code, r := post(t, url, c.tokens["agent-a"], []event.Event{kernel(time.Second, ref(c.web1)), kernel(2*time.Second, f.ref)})
			ok := code == http.StatusForbidden && r.Event != nil && *r.Event == 1 && strings.Contains(r.Error, `"node-a"`)
			for _, s := range f.says {
				ok = ok && strings.Contains(r.Error, s)
			}
			if !ok {
				t.Errorf("%s, %s: %d %+v, want 403 naming event 1, node-a and %q", when, f.name, code, r, f.says)
			}
		}
		if n := stored(); n != 1 {
			t.Errorf("%s: node A has %d events of web-1 and web-9 stored, want 1 (its own pod's first)", when, n)
		}
	}
	check("while web-9 runs")

	// Addresses, from the pods' status as the API server holds it: node
	// A's kernel event with no pod on web-9's address is refused, on
	// web-1's taken.
	for p, ip := range map[*corev1.Pod]string{c.web1: "10.244.1.1", c.web9: "10.244.2.9"} {
		cur, err := c.cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Status.Phase, cur.Status.PodIP, cur.Status.PodIPs = corev1.PodRunning, ip, []corev1.PodIP{{IP: ip}}
		if _, err := c.cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for ip := netip.MustParseAddr("10.244.2.9"); ; {
		if ts, _ := pods.Holders(ip); len(ts) == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the pod index did not see web-9's address")
		case <-time.After(20 * time.Millisecond):
		}
	}
	refused := func(local string) event.Event {
		e := event.Event{Time: base.Add(2500 * time.Millisecond).UnixNano(), Kind: event.ConnRefused, Node: "node-a", Source: event.SourceKernel,
			Local: netip.MustParseAddrPort(local), Remote: netip.MustParseAddrPort("10.244.3.3:40000")}
		e.Seal()
		return e
	}
	if code, r := post(t, url, c.tokens["agent-a"], []event.Event{refused("10.244.2.9:8080")}); code != http.StatusForbidden || !strings.Contains(r.Error, "is pod shop/web-9's") {
		t.Errorf("node A's refused SYN on web-9's address: %d %+v, want 403 naming web-9", code, r)
	}
	if code, r := post(t, url, c.tokens["agent-a"], []event.Event{refused("10.244.1.1:8080")}); code != http.StatusOK {
		t.Errorf("node A's refused SYN on web-1's address: %d %+v, want 200", code, r)
	}
	// Node B's agent stores its own pod's events.
	evB := kernel(3*time.Second, ref(c.web9))
	evB.Node = ""
	if code, _ := post(t, url, c.tokens["agent-b"], []event.Event{evB}); code != http.StatusOK {
		t.Errorf("node B's kernel event of its own pod: %d, want 200", code)
	}
	// A pod the server never saw is let through, and counted.
	before = h.Stats()
	if code, _ := post(t, url, c.tokens["agent-a"], []event.Event{kernel(4*time.Second, event.PodRef{Namespace: "shop", Name: "gone-long-ago", UID: "uid-gone"})}); code != http.StatusOK {
		t.Errorf("a pod the server cannot place: %d, want 200", code)
	}
	if s := h.Stats(); s.Unplaced != before.Unplaced+1 {
		t.Errorf("unplaced %d → %d, want one more", before.Unplaced, s.Unplaced)
	}
	// Deleted, node B's pod is remembered on node B.
	if err := c.cs.CoreV1().Pods("shop").Delete(ctx, "web-9", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, gone := pods.Len(); gone == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the pod index did not see web-9 deleted")
		case <-time.After(20 * time.Millisecond):
		}
	}
	check("after web-9 was deleted")
	t.Logf("relay stats: %s", h.Stats())
}
