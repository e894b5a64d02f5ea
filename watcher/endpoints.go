package watcher

import (
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/drainscope/drainscope/event"
)

// Extra attribute keys of endpoint events, beside event.AttrConditions and
// event.AttrLastChangeTriggerTime.
const (
	AttrEndpointNode = "endpoint_node" // the endpoint's nodeName
	AttrPorts        = "ports"         // the slice's ports, "name/PROTO/port" comma-separated
)

// epKey identifies one endpoint of a Service: the same pod address in two
// slices of one Service (while the controller moves it) is one endpoint.
type epKey struct {
	ns     string
	group  string // Service name, or "slice:NAME" for slices without one
	addr   netip.Addr
	podUID string // targetRef UID; empty for endpoints that are not pods
}

// epState is what the watcher knows of an endpoint in one slice.
type epState struct {
	ready, serving, terminating bool

	podName string
	node    string
	port    uint16 // the slice's only port, 0 when it has none or several
	ports   string
	trigger string // the slice's last-change-trigger-time
	slice   string
}

func (s epState) conditions() string {
	return "ready=" + strconv.FormatBool(s.ready) + ",serving=" + strconv.FormatBool(s.serving) +
		",terminating=" + strconv.FormatBool(s.terminating)
}

// epEntry is one endpoint: the state last reported, and its state in each
// slice that lists it (almost always exactly one).
type epEntry struct {
	cur   epState
	known bool
	in    []holder
}

type holder struct {
	slice string
	st    epState
}

func (e *epEntry) set(slice string, st epState) {
	for i := range e.in {
		if e.in[i].slice == slice {
			e.in[i].st = st
			return
		}
	}
	e.in = append(e.in, holder{slice, st})
}

// drop removes the slice's entry and reports whether there was one.
func (e *epEntry) drop(slice string) bool {
	for i := range e.in {
		if e.in[i].slice == slice {
			e.in = append(e.in[:i], e.in[i+1:]...)
			return true
		}
	}
	return false
}

type sliceRec struct {
	rv   string
	keys []epKey
}

// sliceTracker turns EndpointSlice states into per-endpoint transitions.
// It is not safe for concurrent use; the informer calls it from one
// goroutine.
type sliceTracker struct {
	slices map[string]*sliceRec // namespace/name
	eps    map[epKey]*epEntry
	emit   func(at time.Time, k event.Kind, key epKey, s epState, flags event.Flags)
	// at is when the update being applied was received; set by the
	// informer's handler before each call.
	at time.Time
}

func newSliceTracker(emit func(time.Time, event.Kind, epKey, epState, event.Flags)) *sliceTracker {
	return &sliceTracker{
		slices: map[string]*sliceRec{},
		eps:    map[epKey]*epEntry{},
		emit:   emit,
	}
}

func sliceKey(s *discoveryv1.EndpointSlice) string { return s.Namespace + "/" + s.Name }

// endpoints extracts the endpoints of a slice, in address order.
func endpoints(s *discoveryv1.EndpointSlice) ([]epKey, []epState) {
	group := s.Labels[discoveryv1.LabelServiceName]
	if group == "" {
		group = "slice:" + s.Name
	}
	var port uint16
	var ports []string
	for _, p := range s.Ports {
		if p.Port == nil {
			continue
		}
		name, proto := "", "TCP"
		if p.Name != nil {
			name = *p.Name
		}
		if p.Protocol != nil {
			proto = string(*p.Protocol)
		}
		ports = append(ports, name+"/"+proto+"/"+strconv.Itoa(int(*p.Port)))
	}
	if len(s.Ports) == 1 && s.Ports[0].Port != nil {
		port = uint16(*s.Ports[0].Port)
	}
	base := epState{
		port:    port,
		ports:   strings.Join(ports, ","),
		trigger: s.Annotations[corev1.EndpointsLastChangeTriggerTime],
		slice:   s.Name,
	}
	var keys []epKey
	var states []epState
	for i := range s.Endpoints {
		ep := &s.Endpoints[i]
		st := base
		// Unknown (nil) conditions are read as the API documents them:
		// ready and serving when unknown, terminating only when said.
		st.ready = ep.Conditions.Ready == nil || *ep.Conditions.Ready
		st.serving = st.ready
		if ep.Conditions.Serving != nil {
			st.serving = *ep.Conditions.Serving
		}
		st.terminating = ep.Conditions.Terminating != nil && *ep.Conditions.Terminating
		if ep.NodeName != nil {
			st.node = *ep.NodeName
		}
		var uid string
		if ep.TargetRef != nil {
			uid = string(ep.TargetRef.UID)
			st.podName = ep.TargetRef.Name
		}
		for _, a := range ep.Addresses {
			addr, err := netip.ParseAddr(a)
			if err != nil {
				continue
			}
			keys = append(keys, epKey{ns: s.Namespace, group: group, addr: addr, podUID: uid})
			states = append(states, st)
		}
	}
	return keys, states
}

// apply records the slice's current state and reports what changed. With
// silent, nothing is reported (the initial list: the state the watcher
// starts from, not transitions it saw).
func (t *sliceTracker) apply(s *discoveryv1.EndpointSlice, flags event.Flags, silent bool) {
	if drop := t.update(s, flags, silent); drop != nil {
		drop()
	}
}

// update records the endpoints the slice lists and reports their changes;
// the returned func (nil when nothing is left to do) then handles the
// endpoints the slice no longer lists. Split so that a relist can apply
// every slice before dropping anything.
func (t *sliceTracker) update(s *discoveryv1.EndpointSlice, flags event.Flags, silent bool) func() {
	sk := sliceKey(s)
	old := t.slices[sk]
	if old != nil && old.rv == s.ResourceVersion {
		return nil // a resync or a relist of an unchanged slice
	}
	keys, states := endpoints(s)
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return keys[order[a]].addr.Less(keys[order[b]].addr) })
	present := make(map[epKey]bool, len(keys))
	for _, i := range order {
		k, st := keys[i], states[i]
		present[k] = true
		e := t.eps[k]
		if e == nil {
			e = &epEntry{}
			t.eps[k] = e
		}
		e.set(sk, st)
		t.report(e, k, st, flags, silent)
	}
	t.slices[sk] = &sliceRec{rv: s.ResourceVersion, keys: keys}
	if old == nil {
		return nil
	}
	return func() { t.dropMissing(sk, old.keys, present, flags, silent) }
}

// remove forgets a deleted slice; its endpoints that no other slice lists
// are reported removed.
func (t *sliceTracker) remove(sk string, flags event.Flags, silent bool) {
	old := t.slices[sk]
	if old == nil {
		return
	}
	delete(t.slices, sk)
	t.dropMissing(sk, old.keys, nil, flags, silent)
}

func (t *sliceTracker) dropMissing(sk string, keys []epKey, present map[epKey]bool, flags event.Flags, silent bool) {
	for _, k := range keys {
		if present[k] {
			continue
		}
		e := t.eps[k]
		if e == nil || !e.drop(sk) {
			continue // listed twice in the old slice, already handled
		}
		if len(e.in) > 0 {
			// Still listed by another slice of the Service: report its
			// state there, which may differ.
			h := e.in[0]
			for _, o := range e.in[1:] {
				if o.slice < h.slice {
					h = o
				}
			}
			t.report(e, k, h.st, flags, silent)
			continue
		}
		delete(t.eps, k)
		if e.known && !silent {
			t.emit(t.at, event.EndpointRemoved, k, e.cur, flags)
		}
	}
}

// report compares st with the endpoint's last reported state and emits the
// transitions between them: going down, not-ready first, then not-serving,
// then terminating; coming up, ready then serving.
func (t *sliceTracker) report(e *epEntry, k epKey, st epState, flags event.Flags, silent bool) {
	prev, known := e.cur, e.known
	e.cur, e.known = st, true
	if silent {
		return
	}
	if !known {
		t.emit(t.at, event.EndpointAdded, k, st, flags)
		return
	}
	if prev.ready && !st.ready {
		t.emit(t.at, event.EndpointNotReady, k, st, flags)
	}
	if prev.serving && !st.serving {
		t.emit(t.at, event.EndpointNotServing, k, st, flags)
	}
	if !prev.terminating && st.terminating {
		t.emit(t.at, event.EndpointTerminating, k, st, flags)
	}
	if !prev.ready && st.ready {
		t.emit(t.at, event.EndpointReady, k, st, flags)
	}
	if !prev.serving && st.serving {
		t.emit(t.at, event.EndpointServing, k, st, flags)
	}
}

// replaceAll reconciles the tracker with a complete list: slices that
// changed are applied first and vanished ones removed after, so an
// endpoint that moved between slices while the watch was down is not
// reported removed and added again.
func (t *sliceTracker) replaceAll(list []*discoveryv1.EndpointSlice, flags event.Flags, silent bool) {
	seen := make(map[string]bool, len(list))
	var drops []func()
	for _, s := range list {
		seen[sliceKey(s)] = true
		if drop := t.update(s, flags, silent); drop != nil {
			drops = append(drops, drop)
		}
	}
	for _, drop := range drops {
		drop()
	}
	var gone []string
	for sk := range t.slices {
		if !seen[sk] {
			gone = append(gone, sk)
		}
	}
	sort.Strings(gone)
	for _, sk := range gone {
		t.remove(sk, flags, silent)
	}
}

// size reports how many endpoints and slices are tracked.
func (t *sliceTracker) size() (endpoints, slices int) { return len(t.eps), len(t.slices) }

// observe reports every endpoint's state as it is now, flagged
// FlagObserved: endpoint_ready when ready, endpoint_terminating when
// terminating, endpoint_not_ready otherwise. A walk of the tracker's own
// state; nothing is read from the API.
func (t *sliceTracker) observe(at time.Time) {
	for k, e := range t.eps {
		if !e.known {
			continue
		}
		kind := event.EndpointNotReady
		switch {
		case e.cur.ready:
			kind = event.EndpointReady
		case e.cur.terminating:
			kind = event.EndpointTerminating
		}
		t.emit(at, kind, k, e.cur, event.FlagObserved)
	}
}
