package fleet

import (
	"container/heap"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/drainscope/drainscope/event"
)

// Model is the event mix a node emits, with the flight recorder on each
// node (ordinary connection closes stored only around a pod's end), the
// endpoint watcher in leader mode and the dataplane bounded. Every
// assumption is a field, printed with the results.
type Model struct {
	PodsPerNode int     // pods per node (30: 150,000 pods on 5,000 nodes)
	Churn       float64 // pods ending per second cluster-wide, each replaced by a new one elsewhere
	// ConnsMin–ConnsMax ordinary conn_closed events stored per ending
	// pod: the flight recorder's window around its end.
	ConnsMin, ConnsMax int
	// RSTsMax: 0–RSTsMax resets per ending pod (stored always).
	RSTsMax int
	// Background: resets, refusals and received resets per pod per
	// minute in steady state, stored always.
	Background float64
	// DataplaneNodes nodes record each endpoint change DataplanePerChange
	// times (rule events); the other nodes record none.
	DataplaneNodes, DataplanePerChange int
	// Rollout replicas of one Deployment, spread over the nodes, replaced
	// over RolloutOver, after the steady state.
	Rollout     int
	RolloutOver time.Duration
	// History: the running pods were recorded this long before the run
	// (their creation, start, readiness and endpoint), as a cluster that
	// has run a while holds them; 0, a cluster as new as the run.
	History time.Duration
	// ObserveEvery: the watcher records the running pods' state again
	// this often (watcher.ObserveEvery): each node's agent its pods'
	// readiness and container, the leader every endpoint; 0, never.
	ObserveEvery time.Duration
}

// DefaultModel is the model the table in docs/scale.md was measured with.
func DefaultModel() Model {
	return Model{PodsPerNode: 30, Churn: 20, ConnsMin: 20, ConnsMax: 50, RSTsMax: 4, Background: 0.5,
		DataplaneNodes: 20, DataplanePerChange: 1, Rollout: 1000, RolloutOver: 60 * time.Second, ObserveEvery: 10 * time.Minute}
}

// Describe states the model in words, for the output and the docs.
func (m Model) Describe(nodes int) string {
	return fmt.Sprintf("%d pods per node (%d pods); %.0f pods ending/s cluster-wide, each replaced on another node; per ending pod on its node: "+
		"pod_deletion, SIGTERM, listener close, %d–%d conn_closed (flight recorder), 0–%d RSTs, exit, container_terminated; "+
		"the new pod: pod_created, container_started, pod_ready on its node; endpoint events (not-ready, terminating, removed, added, ready) "+
		"by one leader agent; %d dataplane event(s) per endpoint change on %d sample nodes, none on the others; background %.2f resets/refusals per pod per minute; "+
		"then a %d-replica rollout (Deployment shop/checkout, one pod per node where nodes allow) over %v%s",
		m.PodsPerNode, m.PodsPerNode*nodes, m.Churn, m.ConnsMin, m.ConnsMax, m.RSTsMax, m.DataplanePerChange, m.DataplaneNodes,
		m.Background, m.Rollout, m.RolloutOver, m.describeHistory())
}

func (m Model) describeHistory() string {
	var s string
	if m.ObserveEvery > 0 {
		s = fmt.Sprintf("; every %v the running pods' readiness and container observed by their nodes (ticks spread over the interval) and their endpoints by the leader (at once, half way)", m.ObserveEvery)
	}
	if m.History <= 0 {
		return s + "; no history before the run"
	}
	return s + fmt.Sprintf("; every running pod's (the rollout's too) creation, start, readiness and endpoint recorded %v before the run, and the observations of the last %v before it", m.History, observationSpan)
}

// due is an event to hand to agent at its time.
type due struct {
	agent int
	ev    event.Event
}

type schedule []due

func (s schedule) Len() int           { return len(s) }
func (s schedule) Less(i, j int) bool { return s[i].ev.Time < s[j].ev.Time }
func (s schedule) Swap(i, j int)      { s[i], s[j] = s[j], s[i] }
func (s *schedule) Push(x any)        { *s = append(*s, x.(due)) }
func (s *schedule) Pop() any {
	old := *s
	x := old[len(old)-1]
	*s = old[:len(old)-1]
	return x
}

// traffic makes the cluster's events. Node i's events go to agent i;
// agent 0 is the endpoint watcher's leader.
type traffic struct {
	m     Model
	nodes int
	r     *rand.Rand
	q     schedule
	seq   int
	// dpNodes record dataplane events.
	dpNodes []int
	// rolloutAt is when the rollout is due: its pods are observed
	// before it.
	rolloutAt time.Time
}

func newTraffic(m Model, nodes int, seed uint64) *traffic {
	t := &traffic{m: m, nodes: nodes, r: rand.New(rand.NewPCG(seed, seed^0x5bd1e995))}
	for i := range min(m.DataplaneNodes, nodes) {
		t.dpNodes = append(t.dpNodes, (i*nodes/max(m.DataplaneNodes, 1)+1)%nodes)
	}
	return t
}

func nodeName(i int) string { return fmt.Sprintf("sim-node-%05d", i) }

// add schedules an event of node at t, with a nanosecond offset of its own
// so that no two events are the same event.
func (t *traffic) add(node int, at time.Time, e event.Event) {
	e.Node = nodeName(node)
	e.Time = at.UnixNano() + int64(t.r.IntN(1000))
	e.Seal()
	heap.Push(&t.q, due{agent: node, ev: e})
}

// poisson draws a count with mean l.
func (t *traffic) poisson(l float64) int {
	if l > 50 { // normal approximation
		return max(0, int(math.Round(l+math.Sqrt(l)*t.r.NormFloat64())))
	}
	n, p, limit := 0, 1.0, math.Exp(-l)
	for {
		p *= t.r.Float64()
		if p <= limit {
			return n
		}
		n++
	}
}

type pod struct {
	ref  event.PodRef
	wl   event.Workload
	addr netip.AddrPort
	svc  string
	node int
}

func (t *traffic) newPod(ns, workload string, node int) pod {
	t.seq++
	n := t.seq
	return pod{
		ref: event.PodRef{Namespace: ns, Name: fmt.Sprintf("%s-%x-%05d", workload, t.r.Uint32()&0xfffff, n%100000),
			UID: fmt.Sprintf("%08x-0000-4000-8000-%012d", t.r.Uint32(), n), Container: "app"},
		wl:   event.Workload{Kind: "Deployment", Name: workload},
		addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)}), 8080),
		svc:  workload,
		node: node,
	}
}

// steadyWorkload names a steady-state pod's Deployment: 10,000 Services'
// worth, as many as Kubernetes' threshold.
func (t *traffic) steadyWorkload() string { return fmt.Sprintf("svc-%04d", t.r.IntN(10000)) }

// end schedules a pod's end from at, and its replacement on another node.
func (t *traffic) end(p pod, at time.Time) {
	ms := func(d float64) time.Duration { return time.Duration(d * float64(time.Millisecond)) }
	base := event.Event{Pod: p.ref, Workload: p.wl}
	kern := func(e event.Event) event.Event {
		e.Source, e.PID, e.Comm = event.SourceKernel, 4242, "server"
		return e
	}
	del := base
	del.Kind, del.Source, del.Duration = event.PodDeletion, event.SourceWatcher, int64(30*time.Second)
	del.Attrs = map[string]string{event.AttrDeletionTimestamp: at.UTC().Truncate(time.Second).Format(time.RFC3339)}
	t.add(p.node, at, del)
	ep := func(k event.Kind, dt time.Duration, addr netip.AddrPort, ref event.PodRef, svc string) {
		e := event.Event{Kind: k, Source: event.SourceWatcher, Pod: ref, Local: addr, Service: svc, Slice: svc + "-x7k2p"}
		t.add(0, at.Add(dt), e)
	}
	ep(event.EndpointNotReady, ms(300+t.r.Float64()*200), p.addr, p.ref, p.svc)
	ep(event.EndpointTerminating, ms(305+t.r.Float64()*200), p.addr, p.ref, p.svc)
	sig := kern(base)
	sig.Kind, sig.PeerPID, sig.PeerComm, sig.Signal = event.Signal, 1, "containerd-shim", 15
	t.add(p.node, at.Add(ms(10+t.r.Float64()*20)), sig)
	lc := kern(base)
	lc.Kind, lc.Local = event.ListenerClosed, p.addr
	t.add(p.node, at.Add(ms(35)), lc)
	conns := t.m.ConnsMin + t.r.IntN(max(t.m.ConnsMax-t.m.ConnsMin+1, 1))
	for range conns {
		c := kern(base)
		c.Kind, c.Reason, c.Local = event.ConnClosed, "local", p.addr
		c.Remote = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 200, byte(t.r.IntN(256)), byte(t.r.IntN(256))}), uint16(30000+t.r.IntN(30000)))
		if t.r.IntN(3) == 0 {
			c.Flags = event.FlagAtExit
		}
		t.add(p.node, at.Add(ms(t.r.Float64()*3000)), c)
	}
	for range t.r.IntN(t.m.RSTsMax + 1) {
		c := kern(base)
		c.Kind, c.Reason, c.Local = event.RSTSent, "NOT_SPECIFIED", p.addr
		c.Remote = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 200, byte(t.r.IntN(256)), byte(t.r.IntN(256))}), uint16(30000+t.r.IntN(30000)))
		t.add(p.node, at.Add(ms(2900+t.r.Float64()*200)), c)
	}
	ex := kern(base)
	ex.Kind = event.ProcessExit
	t.add(p.node, at.Add(ms(3000+t.r.Float64()*10)), ex)
	ct := base
	ct.Kind, ct.Source, ct.Reason = event.ContainerTerminated, event.SourceWatcher, "Completed"
	t.add(p.node, at.Add(ms(3050+t.r.Float64()*20)), ct)
	ep(event.EndpointRemoved, ms(3200+t.r.Float64()*100), p.addr, p.ref, p.svc)
	t.dataplane(event.DataplaneEndpointRemoved, at.Add(ms(1300)), p)

	// The replacement, on another node, ready after 2–4 s.
	np := t.newPod(p.ref.Namespace, p.wl.Name, t.r.IntN(t.nodes))
	start := at.Add(ms(100 + t.r.Float64()*200))
	for i, k := range []event.Kind{event.PodCreated, event.ContainerStarted, event.PodReady} {
		e := event.Event{Kind: k, Source: event.SourceWatcher, Pod: np.ref, Workload: np.wl}
		t.add(np.node, start.Add(time.Duration(i)*ms(1000+t.r.Float64()*1000)), e)
	}
	ep(event.EndpointAdded, ms(3000+t.r.Float64()*1000), np.addr, np.ref, np.svc)
	ep(event.EndpointReady, ms(3010+t.r.Float64()*1000), np.addr, np.ref, np.svc)
	t.dataplane(event.DataplaneEndpointAdded, at.Add(ms(4200)), np)
}

// dataplane schedules a rule change of p's endpoint on the sample nodes.
func (t *traffic) dataplane(k event.Kind, at time.Time, p pod) {
	chain := endpointChain(p.ref.Namespace, p.svc, "http", p.addr)
	for _, n := range t.dpNodes {
		for i := range t.m.DataplanePerChange {
			e := event.Event{Kind: k, Source: event.SourceDataplane, Pod: event.PodRef{Namespace: p.ref.Namespace},
				Service: p.svc, Local: p.addr, Attrs: map[string]string{event.AttrProxy: event.ProxyNFTables,
					event.AttrServicePort: "http", event.AttrProtocol: "TCP", event.AttrChain: chain}}
			t.add(n, at.Add(time.Duration(800+t.r.IntN(700)+i)*time.Millisecond), e)
		}
	}
}

// endpointChain names an endpoint's chain as kube-proxy's nftables mode
// does, from the Service port and the endpoint's address: every node's
// proxy names it alike.
func endpointChain(ns, svc, port string, addr netip.AddrPort) string {
	name := fmt.Sprintf("%s/%s/tcp/%s__%s/%d", ns, svc, port, addr.Addr(), addr.Port())
	h := sha256.Sum256([]byte(name))
	return "endpoint-" + base32.StdEncoding.EncodeToString(h[:])[:8] + "-" + name
}

// background schedules resets and refusals of running pods over dt from at.
func (t *traffic) background(at time.Time, dt time.Duration) {
	n := t.poisson(float64(t.nodes*t.m.PodsPerNode) * t.m.Background / 60 * dt.Seconds())
	for range n {
		node := t.r.IntN(t.nodes)
		slot := t.r.IntN(max(t.m.PodsPerNode, 1))
		p := runningPod(node, slot, t.m.PodsPerNode)
		e := event.Event{Source: event.SourceKernel, Pod: p.ref, PID: 100 + int32(slot), Comm: "server", Local: p.addr,
			Remote: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 200, byte(t.r.IntN(256)), byte(t.r.IntN(256))}), uint16(30000+t.r.IntN(30000)))}
		switch x := t.r.IntN(10); {
		case x < 6:
			e.Kind, e.Reason = event.RSTSent, "NOT_SPECIFIED"
		case x < 8:
			e.Kind, e.Reason = event.ConnRefused, "NO_SOCKET"
		default:
			e.Kind = event.RSTReceived
		}
		t.add(node, at.Add(time.Duration(t.r.Int64N(int64(dt)))), e)
	}
}

// observe schedules the watcher's observations of the running pods over
// dt from at, on the ticks of an interval that began at origin
// (observeRounds).
func (t *traffic) observe(origin, at time.Time, dt time.Duration) {
	observeRounds(t.m, t.nodes, origin, at, at.Add(dt), t.rolloutAt, t.add)
}

// churn schedules the steady state's pod ends over dt from at.
func (t *traffic) churn(at time.Time, dt time.Duration) {
	for range t.poisson(t.m.Churn * dt.Seconds()) {
		p := t.newPod("apps", t.steadyWorkload(), t.r.IntN(t.nodes))
		t.end(p, at.Add(time.Duration(t.r.Int64N(int64(dt)))))
	}
}

// rollout schedules the rollout's pod ends from at: pod i on node
// i×nodes/replicas, spread evenly over RolloutOver.
func (t *traffic) rollout(at time.Time) {
	n := t.m.Rollout
	for i := range n {
		t.end(rolloutPod(i, n, t.nodes), at.Add(time.Duration(int64(t.m.RolloutOver)*int64(i)/int64(max(n, 1)))))
	}
}

// pop returns the events due by now, grouped by agent.
func (t *traffic) pop(now time.Time, out map[int][]event.Event) int {
	n := 0
	for len(t.q) > 0 && t.q[0].ev.Time <= now.UnixNano() {
		d := heap.Pop(&t.q).(due)
		out[d.agent] = append(out[d.agent], d.ev)
		n++
	}
	return n
}

// last is the time of the last event scheduled.
func (t *traffic) pending() int { return len(t.q) }
