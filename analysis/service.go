package analysis

import (
	"net"
	"net/netip"
	"sort"
	"strings"

	"github.com/drainscope/drainscope/event"
)

// svcState counts a Service's ready endpoints as each node saw them, with a
// short history so "no ready endpoint at t" can be answered a lookahead
// later.
type svcState struct {
	members map[member]bool
	nodes   map[string]*nodeCount
	// created is the watcher's event of the Service's creation, when it
	// came before any endpoint: until an endpoint appears, it had none.
	created *event.Event
}

type member struct{ id, node string }

type nodeCount struct {
	n    int
	hist []countTrans
}

type countTrans struct {
	n  int
	ev event.Event
}

func (a *Aligner) endpoint(e *event.Event) {
	key := serviceKey(e.Pod.Namespace, e.Service)
	if key == "" {
		return
	}
	ready, known := endpointReady(e)
	if !known {
		return
	}
	s := a.svcs[key]
	if s == nil {
		s = &svcState{members: map[member]bool{}, nodes: map[string]*nodeCount{}}
		a.svcs[key] = s
		name := key
		if i := lastSlash(key); i >= 0 {
			name = key[i+1:]
		}
		a.svcIdx[name] = append(a.svcIdx[name], key)
	}
	id := e.Pod.UID
	if id == "" {
		id = e.Pod.Namespace + "/" + e.Pod.Name
	}
	if e.Pod.IsZero() {
		id = e.Local.String()
	}
	m := member{id, e.Node}
	was, seen := s.members[m]
	nc := s.nodes[e.Node]
	if nc == nil {
		nc = &nodeCount{}
		s.nodes[e.Node] = nc
	}
	if !seen && !ready && e.Kind != event.EndpointAdded {
		// First seen leaving: it was ready before the recorded history
		// began, so every earlier count of this node was one higher.
		was = true
		nc.n++
		for i := range nc.hist {
			nc.hist[i].n++
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
	case !was && ready:
		nc.n++
	case len(nc.hist) > 0:
		return // no change in this node's count
	}
	nc.hist = append(nc.hist, countTrans{n: nc.n, ev: e.Clone()})
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
		i := 0
		for i+1 < len(nc.hist) && nc.hist[i+1].ev.Time < before {
			i++
		}
		if i > 0 {
			nc.hist = append(nc.hist[:0], nc.hist[i:]...)
		}
	}
}

// noReadyAt reports whether every node that had a view of the Service at t
// saw no ready endpoint, and returns the events that emptied each view. A
// Service the watcher saw created, and never with an endpoint since, had
// none.
func (s *svcState) noReadyAt(t int64) (bool, []*event.Event) {
	var why []*event.Event
	for _, nc := range s.nodes {
		// hist is in time order: the count in force at t is the last
		// entry at or before it.
		i := sort.Search(len(nc.hist), func(i int) bool { return nc.hist[i].ev.Time > t })
		if i == 0 {
			continue // this node had no view yet
		}
		cur := &nc.hist[i-1]
		if cur.n > 0 {
			return false, nil
		}
		why = append(why, &cur.ev)
	}
	if len(why) == 0 && s.created != nil && s.created.Time <= t {
		// No node had a view yet, but the Service was seen created.
		return true, []*event.Event{s.created}
	}
	return len(why) > 0, why
}

// firstReadyIn returns the first transition to a ready endpoint, on any
// node, in (from, to].
func (s *svcState) firstReadyIn(from, to int64) *event.Event {
	var first *event.Event
	for _, nc := range s.nodes {
		for i := range nc.hist {
			h := &nc.hist[i]
			if h.ev.Time > from && h.ev.Time <= to && h.n > 0 && (first == nil || h.ev.Time < first.Time) {
				first = &h.ev
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
	// Free what this Service held and no longer does.
	for ip, cs := range a.svcAddrs {
		if last := cs[len(cs)-1]; last.key == key && !now[ip] {
			a.svcAddrs[ip] = append(cs, svcClaim{t: e.Time})
		}
	}
	for ip := range now {
		cs := a.svcAddrs[ip]
		if n := len(cs); n == 0 || cs[n-1].key != key {
			a.svcAddrs[ip] = append(cs, svcClaim{t: e.Time, key: key})
		}
	}
	if e.Reason == event.ChangeDeleted {
		return
	}
	st := a.svcs[key]
	if st == nil {
		st = &svcState{members: map[member]bool{}, nodes: map[string]*nodeCount{}}
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

// serviceAt is the Service that held ip at t, if the watcher recorded one.
func (a *Aligner) serviceAt(ip netip.Addr, t int64) string {
	cs := a.svcAddrs[ip.Unmap()]
	i := sort.Search(len(cs), func(i int) bool { return cs[i].t > t })
	if i == 0 {
		return ""
	}
	return cs[i-1].key
}

// servicesFor returns the Service keys a failure refers to, at the time its
// request began: the one the client named (its Service field, else the host
// of its target: a ClusterIP, or name.ns[.svc[.cluster.local]]), else the
// Service that held the address it dialled, else the pod's.
func (a *Aligner) servicesFor(f *event.Event, p *podState) []string {
	start := f.Time - max(f.Duration, 0)
	named := f.Service
	if named == "" {
		if host := targetHost(f.Attrs[event.AttrTarget]); host != "" {
			if ip, err := netip.ParseAddr(host); err == nil {
				if k := a.serviceAt(ip, start); k != "" {
					return []string{k}
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
		if k := a.serviceAt(f.Remote.Addr(), start); k != "" {
			return []string{k}
		}
	}
	if p != nil {
		return p.services
	}
	return nil
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
