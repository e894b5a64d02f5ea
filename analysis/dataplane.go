package analysis

import (
	"sort"
	"time"

	"github.com/drainscope/drainscope/event"
)

// The dataplane events (dataplane_endpoint_added/removed) say when a node's
// proxy began and stopped sending a Service's new connections to an
// endpoint. Where a pod has them for a node, that node's view of its
// endpoint comes from them instead of from the watch, and a refusal after
// the removal gets only DataplaneSlack, not a lag: the rules had changed.
// Each removal also measures that node's lag behind the API: the removal
// minus the first watch event that took the endpoint out of rotation. A
// node seen only through the watch then gets its own measured lag (the
// p99 so far) in place of Options.ProxyLag.

// maxLagSamples bounds the samples kept per node.
const maxLagSamples = 8192

// lagTable holds the measured watch → dataplane lags per node.
type lagTable struct {
	def   int64 // Options.ProxyLag
	slack int64 // Options.DataplaneSlack
	nodes map[string]*lagAcc
}

type lagAcc struct {
	proxy   string // Attrs[proxy] of the node's latest removal
	samples []lagSample
	sorted  []int64 // lags, sorted; rebuilt when stale
	stale   bool
}

type lagSample struct {
	t, lag int64 // removal time, lag
}

func (l *lagTable) add(node, proxy string, t, lag int64) {
	if l.nodes == nil {
		l.nodes = map[string]*lagAcc{}
	}
	a := l.nodes[node]
	if a == nil {
		a = &lagAcc{}
		l.nodes[node] = a
	}
	if len(a.samples) >= maxLagSamples {
		a.samples = append(a.samples[:0], a.samples[maxLagSamples/2:]...)
	}
	if proxy != "" {
		a.proxy = proxy
	}
	a.samples = append(a.samples, lagSample{t, lag})
	a.stale = true
}

func (a *lagAcc) quantile(q float64) int64 {
	if a.stale {
		a.sorted = a.sorted[:0]
		for _, s := range a.samples {
			a.sorted = append(a.sorted, s.lag)
		}
		sort.Slice(a.sorted, func(i, j int) bool { return a.sorted[i] < a.sorted[j] })
		a.stale = false
	}
	return quantileOf(a.sorted, q)
}

func quantileOf(sorted []int64, q float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted)-1) + 0.5)
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// allowance is how long after a watch event took the endpoint out a
// refusal may still have come through node's proxy: its measured p99 lag,
// else Options.ProxyLag.
func (l *lagTable) allowance(node string) int64 {
	if l == nil {
		return 0
	}
	if a := l.nodes[node]; a != nil && len(a.samples) > 0 {
		return a.quantile(0.99)
	}
	return l.def
}

// NodeLag is one node's measured lag from the watch seeing an endpoint
// leave rotation to that node's proxy rules dropping it.
type NodeLag struct {
	Node    string `json:"node"`
	Proxy   string `json:"proxy,omitempty"`
	Samples int    `json:"samples"`
	P50     int64  `json:"p50_ns"`
	P99     int64  `json:"p99_ns"`
	Max     int64  `json:"max_ns"`
}

// lags reports the samples within w, per node, in node order.
func (l *lagTable) lags(w event.Window) []NodeLag {
	var out []NodeLag
	for node, a := range l.nodes {
		var v []int64
		for _, s := range a.samples {
			if w.Contains(s.t) {
				v = append(v, s.lag)
			}
		}
		if len(v) == 0 {
			continue
		}
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		proxy := a.proxy
		if proxy == "" {
			proxy = event.ProxyNFTables
		}
		out = append(out, NodeLag{Node: node, Proxy: proxy, Samples: len(v),
			P50: quantileOf(v, 0.5), P99: quantileOf(v, 0.99), Max: v[len(v)-1]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// maxViews bounds the room a pod's dataplane views start with.
const maxViews = 64

// dataplane takes a dataplane event: the pod that held the address gets
// it as its node's view of the endpoint, and a removal measures the lag.
func (a *Aligner) dataplane(e *event.Event) {
	p := a.podByIP(e.Local.Addr(), e.Time)
	if p == nil {
		return
	}
	ready := e.Kind == event.DataplaneEndpointAdded
	i := 0
	for i < len(p.dp) && (p.dp[i].node != e.Node || !isServiceKey(p.dp[i].svc, e.Pod.Namespace, e.Service)) {
		i++
	}
	if i == len(p.dp) {
		if p.dp == nil {
			// A view per node whose proxy records rules, for each
			// Service: room for as many as the most a pod has had so
			// far, not a slice grown by doubling from one (20 nodes'
			// views took 3.5 KB a pod, 1.1 KB of it used).
			p.dp = make([]epView, 0, max(a.mostViews, 1))
		}
		p.dp = append(p.dp, epView{epKey: epKey{serviceKey(e.Pod.Namespace, e.Service), e.Node}})
		a.mostViews = min(max(a.mostViews, len(p.dp)), maxViews)
	}
	v := &p.dp[i]
	svc := v.svc
	if n := len(v.trans); n > 0 && v.trans[n-1].ready == ready {
		return
	}
	if len(v.trans) >= 32 {
		v.trans = newerPart(v.trans, 16, 32)
	}
	// Held here only: the pod's timeline and its failures' nearest
	// events read the views beside the landmarks (podState.events,
	// podState.nearest). A pod's views grow with the nodes that record
	// its endpoint; a second copy in the landmarks was a third of a
	// server's heap at 2,000 nodes. A pod the analysis does not want
	// keeps the transition without its event: at 5,000 nodes those
	// copies were a sixth of a one-workload report's memory.
	var ev *event.Event
	if a.wants(p) {
		ev = new(event.Event)
		*ev = *e // its Attrs map is kept, not copied: see Aligner.Add
		ev.Pod = p.ref
		ev.Workload = p.wl
	}
	v.trans = append(v.trans, epTrans{t: e.Time, ev: ev, ready: ready})
	v.proxy = e.Attrs[event.AttrProxy]
	if !ready {
		if w := p.watchLeave(svc, e.Time); w != nil {
			if e.Time-w.Time < int64(a.opts.Retain) {
				a.lags.add(e.Node, e.Attrs[event.AttrProxy], e.Time, e.Time-w.Time)
			}
		} else {
			v.trans[len(v.trans)-1].unmeasured = true
		}
	}
}

// watchJitter bounds how much earlier than the recorder's watch another
// watcher of the same API change (an ingress controller's) may see it.
const watchJitter = 250 * time.Millisecond

// lateLeave takes an endpoint event of p: when it is the watch seeing the
// endpoint leave rotation, a proxy whose own removal of the endpoint was
// recorded shortly before it, with no leave before that, had the change
// from its own watch before the recorder's watch did. That proxy's lag
// behind the API is below what two watches of one change can tell apart:
// it is measured as 0, not left out (a removal left out would make a fast
// proxy look as if it had removed fewer endpoints than it did).
func (a *Aligner) lateLeave(p *podState, e *event.Event) {
	svc := serviceKey(e.Pod.Namespace, e.Service)
	if w := p.watchLeave(svc, e.Time); w == nil || w.Time != e.Time {
		return
	}
	for i := range p.dp {
		v := &p.dp[i]
		if v.svc != svc || len(v.trans) == 0 {
			continue
		}
		t := &v.trans[len(v.trans)-1]
		if t.ready || !t.unmeasured || e.Time-t.t > int64(watchJitter) {
			continue
		}
		t.unmeasured = false
		a.lags.add(v.node, v.proxy, t.t, 0)
	}
}

// watchLeave is the first watch event, on any node, of the endpoint's last
// leave from rotation in svc at or before t: the API change the proxies
// follow.
func (p *podState) watchLeave(svc string, t int64) *event.Event {
	var best *event.Event
	for vi := range p.ep {
		v := &p.ep[vi]
		if v.svc != svc {
			continue
		}
		var leave *event.Event
		for j := range v.trans {
			if v.trans[j].t > t {
				break
			}
			if v.trans[j].ready {
				leave = nil
			} else if leave == nil {
				leave = v.trans[j].ev
			}
		}
		if leave != nil && (best == nil || leave.Time < best.Time) {
			best = leave
		}
	}
	return best
}

// view is one node's view of the endpoint and how long after its leave a
// connection may still have been routed there.
type view struct {
	v     *epView
	allow int64
}

// views lists, for the Services in svcs (all when empty), each node's view
// of the pod's endpoint: its dataplane's where the pod has one for that
// node, else its watch's.
func (p *podState) views(svcs []string, dst []view) []view {
	for i := range p.dp {
		v := &p.dp[i]
		if len(svcs) > 0 && !containsService(svcs, v.svc) {
			continue
		}
		var slack int64
		if p.lags != nil {
			slack = p.lags.slack
		}
		dst = append(dst, view{v, slack})
	}
	for i := range p.ep {
		v := &p.ep[i]
		if len(svcs) > 0 && !containsService(svcs, v.svc) {
			continue
		}
		if p.hasDataplane(v.epKey) {
			continue
		}
		dst = append(dst, view{v, p.lags.allowance(v.node)})
	}
	return dst
}

func (p *podState) hasDataplane(k epKey) bool {
	for i := range p.dp {
		if p.dp[i].epKey == k {
			return true
		}
	}
	return false
}
