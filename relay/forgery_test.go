package relay_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/relay"
	"github.com/drainscope/drainscope/store"
)

// fakePods is a PodLocator over a fixed list of pods, for the handler's
// use of their places (TestAgentWritesOnlyItsNode runs PodIndex against a
// real API server).
type fakePods struct {
	pods  []relay.PodPlace
	addrs map[netip.Addr][]relay.AddrTenure
}

func (f *fakePods) Holders(ip netip.Addr) ([]relay.AddrTenure, error) {
	return f.addrs[ip], nil
}

func (f *fakePods) Place(ref event.PodRef) (relay.PodPlace, bool, error) {
	for _, p := range f.pods {
		if (ref.UID != "" && p.UID == ref.UID) || (ref.UID == "" && p.Namespace == ref.Namespace && p.Name == ref.Name) {
			return p, true, nil
		}
	}
	return relay.PodPlace{}, false, nil
}

// forgeryBench is two nodes' agents writing through one relay into a
// real SQLite store, the pods placed by fakePods: web-1 on node-a, web-9
// on node-b. Its store holds web-9's end as node-b's agent and the
// lease holder (node-a) recorded it, and a client's failure served by
// web-9.
type forgeryBench struct {
	t     *testing.T
	st    store.Store
	h     *relay.Handler
	url   string
	base  time.Time
	pods  *fakePods
	web1  event.PodRef
	web9  event.PodRef
	ip1   netip.Addr
	ip9   netip.Addr
	truth string // the analysis's answer for web-9 before any forgery
}

func newForgeryBench(t *testing.T) *forgeryBench {
	b := &forgeryBench{t: t, st: sqlite(t), base: time.Now().Add(-30 * time.Minute),
		web1: event.PodRef{Namespace: "shop", Name: "web-1", UID: "uid-web-1", Container: "app"},
		web9: event.PodRef{Namespace: "shop", Name: "web-9", UID: "uid-web-9", Container: "app"},
		ip1:  netip.MustParseAddr("10.244.1.1"), ip9: netip.MustParseAddr("10.244.2.9"),
	}
	web1 := relay.PodPlace{Namespace: "shop", Name: "web-1", UID: "uid-web-1", Node: "node-a"}
	web9 := relay.PodPlace{Namespace: "shop", Name: "web-9", UID: "uid-web-9", Node: "node-b"}
	created := b.base.Add(-time.Minute).UnixNano()
	b.pods = &fakePods{pods: []relay.PodPlace{web1, web9}, addrs: map[netip.Addr][]relay.AddrTenure{
		b.ip1: {{Pod: web1, From: created}},
		// web-9 gave its address up when it was deleted, after its exit.
		b.ip9: {{Pod: web9, From: created, To: b.base.Add(11_100 * time.Millisecond).UnixNano()}},
	}}
	b.h = &relay.Handler{Store: b.st, Auth: nodeToken{}, Pods: b.pods}
	srv := httptest.NewServer(b.h)
	t.Cleanup(srv.Close)
	b.url = srv.URL
	wl := event.Workload{Kind: "Deployment", Name: "web"}
	at := func(ms int) int64 { return b.base.Add(time.Duration(ms) * time.Millisecond).UnixNano() }
	addr9 := netip.AddrPortFrom(b.ip9, 8080)
	ep := func(ms int, k event.Kind) event.Event {
		return event.Event{Time: at(ms), Kind: k, Source: event.SourceWatcher, Pod: b.web9, Workload: wl,
			Local: addr9, Service: "web", Slice: "web-x7k2p"}
	}
	nodeB := []event.Event{
		{Time: at(0), Kind: event.PodReady, Source: event.SourceWatcher, Pod: b.web9, Workload: wl, Local: netip.AddrPortFrom(b.ip9, 0)},
		{Time: at(10_000), Kind: event.PodDeletion, Source: event.SourceWatcher, Pod: b.web9, Workload: wl, Duration: int64(30 * time.Second)},
		{Time: at(10_010), Kind: event.Signal, Source: event.SourceKernel, Pod: b.web9, Workload: wl, PID: 42, Comm: "server",
			PeerPID: 1, PeerComm: "containerd-shim", Signal: event.SIGTERM, Flags: event.FlagMain},
		{Time: at(10_020), Kind: event.ListenerClosed, Source: event.SourceKernel, Pod: b.web9, Workload: wl, PID: 42, Comm: "server",
			Local: addr9, Flags: event.FlagMain},
		{Time: at(11_000), Kind: event.ProcessExit, Source: event.SourceKernel, Pod: b.web9, Workload: wl, PID: 42, Comm: "server", Flags: event.FlagMain},
		{Time: at(11_050), Kind: event.ContainerTerminated, Source: event.SourceWatcher, Pod: b.web9, Workload: wl, Reason: "Completed"},
	}
	// The lease holder, node-a, records web-9's endpoint.
	leader := []event.Event{ep(1, event.EndpointReady), ep(10_005, event.EndpointNotReady), ep(10_006, event.EndpointTerminating),
		ep(11_200, event.EndpointRemoved)}
	b.postOK("node:node-b", nodeB)
	b.postOK("node:node-a", leader)
	// A client's failure, through its own endpoint (here, the store).
	cf := event.Event{Time: at(10_500), Kind: event.ClientFailure, Source: event.SourceClient, Service: "web",
		Local: netip.MustParseAddrPort("10.244.3.3:40001"), Remote: netip.MustParseAddrPort("10.96.0.10:80"),
		Reason: event.FailEOF, Attrs: map[string]string{event.AttrBackend: addr9.String()}}
	cf.Seal()
	if err := b.st.Append(context.Background(), []event.Event{cf}); err != nil {
		t.Fatal(err)
	}
	b.truth = b.answer(nil)
	if !strings.Contains(b.truth, `"web-9"`) {
		t.Fatalf("the analysis's answer does not name web-9: %s", b.truth)
	}
	return b
}

func (b *forgeryBench) postOK(token string, evs []event.Event) {
	b.t.Helper()
	for i := range evs {
		evs[i].Seal()
	}
	if code, ref := post(b.t, b.url, token, evs); code != http.StatusOK {
		b.t.Fatalf("honest batch of %s: %d %+v", token, code, ref)
	}
}

// answer is the analysis's answer about web-9 over the stored events and
// extra: its timelines, the failures and their causes.
func (b *forgeryBench) answer(extra []event.Event) string {
	b.t.Helper()
	evs, err := store.Events(context.Background(), b.st, store.Query{})
	if err != nil {
		b.t.Fatal(err)
	}
	res, err := analysis.AnalyzeEvents(append(evs, extra...), store.Query{}, analysis.Options{})
	if err != nil {
		b.t.Fatal(err)
	}
	var tls []analysis.PodTimeline
	for _, tl := range res.Timelines {
		if tl.Pod.Name == "web-9" {
			tls = append(tls, tl)
		}
	}
	out, err := json.Marshal(struct {
		Timelines []analysis.PodTimeline
		Failures  []analysis.AlignedFailure
		Causes    []analysis.CauseSummary
		Inferred  []analysis.CauseSummary
	}{tls, res.Failures, res.Causes, res.InferredCauses})
	if err != nil {
		b.t.Fatal(err)
	}
	return string(out)
}

// forged is one forgery: an event node-a's agent sends about what is not
// its own, and what the refusal must say.
type forged struct {
	name string
	ev   event.Event
	says string
}

// refuse sends each forgery from node-a's agent, behind an honest event
// of its own pod, and checks that it is refused, naming it, that nothing
// of its batch is stored, and that the analysis's answer about web-9 is
// what it was; and that the forgery, stored, would have changed that
// answer (or the test would show nothing).
func (b *forgeryBench) refuse(fs []forged) {
	b.t.Helper()
	honest := event.Event{Time: b.base.Add(20 * time.Second).UnixNano(), Kind: event.Signal, Source: event.SourceKernel,
		Pod: b.web1, PID: 7, Comm: "server", Signal: event.SIGTERM}
	honest.Seal()
	for _, f := range fs {
		f.ev.Node = "node-a"
		f.ev.Seal()
		if would := b.answer([]event.Event{f.ev}); would == b.truth {
			b.t.Errorf("%s: stored, the forgery would not change the analysis's answer about web-9; the test shows nothing", f.name)
		}
		before := count(b.t, b.st, "node-a")
		code, ref := post(b.t, b.url, "node:node-a", []event.Event{honest, f.ev})
		if code != http.StatusForbidden || ref.Event == nil || *ref.Event != 1 || !strings.Contains(ref.Error, f.says) {
			b.t.Errorf("%s: %d %+v, want 403 naming event 1 and %q", f.name, code, ref, f.says)
		}
		if n := count(b.t, b.st, "node-a"); n != before {
			b.t.Errorf("%s: node-a has %d events, had %d: something of the refused batch was stored", f.name, n, before)
		}
		if got := b.answer(nil); got != b.truth {
			b.t.Errorf("%s: the analysis's answer about web-9 changed:\nbefore %s\nafter  %s", f.name, b.truth, got)
		}
	}
}

// TestForgedKindsAndPods: node-a's agent can forge web-9's end (node-b's
// pod) neither through a kernel kind sent as another source, nor through
// a watcher kind about a pod elsewhere, nor a client failure; the lease
// holder's record of web-9's endpoint, its own pod's events and a pod no
// one knows are taken.
func TestForgedKindsAndPods(t *testing.T) {
	b := newForgeryBench(t)
	at := func(ms int) int64 { return b.base.Add(time.Duration(ms) * time.Millisecond).UnixNano() }
	wl := event.Workload{Kind: "Deployment", Name: "web"}
	kill := event.Event{Time: at(10_300), Kind: event.Signal, Pod: b.web9, Workload: wl, PID: 42, Comm: "server",
		PeerPID: 999, PeerComm: "kill", Signal: event.SIGKILL, Flags: event.FlagMain}
	as := func(e event.Event, src event.Source) event.Event { e.Source = src; return e }
	exit9 := event.Event{Time: at(10_301), Kind: event.ProcessExit, Pod: b.web9, Workload: wl, PID: 42, Comm: "server",
		Signal: event.SIGKILL, Flags: event.FlagMain}
	oom := event.Event{Time: at(10_350), Kind: event.ContainerTerminated, Source: event.SourceWatcher, Pod: b.web9, Workload: wl,
		Reason: "OOMKilled", Code: 137}
	byName := func(e event.Event) event.Event { e.Pod.UID = ""; return e }
	cf := event.Event{Time: at(10_400), Kind: event.ClientFailure, Service: "web", Local: netip.MustParseAddrPort("10.244.3.3:40002"),
		Remote: netip.MustParseAddrPort("10.96.0.10:80"), Reason: event.FailReset,
		Attrs: map[string]string{event.AttrBackend: netip.AddrPortFrom(b.ip9, 8080).String()}}
	b.refuse([]forged{
		{"web-9's SIGKILL sent as a watcher's", as(kill, event.SourceWatcher), "kind signal comes from source kernel only, not watcher"},
		{"web-9's SIGKILL sent as a dataplane event", as(kill, event.SourceDataplane), "kind signal comes from source kernel only, not dataplane"},
		{"web-9's exit by SIGKILL sent as a watcher's", as(exit9, event.SourceWatcher), "kind process_exit comes from source kernel only"},
		{"web-9's SIGKILL as the kernel's", as(kill, event.SourceKernel), `which is on node "node-b"`},
		{"web-9's container OOMKilled", oom, `which is on node "node-b"`},
		{"web-9's container OOMKilled, by name", byName(oom), `which is on node "node-b"`},
		{"web-9's container OOMKilled sent as the kernel's", as(oom, event.SourceKernel), "kind container_terminated comes from source watcher only"},
		{"a client failure as the kernel's", as(cf, event.SourceKernel), "kind client_failure is no agent's"},
		{"a client failure as the watcher's", as(cf, event.SourceWatcher), "kind client_failure is no agent's"},
	})
	// kernel_capabilities is the kernel's: as the watcher's it is refused.
	caps := event.Event{Time: at(12_000), Kind: event.KernelCapabilities, Source: event.SourceWatcher, Node: "node-a"}
	caps.Seal()
	if code, ref := post(t, b.url, "node:node-a", []event.Event{caps}); code != http.StatusForbidden || !strings.Contains(ref.Error, "source kernel only") {
		t.Errorf("kernel_capabilities as the watcher's: %d %+v, want 403", code, ref)
	}

	// Taken: the lease holder's record of web-9's endpoint (a
	// cluster-wide kind), node-a's own pod's events of each source, a
	// pod no one knows (counted).
	before := b.h.Stats()
	own := []event.Event{
		{Time: at(13_000), Kind: event.EndpointServing, Source: event.SourceWatcher, Pod: b.web9, Local: netip.AddrPortFrom(b.ip9, 8080), Service: "web", Slice: "web-x7k2p"},
		{Time: at(13_001), Kind: event.PodDeletion, Source: event.SourceWatcher, Pod: b.web1},
		{Time: at(13_002), Kind: event.Signal, Source: event.SourceKernel, Pod: b.web1, PID: 7, Signal: event.SIGTERM},
		{Time: at(13_003), Kind: event.KernelCapabilities, Source: event.SourceKernel},
		{Time: at(13_004), Kind: event.ContainerStarted, Source: event.SourceWatcher, Pod: event.PodRef{Namespace: "shop", Name: "new-1", UID: "uid-new-1"}},
	}
	b.postOK("node:node-a", own)
	if s := b.h.Stats(); s.Unplaced != before.Unplaced+1 {
		t.Errorf("unplaced %d → %d, want one more (the pod no one knows)", before.Unplaced, s.Unplaced)
	}
}

// Every kind is given a source, so that a new kind is refused from agents
// until it is placed in KindSource, and every kind an agent records is one
// of an agent's sources.
func TestKindSource(t *testing.T) {
	for _, k := range event.Kinds {
		src, ok := relay.KindSource(k)
		if !ok {
			t.Errorf("kind %s has no source", k)
		}
		if agent := relay.AgentSource(src); agent == (k == event.ClientFailure || k == event.ProxyState) {
			t.Errorf("kind %s: source %s, agent's: %v", k, src, agent)
		}
	}
}

// TestForgedAddresses: node-a's agent can neither make web-9's address
// (a pod on node-b) its own pod's, which would hand web-9's clients'
// failures to web-1, nor prove failures on it with kernel events that
// name no pod; at web-9's time or within reach of it. Its own pod's
// address and an address no pod held are taken.
func TestForgedAddresses(t *testing.T) {
	b := newForgeryBench(t)
	at := func(ms int) int64 { return b.base.Add(time.Duration(ms) * time.Millisecond).UnixNano() }
	addr9 := netip.AddrPortFrom(b.ip9, 8080)
	client := netip.MustParseAddrPort("10.244.3.3:40001") // the client of the failure web-9 served
	b.refuse([]forged{
		// With no pod: an inferred failure on web-9's address, which the
		// analysis gives to web-9.
		{"a refused SYN on web-9's address", event.Event{Time: at(10_400), Kind: event.ConnRefused, Source: event.SourceKernel,
			Local: addr9, Remote: netip.MustParseAddrPort("10.244.3.3:40010"), Reason: "NO_SOCKET"}, `local address 10.244.2.9 is pod shop/web-9's`},
		{"a reset on web-9's address, 90 s after it gave it up", event.Event{Time: at(11_100 + 90_000), Kind: event.RSTSent, Source: event.SourceKernel,
			Local: addr9, Remote: netip.MustParseAddrPort("10.244.3.3:40011"), Reason: "NOT_SPECIFIED", Flags: event.FlagUnreadData},
			`on node "node-b", which held it until`},
		// Its own pod claiming web-9's address: web-9's client's failure
		// would be web-1's.
		{"web-1's reset on web-9's address", event.Event{Time: at(10_490), Kind: event.RSTSent, Source: event.SourceKernel, Pod: b.web1,
			PID: 7, Comm: "server", Local: addr9, Remote: client, Reason: "NOT_SPECIFIED"}, `local address 10.244.2.9 is pod shop/web-9's`},
		{"web-1 ready on web-9's address", event.Event{Time: at(10_490), Kind: event.PodReady, Source: event.SourceWatcher, Pod: b.web1,
			Local: netip.AddrPortFrom(b.ip9, 0)}, `no pod of node "node-a" held it then`},
		{"a refused SYN on web-9's address, IPv4 in IPv6", event.Event{Time: at(10_401), Kind: event.ConnRefused, Source: event.SourceKernel,
			Local: netip.AddrPortFrom(netip.AddrFrom16(b.ip9.As16()), 8080), Remote: netip.MustParseAddrPort("10.244.3.3:40012"), Reason: "NO_SOCKET"},
			`local address 10.244.2.9 is pod shop/web-9's`},
	})
	// Taken: web-1's own address, with its pod and without; an address
	// no pod held (the node's own); web-9's address an hour after it
	// gave it up, past the analysis's reach.
	b.postOK("node:node-a", []event.Event{
		{Time: at(12_000), Kind: event.RSTSent, Source: event.SourceKernel, Pod: b.web1, PID: 7, Local: netip.AddrPortFrom(b.ip1, 8080),
			Remote: netip.MustParseAddrPort("10.244.3.3:40020"), Reason: "NOT_SPECIFIED"},
		{Time: at(12_001), Kind: event.ConnRefused, Source: event.SourceKernel, Local: netip.AddrPortFrom(b.ip1, 8080),
			Remote: netip.MustParseAddrPort("10.244.3.3:40021")},
		{Time: at(12_002), Kind: event.ConnRefused, Source: event.SourceKernel, Local: netip.MustParseAddrPort("192.168.0.10:10250"),
			Remote: netip.MustParseAddrPort("10.244.3.3:40022")},
		{Time: at(12_003), Kind: event.PodReady, Source: event.SourceWatcher, Pod: b.web1, Local: netip.AddrPortFrom(b.ip1, 0)},
	})
	late := event.Event{Time: at(11_100 + 20*60_000), Kind: event.ConnRefused, Source: event.SourceKernel, Local: addr9,
		Remote: netip.MustParseAddrPort("10.244.3.3:40023")}
	b.postOK("node:node-a", []event.Event{late})
}
