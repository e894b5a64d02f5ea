package analysis

import (
	"sort"

	"github.com/drainscope/drainscope/event"
)

// svcState counts a Service's ready endpoints as each node saw them, with a
// short history so "no ready endpoint at t" can be answered a lookahead
// later.
type svcState struct {
	members map[member]bool
	nodes   map[string]*nodeCount
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
// saw no ready endpoint, and returns the events that emptied each view.
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
	return len(why) > 0, why
}

// servicesFor returns the Service keys a failure refers to: the one the
// client named, else the pod's.
func (a *Aligner) servicesFor(f *event.Event, p *podState) []string {
	if f.Service != "" {
		if _, ok := a.svcs[f.Service]; ok {
			return []string{f.Service}
		}
		var out []string
		name := f.Service
		if i := lastSlash(name); i >= 0 {
			name = name[i+1:]
		}
		if i := indexByte(name, '.'); i >= 0 {
			name = name[:i]
		}
		for _, k := range a.svcIdx[name] {
			if serviceMatch(f.Service, k) {
				out = append(out, k)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	if p != nil {
		return p.services
	}
	return nil
}

func indexByte(s string, b byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == b {
			return i
		}
	}
	return -1
}
