package web

import (
	"context"
	"math"
	"sort"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// A model is one rollout read into memory: the analysis of its window and,
// per pod, the events the timeline draws in compact form. Every timeline
// request for the rollout, at any zoom, is answered from it.
type model struct {
	key     analysis.DisruptionKey
	rollout *analysis.Disruption
	live    bool // the rollout may still grow
	built   time.Time
	took    time.Duration

	capture event.Window // lanes hold the events in here
	extent  event.Window // the default view

	result  *analysis.Result
	summary RolloutSummary
	lanes   []*lane
	events  int // events held in lanes

	clientN int // failures reported by clients

	gaps       []analysis.RecorderGap // where its record is incomplete (analysis.Disruption.RecorderGaps)
	found      *analysis.Disruption   // the disruption as the account found it, before the analysis filled it in
	partial    bool                   // read from a digest without the whole analysis: answers the timeline only
	fromDigest bool
}

// lane is one pod's row on the timeline.
type lane struct {
	key         string
	pod         analysis.PodView
	role        string // old, new, other
	node        string
	first, last int64
	start       int64 // termination start (old pods) or creation/readiness (new): the sort key
	life        int64 // an old pod's: which of its lives the disruption ended (analysis.PodView.Life)
	tl          *analysis.PodTimeline

	marks   []landmark  // lifecycle events, in time order
	lastSig event.Event // the latest signal, to leave out its repeats
	dropped int         // lifecycle events not kept (beyond maxLaneLandmarks)
	socks   []sockMark  // connection closes, resets, refusals, in time order
	// Failures the analysis attributed to the pod, in time order: reported
	// by clients, inferred from kernel evidence alone, and both merged.
	fails    []failMark
	inferred []failMark
	all      []failMark
}

// Lane roles.
const (
	roleOld   = "old"
	roleNew   = "new"
	roleOther = "other"
)

type landmark struct {
	t       int64
	id      event.ID
	kind    event.Kind
	signal  int32
	node    string
	summary string
}

type sockMark struct {
	t      int64
	id     event.ID
	kind   uint8 // index into sockKinds
	series uint8 // index into sockSeries
}

type failMark struct {
	t        int64
	i        int32 // index into result.Failures
	cause    uint8 // index into causeOrder
	inferred bool
}

// maxLaneLandmarks bounds the lifecycle events one lane keeps: a pod whose
// readiness flaps, or a Service seen by hundreds of nodes, must not grow a
// lane without limit. The first ones are kept; the spreads summarise the rest.
const maxLaneLandmarks = 512

var sockKinds = []event.Kind{event.ConnClosed, event.RSTSent, event.RSTReceived, event.ConnRefused}

// Socket density series.
var sockSeries = []string{"close", "close_at_exit", "rst", "refused"}

func sockIndex(e *event.Event) (kind, series uint8, ok bool) {
	switch e.Kind {
	case event.ConnClosed:
		if e.Flags.Has(event.FlagAtExit) {
			return 0, 1, true
		}
		return 0, 0, true
	case event.RSTSent:
		return 1, 2, true
	case event.RSTReceived:
		return 2, 2, true
	case event.ConnRefused:
		return 3, 3, true
	}
	return 0, 0, false
}

// causeOrder lists the causes in the order legends and tables show them:
// the analysis's rule order, then any cause a custom rule table adds.
// Every failure's cause is one of these: a rule's, or "unexplained", which
// the default table has.
func causeOrder(res *analysis.Result) []analysis.Cause {
	var out []analysis.Cause
	seen := map[analysis.Cause]bool{}
	add := func(c analysis.Cause) {
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	for _, r := range analysis.Rules {
		add(r.Cause)
	}
	if res != nil {
		for _, r := range res.Rules {
			add(r.Cause)
		}
	}
	return out
}

// laneKey names a pod the way the analysis does: by UID, else ns/name.
func laneKey(uid, ns, name string) string {
	if uid != "" {
		return uid
	}
	return ns + "/" + name
}

// tee hands every event the analysis reads to a second consumer, so one
// scan of the store feeds both.
type tee struct {
	store.Store
	fn func(*event.Event)
}

func (t tee) Scan(ctx context.Context, q store.Query, fn func(*event.Event) error) error {
	return t.Store.Scan(ctx, q, func(e *event.Event) error {
		t.fn(e)
		return fn(e)
	})
}

// capture builds lanes from the events of the rollout's window.
type capture struct {
	ns     string
	wl     event.Workload
	win    event.Window
	old    map[string]bool // keys of the pods the rollout replaced
	byKey  map[string]*lane
	byName map[string]*lane // ns/name → lane, for events without a UID
	order  []*lane
	events int
	slack  time.Duration // a signal repeated within it is one landmark (analysis.RepeatsSignal)
}

func newCapture(r *analysis.Disruption, win event.Window, slack time.Duration) *capture {
	c := &capture{ns: r.Namespace, wl: event.Workload{Kind: r.Kind, Name: r.Name}, win: win, slack: slack, old: map[string]bool{},
		byKey: map[string]*lane{}, byName: map[string]*lane{}}
	for _, p := range r.Replaced {
		k := laneKey(p.UID, p.Namespace, p.Name)
		c.old[k] = true
		l := c.lane(event.PodRef{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Container: p.Container})
		l.role = roleOld
		l.life = p.Life
	}
	return c
}

func (c *capture) lane(p event.PodRef) *lane {
	k := laneKey(p.UID, p.Namespace, p.Name)
	if l := c.byKey[k]; l != nil {
		return l
	}
	if p.UID == "" {
		if l := c.byName[p.Namespace+"/"+p.Name]; l != nil {
			return l
		}
	}
	l := &lane{key: k, pod: analysis.PodView{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Container: p.Container}, role: roleOther}
	c.byKey[k] = l
	if p.Name != "" {
		c.byName[p.Namespace+"/"+p.Name] = l
	}
	c.order = append(c.order, l)
	return l
}

// find returns the lane of an existing pod, or nil.
func (c *capture) find(p event.PodRef) *lane {
	if l := c.byKey[laneKey(p.UID, p.Namespace, p.Name)]; l != nil {
		return l
	}
	if p.Name != "" {
		return c.byName[p.Namespace+"/"+p.Name]
	}
	return nil
}

func (c *capture) add(e *event.Event) {
	if !c.win.Contains(e.Time) || e.Kind == event.ClientFailure || e.Pod.IsZero() {
		return
	}
	l := c.find(e.Pod)
	if l == nil {
		// A pod joins the timeline when an event says it belongs to the
		// workload; kernel events, which carry no workload, then follow it.
		if c.wl.IsZero() || e.Pod.Namespace != c.ns || e.Workload != c.wl {
			return
		}
		l = c.lane(e.Pod)
	}
	if l.pod.UID == "" && e.Pod.UID != "" {
		l.pod.UID = e.Pod.UID
	}
	if l.pod.Name == "" {
		l.pod.Namespace, l.pod.Name = e.Pod.Namespace, e.Pod.Name
	}
	if l.pod.Container == "" {
		l.pod.Container = e.Pod.Container
	}
	c.events++
	if l.first == 0 || e.Time < l.first {
		l.first = e.Time
	}
	l.last = max(l.last, e.Time)
	if k, s, ok := sockIndex(e); ok {
		l.socks = append(l.socks, sockMark{t: e.Time, id: e.ID, kind: k, series: s})
		return
	}
	if l.node == "" && !e.Kind.IsEndpoint() {
		l.node = e.Node
	}
	if e.Kind == event.Signal {
		if analysis.IgnoredSignal(e) || analysis.RepeatsSignal(&l.lastSig, e, c.slack) {
			return
		}
		l.lastSig = *e
	}
	if len(l.marks) >= maxLaneLandmarks {
		l.dropped++
		return
	}
	l.marks = append(l.marks, landmark{t: e.Time, id: e.ID, kind: e.Kind, signal: e.Signal, node: e.Node, summary: analysis.Describe(e)})
}

// buildModel reads one rollout from the store.
func buildModel(ctx context.Context, st store.Store, analyze AnalyzeFunc, opts analysis.Options, r *analysis.Disruption, now time.Time) (*model, error) {
	began := time.Now()
	found := analysis.NewDisruption(r, nil)
	q := r.Query()
	win := q.Window
	c := newCapture(r, win, opts.WithDefaults().ExitSlack)
	res, err := analyze(ctx, tee{st, c.add}, q, opts)
	if err != nil {
		return nil, err
	}
	m := &model{
		key: r.Key(), rollout: r, capture: win, result: res, events: c.events,
		live:  r.Live(now.UnixNano()),
		found: found,
	}
	m.attach(c)
	d := analysis.NewDisruption(r, res)
	m.gaps = d.RecorderGaps
	m.summary = summaryOf(d, m.live)
	m.summary.Analysed = true
	m.summary.Lanes = len(m.lanes)
	m.built = now
	m.took = time.Since(began)
	return m, nil
}

// attach joins the analysis's timelines and failures to the lanes, orders
// the lanes and sets the default view.
func (m *model) attach(c *capture) {
	res := m.result
	for i := range res.Timelines {
		tl := &res.Timelines[i]
		ref := event.PodRef{Namespace: tl.Pod.Namespace, Name: tl.Pod.Name, UID: tl.Pod.UID}
		l := c.find(ref)
		if l == nil {
			continue // another workload in the scope of an unnamed one
		}
		if l.role == roleOld && tl.Since != l.life {
			continue // another life of the pod: another disruption's
		}
		l.tl = tl
		if l.role == roleOld {
			l.start, _ = tl.EndSpan()
		}
		if l.node == "" {
			l.node = tl.Node
		}
	}
	causes := causeOrder(res)
	ci := map[analysis.Cause]uint8{}
	for i, cs := range causes {
		ci[cs] = uint8(min(i, math.MaxUint8))
	}
	for i := range res.Failures {
		f := &res.Failures[i]
		if f.Pod == nil {
			continue
		}
		l := c.find(event.PodRef{Namespace: f.Pod.Namespace, Name: f.Pod.Name, UID: f.Pod.UID})
		if l == nil {
			l = c.lane(event.PodRef{Namespace: f.Pod.Namespace, Name: f.Pod.Name, UID: f.Pod.UID, Container: f.Pod.Container})
		}
		t := f.Failure.Time
		fm := failMark{t: t, i: int32(i), cause: ci[f.Cause], inferred: f.Inferred}
		if f.Inferred {
			l.inferred = append(l.inferred, fm)
		} else {
			l.fails = append(l.fails, fm)
			m.clientN++
		}
		if l.first == 0 || t < l.first {
			l.first = t
		}
		l.last = max(l.last, t)
	}
	newPods := map[string]bool{}
	for _, np := range analysis.NewDisruption(m.rollout, res).NewPods {
		newPods[laneKey(np.Pod.UID, np.Pod.Namespace, np.Pod.Name)] = true
	}
	for _, l := range c.order {
		byTime := func(fs []failMark) func(i, j int) bool { return func(i, j int) bool { return fs[i].t < fs[j].t } }
		sort.SliceStable(l.fails, byTime(l.fails))
		sort.SliceStable(l.inferred, byTime(l.inferred))
		l.all = append(append(make([]failMark, 0, len(l.fails)+len(l.inferred)), l.fails...), l.inferred...)
		sort.SliceStable(l.all, byTime(l.all))
		// Events come in time order, but a store may tie-break differently
		// from this sort; keep the slices sorted for binary search.
		sort.SliceStable(l.socks, func(i, j int) bool { return l.socks[i].t < l.socks[j].t })
		if l.role == roleOld {
			continue
		}
		if newPods[l.key] || (l.tl != nil && (l.tl.Created >= m.capture.From || l.tl.Ready >= m.capture.From) && l.tl.Deletion == 0) {
			l.role = roleNew
		}
		l.start = l.first
		if l.tl != nil {
			for _, v := range []int64{l.tl.Ready, l.tl.Created} {
				if v != 0 {
					l.start = v
				}
			}
		}
	}
	rank := map[string]int{roleOld: 0, roleNew: 1, roleOther: 2}
	lanes := make([]*lane, 0, len(c.order))
	for _, l := range c.order {
		if l.first == 0 && l.tl == nil && len(l.all) == 0 {
			continue // a replaced pod with nothing in the window
		}
		lanes = append(lanes, l)
	}
	sort.SliceStable(lanes, func(i, j int) bool {
		a, b := lanes[i], lanes[j]
		if rank[a.role] != rank[b.role] {
			return rank[a.role] < rank[b.role]
		}
		if a.start != b.start {
			return a.start < b.start
		}
		return a.pod.Name < b.pod.Name
	})
	m.lanes = lanes
	// Default view: the rollout, widened to the new pods that came up for
	// it (with maxSurge they are ready just before the first deletion).
	from, to := m.rollout.From, m.rollout.To
	for _, l := range lanes {
		if l.role == roleNew && l.start != 0 && l.start < from {
			from = max(l.start, m.capture.From)
		}
		if l.role == roleOld && l.last > to {
			to = l.last
		}
	}
	if to <= from {
		to = from + int64(time.Second)
	}
	pad := max((to-from)/25, int64(200*time.Millisecond))
	m.extent = event.Window{From: from - pad, To: to + pad}
}

// weight is a rough size of the model, for the cache's budget.
func (m *model) weight() int {
	return m.events + 20*len(m.result.Failures) + 10*len(m.result.Timelines)
}
