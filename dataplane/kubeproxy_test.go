package dataplane

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/lab/lock"
)

var capture = flag.Bool("capture", false, "TestKubeProxyRules: write the notifications kube-proxy's syncs caused to testdata/"+captureFile)

const captureFile = "kube-proxy-v1.37.2.nlmon.jsonl"

// minSync is the minimum sync period TestKubeProxyRules starts kube-proxy
// with (--iptables-min-sync-period, which sets config.MinSyncPeriod that
// the nftables mode uses too): long enough that a change right after another one waits for it.
const minSync = 3 * time.Second

// proxyCase is one of kube-proxy's modes as TestKubeProxyRules runs it.
type proxyCase struct {
	mode, backend string // --proxy-mode, controlplane.ProxyOptions.IPTablesBackend
	proxy         string // Attrs[proxy] of its events
	capture       string // testdata files written with -capture: notifications …
	listing       string // … and the listing of the rules at the end
	svcPrefix     string // the chains an endpoint's event names
}

var (
	caseNFTables = proxyCase{mode: "nftables", proxy: event.ProxyNFTables, capture: captureFile,
		listing: "kube-proxy-v1.37.2.nft.json", svcPrefix: "service-"}
	caseIPTables = proxyCase{mode: "iptables", backend: "nft", proxy: event.ProxyIPTables, capture: captureFileIPT,
		listing: "kube-proxy-v1.37.2-iptables.save", svcPrefix: "KUBE-SVC-"}
	caseLegacy = proxyCase{mode: "iptables", backend: "legacy", proxy: event.ProxyIPTablesLegacy, svcPrefix: "KUBE-SVC-"}
)

const captureFileIPT = "kube-proxy-v1.37.2-iptables.nlmon.jsonl"

// TestKubeProxyRules runs a real kube-proxy (nftables mode) against a real
// API server, with Services and EndpointSlices written directly (no pods
// are needed for kube-proxy to program them), and checks that the watcher
// reports each endpoint entering and leaving each Service port's chains:
// for a Service without session affinity (an anonymous numgen map, or one
// dnat when a single endpoint is left) and one with ClientIP affinity (a
// vmap of per-endpoint chains). kube-proxy runs with --min-sync-period 3s:
// an endpoint marked terminating at once after another waits for the next
// allowed sync, and the measured lag follows. It needs root, nft and the
// Kubernetes binaries, and holds the lab lock (kube-proxy's tables are the
// lab's too).
func TestKubeProxyRules(t *testing.T) { testKubeProxyRules(t, caseNFTables) }

// TestKubeProxyIPTablesRules is TestKubeProxyRules with kube-proxy in
// iptables mode on the nf_tables backend (iptables-nft): its KUBE-SVC-/
// KUBE-SEP- chains come through the same notifications, and at the end
// what the watcher holds must be what iptables-nft-save lists.
func TestKubeProxyIPTablesRules(t *testing.T) {
	testenv.RequireBinary(t, "iptables-nft")
	testKubeProxyRules(t, caseIPTables)
}

// TestKubeProxyIPTablesLegacyRules is TestKubeProxyRules with kube-proxy
// in iptables mode on the legacy backend, which announces nothing: the
// LegacyPoller reads kube-proxy's sync metric and iptables-legacy-save.
func TestKubeProxyIPTablesLegacyRules(t *testing.T) {
	testenv.RequireBinary(t, "iptables-legacy")
	testKubeProxyRules(t, caseLegacy)
}

// follower is what TestKubeProxyRules reads the rules with.
type ruleReader interface {
	Run(context.Context) error
	commits() uint64
	endpoints() ([]string, error)
}

type nftReader struct{ *Watcher }

func (r nftReader) commits() uint64 { return r.Stats().Commits }
func (r nftReader) endpoints() ([]string, error) {
	md, _, err := r.snapshot()
	if err != nil {
		return nil, err
	}
	return append(keys(md.flat()), keys(md.xt.current)...), nil
}

type legacyReader struct{ *LegacyPoller }

func (r legacyReader) commits() uint64 { return r.Stats().Saves }
func (r legacyReader) endpoints() ([]string, error) {
	chains, err := r.save(context.Background())
	if err != nil {
		return nil, err
	}
	x := newXTModel("")
	x.chains = chains
	return keys(x.endpoints()), nil
}

func testKubeProxyRules(t *testing.T, pc proxyCase) {
	testenv.RequireRoot(t)
	if pc.mode == "nftables" {
		testenv.RequireBinary(t, "nft")
	}
	if _, err := controlplane.CheckBinaries("", "etcd", "kube-apiserver", "kube-controller-manager", "kube-proxy"); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l, err := lock.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	cp, err := controlplane.Start(ctx, controlplane.Options{Logger: log, NoControllerManager: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	if _, err := cp.RegisterNode(ctx, controlplane.NodeOptions{Name: "node-a", InternalIP: "10.244.0.1", PodCIDR: "10.244.0.0/24"}); err != nil {
		t.Fatal(err)
	}

	var rec *recorder
	if *capture && pc.capture != "" {
		rec, err = startRecorder()
		if err != nil {
			t.Fatal(err)
		}
	}
	evs := newSink()
	var w ruleReader
	wctx, wcancel := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	defer func() {
		wcancel()
		if w != nil {
			<-wdone
		}
	}()
	startReader := func() {
		go func() { wdone <- w.Run(wctx) }()
		time.Sleep(200 * time.Millisecond) // its first read
	}
	if pc.backend != "legacy" {
		nw, err := New(Options{Node: "node-a", Emit: evs.add, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		w = nftReader{nw}
		startReader() // before kube-proxy's table exists
	}

	if err := cp.StartKubeProxy(ctx, controlplane.ProxyOptions{NodeName: "node-a", Mode: pc.mode, IPTablesBackend: pc.backend,
		ExtraArgs: []string{"--iptables-min-sync-period=" + minSync.String(), "--iptables-localhost-nodeports=false"}}); err != nil {
		t.Fatal(err)
	}
	if pc.backend == "legacy" {
		lp, err := NewLegacy(LegacyOptions{Node: "node-a", Emit: evs.add, Logger: log, Metrics: cp.ProxyMetrics("node-a")})
		if err != nil {
			t.Fatal(err)
		}
		w = legacyReader{lp}
		startReader()
	}
	cs := cp.Client()
	if err := cp.EnsureNamespace(ctx, "dp"); err != nil {
		t.Fatal(err)
	}
	addrs := []string{"10.244.0.11", "10.244.0.12", "10.244.0.13"}
	for _, svc := range []struct {
		name     string
		affinity corev1.ServiceAffinity
	}{{"web", corev1.ServiceAffinityNone}, {"sticky", corev1.ServiceAffinityClientIP}} {
		createService(ctx, t, cs, svc.name, svc.affinity)
		writeSlice(ctx, t, cs, svc.name, addrs, nil, true)
	}
	want := map[string]bool{}
	for _, svc := range []string{"web", "sticky"} {
		for _, a := range addrs {
			want[svc+" "+a+":8080"] = true
		}
	}
	evs.waitFor(t, 60*time.Second, "every endpoint added", func(es []event.Event) bool {
		got := map[string]bool{}
		for _, e := range es {
			if e.Kind == event.DataplaneEndpointAdded {
				got[e.Service+" "+e.Local.String()] = true
			}
		}
		for k := range want {
			if !got[k] {
				return false
			}
		}
		return true
	}, cp)
	for _, e := range evs.all() {
		if e.Attrs[event.AttrServicePort] != "http" || e.Attrs[event.AttrProtocol] != "tcp" || e.Pod.Namespace != "dp" || e.Node != "node-a" || e.Attrs[event.AttrProxy] != pc.proxy {
			t.Errorf("event %s %s: attrs %v, namespace %q, node %q", e.Kind, e.Local, e.Attrs, e.Pod.Namespace, e.Node)
		}
		if e.Service == "sticky" && !strings.HasPrefix(e.Attrs[event.AttrChain], pc.svcPrefix) {
			t.Errorf("sticky endpoint %s held by chain %q", e.Local, e.Attrs[event.AttrChain])
		}
	}

	// Quiet for longer than the sync period, so that the next change syncs
	// at once, then a second change right after it, which has to wait.
	for last, since := w.commits(), time.Now(); time.Since(since) < minSync+500*time.Millisecond; time.Sleep(50 * time.Millisecond) {
		if c := w.commits(); c != last {
			last, since = c, time.Now()
		}
	}
	type step struct {
		name      string
		terminate []string
		at        time.Time
	}
	steps := []*step{
		{name: "first terminating", terminate: addrs[:1]},
		{name: "second terminating, 200 ms later", terminate: addrs[:2]},
	}
	for i, s := range steps {
		if i > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		s.at = time.Now()
		for _, svc := range []string{"web", "sticky"} {
			writeSlice(ctx, t, cs, svc, addrs, s.terminate, false)
		}
	}
	removedAt := func(svc, addr string) (time.Time, bool) {
		for _, e := range evs.all() {
			if e.Kind == event.DataplaneEndpointRemoved && e.Service == svc && e.Local.Addr().String() == addr {
				return e.At(), true
			}
		}
		return time.Time{}, false
	}
	evs.waitFor(t, 30*time.Second, "both terminating endpoints removed from both Services", func([]event.Event) bool {
		for _, svc := range []string{"web", "sticky"} {
			for _, a := range addrs[:2] {
				if _, ok := removedAt(svc, a); !ok {
					return false
				}
			}
		}
		return true
	}, cp)
	for _, svc := range []string{"web", "sticky"} {
		first, _ := removedAt(svc, addrs[0])
		second, _ := removedAt(svc, addrs[1])
		l1, l2 := first.Sub(steps[0].at), second.Sub(steps[1].at)
		t.Logf("%s: API write → dataplane removal: %v (first), %v (second, written 200 ms after the first; --min-sync-period %v)", svc, l1, l2, minSync)
		if l1 < 0 || l2 < 0 {
			t.Errorf("%s: a removal before its API write: %v, %v", svc, l1, l2)
		}
	}
	// kube-proxy starts a sync no sooner than minSync after the end of the
	// last (its BoundedFrequencyRunner), so the syncs the watcher stamped
	// are at least that far apart (less the few milliseconds of reading
	// them). One sync may commit twice, back to back: a transaction that
	// deletes stale chains, then its own (CI saw two 41 ms apart), so
	// commits closer than half the period are one sync.
	var commits, syncs []time.Time
	for _, e := range evs.all() {
		if at := e.At(); len(commits) == 0 || !at.Equal(commits[len(commits)-1]) {
			commits = append(commits, at)
			if len(syncs) == 0 || at.Sub(commits[len(commits)-2]) >= minSync/2 {
				syncs = append(syncs, at)
			}
		}
	}
	for i := 1; i < len(syncs); i++ {
		if gap := syncs[i].Sub(syncs[i-1]); gap < minSync-50*time.Millisecond {
			t.Errorf("syncs %d and %d stamped %v apart, closer than kube-proxy's --min-sync-period %v allows", i-1, i, gap, minSync)
		}
	}
	// The quiet wait sees commits only: a sync of kube-proxy's that wrote
	// nothing (a periodic full sync) can still hold the first step back
	// for up to the period, and then both steps share one sync.
	firstGone, _ := removedAt("web", addrs[0])
	wantCommits := 3
	if firstGone.Sub(steps[0].at) >= minSync/2 {
		wantCommits = 2
	}
	if len(commits) < wantCommits {
		t.Errorf("%d commits with endpoint changes, want the adds and the two steps in at least %d", len(commits), wantCommits)
	}
	if _, ok := removedAt("web", addrs[2]); ok {
		t.Errorf("the endpoint left ready was reported removed")
	}

	// Listing the rules must agree with what the notifications built.
	out, listed := listRules(t, pc)
	got, err := w.endpoints()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, listed) {
		t.Errorf("a fresh read of the rules says %v, their listing says %v", got, listed)
	}
	if rec != nil {
		if err := rec.save("testdata/"+pc.capture, "testdata/"+pc.listing, out); err != nil {
			t.Fatal(err)
		}
	}
}

// listRules lists the rules with the tool of the mode (nft -j, or the
// backend's iptables-save) and the endpoints the listing names, read
// independently of the netlink decoding.
func listRules(t *testing.T, pc proxyCase) ([]byte, []string) {
	t.Helper()
	if pc.mode == "nftables" {
		out, err := exec.Command("nft", "-j", "list", "table", "ip", Table).Output()
		if err != nil {
			t.Fatal(err)
		}
		return out, endpointsFromJSON(t, out)
	}
	out, err := exec.Command("iptables-"+pc.backend+"-save", "-t", "nat").Output()
	if err != nil {
		t.Fatal(err)
	}
	return out, endpointsFromSave(t, out, "iptables-"+pc.backend+"-save")
}

func endpointsFromSave(t *testing.T, b []byte, name string) []string {
	t.Helper()
	chains, err := parseSave(bytes.NewReader(b), name)
	if err != nil {
		t.Fatal(err)
	}
	x := newXTModel("")
	x.chains[unix.NFPROTO_IPV4] = chains
	return keys(x.endpoints())
}

func createService(ctx context.Context, t testing.TB, cs kubernetes.Interface, name string, aff corev1.ServiceAffinity) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "dp"},
		Spec: corev1.ServiceSpec{
			SessionAffinity: aff,
			Ports:           []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
	if _, err := cs.CoreV1().Services("dp").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Service %s: %v", name, err)
	}
}

// writeSlice writes the Service's one EndpointSlice (no selector: nothing
// else manages it), with the terminating addresses not ready.
func writeSlice(ctx context.Context, t testing.TB, cs kubernetes.Interface, svc string, addrs, terminating []string, create bool) {
	t.Helper()
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc + "-1", Namespace: "dp", Labels: map[string]string{
			discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "drainscope-test"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, a := range addrs {
		term := slices.Contains(terminating, a)
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{a}, NodeName: ptr.To("node-a"),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(!term), Serving: ptr.To(true), Terminating: ptr.To(term)},
		})
	}
	var err error
	if create {
		_, err = cs.DiscoveryV1().EndpointSlices("dp").Create(ctx, s, metav1.CreateOptions{})
	} else {
		_, err = cs.DiscoveryV1().EndpointSlices("dp").Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("writing the EndpointSlice of %s: %v", svc, err)
	}
}

type sink struct {
	mu  sync.Mutex
	evs []event.Event
}

func newSink() *sink { return &sink{} }

func (s *sink) add(e event.Event) {
	s.mu.Lock()
	s.evs = append(s.evs, e)
	s.mu.Unlock()
}

func (s *sink) all() []event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.evs)
}

func (s *sink) waitFor(t *testing.T, d time.Duration, what string, ok func([]event.Event) bool, cp *controlplane.ControlPlane) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok(s.all()) {
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, e := range s.all() {
				fmt.Fprintf(&b, "%s %s %s/%s %s\n", e.At().Format("15:04:05.000"), e.Kind, e.Pod.Namespace, e.Service, e.Local)
			}
			t.Fatalf("waiting for %s; events:\n%s\nkube-proxy:\n%s", what, b.String(), cp.Logs("kube-proxy-node-a", 4000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func keys(m map[Endpoint]string) []string {
	var out []string
	for ep := range m {
		out = append(out, ep.String()+" "+ep.Addr.String())
	}
	sort.Strings(out)
	return out
}

// endpointsFromJSON reads `nft -j list table` output independently of the
// netlink decoding: every Service port chain's dnat targets, and the
// endpoint chains its vmap sends to.
func endpointsFromJSON(t *testing.T, b []byte) []string {
	t.Helper()
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("nft -j output: %v", err)
	}
	type jrule struct {
		Chain string            `json:"chain"`
		Expr  []json.RawMessage `json:"expr"`
	}
	endpointDNAT := map[string]string{}
	var rules []jrule
	for _, o := range doc.Nftables {
		raw, ok := o["rule"]
		if !ok {
			continue
		}
		var r jrule
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		rules = append(rules, r)
	}
	// Each "dnat" expression names addr and port, or (a numgen map) a
	// list of [n, {concat: [addr, port]}] elements; a vmap lists gotos.
	targets := func(r jrule) (out []string, gotos []string) {
		s := string(mustJSON(r.Expr))
		var walk func(v any)
		walk = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				if d, ok := v["dnat"].(map[string]any); ok {
					if a, ok := d["addr"].(string); ok {
						out = append(out, fmt.Sprintf("%s:%v", a, d["port"]))
					}
					if a, ok := d["addr"].(map[string]any); ok {
						if m, ok := a["map"].(map[string]any); ok {
							if set, ok := m["data"].(map[string]any)["set"].([]any); ok {
								for _, el := range set {
									c := el.([]any)[1].(map[string]any)["concat"].([]any)
									out = append(out, fmt.Sprintf("%v:%v", c[0], c[1]))
								}
							}
						}
					}
				}
				if g, ok := v["goto"].(map[string]any); ok {
					gotos = append(gotos, g["target"].(string))
				}
				for _, x := range v {
					walk(x)
				}
			case []any:
				for _, x := range v {
					walk(x)
				}
			}
		}
		var v any
		_ = json.Unmarshal([]byte(s), &v)
		walk(v)
		return out, gotos
	}
	for _, r := range rules {
		if strings.HasPrefix(r.Chain, prefixEndpoint) {
			if d, _ := targets(r); len(d) > 0 {
				endpointDNAT[r.Chain] = d[0]
			}
		}
	}
	seen := map[string]bool{}
	for _, r := range rules {
		sp, ok := parseServiceChain(r.Chain)
		if !ok {
			continue
		}
		d, gotos := targets(r)
		for _, g := range gotos {
			d = append(d, endpointDNAT[g])
		}
		for _, a := range d {
			seen[sp.String()+" "+a] = true
		}
	}
	var out []string
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// recorder keeps every nftables notification, as the kernel sent it, for
// the replay tests.
type recorder struct {
	c    *netlink.Conn
	mu   sync.Mutex
	recs []capturedMsg
	done chan struct{}
}

// capturedMsg is one line of the capture file: the datagram it arrived in
// (messages of one datagram share it), its offset from the first in
// nanoseconds, and the raw message.
type capturedMsg struct {
	Datagram int    `json:"datagram"`
	OffsetNS int64  `json:"offset_ns"`
	Type     uint16 `json:"type"`
	Flags    uint16 `json:"flags"`
	Data     string `json:"data"` // hex
}

func startRecorder() (*recorder, error) {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, err
	}
	if err := c.JoinGroup(unix.NFNLGRP_NFTABLES); err != nil {
		c.Close()
		return nil, err
	}
	r := &recorder{c: c, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		var start time.Time
		for n := 0; ; n++ {
			msgs, err := c.Receive()
			if err != nil {
				return
			}
			now := time.Now()
			if start.IsZero() {
				start = now
			}
			r.mu.Lock()
			for _, m := range msgs {
				r.recs = append(r.recs, capturedMsg{Datagram: n, OffsetNS: int64(now.Sub(start)), Type: uint16(m.Header.Type), Flags: uint16(m.Header.Flags), Data: hex.EncodeToString(m.Data)})
			}
			r.mu.Unlock()
		}
	}()
	return r, nil
}

func (r *recorder) save(path, listPath string, listing []byte) error {
	time.Sleep(200 * time.Millisecond)
	r.c.Close()
	<-r.done
	var b strings.Builder
	for _, m := range r.recs {
		b.Write(mustJSON(m))
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(listPath, listing, 0o644)
}

// BenchmarkWatcherCPU measures what following kube-proxy's rules costs the
// agent: kube-proxy (nftables mode, --iptables-min-sync-period=100ms) holds
// 50 Services of 20 endpoints; each round flips one endpoint of every
// Service not ready and back over about 3 s, with the watcher running in
// every other round. It reports this process's CPU per round with and
// without the watcher, the difference, and kube-proxy's own CPU in the
// same rounds, as medians with p25–p75 (go test ./dataplane -run '^$'
// -bench WatcherCPU -benchtime 1x, as root with the Kubernetes binaries).
func BenchmarkWatcherCPU(b *testing.B) { benchWatcherCPU(b, caseNFTables) }

// BenchmarkWatcherCPUIPTables is BenchmarkWatcherCPU with kube-proxy in
// iptables mode on iptables-nft: the same watcher, reading the xtables
// compat expressions of the nat table's notifications.
func BenchmarkWatcherCPUIPTables(b *testing.B) { benchWatcherCPU(b, caseIPTables) }

// BenchmarkWatcherCPUIPTablesLegacy is BenchmarkWatcherCPU with kube-proxy
// in iptables mode on the legacy backend: the LegacyPoller reading
// kube-proxy's metric every 100 ms and iptables-legacy-save after each
// sync (its children's CPU counted: they are the reader's cost).
func BenchmarkWatcherCPUIPTablesLegacy(b *testing.B) { benchWatcherCPU(b, caseLegacy) }

func benchWatcherCPU(b *testing.B, pc proxyCase) {
	testenv.RequireRoot(b)
	if _, err := controlplane.CheckBinaries("", "etcd", "kube-apiserver", "kube-proxy"); err != nil {
		testenv.Unavailable(b, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	l, err := lock.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Release()
	quietLog := slog.New(slog.DiscardHandler)
	cp, err := controlplane.Start(ctx, controlplane.Options{Logger: quietLog, NoControllerManager: true})
	if err != nil {
		b.Fatal(err)
	}
	defer cp.Stop()
	if _, err := cp.RegisterNode(ctx, controlplane.NodeOptions{Name: "node-a", InternalIP: "10.244.0.1", PodCIDR: "10.244.0.0/24"}); err != nil {
		b.Fatal(err)
	}
	if err := cp.StartKubeProxy(ctx, controlplane.ProxyOptions{NodeName: "node-a", Mode: pc.mode, IPTablesBackend: pc.backend,
		ExtraArgs: []string{"--iptables-min-sync-period=100ms", "--iptables-localhost-nodeports=false"}}); err != nil {
		b.Fatal(err)
	}
	cs := cp.Client()
	if err := cp.EnsureNamespace(ctx, "dp"); err != nil {
		b.Fatal(err)
	}
	const services, perService = 50, 20
	addrs := make([]string, perService)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("10.244.0.%d", 10+i)
	}
	for i := range services {
		name := fmt.Sprintf("svc-%02d", i)
		createService(ctx, b, cs, name, corev1.ServiceAffinityNone)
		writeSlice(ctx, b, cs, name, addrs, nil, true)
	}
	pid := kubeProxyPID(b)
	time.Sleep(3 * time.Second) // kube-proxy programs them all
	var on, off, proxyOn, proxyOff []float64
	commits := uint64(0)
	const rounds = 12
	b.ResetTimer()
	for r := range rounds {
		watching := r%2 == 1
		var w ruleReader
		wctx, wcancel := context.WithCancel(ctx)
		wdone := make(chan error, 1)
		if watching {
			if pc.backend == "legacy" {
				lp, _ := NewLegacy(LegacyOptions{Node: "node-a", Emit: func(event.Event) {}, Logger: quietLog, Metrics: cp.ProxyMetrics("node-a")})
				w = legacyReader{lp}
			} else {
				nw, _ := New(Options{Node: "node-a", Emit: func(event.Event) {}, Logger: quietLog})
				w = nftReader{nw}
			}
			go func() { wdone <- w.Run(wctx) }()
			time.Sleep(300 * time.Millisecond) // its snapshot, outside the measure
		}
		c0, p0 := selfCPU(), procCPU(pid)
		for i := range services {
			name := fmt.Sprintf("svc-%02d", i)
			writeSlice(ctx, b, cs, name, addrs, addrs[r%perService:r%perService+1], false)
			time.Sleep(30 * time.Millisecond)
		}
		for i := range services {
			writeSlice(ctx, b, cs, fmt.Sprintf("svc-%02d", i), addrs, nil, false)
			time.Sleep(30 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond) // the last syncs
		c1, p1 := selfCPU(), procCPU(pid)
		if watching {
			wcancel()
			<-wdone
			commits += w.commits()
			on, proxyOn = append(on, (c1-c0).Seconds()), append(proxyOn, (p1-p0).Seconds())
		} else {
			wcancel()
			off, proxyOff = append(off, (c1-c0).Seconds()), append(proxyOff, (p1-p0).Seconds())
		}
	}
	b.StopTimer()
	q := func(v []float64) (float64, float64, float64) {
		s := slices.Clone(v)
		slices.Sort(s)
		at := func(p float64) float64 { return s[int(p*float64(len(s)-1)+0.5)] }
		return at(0.5), at(0.25), at(0.75)
	}
	mOn, lOn, hOn := q(on)
	mOff, lOff, hOff := q(off)
	mp, lp, hp := q(append(slices.Clone(proxyOn), proxyOff...))
	b.Logf("kube-proxy %s%s, per round (%d Services × %d endpoints, 100 EndpointSlice writes, %d commits (legacy: table reads) in %d watched rounds):",
		pc.mode, map[string]string{"": "", "nft": " (iptables-nft)", "legacy": " (iptables-legacy)"}[pc.backend], services, perService, commits, len(on))
	b.Logf("  this process with the watcher %.3f s CPU (p25–p75 %.3f–%.3f), without %.3f s (%.3f–%.3f): the watcher's %.1f ms",
		mOn, lOn, hOn, mOff, lOff, hOff, (mOn-mOff)*1000)
	b.Logf("  kube-proxy %.3f s CPU (p25–p75 %.3f–%.3f): the watcher costs %.1f %% of kube-proxy's CPU", mp, lp, hp, 100*(mOn-mOff)/mp)
	b.ReportMetric((mOn-mOff)*1000, "watcher-ms/round")
	b.ReportMetric(100*(mOn-mOff)/mp, "%-of-kube-proxy")
}

// selfCPU is this process's CPU and its waited-for children's (the
// legacy reader's iptables-legacy-save runs).
func selfCPU() time.Duration {
	var ru, ch unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &ch)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano() + ch.Utime.Nano() + ch.Stime.Nano())
}

// procCPU reads a process's user+system time from /proc/PID/stat, its
// waited-for children's included (kube-proxy's iptables-restore runs).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	var ut, st, cut, cst int64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	fmt.Sscan(f[13], &cut)
	fmt.Sscan(f[14], &cst)
	return time.Duration(ut+st+cut+cst) * time.Second / 100 // USER_HZ
}

func kubeProxyPID(b *testing.B) int {
	ents, _ := os.ReadDir("/proc")
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(cmd), "--hostname-override=node-a") {
			continue
		}
		if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && strings.Contains(string(stat), fmt.Sprintf(" %d ", self)) {
			return pid // a child of this test
		}
	}
	b.Fatal("kube-proxy's process not found")
	return 0
}
