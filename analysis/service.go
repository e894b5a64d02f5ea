package analysis

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/drainscope/drainscope/event"
)

// svcState counts a Service's ready endpoints as each node saw them, with a
// short history so "no ready endpoint at t" can be answered a lookahead
// later; the serving and terminating ones are counted beside them, as the
// evidence of what the Service had instead.
type svcState struct {
	members map[member]bool
	others  map[member]epOthers
	nodes   map[string]*nodeCount
	// created is the watcher's event of the Service's creation, when it
	// came before any endpoint: until an endpoint appears, it had none.
	created *event.Event
}

func newSvcState() *svcState {
	return &svcState{members: map[member]bool{}, others: map[member]epOthers{}, nodes: map[string]*nodeCount{}}
}

type member struct{ id, node string }

// epOthers are an endpoint's serving and terminating conditions.
type epOthers struct{ serving, terminating bool }

type nodeCount struct {
	n                    int // ready
	serving, terminating int
	// hist[lo:] is the node's history (see live); trim moves lo past
	// what it drops and compacts hist only now and then.
	hist []countTrans
	lo   int
}

// live is the node's history of counts, oldest first.
func (nc *nodeCount) live() []countTrans { return nc.hist[nc.lo:] }

// countTrans is a node's counts from t on; ev is the event that set the
// ready count n (an entry that changed only the others repeats it).
type countTrans struct {
	t                    int64
	n                    int
	serving, terminating int
	ev                   *event.Event // shared (see keeper)
}

func (a *Aligner) endpoint(k *keeper) {
	e := k.e
	key := serviceKey(e.Pod.Namespace, e.Service)
	if key == "" {
		return
	}
	ready, known := endpointReady(e)
	others, knownOthers := endpointOthers(e)
	if !known && !knownOthers {
		return
	}
	s := a.svcs[key]
	if s == nil {
		s = newSvcState()
		a.svcs[key] = s
		name := key
		if i := lastSlash(key); i >= 0 {
			name = key[i+1:]
		}
		a.svcIdx[name] = append(a.svcIdx[name], key)
	}
	if p := a.pod(&e.Pod, false); p != nil {
		ps := a.svcPods[key]
		if ps == nil {
			ps = map[*podState]bool{}
			a.svcPods[key] = ps
		}
		ps[p] = true
	}
	id := e.Pod.UID
	if id == "" {
		id = e.Pod.Namespace + "/" + e.Pod.Name
	}
	if e.Pod.IsZero() {
		id = e.Local.String()
	}
	m := member{id, e.Node}
	nc := s.nodes[e.Node]
	if nc == nil {
		nc = &nodeCount{}
		s.nodes[e.Node] = nc
	}
	changed := false
	if knownOthers {
		was := s.others[m]
		now := others(was)
		if e.Kind == event.EndpointRemoved {
			delete(s.others, m)
			now = epOthers{}
		} else {
			s.others[m] = now
		}
		// An endpoint first seen leaving a condition had it before the
		// history began: the count is not let below zero.
		nc.serving = max(nc.serving+b2i(now.serving)-b2i(was.serving), 0)
		nc.terminating = max(nc.terminating+b2i(now.terminating)-b2i(was.terminating), 0)
		changed = now != was
	}
	if known {
		was, seen := s.members[m]
		if !seen && !ready && e.Kind != event.EndpointAdded && !e.Flags.Has(event.FlagObserved) {
			// First seen leaving: it was ready before the recorded history
			// began, so every earlier count of this node was one higher.
			was = true
			nc.n++
			h := nc.live()
			for i := range h {
				h[i].n++
			}
		}
		if e.Kind == event.EndpointRemoved {
			delete(s.members, m)
		} else {
			s.members[m] = ready
		}
		switch {
		case was && !ready:
			nc.n--
			changed = true
		case !was && ready:
			nc.n++
			changed = true
		}
	}
	h := nc.live()
	if !changed && len(h) > 0 {
		return // no change in this node's counts
	}
	tr := countTrans{t: e.Time, n: nc.n, serving: nc.serving, terminating: nc.terminating}
	if last := len(h) - 1; last >= 0 && h[last].n == nc.n {
		tr.ev = h[last].ev // the ready count's evidence stays the event that set it
	} else {
		tr.ev = k.get()
	}
	nc.hist = append(nc.hist, tr)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// endpointOthers says how an endpoint event changes the serving and
// terminating conditions; known is false when it does not touch them.
func endpointOthers(e *event.Event) (func(epOthers) epOthers, bool) {
	switch e.Kind {
	case event.EndpointAdded:
		c := e.Attrs[event.AttrConditions]
		return func(epOthers) epOthers {
			return epOthers{serving: conditionIn(c, "serving"), terminating: conditionIn(c, "terminating")}
		}, true
	case event.EndpointServing:
		return func(o epOthers) epOthers { o.serving = true; return o }, true
	case event.EndpointNotServing:
		return func(o epOthers) epOthers { o.serving = false; return o }, true
	case event.EndpointTerminating:
		return func(o epOthers) epOthers { o.terminating = true; return o }, true
	case event.EndpointRemoved:
		return func(epOthers) epOthers { return epOthers{} }, true
	}
	return nil, false
}

// conditionIn reads a condition from the conditions attribute in the
// spellings readyFromConditions reads: "serving", "serving=true",
// {"serving":true}.
func conditionIn(s, name string) bool {
	for _, tok := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return r == ',' || r == ' ' || r == '{' || r == '}' || r == ';' || r == '|'
	}) {
		k, v, hasV := strings.Cut(tok, "=")
		if !hasV {
			k, v, hasV = strings.Cut(tok, ":")
		}
		if strings.Trim(k, `"'`) == name {
			v = strings.Trim(v, `"'`)
			return !hasV || v == "true" || v == "1" || v == "yes"
		}
	}
	return false
}

// endpointsAt says what the Service's endpoints were at t, as the node
// views that had most of them: "0 ready, 2 serving, 2 terminating".
func (s *svcState) endpointsAt(t int64) string {
	ready, serving, terminating, seen := 0, 0, 0, false
	for _, nc := range s.nodes {
		h := nc.live()
		i := sort.Search(len(h), func(i int) bool { return h[i].t > t })
		if i == 0 {
			continue
		}
		c := &h[i-1]
		seen = true
		ready, serving, terminating = max(ready, c.n), max(serving, c.serving), max(terminating, c.terminating)
	}
	if !seen {
		return "no endpoint"
	}
	return fmt.Sprintf("%d ready, %d serving, %d terminating", ready, serving, terminating)
}

func lastSlash(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}

// trim drops history older than before, keeping the last entry before it
// (the count then in force).
func (s *svcState) trim(before int64) {
	for _, nc := range s.nodes {
		h := nc.live()
		i := 0
		for i+1 < len(h) && h[i+1].t < before {
			i++
		}
		nc.lo += i
		// Moving the kept entries down costs as much as there are (a
		// busy Service keeps thousands): do it once the dropped ones are
		// as many, so that an entry moves about once.
		if nc.lo > 0 && nc.lo >= len(nc.hist)-nc.lo {
			n := copy(nc.hist, nc.hist[nc.lo:])
			clear(nc.hist[n:]) // the dropped events, for the collector
			nc.hist, nc.lo = nc.hist[:n], 0
		}
	}
}

// noReadyAt reports whether every node that had a view of the Service at t
// saw no ready endpoint, and returns the events that emptied each view. A
// Service the watcher saw created, and never with an endpoint since, had
// none.
func (s *svcState) noReadyAt(t, grace int64) (bool, []*event.Event) {
	var why []*event.Event
	for _, nc := range s.nodes {
		// hist is in time order: the count in force at t is the last
		// entry at or before it.
		h := nc.live()
		i := sort.Search(len(h), func(i int) bool { return h[i].t > t })
		if i == 0 {
			continue // this node had no view yet
		}
		cur := &h[i-1]
		if cur.n > 0 {
			return false, nil
		}
		why = append(why, cur.ev)
	}
	if len(why) == 0 && s.created != nil && s.created.Time <= t+grace {
		// No node had a view yet, but the Service was seen created (up to
		// grace later: the watch stamps a new Service when its event
		// arrives, after the first requests to it may have).
		return true, []*event.Event{s.created}
	}
	return len(why) > 0, why
}

// firstReadyIn returns the first transition to a ready endpoint, on any
// node, in (from, to].
func (s *svcState) firstReadyIn(from, to int64) *event.Event {
	var first *event.Event
	for _, nc := range s.nodes {
		live := nc.live()
		for i := range live {
			h := &live[i]
			if h.t > from && h.t <= to && h.n > 0 && (first == nil || h.ev.Time < first.Time) {
				first = h.ev
				break
			}
		}
	}
	return first
}

// svcClaim is a Service taking a ClusterIP (key set) or letting it go
// (key empty) at time t.
type svcClaim struct {
	t   int64
	key string
}

// service records which ClusterIPs a Service holds from a service_changed
// event on: its creation, update or observation claims them (and frees the
// ones it no longer has), its deletion frees them. Services with no
// endpoint event yet are indexed by name too, so that a client naming one
// is known to mean it.
func (a *Aligner) service(e *event.Event) {
	key := serviceKey(e.Pod.Namespace, e.Service)
	if key == "" {
		return
	}
	now := map[netip.Addr]bool{}
	if e.Reason != event.ChangeDeleted {
		for _, s := range strings.Split(e.Attrs[event.AttrClusterIPs], ",") {
			if ip, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil {
				now[ip.Unmap()] = true
			}
		}
	}
	// Free what this Service held and no longer does. (A snapshot of every
	// Service repeats what is known: it changes nothing, at the cost of
	// its own addresses only.)
	held := a.svcHeld[key]
	for _, ip := range held {
		if cs := a.svcAddrs[ip]; !now[ip] && cs[len(cs)-1].key == key {
			a.svcAddrs[ip] = append(cs, svcClaim{t: e.Time})
		}
	}
	held = held[:0]
	for ip := range now {
		cs := a.svcAddrs[ip]
		if n := len(cs); n == 0 || cs[n-1].key != key {
			a.svcAddrs[ip] = append(cs, svcClaim{t: e.Time, key: key})
		}
		held = append(held, ip)
	}
	if len(held) == 0 {
		delete(a.svcHeld, key)
	} else {
		a.svcHeld[key] = held
	}
	if e.Reason == event.ChangeDeleted {
		if a.svcs[key] == nil {
			if a.svcGone == nil {
				a.svcGone = map[string]bool{}
			}
			a.svcGone[key] = true
		}
		return
	}
	st := a.svcs[key]
	if st == nil {
		st = newSvcState()
		a.svcs[key] = st
		name := key[lastSlash(key)+1:]
		a.svcIdx[name] = append(a.svcIdx[name], key)
	}
	// Only a Service seen created starts with no endpoint for sure; one
	// observed may have had endpoints since before the watch began, which
	// the EndpointSlice watch's first list reports as no event.
	if e.Reason == event.ChangeCreated && len(st.nodes) == 0 && st.created == nil {
		c := e.Clone()
		st.created = &c
	}
}

// servicesAt are the Services a client that dialled ip at t may have
// reached: the one that held it at t, if the watcher recorded one. When
// none did:
//   - the one that freed it within the proxy lag before t: the nodes'
//     proxies route a deleted Service's address until they catch up, and
//     its ClusterIP may already be a new Service's (the API server hands a
//     freed address out again);
//   - the one that claimed it within the lookahead after t: the watch
//     stamps a Service when its event arrives, which can be after the
//     first requests to a Service just created.
//
// Both when both hold: the pod-side records then tell which pods it
// reached.
func (a *Aligner) servicesAt(ip netip.Addr, t int64) []string {
	cs := a.svcAddrs[ip.Unmap()]
	i := sort.Search(len(cs), func(i int) bool { return cs[i].t > t })
	if i > 0 && cs[i-1].key != "" {
		return []string{cs[i-1].key}
	}
	var out []string
	if i > 1 && t-cs[i-1].t <= int64(a.opts.ProxyLag) && cs[i-2].key != "" {
		out = append(out, cs[i-2].key)
	}
	if i < len(cs) && cs[i].t-t <= int64(a.opts.Lookahead) && cs[i].key != "" {
		out = append(out, cs[i].key)
	}
	return out
}

// servicesHeld appends to dst the Services that held ip at some time in
// [from, to], each once.
func (a *Aligner) servicesHeld(dst []string, ip netip.Addr, from, to int64) []string {
	cs := a.svcAddrs[ip.Unmap()]
	for i, c := range cs {
		if c.key == "" || c.t > to || i+1 < len(cs) && cs[i+1].t < from || slices.Contains(dst, c.key) {
			continue
		}
		dst = append(dst, c.key)
	}
	return dst
}

// dialled is the address a failure's client dialled: its target's host
// when that is an address, else the connection's remote end.
func dialled(f *event.Event) (netip.Addr, bool) {
	if h := targetHost(f.Attrs[event.AttrTarget]); h != "" {
		if ip, err := netip.ParseAddr(h); err == nil {
			return ip, true
		}
	}
	if f.Remote.IsValid() {
		return f.Remote.Addr(), true
	}
	return netip.Addr{}, false
}

// servicesFor returns the Service keys a failure refers to, at the time its
// request began: the one the client named (its Service field, else the host
// of its target: a ClusterIP, or name.ns[.svc[.cluster.local]]), else the
// Service that held the address it dialled, else the pod's.
// servicePods are the pods known as endpoints of the Services svcs (at
// any time), in a stable order.
func (a *Aligner) servicePods(svcs []string, t int64) []*podState {
	var out []*podState
	seen := map[*podState]bool{}
	for _, k := range svcs {
		for p := range a.svcPods[k] {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ref.Name < out[j].ref.Name })
	return out
}

func (a *Aligner) servicesFor(f *event.Event, p *podState) []string {
	start := f.Time - max(f.Duration, 0)
	named := f.Service
	if named == "" {
		if host := targetHost(f.Attrs[event.AttrTarget]); host != "" {
			if ip, err := netip.ParseAddr(host); err == nil {
				if ks := a.servicesAt(ip, start); len(ks) > 0 {
					return ks
				}
			} else {
				named = host
			}
		}
	}
	if named != "" {
		if _, ok := a.svcs[named]; ok {
			return []string{named}
		}
		var out []string
		name := named
		if i := lastSlash(name); i >= 0 {
			name = name[i+1:]
		}
		if i := indexByte(name, '.'); i >= 0 {
			name = name[:i]
		}
		for _, k := range a.svcIdx[name] {
			if serviceMatch(named, k) {
				out = append(out, k)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	if f.Remote.IsValid() {
		if ks := a.servicesAt(f.Remote.Addr(), start); len(ks) > 0 {
			return ks
		}
	}
	if p != nil {
		return p.services
	}
	return nil
}

// otherCluster returns the Service a client failure names with its
// namespace (see namedService) when the records hold this cluster's
// Services but none of this one: no service_changed, no endpoint event,
// in the window or in the state read before it. Such a Service is another
// cluster's, and the address its client dialled means nothing here:
// clusters hand out addresses from the same default ranges, so it may be
// a local Service's ClusterIP or a local pod's address by coincidence.
// Records with no Service at all (no watch of them) say nothing either
// way. "" when the failure names no Service so, or one this cluster has
// had.
func (a *Aligner) otherCluster(f *event.Event) string {
	if len(a.svcs) == 0 && len(a.svcGone) == 0 {
		return ""
	}
	k := namedService(f)
	if k == "" || a.svcs[k] != nil || a.svcGone[k] {
		return ""
	}
	return k
}

// namedService is the Service a failure names with its namespace, as
// namespace/name: its Service field (namespace/name, name.namespace or
// name.namespace.svc…), else its target's host when that is a Service's
// DNS name (name.namespace.svc, with the cluster's domain or not). A host
// of two labels is not taken for name.namespace: example.com would be.
// "" when it names none so.
func namedService(f *event.Event) string {
	s, field := f.Service, true
	if s == "" {
		s, field = targetHost(f.Attrs[event.AttrTarget]), false
	}
	if s == "" {
		return ""
	}
	if ns, name, ok := strings.Cut(s, "/"); ok {
		if !field || ns == "" || name == "" || strings.Contains(name, "/") {
			return ""
		}
		return s
	}
	name, rest, ok := strings.Cut(strings.TrimSuffix(s, "."), ".")
	if !ok {
		return ""
	}
	ns, rest, more := strings.Cut(rest, ".")
	if more {
		if svc, _, _ := strings.Cut(rest, "."); !strings.EqualFold(svc, "svc") {
			return ""
		}
	} else if !field {
		return ""
	}
	if name == "" || ns == "" {
		return ""
	}
	// Host names are case-insensitive; Service names are lower case.
	return strings.ToLower(ns + "/" + name)
}

// targetHost is the host a client's target names: of a URL
// (http://web.default.svc:80/x), of host:port, or the target itself.
func targetHost(target string) string {
	if target == "" {
		return ""
	}
	if i := strings.Index(target, "://"); i >= 0 {
		target = target[i+3:]
	}
	if i := strings.IndexAny(target, "/?#"); i >= 0 {
		target = target[:i]
	}
	if i := strings.LastIndexByte(target, '@'); i >= 0 {
		target = target[i+1:]
	}
	if h, _, err := net.SplitHostPort(target); err == nil {
		return strings.Trim(h, "[]")
	}
	return strings.Trim(target, "[]")
}

func indexByte(s string, b byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == b {
			return i
		}
	}
	return -1
}

// serviceKey renders a Service as namespace/name; a name that already has a
// namespace is kept.
func serviceKey(ns, svc string) string {
	if svc == "" || strings.Contains(svc, "/") || ns == "" {
		return svc
	}
	return ns + "/" + svc
}

// isServiceKey reports whether key == serviceKey(ns, svc), without
// building the key: a dataplane event looks up its view with it.
func isServiceKey(key, ns, svc string) bool {
	if svc == "" || ns == "" || strings.Contains(svc, "/") {
		return key == svc
	}
	return len(key) == len(ns)+1+len(svc) && key[len(ns)] == '/' && key[:len(ns)] == ns && key[len(ns)+1:] == svc
}

// serviceMatch reports whether a client's idea of a Service (maybe only a
// name, maybe a DNS name like web.default.svc) names key (namespace/name).
func serviceMatch(client, key string) bool {
	if client == "" || key == "" {
		return false
	}
	if client == key {
		return true
	}
	ns, name, _ := strings.Cut(key, "/")
	if client == name {
		return true
	}
	// web.default, web.default.svc, web.default.svc.cluster.local
	if parts := strings.Split(client, "."); len(parts) >= 2 && parts[0] == name && parts[1] == ns {
		return true
	}
	return false
}

func containsService(svcs []string, s string) bool {
	for _, x := range svcs {
		if x == s {
			return true
		}
	}
	return false
}
