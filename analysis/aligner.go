package analysis

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/drainscope/drainscope/event"
)

// ErrOutOfOrder is returned by Aligner.Add when an event is older than one
// already added: the aligner needs events in time order.
var ErrOutOfOrder = errors.New("events out of time order")

// Aligner aligns failures to pods and names their causes while events
// stream through it in time order. It decides a failure once the stream has
// passed the failure's time plus Options.Lookahead, so its memory holds the
// failures of one lookahead window, the kernel events of one KernelWindow,
// and a small state per pod that is dropped Options.Retain after the pod
// ended: it grows with the window, not with the history.
type Aligner struct {
	opts      Options
	onFailure func(*Decision)
	onPod     func(*PodTimeline)
	// podWanted, when set, says which pods onPod wants, by namespace and
	// workload: the others' timelines are not built (see WantPods).
	podWanted func(ns string, wl event.Workload) bool

	now       int64
	lastSweep int64
	lastPods  int64

	byUID   map[string]*podState
	lastPod *podState
	// ending are the pods that may be gone: those that ended or were
	// deleted (podState.gone holds for no other), so that a sweep does
	// not visit every live pod of the cluster.
	ending   []*podState
	backends map[string]netip.Addr // parsed backend attributes, a small cache
	// byName is built at the first reference without a UID (see
	// indexNames); until then every pod is in byUID, and a cluster-wide
	// window's hundred thousand pods are not indexed twice.
	byName map[nsName]*podState
	ips    ipIndex
	svcs   map[string]*svcState
	svcIdx map[string][]string // bare service name → keys
	// svcAddrs holds, per ClusterIP, which Service held it from when, in
	// time order: what a client that dialled the address reached.
	svcAddrs map[netip.Addr][]svcClaim
	svcHeld  map[string][]netip.Addr       // Service key → the ClusterIPs it holds now
	svcGone  map[string]bool               // Services seen only deleted: no svcs entry, still this cluster's
	svcPods  map[string]map[*podState]bool // Service key → the pods seen as its endpoints

	// Pod-side connection events in time order, each linked to the
	// previous one on the same client address; kidx holds the latest per
	// client address (or one already dropped, until it trims itself).
	kbuf         ring[kentry]
	kidx         kernelIndex
	inferredSeen map[connKey]seenInference
	inferredAt   addrMap[[]inferMark]

	global  ring[mark] // recent landmarks of all pods, for failures no pod claims
	pending ring[pending]
	cover   *Coverage // the recorders' gaps; nil: none known (SetCoverage)

	scratch  []Piece
	missing  []Missing
	kscratch []*event.Event
	kpods    []*podState
	dec      Decision
	facts    Facts

	lags      lagTable // measured watch → dataplane lags per node
	mostViews int      // the most dataplane views a pod has had (see dataplane)

	// mainNodes are the nodes whose capture marks containers' main
	// processes (kernel_capabilities lists FeatureMainProcess).
	mainNodes map[string]bool
	// endedUIDs are the pods forgotten after their end (see learnIPs).
	endedUIDs map[string]bool

	stats Stats
}

type nsName struct{ ns, name string }

type ipLease struct {
	ip          netip.Addr
	pod         *podState
	first, last int64
}

// mark is an event by pointer with its time beside it: a search by time
// then reads the marks only, not an event for each step.
type mark struct {
	t  int64
	ev *event.Event
}

type kentry struct {
	ev   event.Event
	pod  *podState
	prev int64 // previous entry of the same client address, -1 when none
}

type pending struct {
	ev       event.Event
	inferred bool
	proof    string // for inferred failures: which kernel evidence proved it
}

// Stats counts what went through an Aligner.
type Stats struct {
	Events         int `json:"events"`
	ClientFailures int `json:"client_failures"`
	Inferred       int `json:"inferred_failures"`
	WithClientAddr int `json:"client_failures_with_address"`
	ProvenByKernel int `json:"client_failures_proven_by_kernel"`
	ProvenLikely   int `json:"client_failures_matched_only_likely"` // of ProvenByKernel: matched only by an in-use connection cut at exit
	// Refused SYNs after the pod's endpoint had left rotation everywhere
	// (beyond the proxy lag): the kubelet's readiness probes, or clients
	// that bypass the Service. Not counted as failures.
	RefusedOutOfRotation int `json:"refused_out_of_rotation"`
	Unresolved           int `json:"failures_without_pod"`
	// InRecorderGap counts the failures whose evidence lay in a
	// recorder's gap (Coverage): unexplained, naming it.
	InRecorderGap   int `json:"failures_in_recorder_gap"`
	PodsEvicted     int `json:"pods_evicted"`
	MaxPending      int `json:"max_pending"`
	MaxKernelWindow int `json:"max_kernel_window"`
}

// NewAligner returns an aligner that calls onFailure for every failure,
// client-reported or inferred, once decided (the Decision is valid only
// during the call), and onPod for every pod with lifecycle events once the
// aligner forgets it or the stream ends. Either may be nil.
func NewAligner(opts Options, onFailure func(*Decision), onPod func(*PodTimeline)) *Aligner {
	opts = opts.WithDefaults()
	return &Aligner{
		lags:         lagTable{def: int64(opts.ProxyLag), slack: int64(opts.DataplaneSlack)},
		opts:         opts,
		onFailure:    onFailure,
		onPod:        onPod,
		byUID:        map[string]*podState{},
		backends:     map[string]netip.Addr{},
		ips:          newIPIndex(),
		svcs:         map[string]*svcState{},
		svcIdx:       map[string][]string{},
		svcAddrs:     map[netip.Addr][]svcClaim{},
		svcHeld:      map[string][]netip.Addr{},
		kidx:         newKernelIndex(0),
		inferredSeen: map[connKey]seenInference{},
		inferredAt:   newAddrMap[[]inferMark](),
		mainNodes:    map[string]bool{},
		endedUIDs:    map[string]bool{},
		svcPods:      map[string]map[*podState]bool{},
	}
}

// WantPods limits onPod, and onFailure's failures that a pod served, to
// the pods f accepts, by namespace and workload: a report of one workload
// in a cluster of thousands of pods need not build every other pod's
// timeline, nor name causes it drops. The other pods are still aligned
// (a failure they served is theirs) and their failures counted in Stats.
// Call it before the first Add.
func (a *Aligner) WantPods(f func(ns string, wl event.Workload) bool) { a.podWanted = f }

// FeatureMainProcess is event.FeatureMainProcess, which the agent lists
// in kernel_capabilities when its capture marks main processes.
const FeatureMainProcess = event.FeatureMainProcess

// Stats reports the counters so far.
func (a *Aligner) Stats() Stats { return a.stats }

// Add feeds one event. Events must come in time order (ties in any order).
// e is not kept, but its Attrs map may be: the caller must not modify it
// afterwards (a store's scan hands out maps no one writes to; see
// store.Store's Scan).
func (a *Aligner) Add(e *event.Event) error {
	if e.Time < a.now {
		return fmt.Errorf("%w: %s at %d after %d", ErrOutOfOrder, e.Kind, e.Time, a.now)
	}
	a.flush(e.Time)
	a.now = e.Time
	a.stats.Events++
	if a.now-a.lastSweep >= int64(max(a.opts.Lookahead, a.opts.KernelWindow/2)) {
		a.sweep()
	}
	if e.Kind == event.ClientFailure {
		inferred := e.Flags.Has(event.FlagInferred)
		if inferred {
			k := connKey{keyOf(e.Local), keyOf(e.Remote)}
			if seen, ok := a.inferredSeen[k]; ok && e.Time-seen.t <= int64(a.opts.KernelWindow) {
				return nil // the aligner inferred this one itself
			}
			a.inferredSeen[k] = seenInference{t: e.Time, seq: -1}
			a.markInferred(k.local, e.Time, false)
		}
		// The failure waits a lookahead; its Attrs map is shared, not
		// copied (see Add), as are a kept event's.
		_, q := a.addPending()
		q.ev, q.inferred, q.proof = *e, inferred, ProofStored
		return nil
	}
	if e.Kind == event.KernelCapabilities && hasFeature(e.Attrs[event.AttrKernelFeatures], FeatureMainProcess) {
		a.mainNodes[e.Node] = true
	}
	k := &keeper{e: e}
	p := a.pod(&e.Pod, true)
	if p != nil {
		if e.Kind.IsKernel() && a.mainNodes[e.Node] {
			p.mainKnown = true
		}
		if p.ingest(k, &a.opts) {
			a.global.push(mark{e.Time, k.get()})
		}
		if !p.enlisted && (p.ended || p.lifeEvents().deletion.Time != 0) {
			p.enlisted = true
			a.ending = append(a.ending, p)
		}
		a.learnIPs(p, e)
	}
	if e.Kind.IsEndpoint() {
		a.endpoint(k)
		if p != nil {
			a.lateLeave(p, e)
		}
	}
	if e.Kind.IsDataplane() {
		a.dataplane(e)
	}
	if e.Kind == event.ServiceChanged {
		a.service(e)
	}
	switch e.Kind {
	case event.ConnClosed, event.RSTSent, event.RSTReceived, event.ConnRefused:
		if e.Remote.IsValid() {
			// The event's number in kbuf will be kbuf.tail (add returns
			// it). prev may be before the window: kbuf.at says so.
			prev, ok := a.kidx.swap(keyOf(e.Remote), a.kbuf.tail, a.kbuf.head)
			if !ok {
				prev = -1
			}
			_, ke := a.kbuf.add()
			ke.ev = *e
			ke.ev.Attrs = nil // connection events need no extras
			ke.pod, ke.prev = p, prev
		}
		if p != nil && a.timelineWanted(p) {
			p.connEnded(e)
		}
		a.infer(e, p)
	}
	return nil
}

// keeper makes one copy of the event being added, on the heap, the first
// time a part of the state keeps it, and hands every part that copy: an
// endpoint change is at once a landmark of its pod, an entry of the global
// ring, a transition of the pod's endpoint view and one of its Service's
// count. Nothing may modify a kept event. Its Attrs map is the one Add
// was given, not a copy: a 5,000-node window keeps tens of thousands.
type keeper struct {
	e    *event.Event
	kept *event.Event
}

func (k *keeper) get() *event.Event {
	if k.kept == nil {
		c := *k.e
		k.kept = &c
	}
	return k.kept
}

func hasFeature(list, f string) bool {
	for _, x := range strings.Split(list, ",") {
		if strings.TrimSpace(x) == f {
			return true
		}
	}
	return false
}

// DataplaneLags reports the measured watch → dataplane lag per node, of
// the removals within w (all when w is empty).
func (a *Aligner) DataplaneLags(w event.Window) []NodeLag { return a.lags.lags(w) }

// Flush decides every pending failure and reports every pod still known.
// Call it once at the end of the stream.
func (a *Aligner) Flush() {
	for a.pending.len() > 0 {
		a.decide(a.pending.front())
		a.pending.drop()
	}
	// Only the pods with a timeline to report are gathered and sorted: a
	// cluster-wide window holds a state for every pod some event named.
	seen := map[*podState]bool{}
	var all []*podState
	gather := func(p *podState) {
		if a.reports(p) && !seen[p] {
			seen[p] = true
			all = append(all, p)
		}
	}
	for _, p := range a.byUID {
		gather(p)
	}
	for _, p := range a.byName {
		gather(p)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].first < all[j].first })
	for _, p := range all {
		a.report(p)
	}
	// The stream ended: the indexes go at once, not pod by pod.
	clear(a.byUID)
	clear(a.endedUIDs)
	clear(a.byName)
	clear(a.svcPods)
	a.ips = newIPIndex()
	a.lastPod, a.ending = nil, nil
}

// addPending adds a failure to decide, to be filled in place.
func (a *Aligner) addPending() (int64, *pending) {
	seq, q := a.pending.add()
	if n := a.pending.len(); n > a.stats.MaxPending {
		a.stats.MaxPending = n
	}
	return seq, q
}

// flush decides the failures whose lookahead ends before now.
func (a *Aligner) flush(now int64) {
	la := int64(a.opts.Lookahead)
	for p := a.pending.front(); p != nil && p.ev.Time+la < now; p = a.pending.front() {
		a.decide(p)
		a.pending.drop()
	}
}

// pod finds (or, with create, makes) the state of the pod ref names. Each
// index is read once and written only when it lacks the pod: a new pod
// costs a lookup and an insert in byUID (and in byName, once built).
func (a *Aligner) pod(ref *event.PodRef, create bool) *podState {
	if ref.IsZero() {
		return nil
	}
	var byUID *podState
	if ref.UID != "" {
		// The common cases: the same pod as last time, or one lookup.
		if c := a.lastPod; c != nil && c.ref.UID == ref.UID {
			return c
		}
		if byUID = a.byUID[ref.UID]; byUID != nil && (byUID.ref.Name != "" || ref.Name == "") {
			a.lastPod = byUID
			return byUID
		}
	}
	p := byUID
	nn := nsName{ref.Namespace, ref.Name}
	if ref.UID == "" {
		a.indexNames()
	}
	var byName *podState
	if ref.Name != "" && a.byName != nil {
		byName = a.byName[nn]
		if p == nil && byName != nil && (ref.UID == "" || byName.ref.UID == "" || byName.ref.UID == ref.UID) {
			p = byName // else: same name, another pod (a StatefulSet's next incarnation)
		}
	}
	if p == nil {
		if !create {
			return nil
		}
		p = &podState{ref: *ref, lags: &a.lags}
	}
	if ref.UID != "" && byUID == nil {
		a.byUID[ref.UID] = p
	}
	if ref.Name != "" && byName != p && a.byName != nil {
		a.byName[nn] = p
	}
	return p
}

// indexNames builds byName from byUID, once. Where two pods share a name
// (a StatefulSet's incarnations), the newest (by its first event) holds
// it, as it would had the index been kept from the start: pod() gives a
// name to the pod it makes, not to one it finds by UID.
func (a *Aligner) indexNames() {
	if a.byName != nil {
		return
	}
	a.byName = make(map[nsName]*podState, len(a.byUID))
	for _, p := range a.byUID {
		if p.ref.Name == "" {
			continue
		}
		nn := nsName{p.ref.Namespace, p.ref.Name}
		if q := a.byName[nn]; q == nil || p.first > q.first {
			a.byName[nn] = p
		}
	}
}

func (a *Aligner) learnIPs(p *podState, e *event.Event) {
	var ip netip.Addr
	switch e.Kind {
	case event.PodReady, event.PodNotReady, event.ListenerClosed, event.ConnClosed,
		event.RSTSent, event.RSTReceived, event.ConnRefused:
		ip = e.Local.Addr()
	default:
		if e.Kind.IsEndpoint() {
			ip = e.Local.Addr()
		}
	}
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsUnspecified() || ip.IsLoopback() {
		return
	}
	// A pod object left after its end (a finalizer holds it) is still
	// listed not ready with its old address, which the network may have
	// given to another pod since: the re-observations of a pod whose end
	// was seen keep no address for it, unless they find it ready.
	if e.Flags.Has(event.FlagObserved) && e.Kind != event.PodReady && e.Kind != event.EndpointReady &&
		(p.ended || a.endedUIDs[p.ref.UID]) {
		return
	}
	for _, l := range p.leases {
		if l.ip == ip {
			l.last = max(l.last, e.Time)
			return
		}
	}
	if len(p.leases) >= 4 {
		return
	}
	l := &ipLease{ip: ip, pod: p, first: e.Time, last: e.Time}
	a.ips.set(ip, append(a.ips.get(ip), l))
	p.leases = append(p.leases, l)
}

// podByIP picks the pod that had ip at t: the one whose observed tenure
// covers t (the latest to arrive if several do), else the nearest tenure.
// A pod that has not ended holds its address until now.
func (a *Aligner) podByIP(ip netip.Addr, t int64) *podState {
	var best *podState
	var bestFirst, bestDist int64 = 0, -1
	for _, l := range a.ips.get(ip.Unmap()) {
		var d int64
		switch {
		case t < l.first:
			d = l.first - t
		case t > l.last && l.pod.ended:
			d = t - l.last
		}
		// A live pod holds its address from its first event on, however
		// quiet it has been since.
		if d > int64(a.opts.Retain) {
			continue
		}
		if bestDist < 0 || d < bestDist || (d == bestDist && l.first > bestFirst) {
			best, bestDist, bestFirst = l.pod, d, l.first
		}
	}
	return best
}

// sweep drops what no pending or future failure can need.
func (a *Aligner) sweep() {
	a.lastSweep = a.now
	la, kw := int64(a.opts.Lookahead), int64(a.opts.KernelWindow)
	horizon := a.now - la - kw
	for k := a.kbuf.front(); k != nil && k.ev.Time < horizon; k = a.kbuf.front() {
		a.kbuf.drop()
	}
	if n := a.kbuf.len(); n > a.stats.MaxKernelWindow {
		a.stats.MaxKernelWindow = n
	}
	a.kidx.trim(a.kbuf.head, a.kbuf.len())
	for k, seen := range a.inferredSeen {
		if seen.t < horizon {
			delete(a.inferredSeen, k)
		}
	}
	a.inferredAt.each(func(k addrKey, ts []inferMark) {
		i := 0
		for i < len(ts) && ts[i].t < horizon {
			i++
		}
		if i == len(ts) {
			a.inferredAt.del(k)
		} else if i > 0 {
			a.inferredAt.set(k, append(ts[:0], ts[i:]...))
		}
	})
	retain := int64(a.opts.Retain)
	// Keep one landmark older than the window: the nearest before it.
	for a.global.len() > 1 && a.global.at(a.global.head+1).t < a.now-retain {
		a.global.drop()
	}
	for _, s := range a.svcs {
		s.trim(a.now - retain)
	}
	if a.now-a.lastPods < retain/10 {
		return
	}
	a.lastPods = a.now
	var gone []*podState
	keep := a.ending[:0]
	for _, p := range a.ending {
		if p.gone(a.now, retain) {
			gone = append(gone, p)
		} else {
			keep = append(keep, p)
		}
	}
	clear(a.ending[len(keep):])
	a.ending = keep
	for _, p := range gone {
		a.forget(p)
		a.stats.PodsEvicted++
	}
}

// forget drops the pod's state and reports its timeline.
func (a *Aligner) forget(p *podState) {
	if p.ended && p.ref.UID != "" {
		a.endedUIDs[p.ref.UID] = true
	}
	a.unindex(p)
	a.report(p)
}

// unindex drops the pod from the aligner's indexes.
func (a *Aligner) unindex(p *podState) {
	if p.ref.UID != "" && a.byUID[p.ref.UID] == p {
		delete(a.byUID, p.ref.UID)
	}
	if a.lastPod == p {
		a.lastPod = nil
	}
	for _, k := range p.services {
		if ps := a.svcPods[k]; ps != nil {
			delete(ps, p)
			if len(ps) == 0 {
				delete(a.svcPods, k)
			}
		}
	}
	if nn := (nsName{p.ref.Namespace, p.ref.Name}); a.byName[nn] == p {
		delete(a.byName, nn)
	}
	for _, pl := range p.leases {
		ip := pl.ip
		ls := a.ips.get(ip)
		out := ls[:0]
		for _, l := range ls {
			if l.pod != p {
				out = append(out, l)
			}
		}
		a.ips.set(ip, out) // deletes ip when out is empty
	}
}

// reports tells whether report(p) passes p's timeline to onPod.
func (a *Aligner) reports(p *podState) bool {
	return a.onPod != nil && hasLifecycle(p) && (a.podWanted == nil || a.podWanted(p.ref.Namespace, p.wl))
}

// timelineWanted reports whether p's timeline may be built: what only a
// timeline reads (each connection's end after SIGTERM, the counts of the
// pod's failures by cause) is not recorded for a pod no one will ask for.
// A report of one Deployment in a busy cluster then records none of the
// other pods' connections. A pod whose workload is not known yet may
// still be wanted.
func (a *Aligner) timelineWanted(p *podState) bool {
	return a.onPod != nil && a.wants(p)
}

// wants says whether the analysis wants p's timeline and decisions: with
// WantPods, a pod whose workload is known and rejected is aligned and
// counted, but gets neither (its failures are not passed to onFailure).
func (a *Aligner) wants(p *podState) bool {
	return a.podWanted == nil || p.wl.IsZero() || a.podWanted(p.ref.Namespace, p.wl)
}

// report calls onPod with the pod's timelines, when it has them and onPod
// wants them: one for each life that ended in a restart in place, oldest
// first, and one for its current life. Each life's failures and its end
// are its own: a restart and a later deletion are two disruptions.
func (a *Aligner) report(p *podState) {
	if !a.reports(p) {
		return
	}
	var lives []*podState
	for q := p.before; q != nil; q = q.before {
		lives = append(lives, q)
	}
	for i := len(lives) - 1; i >= 0; i-- {
		tl := lives[i].timeline(&a.opts)
		a.onPod(&tl)
	}
	tl := p.timeline(&a.opts)
	a.onPod(&tl)
}

// unmapAP turns an IPv4-mapped IPv6 address into IPv4, so kernel and client
// spellings of one address compare equal.
func unmapAP(ap netip.AddrPort) netip.AddrPort {
	if !ap.IsValid() || !ap.Addr().Is4In6() {
		return ap
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// kernelFor calls fn for the held connection events on client address c
// with times in [from, to], newest first, until fn returns false.
func (a *Aligner) kernelFor(c addrKey, from, to int64, fn func(*event.Event, *podState) bool) {
	seq, ok := a.kidx.get(c)
	if !ok {
		return
	}
	for k := a.kbuf.at(seq); k != nil; k = a.kbuf.at(k.prev) {
		if k.ev.Time < from {
			return
		}
		if k.ev.Time <= to && !fn(&k.ev, k.pod) {
			return
		}
		if k.prev < 0 {
			return
		}
	}
}
