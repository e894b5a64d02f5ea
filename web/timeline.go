package web

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/drainscope/drainscope/analysis"
)

// Limits bound what one timeline answer carries, whatever the number of
// events behind it. The zero value means DefaultLimits.
type Limits struct {
	// Lanes per answer; more are paged with lane_offset.
	Lanes int
	// Marks is the number of individual socket and failure marks in one
	// answer; beyond it, and beyond the per-lane figures, a lane's events
	// are sent as density bins.
	Marks         int
	LaneSockets   int
	LaneFailures  int
	LaneLandmarks int
	// Cells bounds the non-empty density bins of one answer; bins are
	// coarsened until it holds.
	Cells int
	// Buckets bounds the bins across the view (the client asks for its
	// width in pixels; a bin is at least two pixels).
	Buckets int
}

// DefaultLimits keep a full answer under about a megabyte of JSON.
var DefaultLimits = Limits{
	Lanes: 200, Marks: 6000, LaneSockets: 60, LaneFailures: 300, LaneLandmarks: 64,
	Cells: 40000, Buckets: 1000,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	set := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&l.Lanes, d.Lanes)
	set(&l.Marks, d.Marks)
	set(&l.LaneSockets, d.LaneSockets)
	set(&l.LaneFailures, d.LaneFailures)
	set(&l.LaneLandmarks, d.LaneLandmarks)
	set(&l.Cells, d.Cells)
	set(&l.Buckets, d.Buckets)
	return l
}

// Timeline is the answer of the timeline API. Times inside it are
// nanoseconds relative to Base (JavaScript numbers cannot hold absolute
// nanoseconds exactly; relative ones up to 104 days they can).
type Timeline struct {
	Rollout    RolloutSummary `json:"rollout"`
	Base       string         `json:"base_ns"` // absolute UTC ns, as a string: the rollout's start
	View       Range          `json:"view"`
	Extent     Range          `json:"extent"`  // the default view
	Capture    Range          `json:"capture"` // what the lanes hold
	BucketNS   int64          `json:"bucket_ns"`
	Buckets    int            `json:"buckets"`
	LanesTotal int            `json:"lanes_total"` // lanes with something in the view
	LaneOffset int            `json:"lane_offset"`
	Lanes      []LaneView     `json:"lanes"`
	Causes     []CauseInfo    `json:"causes"`
	// Failures says which failures the lanes carry: client (reported by
	// clients), inferred (from kernel evidence alone) or all.
	Failures string        `json:"failures"`
	Stats    TimelineStats `json:"stats"`
	// Gaps are where the record is incomplete, drawn over the lanes of
	// their node (every lane for the EndpointSlices', Node "").
	Gaps []GapView `json:"recorder_gaps,omitempty"`
}

// GapView is one recorder gap, clipped to the capture, relative to Base.
type GapView struct {
	Node string `json:"node"`
	From int64  `json:"from"`
	To   int64  `json:"to"`
	What string `json:"what"`
	Text string `json:"text"`
}

// Range is [From, To) in ns relative to Timeline.Base.
type Range struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// TimelineStats says what the answer holds and what it aggregated.
type TimelineStats struct {
	EventsInView     int   `json:"events_in_view"`   // lifecycle, socket and failure events of the listed lanes
	Marks            int   `json:"marks"`            // individual marks sent
	DensityCells     int   `json:"density_cells"`    // non-empty bins sent
	AggregatedLanes  int   `json:"aggregated_lanes"` // lanes with density instead of marks
	Aggregated       bool  `json:"aggregated"`
	FailuresTotal    int   `json:"failures_total"` // of the whole rollout
	FailuresListed   int   `json:"failures_listed"`
	AnalysisTruncate bool  `json:"analysis_truncated"`
	BuiltNS          int64 `json:"built_ns"` // when the model was read (absolute)
	BuildTookNS      int64 `json:"build_took_ns"`
}

// LaneView is one pod's row.
type LaneView struct {
	Key     string           `json:"key"`
	Pod     analysis.PodView `json:"pod"`
	Role    string           `json:"role"`
	Node    string           `json:"node,omitempty"`
	Span    Range            `json:"span"`
	Phases  Phases           `json:"phases"`
	Spreads []SpreadView     `json:"spreads,omitempty"`
	// Dataplane marks when each node's proxy rules began and stopped
	// sending the pod's Service to it (dataplane events), the first
	// 2×maxSpreadNodes.
	Dataplane []DataplaneView        `json:"dataplane,omitempty"`
	Marks     []MarkView             `json:"marks"`
	Dropped   int                    `json:"marks_dropped,omitempty"`
	Failures  map[analysis.Cause]int `json:"failures_by_cause,omitempty"` // whole rollout

	Sockets        []SockView `json:"sockets,omitempty"`
	SocketDensity  []Series   `json:"socket_density,omitempty"`
	SocketCount    int        `json:"socket_count"` // in view
	FailureMarks   []FailView `json:"failure_marks,omitempty"`
	FailureDensity []Series   `json:"failure_density,omitempty"`
	FailureCount   int        `json:"failure_count"` // in view
}

// Phases are the pod's landmarks, relative to Base; absent when not seen.
type Phases struct {
	Created    *int64 `json:"created,omitempty"`
	Ready      *int64 `json:"ready,omitempty"`
	Deletion   *int64 `json:"deletion,omitempty"`
	Sigterm    *int64 `json:"sigterm,omitempty"` // preStop runs from Deletion to Sigterm
	Listener   *int64 `json:"listener_closed,omitempty"`
	Exit       *int64 `json:"exit,omitempty"`
	ExitSignal string `json:"exit_signal,omitempty"`
	ExitCode   int32  `json:"exit_code,omitempty"`
	Sigkill    *int64 `json:"sigkill,omitempty"`
	Terminated *int64 `json:"container_terminated,omitempty"`
	Grace      int64  `json:"grace_period_ns,omitempty"`
	PreStop    int64  `json:"prestop_ns,omitempty"`
}

// SpreadView is an endpoint transition across the nodes that saw it.
type SpreadView struct {
	Kind      string   `json:"kind"` // endpoint_not_ready, endpoint_terminating, endpoint_removed, out_of_rotation, dataplane_removed
	First     int64    `json:"first"`
	Last      int64    `json:"last"`
	Nodes     []string `json:"nodes"`      // the first maxSpreadNodes, sorted
	NodeCount int      `json:"node_count"` // all the nodes that saw it
}

// DataplaneView is one change of a node's proxy rules for the pod.
type DataplaneView struct {
	T          int64  `json:"t"`
	Node       string `json:"node"`
	Service    string `json:"service,omitempty"`
	InRotation bool   `json:"in_rotation"`
}

// maxSpreadNodes bounds the node names one spread carries: a cluster of
// hundreds of nodes would otherwise repeat them on every lane.
const maxSpreadNodes = 16

// MarkView is one lifecycle event.
type MarkView struct {
	T      int64  `json:"t"`
	Kind   string `json:"kind"`
	Signal int32  `json:"signal,omitempty"`
	ID     string `json:"id"`
	Node   string `json:"node,omitempty"`
	Label  string `json:"label"`
}

// SockView is one socket event.
type SockView struct {
	T      int64  `json:"t"`
	Kind   string `json:"kind"`
	Series string `json:"series"`
	ID     string `json:"id"`
}

// FailView is one failure; I indexes the rollout's failures API.
type FailView struct {
	T        int64  `json:"t"`
	I        int    `json:"i"`
	Cause    string `json:"cause"`
	Class    string `json:"class"`
	Inferred bool   `json:"inferred,omitempty"`
}

// Series is density: [bin, count] pairs, bin b covering
// [view.from + b·bucket_ns, view.from + (b+1)·bucket_ns).
type Series struct {
	Name string     `json:"name"`
	Bins [][2]int64 `json:"bins"`
}

// CauseInfo is a legend entry.
type CauseInfo struct {
	Cause string `json:"cause"`
	Title string `json:"title"`
	Color string `json:"color"`
	Fix   string `json:"fix,omitempty"`
}

// causeColor is a cause's colour on the timeline, the histograms and the
// chips: its rule's (analysis.Rule.Color, one row of the cause table), and
// for a cause no rule of the default table names (a custom rule without
// one) a grey that is no cause's own.
func causeColor(c analysis.Cause) string {
	if v, ok := causeColors[c]; ok {
		return v
	}
	return unknownCauseColor
}

const unknownCauseColor = "#B8B8B8"

var causeColors = func() map[analysis.Cause]string {
	m := map[analysis.Cause]string{}
	for _, r := range analysis.DefaultOptions().WithDefaults().Rules {
		if r.Color != "" {
			m[r.Cause] = r.Color
		}
	}
	return m
}()

// causesCSS is the stylesheet of the causes' colours (causes.css): a
// variable and a class a cause, from the rule table, so that the pages'
// chips and swatches and the timeline's marks cannot disagree.
func causesCSS(rules []analysis.Rule) []byte {
	var b strings.Builder
	b.WriteString("/* drainscope: the causes' colours, made from the rule table (analysis.Rules). */\n:root {")
	for _, r := range rules {
		fmt.Fprintf(&b, " --c-%s: %s;", cssName(r.Cause), colorOf(r))
	}
	b.WriteString(" }\n")
	for _, r := range rules {
		fmt.Fprintf(&b, ".cause-%s { background: var(--c-%s); }\n", cssName(r.Cause), cssName(r.Cause))
	}
	return []byte(b.String())
}

// cssName keeps of a cause's name what a CSS identifier may hold, as the
// pages' class names do (a custom rule's cause is any string).
func cssName(c analysis.Cause) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			return r
		}
		return -1
	}, string(c))
}

// colorOf is a rule's colour, or causeColor's for one without.
func colorOf(r analysis.Rule) string {
	if r.Color != "" {
		return r.Color
	}
	return causeColor(r.Cause)
}

func (m *model) causeInfos() []CauseInfo {
	titles := map[analysis.Cause]analysis.RuleView{}
	for _, r := range m.result.Rules {
		titles[r.Cause] = r
	}
	var out []CauseInfo
	for _, c := range causeOrder(m.result) {
		ci := CauseInfo{Cause: string(c), Title: string(c), Color: causeColor(c)}
		if r, ok := titles[c]; ok {
			ci.Title, ci.Fix = r.Title, r.Fix
		}
		out = append(out, ci)
	}
	return out
}

// viewParams are what a timeline request asks for, in absolute ns.
type viewParams struct {
	failures   string // client, inferred, all; "" for client when there are any, else inferred
	from, to   int64
	width      int
	laneOffset int
	laneLimit  int
}

// timeline answers one request from the model.
func (m *model) timeline(p viewParams, lim Limits) *Timeline {
	v := m.newTimelineView(p, lim)
	page := v.pageLanes()
	plan := v.planMarks(page)
	for i, l := range page {
		v.out.Lanes = append(v.out.Lanes, v.laneView(l, plan, i))
	}
	return v.out
}

// timelineView is one timeline request being answered: the model, the
// request, and the answer as built so far.
type timelineView struct {
	m        *model
	p        viewParams
	lim      Limits
	base     int64
	mode     string // which failures: client, inferred or all
	causes   []analysis.Cause
	bucketNS int64
	out      *Timeline
}

// newTimelineView settles the request's defaults (view, failure mode) and
// starts the answer with what does not depend on the lanes.
func (m *model) newTimelineView(p viewParams, lim Limits) *timelineView {
	v := &timelineView{m: m, lim: lim.withDefaults(), base: m.key.Start}
	if p.from == 0 && p.to == 0 {
		p.from, p.to = m.extent.From, m.extent.To
	}
	if p.to <= p.from {
		p.to = p.from + 1
	}
	v.p = p
	v.out = &Timeline{
		Rollout: m.summary, Base: strconv.FormatInt(v.base, 10),
		View: Range{v.rel(p.from), v.rel(p.to)}, Extent: Range{v.rel(m.extent.From), v.rel(m.extent.To)},
		Capture: Range{v.rel(m.capture.From), v.rel(m.capture.To)},
		Causes:  m.causeInfos(), Lanes: []LaneView{},
	}
	v.mode = p.failures
	if v.mode == "" {
		v.mode = "client"
		if m.clientN == 0 {
			v.mode = "inferred"
		}
	}
	v.out.Failures = v.mode
	for _, g := range m.gaps {
		from, to := max(g.From, m.capture.From), min(g.To, m.capture.To)
		if to > from {
			v.out.Gaps = append(v.out.Gaps, GapView{Node: g.Node, From: v.rel(from), To: v.rel(to), What: g.What, Text: g.String()})
		}
	}
	v.out.Stats.FailuresTotal = len(m.result.Failures)
	v.out.Stats.AnalysisTruncate = m.result.Truncated
	v.out.Stats.BuiltNS = m.built.UnixNano()
	v.out.Stats.BuildTookNS = int64(m.took)
	return v
}

// rel is t relative to the answer's base.
func (v *timelineView) rel(t int64) int64 { return t - v.base }

// relp is rel for a landmark that may be absent (zero).
func (v *timelineView) relp(t int64) *int64 {
	if t == 0 {
		return nil
	}
	r := t - v.base
	return &r
}

// pick is the lane's failures of the request's mode.
func (v *timelineView) pick(l *lane) []failMark {
	switch v.mode {
	case "inferred":
		return l.inferred
	case "all":
		return l.all
	}
	return l.fails
}

// bin is the density bin of t.
func (v *timelineView) bin(t int64) int64 { return (t - v.p.from) / v.bucketNS }

// pageLanes is the requested page of the lanes with something in the view.
func (v *timelineView) pageLanes() []*lane {
	p := v.p
	var active []*lane
	for _, l := range v.m.lanes {
		lo, hi := l.first, l.last
		if l.tl != nil {
			for _, t := range []int64{l.tl.Created, l.tl.Deletion} {
				if t != 0 && (lo == 0 || t < lo) {
					lo = t
				}
			}
		}
		if lo < p.to && hi >= p.from {
			active = append(active, l)
		}
	}
	v.out.LanesTotal = len(active)
	limit := v.lim.Lanes
	if p.laneLimit > 0 && p.laneLimit < limit {
		limit = p.laneLimit
	}
	off := min(max(p.laneOffset, 0), len(active))
	v.out.LaneOffset = off
	return active[off:min(off+limit, len(active))]
}

// laneSpan is where a lane's sockets and failures in the view lie in its
// lists.
type laneSpan struct{ sLo, sHi, fLo, fHi int }

// markPlan says, lane by lane of a page, which events are in view and
// which are sent as individual marks rather than density.
type markPlan struct {
	spans          []laneSpan
	indivS, indivF []bool
}

// planMarks decides which lanes get individual marks and the density bins
// of the others.
func (v *timelineView) planMarks(page []*lane) markPlan {
	plan := markPlan{spans: v.laneSpans(page)}
	plan.indivF, plan.indivS = v.individual(plan.spans)
	v.causes = causeOrder(v.m.result)
	buckets := v.bucketCount(plan)
	width := v.p.to - v.p.from
	bucketNS := (width + int64(buckets) - 1) / int64(buckets)
	if bucketNS < 1 {
		bucketNS = 1
	}
	v.bucketNS = bucketNS
	v.out.BucketNS, v.out.Buckets = bucketNS, buckets
	return plan
}

// laneSpans finds each lane's sockets and failures in the view.
func (v *timelineView) laneSpans(page []*lane) []laneSpan {
	p := v.p
	spans := make([]laneSpan, len(page))
	for i, l := range page {
		sLo := sort.Search(len(l.socks), func(j int) bool { return l.socks[j].t >= p.from })
		sHi := sort.Search(len(l.socks), func(j int) bool { return l.socks[j].t >= p.to })
		fs := v.pick(l)
		fLo := sort.Search(len(fs), func(j int) bool { return fs[j].t >= p.from })
		fHi := sort.Search(len(fs), func(j int) bool { return fs[j].t >= p.to })
		spans[i] = laneSpan{sLo, sHi, fLo, fHi}
	}
	return spans
}

// individual decides which lanes get individual marks: failures first
// (they are what the page is about), then sockets, within the global
// budget.
func (v *timelineView) individual(spans []laneSpan) (indivF, indivS []bool) {
	budget := v.lim.Marks
	indivF = make([]bool, len(spans))
	indivS = make([]bool, len(spans))
	for i := range spans {
		if n := spans[i].fHi - spans[i].fLo; n <= v.lim.LaneFailures && n <= budget {
			indivF[i] = true
			budget -= n
		}
	}
	for i := range spans {
		if n := spans[i].sHi - spans[i].sLo; n <= v.lim.LaneSockets && n <= budget {
			indivS[i] = true
			budget -= n
		}
	}
	return indivF, indivS
}

// bucketCount is the number of bins: about two pixels each, coarsened
// until the density fits.
func (v *timelineView) bucketCount(plan markPlan) int {
	buckets := v.lim.Buckets
	if v.p.width > 0 {
		buckets = min(max(v.p.width/2, 20), v.lim.Buckets)
	}
	for {
		cells := 0
		for i, sp := range plan.spans {
			if !plan.indivS[i] {
				cells += min(sp.sHi-sp.sLo, buckets*len(sockSeries))
			}
			if !plan.indivF[i] {
				cells += min(sp.fHi-sp.fLo, buckets*len(v.causes))
			}
		}
		if cells <= v.lim.Cells || buckets <= 10 {
			return buckets
		}
		buckets /= 2
	}
}

// laneView is the answer's view of the page's i-th lane.
func (v *timelineView) laneView(l *lane, plan markPlan, i int) LaneView {
	lv := LaneView{
		Key: l.key, Pod: l.pod, Role: l.role, Node: l.node,
		Span: Range{v.rel(l.first), v.rel(l.last)}, Marks: []MarkView{}, Dropped: l.dropped,
	}
	if tl := l.tl; tl != nil {
		v.phases(&lv.Phases, tl)
		v.spreads(&lv, tl)
		if len(tl.Failures) > 0 {
			lv.Failures = tl.Failures
		}
	}
	v.marks(&lv, l)
	sp := plan.spans[i]
	lv.SocketCount = sp.sHi - sp.sLo
	lv.FailureCount = sp.fHi - sp.fLo
	v.out.Stats.EventsInView += lv.SocketCount + lv.FailureCount
	v.sockets(&lv, l, sp, plan.indivS[i])
	v.failures(&lv, l, sp, plan.indivF[i])
	if (!plan.indivS[i] && lv.SocketCount > 0) || (!plan.indivF[i] && lv.FailureCount > 0) {
		v.out.Stats.AggregatedLanes++
		v.out.Stats.Aggregated = true
	}
	return lv
}

// phases fills in the pod's landmarks.
func (v *timelineView) phases(ph *Phases, tl *analysis.PodTimeline) {
	relp := v.relp
	ph.Created, ph.Ready, ph.Deletion = relp(tl.Created), relp(tl.Ready), relp(tl.Deletion)
	ph.Listener = relp(tl.ListenerClosed)
	ph.Grace, ph.PreStop = tl.GracePeriod, tl.PreStop
	if tl.Sigterm != nil {
		ph.Sigterm = relp(tl.Sigterm.Time)
	}
	if tl.Kill != nil {
		ph.Sigkill = relp(tl.Kill.Time)
	}
	if tl.Exit != nil {
		ph.Exit, ph.ExitSignal, ph.ExitCode = relp(tl.Exit.Time), tl.Exit.Signal, tl.Exit.Code
	}
	if tl.Terminated != nil {
		ph.Terminated = relp(tl.Terminated.Time)
	}
}

// spreads adds the pod's endpoint transitions across nodes and its
// dataplane changes, ending with the spread of the dataplane removals.
func (v *timelineView) spreads(lv *LaneView, tl *analysis.PodTimeline) {
	for _, s := range []struct {
		kind string
		s    *analysis.Spread
	}{
		{"endpoint_not_ready", tl.EndpointNotReady}, {"endpoint_terminating", tl.EndpointTerminating},
		{"endpoint_removed", tl.EndpointRemoved}, {"out_of_rotation", tl.OutOfRotation},
	} {
		if s.s != nil {
			lv.Spreads = append(lv.Spreads, SpreadView{Kind: s.kind, First: v.rel(s.s.First), Last: v.rel(s.s.Last),
				Nodes: s.s.Nodes[:min(len(s.s.Nodes), maxSpreadNodes)], NodeCount: len(s.s.Nodes)})
		}
	}
	var gone analysis.Spread
	for _, d := range tl.Dataplane {
		if len(lv.Dataplane) < 2*maxSpreadNodes {
			lv.Dataplane = append(lv.Dataplane, DataplaneView{T: v.rel(d.Time), Node: d.Node, Service: d.Service, InRotation: d.InRotation})
		}
		if d.InRotation {
			continue
		}
		if gone.First == 0 || d.Time < gone.First {
			gone.First = d.Time
		}
		gone.Last = max(gone.Last, d.Time)
		if !slices.Contains(gone.Nodes, d.Node) {
			gone.Nodes = append(gone.Nodes, d.Node)
		}
	}
	if gone.First != 0 {
		sort.Strings(gone.Nodes)
		lv.Spreads = append(lv.Spreads, SpreadView{Kind: "dataplane_removed", First: v.rel(gone.First), Last: v.rel(gone.Last),
			Nodes: gone.Nodes[:min(len(gone.Nodes), maxSpreadNodes)], NodeCount: len(gone.Nodes)})
	}
}

// marks adds the lane's lifecycle marks in view: every kind but endpoint
// transitions first, then endpoint transitions (the spreads summarise
// those left out).
func (v *timelineView) marks(lv *LaneView, l *lane) {
	var inView []int
	for j := range l.marks {
		if t := l.marks[j].t; t >= v.p.from && t < v.p.to {
			inView = append(inView, j)
		}
	}
	v.out.Stats.EventsInView += len(inView)
	keep := make([]int, 0, min(len(inView), v.lim.LaneLandmarks))
	for _, endpoint := range []bool{false, true} {
		for _, j := range inView {
			if l.marks[j].kind.IsEndpoint() == endpoint && len(keep) < v.lim.LaneLandmarks {
				keep = append(keep, j)
			}
		}
	}
	sort.Ints(keep)
	lv.Dropped += len(inView) - len(keep)
	for _, j := range keep {
		lm := &l.marks[j]
		lv.Marks = append(lv.Marks, MarkView{T: v.rel(lm.t), Kind: string(lm.kind), Signal: lm.signal, ID: lm.id.String(), Node: lm.node, Label: lm.summary})
	}
	v.out.Stats.Marks += len(keep)
}

// sockets adds the lane's socket events in view, as marks or as density.
func (v *timelineView) sockets(lv *LaneView, l *lane, sp laneSpan, indiv bool) {
	if indiv {
		for _, s := range l.socks[sp.sLo:sp.sHi] {
			lv.Sockets = append(lv.Sockets, SockView{T: v.rel(s.t), Kind: string(sockKinds[s.kind]), Series: sockSeries[s.series], ID: s.id.String()})
		}
		v.out.Stats.Marks += lv.SocketCount
		return
	}
	counts := make([]map[int64]int64, len(sockSeries))
	for _, s := range l.socks[sp.sLo:sp.sHi] {
		if counts[s.series] == nil {
			counts[s.series] = map[int64]int64{}
		}
		counts[s.series][v.bin(s.t)]++
	}
	for si, c := range counts {
		if c != nil {
			lv.SocketDensity = append(lv.SocketDensity, series(sockSeries[si], c))
			v.out.Stats.DensityCells += len(c)
		}
	}
}

// failures adds the lane's failures in view, as marks or as density.
func (v *timelineView) failures(lv *LaneView, l *lane, sp laneSpan, indiv bool) {
	if indiv {
		for _, f := range v.pick(l)[sp.fLo:sp.fHi] {
			af := &v.m.result.Failures[f.i]
			lv.FailureMarks = append(lv.FailureMarks, FailView{T: v.rel(f.t), I: int(f.i), Cause: string(v.causes[f.cause]), Class: af.Failure.Reason, Inferred: f.inferred})
		}
		v.out.Stats.Marks += lv.FailureCount
		v.out.Stats.FailuresListed += lv.FailureCount
		return
	}
	counts := map[uint8]map[int64]int64{}
	for _, f := range v.pick(l)[sp.fLo:sp.fHi] {
		if counts[f.cause] == nil {
			counts[f.cause] = map[int64]int64{}
		}
		counts[f.cause][v.bin(f.t)]++
	}
	for ci, cs := range v.causes {
		if c := counts[uint8(ci)]; c != nil {
			lv.FailureDensity = append(lv.FailureDensity, series(string(cs), c))
			v.out.Stats.DensityCells += len(c)
		}
	}
}

func series(name string, c map[int64]int64) Series {
	s := Series{Name: name, Bins: make([][2]int64, 0, len(c))}
	for b, n := range c {
		s.Bins = append(s.Bins, [2]int64{b, n})
	}
	sort.Slice(s.Bins, func(i, j int) bool { return s.Bins[i][0] < s.Bins[j][0] })
	return s
}

// failureAt finds a failure by index, checking it is the one a link meant.
func (m *model) failure(i int) (*analysis.AlignedFailure, bool) {
	if i < 0 || i >= len(m.result.Failures) {
		return nil, false
	}
	return &m.result.Failures[i], true
}
