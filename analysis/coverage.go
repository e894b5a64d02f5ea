package analysis

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// Recorder coverage: each node's agent writes recorder_coverage spans
// (agent/coverage.go), each saying "I ran over this span, with this
// captured, and lost this much". Where a node that has written spans has
// none, its record has a gap: it was not running (killed, upgraded,
// crashed), or ran without its kernel capture, or lost events. A missing
// exit or close in a gap reads exactly like an app that never closed, so
// a failure whose evidence lies in a gap gets no cause: it is unexplained,
// and says which recorder was not running and when.

// coverageMargin is how far around the analysed read the spans are read:
// a span written up to twice the longest interval after a time vouches
// for it.
const coverageMargin = 2 * 5 * time.Minute // 2 × agent.MaxCoverageInterval

// spanSlack is how far apart two spans may be and still meet: a store
// keeps times to the microsecond (Postgres) and durations to the
// nanosecond, so one span's start may fall just after the last one's
// end.
const spanSlack = time.Millisecond

// evidenceLead is the furthest before a failure's start its pod's
// termination is looked at for a gap: a preStop and a drain longer than
// this are rare, and a gap that far back would hide little of what the
// rules read about the failure itself.
const evidenceLead = 5 * time.Minute

// RecorderGap is a span of time a node's record is incomplete.
type RecorderGap struct {
	// Node is the node whose recorder it is; "" for the cluster's
	// EndpointSlices, when no agent that records them was running.
	Node string `json:"node"`
	From int64  `json:"from"`
	To   int64  `json:"to"`
	// What: not_running, kernel_off (the agent ran without its kernel
	// capture), dropped (its store buffer dropped events), kernel_lost
	// (the kernel's ring buffer lost events), not_yet (no span after
	// From was read yet: the agent's next one is due, or it stopped
	// without one).
	What string `json:"what"`
	// Lost counts the events dropped or lost, for dropped and
	// kernel_lost.
	Lost int64 `json:"lost,omitempty"`
}

// Kinds of RecorderGap.What.
const (
	GapNotRunning = "not_running"
	GapKernelOff  = "kernel_off"
	GapDropped    = "dropped"
	GapKernelLost = "kernel_lost"
	GapNotYet     = "not_yet"
)

// String says the gap as the reports print it.
func (g RecorderGap) String() string {
	who := "the recorder on " + g.Node
	if g.Node == "" {
		who = "no recorder of EndpointSlices"
	}
	span := "from " + clock(g.From) + " to " + clock(g.To)
	switch {
	case g.From == 0 && g.To == Open:
		span = "at any time read (it wrote no recorder_coverage span: not running, or a version that writes none)"
	case g.From == 0:
		span = "before " + clock(g.To)
	case g.To == Open:
		span = "from " + clock(g.From) + " on"
	}
	switch g.What {
	case GapKernelOff:
		return who + " ran without its kernel capture " + span
	case GapDropped:
		return who + " dropped " + strconv.FormatInt(g.Lost, 10) + " events (its buffer was full) " + span
	case GapKernelLost:
		return who + " lost " + strconv.FormatInt(g.Lost, 10) + " kernel events (the ring buffer was full) " + span
	case GapNotYet:
		return who + " has vouched for nothing since " + clock(g.From) + " (its next span is due, or it stopped without one)"
	}
	if g.Node == "" {
		return who + " was running " + span
	}
	return who + " was not running " + span
}

func clock(ns int64) string {
	return time.Unix(0, ns).UTC().Format("15:04:05.000")
}

// Coverage is what the recorders vouched for, from their
// recorder_coverage spans: per node, the gaps between and inside them.
// Where no node wrote a span (older agents, the lab's in-process node)
// nothing is known of the recorders, and absences are read as before;
// where some did, a node that wrote none vouches for nothing.
type Coverage struct {
	gaps   map[string][]RecorderGap // by node; "" for the EndpointSlices
	spans  map[string][]span        // by node; "" for the agents that recorded EndpointSlices
	slices bool                     // some span said whether its agent recorded EndpointSlices
	built  bool
}

// span is what the gaps need of one recorder_coverage event: a read of
// a 5,000-node cluster holds 400,000 of them (BenchmarkCoverage5000Nodes).
type span struct {
	from, to      int64
	dropped, lost int64 // events dropped and lost in it
	kernelOff     bool
	stopped       bool // the agent's last span: it shut down
}

// NewCoverage makes an empty Coverage; Add the spans, then ask Gaps.
func NewCoverage() *Coverage {
	return &Coverage{spans: map[string][]span{}}
}

// Add takes a recorder_coverage event; others are ignored. Nothing of e
// is kept but its strings.
func (c *Coverage) Add(e *event.Event) {
	if e.Kind != event.RecorderCoverage || e.Node == "" {
		return
	}
	c.built = false
	sp := span{from: e.Time - e.Duration, to: e.Time, stopped: e.Reason == event.CoverStopped}
	if e.Duration > 0 { // a point (started, resumed) vouches for no time
		sp.kernelOff = e.Attrs[event.AttrCoverKernel] == "off"
		sp.dropped, _ = strconv.ParseInt(e.Attrs[event.AttrDropped], 10, 64)
		sp.lost, _ = strconv.ParseInt(e.Attrs[event.AttrKernelLost], 10, 64)
	}
	c.spans[e.Node] = append(c.spans[e.Node], sp)
	if s, ok := e.Attrs[event.AttrCoverSlices]; ok {
		c.slices = true
		if s == "true" {
			c.spans[""] = append(c.spans[""], span{from: sp.from, to: sp.to, stopped: sp.stopped})
		}
	}
}

// Known reports whether any node wrote a span.
func (c *Coverage) Known() bool { return c != nil && len(c.spans) > 0 }

// build turns each node's spans into its gaps.
func (c *Coverage) build() {
	if c.built {
		return
	}
	c.built = true
	c.gaps = make(map[string][]RecorderGap, len(c.spans))
	for node, sps := range c.spans {
		c.gaps[node] = gapsOf(node, sps)
	}
	if c.slices && len(c.spans[""]) == 0 {
		// Spans said who recorded the slices, and none did.
		c.gaps[""] = []RecorderGap{{Node: "", From: 0, To: Open, What: GapNotRunning}}
	}
}

// gapsOf walks one node's spans in the order they begin: before the first
// and where no span covers, the recorder was not running; where a span
// ran without its kernel capture or lost events, it says so; after the
// last, it was not running (it stopped) or has not vouched for anything
// yet. For the EndpointSlices (node ""), the spans of every recording
// agent count, and only their running matters.
func gapsOf(node string, sps []span) []RecorderGap {
	slices.SortFunc(sps, func(a, b span) int { return cmp.Or(cmp.Compare(a.from, b.from), cmp.Compare(a.to, b.to)) })
	var out []RecorderGap
	add := func(g RecorderGap) {
		if g.To <= g.From {
			return
		}
		if n := len(out); n > 0 && out[n-1].What == g.What && out[n-1].To >= g.From && g.Lost == 0 {
			out[n-1].To = max(out[n-1].To, g.To)
			return
		}
		out = append(out, g)
	}
	var covered int64 // covered up to here
	last := &sps[0]
	for i := range sps {
		sp := &sps[i]
		if sp.from > covered+int64(spanSlack) {
			add(RecorderGap{Node: node, From: covered, To: sp.from, What: GapNotRunning})
		}
		if sp.kernelOff {
			add(RecorderGap{Node: node, From: sp.from, To: sp.to, What: GapKernelOff})
		}
		if sp.dropped > 0 {
			add(RecorderGap{Node: node, From: sp.from, To: sp.to, What: GapDropped, Lost: sp.dropped})
		}
		if sp.lost > 0 {
			add(RecorderGap{Node: node, From: sp.from, To: sp.to, What: GapKernelLost, Lost: sp.lost})
		}
		if sp.to >= covered {
			covered, last = sp.to, sp
		}
	}
	what := GapNotYet
	if last.stopped {
		what = GapNotRunning
	}
	add(RecorderGap{Node: node, From: covered, To: Open, What: what})
	return out
}

// Open is the end of a gap that lasts past the newest span read.
const Open = math.MaxInt64

// AnyNode, as Gaps' node, asks for every node's gaps: a failure whose
// pod is not known could have been served on any of them, and the
// evidence that would have named the pod may be what a gap lacks.
const AnyNode = "*"

// Gaps returns the gaps of node's record (every node's for AnyNode; and
// the EndpointSlices', when withSlices) that overlap [from, to], in time
// order. Where some node wrote spans, a node that wrote none has one gap
// over everything.
func (c *Coverage) Gaps(node string, from, to int64, withSlices bool) []RecorderGap {
	if !c.Known() {
		return nil
	}
	c.build()
	var out []RecorderGap
	pick := func(gs []RecorderGap) {
		for _, g := range gs {
			if g.From <= to && g.To >= from {
				out = append(out, g)
			}
		}
	}
	if node == AnyNode {
		for n, gs := range c.gaps {
			if n != "" {
				pick(gs)
			}
		}
	} else if node != "" {
		gs, ok := c.gaps[node]
		if !ok {
			// Other nodes' agents wrote spans and this one's none: it
			// was not running over the whole read, or it is a version
			// that writes none. Either way it vouches for nothing.
			gs = []RecorderGap{{Node: node, From: 0, To: Open, What: GapNotRunning}}
		}
		pick(gs)
	}
	if withSlices {
		pick(c.gaps[""])
	}
	sortGaps(out)
	return out
}

// sortGaps orders gaps by their start, a node's before the
// EndpointSlices' of the same start.
func sortGaps(gs []RecorderGap) {
	slices.SortFunc(gs, func(a, b RecorderGap) int {
		return cmp.Or(cmp.Compare(a.From, b.From), cmp.Compare(b.Node, a.Node), cmp.Compare(a.What, b.What))
	})
}

// InWindow returns every gap that overlaps w, by node then time: the
// report's header.
func (c *Coverage) InWindow(w event.Window) []RecorderGap {
	if !c.Known() {
		return nil
	}
	c.build()
	var out []RecorderGap
	for _, gs := range c.gaps {
		for _, g := range gs {
			if (w.To == 0 || g.From < w.To) && g.To >= w.From {
				out = append(out, g)
			}
		}
	}
	slices.SortFunc(out, func(a, b RecorderGap) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.From, b.From), cmp.Compare(a.What, b.What))
	})
	return out
}

// ReadCoverage reads the recorders' spans around the read [from, to] (to
// 0: open) from st.
func ReadCoverage(ctx context.Context, st store.Store, from, to int64) (*Coverage, error) {
	w := event.Window{From: max(from-int64(coverageMargin), 0)}
	if to != 0 {
		w.To = to + int64(coverageMargin)
	}
	c := NewCoverage()
	err := st.Scan(ctx, store.Query{Window: w, Kinds: []event.Kind{event.RecorderCoverage}}, func(e *event.Event) error {
		c.Add(e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the recorders' coverage: %w", err)
	}
	return c, nil
}

// gapUnjudged is why a failure whose evidence lies in recorder gaps gets
// no cause. It names the gap nearest the failure: the one holding its
// time, else the latest before it (others are counted).
func gapUnjudged(gs []RecorderGap, t int64) Unjudged {
	best, holds := -1, false
	for i, g := range gs {
		switch {
		case g.From <= t && g.To >= t:
			// Holds the failure's time: a node's gap before the
			// EndpointSlices' (the same outage, when its agent recorded
			// them).
			if !holds || gs[best].Node == "" && g.Node != "" {
				best, holds = i, true
			}
		case !holds && g.From <= t && (best < 0 || g.To > gs[best].To):
			best = i // the latest before it so far
		}
	}
	g := gs[max(best, 0)]
	more := ""
	if len(gs) > 1 {
		more = fmt.Sprintf(" (and %d more %s)", len(gs)-1, plural(len(gs)-1, "gap", "gaps"))
	}
	return Unjudged{
		Why:     "its evidence lies where the record is incomplete: " + g.String() + more + ", so what was not recorded cannot be told from what did not happen",
		Missing: "a complete record: " + g.String() + more,
	}
}

// evidenceSpan is the time a failure's cause is read from: from its
// pod's termination (or the kernel window before the request's start)
// to the lookahead after it.
func (a *Aligner) evidenceSpan(fx *Facts, p *podState) (from, to int64) {
	from = fx.Start - int64(a.opts.KernelWindow)
	if p != nil {
		if d := p.lifeEvents().deletion.Time; d != 0 && d < from {
			from = max(d, fx.Start-int64(evidenceLead))
		}
	}
	return from, fx.Failure.Time + int64(a.opts.Lookahead)
}

// gapsFor returns the recorder gaps a failure's evidence overlaps: those
// of the node of the pod that served it, and the EndpointSlices'. With no
// pod known, those of the nodes of its Service's pods, any of which could
// have served it and whose gap may hide the record that would name it;
// every node's when its Service, or a node, is not known.
func (a *Aligner) gapsFor(fx *Facts, p *podState) []RecorderGap {
	from, to := a.evidenceSpan(fx, fx.pod)
	if p != nil {
		return a.cover.Gaps(cmp.Or(p.node, AnyNode), from, to, true)
	}
	pods := a.servicePods(fx.svcs, fx.Start)
	if len(pods) == 0 {
		return a.cover.Gaps(AnyNode, from, to, true)
	}
	nodes := map[string]bool{}
	for _, sp := range pods {
		if sp.node == "" {
			return a.cover.Gaps(AnyNode, from, to, true)
		}
		nodes[sp.node] = true
	}
	gs := a.cover.Gaps("", from, to, true)
	for n := range nodes {
		gs = append(gs, a.cover.Gaps(n, from, to, false)...)
	}
	sortGaps(gs)
	return gs
}

// SetCoverage gives the aligner the recorders' coverage: a failure whose
// evidence overlaps a gap is unexplained, naming it.
func (a *Aligner) SetCoverage(c *Coverage) { a.cover = c }
