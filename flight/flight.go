// Package flight is the node's flight recorder for connection events. It sits
// in front of an event sink and holds each pod's ordinary connection closes in
// a bounded in-memory ring, handing them on only around a disruption of that
// pod (from Lead before its deletion, SIGTERM, not-ready, endpoint change,
// main process exit or listener close, until the pod is gone or healthy
// again), so that what is stored grows with disruptions, not with traffic.
// Every other event passes straight through. See docs/flight-recorder.md for
// what is kept and why.
package flight

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/drainscope/drainscope/event"
)

// Config bounds a Recorder. The zero value takes the defaults.
type Config struct {
	// Lead is how far before a trigger the held events are handed on, and
	// how long a held event waits for a trigger before it is discarded.
	// Default 10 s, the analysis's kernel window (analysis.Options.KernelWindow).
	Lead time.Duration
	// Calm is how long a disrupted pod must go without a trigger, and be
	// ready (or never seen not ready), before its connection events are
	// held again. Default 2 min.
	Calm time.Duration
	// PerPod and Total bound the held events of one pod and of all pods.
	// Defaults 4,096 and 32,768 (360 bytes an event: 1.5 and 12 MB, plus
	// the strings an event does not share with the pod cache).
	PerPod, Total int
	// Now is the clock, in UTC unix nanoseconds (tests pass a fake one).
	Now func() int64
}

func (c *Config) defaults() {
	if c.Lead <= 0 {
		c.Lead = 10 * time.Second
	}
	if c.Calm <= 0 {
		c.Calm = 2 * time.Minute
	}
	if c.PerPod <= 0 {
		c.PerPod = 4096
	}
	if c.Total <= 0 {
		c.Total = 32768
	}
	if c.PerPod > c.Total {
		c.PerPod = c.Total
	}
	if c.Now == nil {
		c.Now = func() int64 { return time.Now().UnixNano() }
	}
}

// Counts are a Recorder's (or one pod's) connection events by outcome.
// Held counts events that entered the ring; each leaves it Persisted
// (handed on at a trigger) or Discarded (aged out or past a bound), so
// Held − Persisted − Discarded are in the ring now. Passed counts
// connection closes handed on at once because their pod was disrupted.
type Counts struct {
	Held      uint64 `json:"held"`
	Persisted uint64 `json:"persisted"`
	Discarded uint64 `json:"discarded"`
	Passed    uint64 `json:"passed"`
}

func (c *Counts) add(o Counts) {
	c.Held += o.Held
	c.Persisted += o.Persisted
	c.Discarded += o.Discarded
	c.Passed += o.Passed
}

// PodCounts are one pod's counts and state, for an agent's debug output.
type PodCounts struct {
	Key       string `json:"pod"` // the pod's UID, or namespace/name when no UID was seen
	Name      string `json:"name,omitempty"`
	Disrupted bool   `json:"disrupted"`
	InRing    int    `json:"in_ring"`
	Counts
}

// Recorder holds connection closes per pod and hands every event to its
// sink when it should be stored. Its methods are safe for concurrent use;
// the sink is called outside the Recorder's lock, by the caller's
// goroutine.
type Recorder struct {
	cfg  Config
	sink func(event.Event)

	mu        sync.Mutex
	pods      map[string]*pod
	alias     map[string]string // namespace/name → UID, from events that carry both
	held      int               // events in all rings
	totals    Counts
	lastSweep int64
}

type pod struct {
	name        string // namespace/name, when known
	ring        []event.Event
	head        int // index of the oldest in ring (a circular buffer once full)
	n           int
	disrupted   bool
	lastTrigger int64 // clock time of the last trigger
	notReady    bool  // the last readiness seen was not ready
	deleted     bool
	lastSeen    int64 // clock time of the last event
	counts      Counts
}

// New returns a Recorder handing events to sink.
func New(cfg Config, sink func(event.Event)) *Recorder {
	cfg.defaults()
	return &Recorder{cfg: cfg, sink: sink, pods: map[string]*pod{}, alias: map[string]string{}}
}

// Held reports whether the recorder may hold e: a connection closed in
// the ordinary way (not by a process's exit) on a known pod. Everything
// else the analysis reads at any time (resets, refused connections, exits,
// signals, listener closes, every watch and dataplane event) is never held.
func Held(e *event.Event) bool {
	return e.Kind == event.ConnClosed && !e.Flags.Has(event.FlagAtExit) && !e.Pod.IsZero()
}

// Trigger reports whether e starts (or prolongs) its pod's disruption:
// its deletion, not-ready, container termination, its endpoint leaving
// rotation, SIGTERM or SIGKILL delivered to it, the exit of its main
// process (or an exit by a signal), or a listener closed.
func Trigger(e *event.Event) bool {
	switch e.Kind {
	case event.PodDeletion, event.PodFinished, event.PodNotReady, event.ContainerTerminated,
		event.EndpointNotReady, event.EndpointTerminating, event.EndpointRemoved,
		event.ListenerClosed:
		return true
	case event.Signal:
		return e.Signal == event.SIGTERM || e.Signal == event.SIGKILL
	case event.ProcessExit:
		// An exec probe's exit every few seconds is no disruption; where
		// the capture cannot mark main processes, the kubelet's
		// container_terminated follows the app's exit within the lead.
		return e.Flags.Has(event.FlagMain) || e.Signal != 0
	}
	return false
}

// Add takes one event: it is handed to the sink now (with, at a trigger,
// its pod's held events first, oldest first), or held.
func (r *Recorder) Add(e event.Event) {
	if e.Pod.IsZero() {
		// No pod: nothing could ever flush it, and the kernel capture only
		// tracks pods, so such an event is rare and worth keeping.
		r.sink(e)
		return
	}
	held, trig := Held(&e), Trigger(&e)
	ready := e.Kind == event.PodReady
	reset := e.Kind == event.RSTSent || e.Kind == event.RSTReceived
	if !held && !trig && !ready && !reset {
		r.sink(e)
		return
	}
	var out []event.Event
	now := r.cfg.Now()
	r.mu.Lock()
	r.maybeSweep(now)
	p := r.pod(&e, trig || held)
	switch {
	case p == nil:
	case trig:
		p.lastSeen = now
		p.lastTrigger = now
		switch e.Kind {
		case event.PodDeletion:
			p.deleted = true
		case event.PodNotReady:
			p.notReady = true
		}
		if !p.disrupted {
			p.disrupted = true
			out = r.flush(p, e.Time-int64(r.cfg.Lead), nil)
		}
	case ready:
		p.notReady = false
	case reset:
		// A reset on a connection this pod closed shortly before is the
		// keep-alive race's signature (the close, the peer's data, the
		// reset): the close is evidence, whatever the pod's state.
		out = r.flushConn(p, &e)
	case held:
		p.lastSeen = now
		r.calm(p, now)
		if p.disrupted {
			p.counts.Passed++
			r.totals.Passed++
			r.mu.Unlock()
			r.sink(e)
			return
		}
		r.expire(p, now)
		r.hold(p, e)
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	for i := range out {
		r.sink(out[i])
	}
	r.sink(e)
}

// pod finds e's pod state, creating it when create is set.
func (r *Recorder) pod(e *event.Event, create bool) *pod {
	uid, name := e.Pod.UID, ""
	if e.Pod.Name != "" {
		name = e.Pod.Namespace + "/" + e.Pod.Name
	}
	key := uid
	if key == "" {
		key = r.alias[name]
		if key == "" {
			key = name
		}
	} else if name != "" && r.alias[name] != uid {
		r.alias[name] = uid
		if q, ok := r.pods[name]; ok {
			// Known by name first (an endpoint without a UID): one pod.
			delete(r.pods, name)
			if _, dup := r.pods[uid]; !dup {
				r.pods[uid] = q
			}
		}
	}
	p := r.pods[key]
	if p == nil && create {
		p = &pod{}
		r.pods[key] = p
	}
	if p != nil && name != "" {
		p.name = name
	}
	return p
}

// hold appends e to p's ring, making room within the bounds.
func (r *Recorder) hold(p *pod, e event.Event) {
	p.counts.Held++
	r.totals.Held++
	if p.n == r.cfg.PerPod || r.held >= r.cfg.Total {
		if p.n == 0 {
			// Every slot is another pod's: this one cannot be held.
			p.counts.Discarded++
			r.totals.Discarded++
			return
		}
		r.drop(p, 1)
	}
	if p.n == len(p.ring) {
		r.grow(p)
	}
	p.ring[(p.head+p.n)%len(p.ring)] = e
	p.n++
	r.held++
}

// grow doubles p's ring, up to PerPod, keeping its order.
func (r *Recorder) grow(p *pod) {
	nr := make([]event.Event, min(max(2*len(p.ring), 16), r.cfg.PerPod))
	for i := 0; i < p.n; i++ {
		nr[i] = *p.at(i)
	}
	p.ring, p.head = nr, 0
}

// at returns the i-th oldest held event of p.
func (p *pod) at(i int) *event.Event { return &p.ring[(p.head+i)%len(p.ring)] }

// drop discards p's k oldest held events.
func (r *Recorder) drop(p *pod, k int) {
	for i := 0; i < k; i++ {
		*p.at(0) = event.Event{} // let go of its strings and Attrs
		p.head = (p.head + 1) % len(p.ring)
		p.n--
	}
	p.counts.Discarded += uint64(k)
	r.totals.Discarded += uint64(k)
	r.held -= k
	if p.n == 0 {
		p.head = 0
	}
}

// expire discards p's held events older than the lead.
func (r *Recorder) expire(p *pod, now int64) {
	cut := now - int64(r.cfg.Lead)
	k := 0
	for k < p.n && p.at(k).Time < cut {
		k++
	}
	if k > 0 {
		r.drop(p, k)
	}
}

// flush empties p's ring: events at or after from are appended to out in
// time order and counted persisted, older ones discarded.
func (r *Recorder) flush(p *pod, from int64, out []event.Event) []event.Event {
	start := len(out)
	discarded := 0
	for i := 0; i < p.n; i++ {
		e := p.at(i)
		if e.Time >= from {
			out = append(out, *e)
		} else {
			discarded++
		}
		*e = event.Event{}
	}
	kept := len(out) - start
	p.counts.Persisted += uint64(kept)
	p.counts.Discarded += uint64(discarded)
	r.totals.Persisted += uint64(kept)
	r.totals.Discarded += uint64(discarded)
	r.held -= p.n
	p.n, p.head, p.ring = 0, 0, nil // a disrupted pod holds nothing
	slices.SortStableFunc(out[start:], func(a, b event.Event) int { return cmp.Compare(a.Time, b.Time) })
	return out
}

// flushConn takes out of p's ring the closes of e's connection (same local
// and remote address), for the sink, oldest first.
func (r *Recorder) flushConn(p *pod, e *event.Event) []event.Event {
	var out []event.Event
	w := 0
	for i := 0; i < p.n; i++ {
		c := p.at(i)
		if c.Local == e.Local && c.Remote == e.Remote {
			out = append(out, *c)
			continue
		}
		if w != i {
			*p.at(w) = *c
		}
		w++
	}
	for i := w; i < p.n; i++ {
		*p.at(i) = event.Event{}
	}
	k := p.n - w
	p.n = w
	r.held -= k
	p.counts.Persisted += uint64(k)
	r.totals.Persisted += uint64(k)
	if p.n == 0 {
		p.head = 0
	}
	return out
}

// calm ends p's disruption once it has gone Calm without a trigger and is
// not known to be not ready or deleted.
func (r *Recorder) calm(p *pod, now int64) {
	if p.disrupted && !p.notReady && !p.deleted && now-p.lastTrigger >= int64(r.cfg.Calm) {
		p.disrupted = false
	}
}

// maybeSweep runs Sweep's work at most once a second, from Add.
func (r *Recorder) maybeSweep(now int64) {
	if now-r.lastSweep < int64(time.Second) {
		return
	}
	r.sweep(now)
}

// Sweep discards held events past the lead, ends the disruptions that
// have calmed, and forgets pods with nothing held and nothing seen for
// Lead + Calm (a deleted pod is gone then). Add sweeps at most once a
// second; a caller with no events for a while may call it on a timer.
func (r *Recorder) Sweep() {
	now := r.cfg.Now()
	r.mu.Lock()
	r.sweep(now)
	r.mu.Unlock()
}

func (r *Recorder) sweep(now int64) {
	r.lastSweep = now
	idle := int64(r.cfg.Lead + r.cfg.Calm)
	for k, p := range r.pods {
		r.expire(p, now)
		r.calm(p, now)
		// A pod not ready is kept (one per pod of this node at most); a
		// deleted pod is gone once nothing is seen of it.
		if p.n == 0 && now-p.lastSeen >= idle && (!p.disrupted || !p.notReady || p.deleted) {
			delete(r.pods, k)
			if p.name != "" && r.alias[p.name] == k {
				delete(r.alias, p.name)
			}
		}
	}
	for name, uid := range r.alias {
		if _, ok := r.pods[uid]; !ok {
			delete(r.alias, name)
		}
	}
}

// Counts returns the totals over every pod since New.
func (r *Recorder) Counts() Counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.totals
}

// Pods returns the counts of the pods the recorder knows now (pods are
// forgotten Lead + Calm after their last event), sorted by key.
func (r *Recorder) Pods() []PodCounts {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]PodCounts, 0, len(r.pods))
	for k, p := range r.pods {
		out = append(out, PodCounts{Key: k, Name: p.name, Disrupted: p.disrupted, InRing: p.n, Counts: p.counts})
	}
	slices.SortFunc(out, func(a, b PodCounts) int { return cmp.Compare(a.Key, b.Key) })
	return out
}
