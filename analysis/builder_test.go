package analysis

import (
	"cmp"
	"fmt"
	"net/netip"
	"time"

	"github.com/drainscope/drainscope/event"
)

// rec builds event sequences shaped like what the watcher (pod and
// EndpointSlice transitions, one observation per node), the eBPF programs
// (signals, exits, socket closes and resets, attributed to the pod) and the
// lab's load generator (client failures) record.
type rec struct {
	t0     int64
	nodes  []string
	events []event.Event
	// target is what failure's clients dialled by name (default the web
	// Service's URL): a scenario of another Service names that one.
	target string
}

const (
	ms = int64(time.Millisecond)
	s  = int64(time.Second)
)

var t0 = time.Date(2026, 3, 14, 12, 0, 25, 0, time.UTC).UnixNano()

func newRec(nodes ...string) *rec {
	if len(nodes) == 0 {
		nodes = []string{"lab"}
	}
	return &rec{t0: t0, nodes: nodes}
}

type tpod struct {
	ref  event.PodRef
	wl   event.Workload
	ip   netip.Addr
	port uint16
	node string
	pid  int32
	svc  string
}

func (r *rec) pod(name, ip string) *tpod {
	return &tpod{
		ref:  event.PodRef{Namespace: "default", Name: name, UID: "uid-" + name, Container: "app"},
		wl:   event.Workload{Kind: "Deployment", Name: "web"},
		ip:   netip.MustParseAddr(ip),
		port: 8080, node: r.nodes[0], pid: 4242, svc: "web",
	}
}

func (p *tpod) addr() netip.AddrPort { return netip.AddrPortFrom(p.ip, p.port) }

func (r *rec) add(e event.Event) *event.Event {
	if e.Source == "" {
		e.Source = event.SourceLab
	}
	e.Seal()
	r.events = append(r.events, e)
	return &r.events[len(r.events)-1]
}

// at is t0 plus d.
func (r *rec) at(d int64) int64 { return r.t0 + d }

func (r *rec) podEvent(p *tpod, d int64, k event.Kind) event.Event {
	return event.Event{Time: r.at(d), Kind: k, Node: p.node, Source: event.SourceWatcher, Pod: p.ref, Workload: p.wl}
}

func (r *rec) created(p *tpod, d int64) { r.add(r.podEvent(p, d, event.PodCreated)) }

// ready: the pod turns ready and every node sees its endpoint become ready.
func (r *rec) ready(p *tpod, d int64) {
	e := r.podEvent(p, d, event.PodReady)
	e.Local = netip.AddrPortFrom(p.ip, 0)
	r.add(e)
	for i, n := range r.nodes {
		r.endpoint(p, d+int64(i+1)*ms, event.EndpointReady, n)
	}
}

func (r *rec) endpoint(p *tpod, d int64, k event.Kind, node string) {
	e := r.podEvent(p, d, k)
	e.Node, e.Local, e.Service, e.Slice = node, p.addr(), p.svc, p.svc+"-abcde"
	r.add(e)
}

// leave: every node sees the endpoint go not ready and terminating, the
// first at d, each next one spread later.
func (r *rec) leave(p *tpod, d, spread int64) {
	for i, n := range r.nodes {
		r.endpoint(p, d+int64(i)*spread, event.EndpointNotReady, n)
		r.endpoint(p, d+int64(i)*spread, event.EndpointTerminating, n)
	}
}

func (r *rec) removed(p *tpod, d, spread int64) {
	for i, n := range r.nodes {
		r.endpoint(p, d+int64(i)*spread, event.EndpointRemoved, n)
	}
}

func (r *rec) deletion(p *tpod, d int64, grace time.Duration) {
	e := r.podEvent(p, d, event.PodDeletion)
	e.Duration = int64(grace)
	e.Attrs = map[string]string{event.AttrDeletionTimestamp: time.Unix(0, r.at(d)).UTC().Truncate(time.Second).Format(time.RFC3339)}
	r.add(e)
}

func (r *rec) kernel(p *tpod, d int64, k event.Kind) event.Event {
	return event.Event{Time: r.at(d), Kind: k, Node: p.node, Source: event.SourceKernel, Pod: p.ref, PID: p.pid, Comm: "python3", NetNS: 4026532001}
}

func (r *rec) signal(p *tpod, d int64, sig int32) {
	e := r.kernel(p, d, event.Signal)
	e.Signal, e.PeerPID, e.PeerComm = sig, 1, "drainscope-lab"
	r.add(e)
}

// runtimeSignal is a signal as runc sends it on a real node, to the app
// container's process.
func (r *rec) runtimeSignal(p *tpod, d int64, sig int32) {
	e := r.kernel(p, d, event.Signal)
	e.Signal, e.PeerPID, e.PeerComm, e.Reason = sig, 7001, "runc", "delivered"
	r.add(e)
}

// selfSignal is a signal the pod's process sends itself, with its result.
func (r *rec) selfSignal(p *tpod, d int64, sig int32, result string) {
	e := r.kernel(p, d, event.Signal)
	e.Signal, e.PeerPID, e.PeerComm, e.Reason = sig, p.pid, e.Comm, result
	r.add(e)
}

// sandboxKilled is the runtime stopping the pod's sandbox on a real node:
// SIGKILL to the pause process of its own container, and its exit.
func (r *rec) sandboxKilled(p *tpod, d int64) {
	e := r.kernel(p, d, event.Signal)
	e.Pod.Container, e.PID, e.Comm = "sandbox", 4000, "pause"
	e.Signal, e.PeerPID, e.PeerComm, e.Reason = 9, 7002, "runc", "delivered"
	r.add(e)
	x := r.kernel(p, d+1*ms, event.ProcessExit)
	x.Pod.Container, x.PID, x.Comm, x.Signal = "sandbox", 4000, "pause", 9
	r.add(x)
}

func (r *rec) exit(p *tpod, d int64, code, sig int32) {
	e := r.kernel(p, d, event.ProcessExit)
	e.Code, e.Signal = code, sig
	r.add(e)
}

// helperExit is a process of the pod other than the server, such as the
// preStop hook's sleep.
func (r *rec) helperExit(p *tpod, d int64) {
	e := r.kernel(p, d, event.ProcessExit)
	e.PID, e.Comm = p.pid+100, "sleep"
	r.add(e)
}

func (r *rec) listenerClosed(p *tpod, d int64) {
	e := r.kernel(p, d, event.ListenerClosed)
	e.Local = netip.AddrPortFrom(netip.IPv4Unspecified(), p.port)
	r.add(e)
}

func (r *rec) connClosed(p *tpod, d int64, client netip.AddrPort, reason string, f event.Flags) {
	e := r.kernel(p, d, event.ConnClosed)
	e.Local, e.Remote, e.Reason, e.Flags = p.addr(), client, reason, f
	r.add(e)
}

// connClosedIdle is a connection the exit closed idle for the given time
// since its last packet, as the kernel capture measures it.
func (r *rec) connClosedIdle(p *tpod, d int64, client netip.AddrPort, idle int64) {
	e := r.kernel(p, d, event.ConnClosed)
	e.Local, e.Remote, e.Reason, e.Flags, e.Duration = p.addr(), client, "local", event.FlagAtExit, idle
	r.add(e)
}

func (r *rec) rst(p *tpod, d int64, client netip.AddrPort, reason string, f event.Flags) {
	e := r.kernel(p, d, event.RSTSent)
	e.Local, e.Remote, e.Reason, e.Flags = p.addr(), client, reason, f
	r.add(e)
}

func (r *rec) refused(p *tpod, d int64, client netip.AddrPort) {
	e := r.kernel(p, d, event.ConnRefused)
	e.PID, e.Comm = 0, ""
	e.Local, e.Remote = p.addr(), client
	r.add(e)
}

var clusterIP = netip.MustParseAddrPort("10.96.0.10:80")

func client(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr("10.244.0.1"), uint16(40000+i))
}

type fopt func(*event.Event)

func backend(p *tpod) fopt {
	return func(e *event.Event) {
		if e.Attrs == nil {
			e.Attrs = map[string]string{}
		}
		e.Attrs[event.AttrBackend] = p.addr().String()
	}
}

func took(d time.Duration) fopt { return func(e *event.Event) { e.Duration = int64(d) } }

func service(name string) fopt { return func(e *event.Event) { e.Service = name } }

// failure is a client failure as the lab's load generator records it: the
// client dialled the ClusterIP; the backend is known only when an option
// says so.
func (r *rec) failure(d int64, c netip.AddrPort, class string, opts ...fopt) {
	e := event.Event{
		Time: r.at(d), Kind: event.ClientFailure, Source: event.SourceClient, Node: "",
		Local: c, Remote: clusterIP, Reason: class, Duration: int64(2 * time.Millisecond),
		Attrs: map[string]string{event.AttrTarget: cmp.Or(r.target, "http://web.default.svc/")},
	}
	for _, o := range opts {
		o(&e)
	}
	r.add(e)
}

// gracefulPreStop records seed 000's "graceful + preStop" shape for one pod
// deleted at d: endpoint not ready 0.4 s later (spread 50 ms over the
// nodes), the preStop sleep's 5 s, SIGTERM, the listener closed at SIGTERM,
// the exit 3.0 s after SIGTERM with the given keep-alive connections closed
// by the exit, each then reset when its client sent the next request, and
// the endpoint removed just after the exit. It returns the exit's offset.
func (r *rec) gracefulPreStop(p *tpod, d int64, clients []netip.AddrPort) int64 {
	r.deletion(p, d, 30*time.Second)
	r.leave(p, d+400*ms, 50*ms)
	r.helperExit(p, d+5*s-1*ms)
	r.signal(p, d+5*s, 15)
	r.listenerClosed(p, d+5*s+1*ms)
	exit := d + 8*s
	r.exit(p, exit, 0, 0)
	for i, c := range clients {
		r.connClosed(p, exit+int64(i)*10_000+50_000, c, "local", event.FlagAtExit)
		r.rst(p, exit+2*ms+int64(i)*10_000, c, "NO_SOCKET", 0)
	}
	r.removed(p, exit+100*ms, 20*ms)
	e := r.podEvent(p, exit+150*ms, event.ContainerTerminated)
	e.Reason = "Completed"
	r.add(e)
	return exit
}

func (p *tpod) String() string { return fmt.Sprintf("%s/%s", p.ref.Namespace, p.ref.Name) }

// dataplane: node's proxy (kube-proxy, nftables) began (added) or stopped
// sending the pod's Service to its endpoint at d. The event names the
// Service and address only, as the agent records it.
func (r *rec) dataplane(p *tpod, d int64, node string, added bool) {
	k := event.DataplaneEndpointRemoved
	if added {
		k = event.DataplaneEndpointAdded
	}
	r.add(event.Event{Time: r.at(d), Kind: k, Node: node, Source: event.SourceDataplane,
		Pod: event.PodRef{Namespace: p.ref.Namespace}, Service: p.svc, Local: p.addr(),
		Attrs: map[string]string{event.AttrProxy: event.ProxyNFTables, event.AttrServicePort: "http", event.AttrProtocol: "tcp"}})
}

// started: the watcher sees the pod's app container running, with attrs
// (its role, ports, preStop, grace period) as its spec gives them.
func (r *rec) started(p *tpod, d int64, attrs map[string]string) {
	e := r.podEvent(p, d, event.ContainerStarted)
	e.Attrs = attrs
	r.add(e)
}

// nodeInfo: node's agent records the API server's and its kubelet's
// versions.
func (r *rec) nodeInfo(node string, d int64, api, kubelet string) {
	r.add(event.Event{Time: r.at(d), Kind: event.NodeInfo, Node: node, Source: event.SourceWatcher, Reason: event.ChangeObserved,
		Flags: event.FlagObserved, Attrs: map[string]string{event.AttrAPIServerVersion: api, event.AttrKubeletVersion: kubelet}})
}
