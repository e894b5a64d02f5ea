package web

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/eventfile"
	"github.com/drainscope/drainscope/store"
)

var update = flag.Bool("update", false, "rewrite the golden files and the recorded fixture under testdata/")

// fixturePath is the recorded rollout the page, API and browser tests read:
// one event per line, as encoding/json writes event.Event.
const fixturePath = "testdata/lab-rollout.jsonl"

// fixtureNow is the clock the tests run at: an hour after the fixture's
// rollout, so nothing in it is still in progress.
var fixtureNow = time.Date(2026, 3, 14, 13, 0, 0, 0, time.UTC)

var fixtureT0 = time.Date(2026, 3, 14, 12, 0, 25, 0, time.UTC).UnixNano()

const (
	ms  = int64(time.Millisecond)
	sec = int64(time.Second)
)

// recorder writes events in the shapes the watcher, the eBPF programs and
// the lab's load generator record them.
type recorder struct {
	events []event.Event
}

type fpod struct {
	ref  event.PodRef
	wl   event.Workload
	ip   netip.Addr
	node string
	pid  int32
	svc  string
	comm string
}

func (p *fpod) addr() netip.AddrPort { return netip.AddrPortFrom(p.ip, 8080) }

func (r *recorder) add(e event.Event) {
	if e.Source == "" {
		e.Source = event.SourceLab
	}
	e.Seal()
	r.events = append(r.events, e)
}

func (r *recorder) pod(p *fpod, t int64, k event.Kind) event.Event {
	return event.Event{Time: t, Kind: k, Node: p.node, Source: event.SourceWatcher, Pod: p.ref, Workload: p.wl}
}

func (r *recorder) kernel(p *fpod, t int64, k event.Kind) event.Event {
	return event.Event{Time: t, Kind: k, Node: p.node, Source: event.SourceKernel, Pod: p.ref, PID: p.pid, Comm: p.comm, NetNS: 4026532000 + uint64(p.pid)}
}

func (r *recorder) endpoint(p *fpod, t int64, k event.Kind, node string) {
	e := r.pod(p, t, k)
	e.Node, e.Local, e.Service, e.Slice = node, p.addr(), p.svc, p.svc+"-7xk2q"
	r.add(e)
}

func (r *recorder) start(p *fpod, created int64, nodes []string) int64 {
	c := r.pod(p, created, event.PodCreated)
	c.Attrs = map[string]string{event.AttrCreationTimestamp: time.Unix(0, created).UTC().Truncate(time.Second).Format(time.RFC3339)}
	r.add(c)
	ready := created + 2200*ms
	e := r.pod(p, ready, event.PodReady)
	e.Local = netip.AddrPortFrom(p.ip, 0)
	r.add(e)
	for i, n := range nodes {
		r.endpoint(p, ready+int64(40+70*i)*ms, event.EndpointReady, n)
	}
	return ready
}

var fixtureClusterIP = netip.MustParseAddrPort("10.96.0.10:80")

func fclient(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr("10.244.0.1"), uint16(40000+i))
}

func (r *recorder) failure(t int64, c netip.AddrPort, class string, p *fpod, took time.Duration, target string) {
	e := event.Event{
		Time: t, Kind: event.ClientFailure, Source: event.SourceClient,
		Local: c, Remote: fixtureClusterIP, Reason: class, Duration: int64(took), Service: p.svc,
		Attrs: map[string]string{event.AttrTarget: target, event.AttrBackend: p.addr().String()},
	}
	r.add(e)
}

type stop struct {
	grace     time.Duration
	preStop   time.Duration
	exitAfter time.Duration // SIGTERM to exit; 0: never exits by itself
	refused   int           // new connections refused while a node still routes
	keepAlive int           // idle keep-alive connections cut at exit
	raced     int           // of those, how many a client then used
	inFlight  bool          // a slow request cut at exit
	drained   int           // connections the app closed while draining
}

// terminate records one pod's end as the kubelet, the EndpointSlice
// controller, the proxies on each node, the kernel and the clients see it.
func (r *recorder) terminate(p *fpod, del int64, nodes []string, st stop, cl *int) {
	d := r.pod(p, del, event.PodDeletion)
	d.Duration = int64(st.grace)
	d.Attrs = map[string]string{event.AttrDeletionTimestamp: time.Unix(0, del).UTC().Truncate(time.Second).Format(time.RFC3339)}
	r.add(d)
	// The endpoint leaves rotation first on the control plane's node, then,
	// 550 ms later, on the other (the proxy's lag).
	for i, n := range nodes {
		t := del + 350*ms + int64(i)*550*ms
		r.endpoint(p, t, event.EndpointNotReady, n)
		r.endpoint(p, t+2*ms, event.EndpointTerminating, n)
	}
	sigterm := del + 20*ms + int64(st.preStop)
	if st.preStop > 0 {
		h := r.kernel(p, sigterm-1*ms, event.ProcessExit)
		h.PID, h.Comm = p.pid+100, "sleep"
		r.add(h)
	}
	sig := r.kernel(p, sigterm, event.Signal)
	sig.Signal, sig.PeerPID, sig.PeerComm = 15, 1873, "containerd-shim"
	r.add(sig)
	lc := r.kernel(p, sigterm+1*ms, event.ListenerClosed)
	lc.Local = netip.AddrPortFrom(netip.IPv4Unspecified(), 8080)
	r.add(lc)
	lastRotation := del + 350*ms + int64(len(nodes)-1)*550*ms
	for i := 0; i < st.refused; i++ {
		t := sigterm + 150*ms + int64(i)*int64(lastRotation-sigterm-200*ms)/int64(max(st.refused, 1))
		if t >= lastRotation {
			break
		}
		c := fclient(*cl)
		*cl++
		e := r.kernel(p, t, event.ConnRefused)
		e.PID, e.Comm, e.Local, e.Remote = 0, "", p.addr(), c
		r.add(e)
		r.failure(t+300_000, c, event.FailRefused, p, 400*time.Microsecond, "http://checkout.shop.svc/cart")
	}
	for i := 0; i < st.drained; i++ {
		c := fclient(*cl)
		*cl++
		e := r.kernel(p, sigterm+40*ms+int64(i)*int64(2500*ms)/int64(st.drained), event.ConnClosed)
		e.Local, e.Remote, e.Reason = p.addr(), c, "peer"
		if i%3 == 0 {
			e.Reason = "local"
		}
		r.add(e)
	}
	end := sigterm + int64(st.exitAfter)
	killed := st.exitAfter == 0 || del+int64(st.grace) < end
	if killed {
		end = del + int64(st.grace)
		k := r.kernel(p, end, event.Signal)
		k.Signal, k.PeerPID, k.PeerComm = 9, 1873, "containerd-shim"
		r.add(k)
		x := r.kernel(p, end+1*ms, event.ProcessExit)
		x.Signal = 9
		r.add(x)
	} else {
		r.add(r.kernel(p, end, event.ProcessExit))
	}
	for i := 0; i < st.keepAlive; i++ {
		c := fclient(*cl)
		*cl++
		e := r.kernel(p, end+int64(i)*20_000+50_000, event.ConnClosed)
		e.Local, e.Remote, e.Reason, e.Flags = p.addr(), c, "local", event.FlagAtExit
		r.add(e)
		if i < st.raced {
			rt := end + 2*ms + int64(i)*900_000
			rst := r.kernel(p, rt, event.RSTSent)
			rst.Local, rst.Remote, rst.Reason = p.addr(), c, "NO_SOCKET"
			r.add(rst)
			class := event.FailEOF
			if killed {
				class = event.FailReset
			}
			r.failure(rt+400_000, c, class, p, 3*time.Millisecond, "http://checkout.shop.svc/cart")
		}
	}
	if st.inFlight {
		c := fclient(*cl)
		*cl++
		rst := r.kernel(p, end+30_000, event.RSTSent)
		rst.Local, rst.Remote, rst.Reason, rst.Flags = p.addr(), c, "NOT_SPECIFIED", event.FlagAtExit|event.FlagUnreadData
		r.add(rst)
		r.failure(end+1*ms, c, event.FailReset, p, 1800*time.Millisecond, "http://checkout.shop.svc/checkout")
	}
	for i, n := range nodes {
		r.endpoint(p, end+int64(80+30*i)*ms, event.EndpointRemoved, n)
	}
	ct := r.pod(p, end+150*ms, event.ContainerTerminated)
	if killed {
		ct.Reason, ct.Code, ct.Signal = "Error", 137, 9
	} else {
		ct.Reason = "Completed"
	}
	r.add(ct)
}

// recordFixture builds the fixture: seed 000's shape (a Deployment of four
// replicas behind a ClusterIP, maxSurge 1, maxUnavailable 0, an app that
// closes its listener at SIGTERM and exits 3.0 s later, keep-alive clients),
// with the last pod's grace period too short so it ends in SIGKILL; a
// quiet rollout that drained properly; and one whose names are markup.
func recordFixture() []event.Event {
	r := &recorder{}
	nodes := []string{"node-a", "node-b"}
	cl := 0
	wl := event.Workload{Kind: "Deployment", Name: "checkout"}
	oldNames := []string{"x2k4p", "q7m2n", "r9t5w", "z3h8c"}
	newNames := []string{"b5n2k", "c8v4l", "d2w7m", "f6q9p"}
	for i := range 4 {
		old := &fpod{
			ref: event.PodRef{Namespace: "shop", Name: "checkout-6d9f7c5b8-" + oldNames[i], UID: fmt.Sprintf("6d9f7c5b-0000-4000-8000-00000000000%d", i), Container: "app"},
			wl:  wl, ip: netip.AddrFrom4([4]byte{10, 244, 0, byte(11 + i)}), node: nodes[i%2], pid: int32(4242 + i), svc: "checkout", comm: "python3",
		}
		nw := &fpod{
			ref: event.PodRef{Namespace: "shop", Name: "checkout-7f8c9d6a1-" + newNames[i], UID: fmt.Sprintf("7f8c9d6a-0000-4000-8000-00000000000%d", i), Container: "app"},
			wl:  wl, ip: netip.AddrFrom4([4]byte{10, 244, 0, byte(21 + i)}), node: nodes[(i+1)%2], pid: int32(5242 + i), svc: "checkout", comm: "python3",
		}
		// With maxSurge 1 the next new pod is created as soon as the
		// previous old one is deleted, so terminations overlap.
		created := fixtureT0 + int64(i)*2300*ms
		ready := r.start(nw, created, nodes)
		st := stop{grace: 30 * time.Second, exitAfter: 3 * time.Second, refused: 2, keepAlive: 5, raced: 3, drained: 6}
		switch i {
		case 1:
			st.inFlight = true
		case 3:
			st.grace, st.exitAfter, st.refused = 2*time.Second, 0, 1
		}
		r.terminate(old, ready+100*ms, nodes, st, &cl)
	}
	// A rollout an hour earlier that drained properly: preStop 5 s, then
	// Connection: close until the pool emptied, exit 1.2 s after SIGTERM.
	lwl := event.Workload{Kind: "Deployment", Name: "ledger"}
	for i := range 2 {
		old := &fpod{ref: event.PodRef{Namespace: "payments", Name: fmt.Sprintf("ledger-5c7d8-%c%c4k2", 'a'+i, 'm'+i), UID: fmt.Sprintf("5c7d8000-0000-4000-8000-00000000000%d", i), Container: "ledger"},
			wl: lwl, ip: netip.AddrFrom4([4]byte{10, 244, 0, byte(41 + i)}), node: nodes[i%2], pid: int32(6242 + i), svc: "ledger", comm: "ledger"}
		nw := &fpod{ref: event.PodRef{Namespace: "payments", Name: fmt.Sprintf("ledger-9a1b2-%c%c7x3", 'a'+i, 'p'+i), UID: fmt.Sprintf("9a1b2000-0000-4000-8000-00000000000%d", i), Container: "ledger"},
			wl: lwl, ip: netip.AddrFrom4([4]byte{10, 244, 0, byte(51 + i)}), node: nodes[(i+1)%2], pid: int32(7242 + i), svc: "ledger", comm: "ledger"}
		created := fixtureT0 - int64(time.Hour) + int64(i)*9*sec
		ready := r.start(nw, created, nodes)
		r.terminate(old, ready+100*ms, nodes, stop{grace: 30 * time.Second, preStop: 5 * time.Second, exitAfter: 1200 * time.Millisecond, drained: 8}, &cl)
	}
	// Names a hostile or careless cluster could hold: they must render as
	// text everywhere.
	ewl := event.Workload{Kind: "Deployment", Name: `<img src=x onerror=alert(2)>`}
	evil := &fpod{ref: event.PodRef{Namespace: `ns"'<b>`, Name: `<script>alert(1)</script>`, UID: "e0000000-0000-4000-8000-000000000001", Container: `"><svg onload=alert(3)>`},
		wl: ewl, ip: netip.AddrFrom4([4]byte{10, 244, 0, 66}), node: `node-<i>x</i>`, pid: 8242, svc: `svc</script><script>alert(4)</script>`, comm: `<b>app`}
	r.terminate(evil, fixtureT0-2*int64(time.Hour), []string{`node-<i>x</i>`}, stop{grace: 30 * time.Second, exitAfter: 3 * time.Second, keepAlive: 2, raced: 1}, &cl)
	sort.SliceStable(r.events, func(i, j int) bool { return r.events[i].Time < r.events[j].Time })
	return r.events
}

func writeFixture(path string, evs []event.Event) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i := range evs {
		if err := enc.Encode(&evs[i]); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// fixtureStore opens a fresh SQLite store holding the recorded fixture.
func fixtureStore(t testing.TB) store.Store {
	t.Helper()
	evs, err := eventfile.Read(fixturePath)
	if err != nil {
		t.Fatalf("reading the fixture (go test ./web -run TestFixture -update writes it): %v", err)
	}
	return storeWith(t, evs)
}

func storeWith(t testing.TB, evs []event.Event) store.Store {
	t.Helper()
	ctx := context.Background()
	st, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for i := 0; i < len(evs); i += 5000 {
		if err := st.Append(ctx, evs[i:min(i+5000, len(evs))]); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// TestFixture keeps the recorded fixture in step with its recorder.
func TestFixture(t *testing.T) {
	evs := recordFixture()
	if *update {
		if err := writeFixture(fixturePath, evs); err != nil {
			t.Fatal(err)
		}
	}
	got, err := eventfile.Read(fixturePath)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(evs) {
		t.Fatalf("fixture has %d events, the recorder makes %d: run with -update", len(got), len(evs))
	}
	for i := range got {
		if got[i].ID != evs[i].ID { // same content, same identity
			t.Fatalf("event %d differs from the recorder's: run with -update", i)
		}
	}
}
