package analysis

import (
	"sort"

	"github.com/drainscope/drainscope/event"
)

// Decision is the aligner's verdict on one failure. It points into the
// aligner's state and is valid only during the onFailure call; Aligned
// copies it into a self-contained AlignedFailure.
type Decision struct {
	Failure  *event.Event
	Inferred bool
	Proof    string // inferred: one of the Proof constants
	// Proven: a client-reported failure that kernel evidence alone also
	// shows (an inferred failure on the same client address and port);
	// Likely: only an in-use connection cut at exit showed it.
	Proven   bool
	Likely   bool
	Pod      event.PodRef
	Workload event.Workload
	// Life is when the life of the pod the failure fell in began, 0 for
	// its first (see PodTimeline.Since).
	Life int64
	Via  string // how the pod was found: pod, backend, target, kernel; "" when none was
	// Terminating: the pod had been deleted, signalled, had closed its
	// listener or exited by the failure's time (plus ExitBefore, for a
	// failure seen just before the exit event).
	Terminating bool
	Rule        *Rule
	Evidence    []Piece
	Missing     []Missing // unexplained: the first requirement each rule lacked
	// Unjudged, when set, is why no rule was tried: the failure lacks what
	// every rule needs. Its cause is then unexplained.
	Unjudged Unjudged

	facts *Facts
	pod   *podState // the pod that served it, nil when none did
}

// Unjudged says why no rule was tried on a failure. Why completes its
// explanation; Missing is its entry in AlignedFailure.Missing.
type Unjudged struct {
	Why, Missing string
}

// notHere is why a failure to a Service of another cluster is not judged.
func notHere(svc string) Unjudged {
	return Unjudged{
		Why:     svc + " is not a Service of this cluster (no record of it was read), so the rules did not judge it by this cluster's Services and pods",
		Missing: "a record of " + svc + ": it is not a Service of this cluster (no Service or endpoint event of it was read)",
	}
}

// startUnknown is why a timeout logged with no duration is not judged: a
// client logs a timeout at its end, and every rule judges a connection at
// its start, when it was routed. A client's timeout given at import
// (--client-timeout) is the duration of a timeout that has none.
var startUnknown = Unjudged{
	Why:     "its start is unknown (the log has no duration; pass --client-timeout or log the duration), and the rules judge a connection when it was made",
	Missing: "the request's start: the log has no duration; pass --client-timeout or log the duration",
}

// Missing names a requirement a rule lacked.
type Missing struct {
	Rule        *Rule
	Requirement *Requirement
}

// Offset is a signed duration from a pod's event to the failure (positive:
// the failure came after it); OK is false when the event was not seen.
type Offset struct {
	NS int64
	OK bool
}

// Offsets of a failure from its pod's landmarks.
type Offsets struct {
	Sigterm, Exit, Kill, Deletion, Rotation Offset
}

// Cause is the decided cause.
func (d *Decision) Cause() Cause { return d.Rule.Cause }

// Offsets are the failure's offsets from the landmarks of the pod's life
// it fell in (none when no pod served it). Like Nearest, they are worked
// out when asked: most consumers read them for few decisions (a scoped
// report, the examples) or for none (the rollout metrics).
func (d *Decision) Offsets() Offsets {
	if d.facts.pod == nil {
		return Offsets{}
	}
	return d.facts.pod.offsets(d.Failure.Time, d.facts.svcs)
}

// Nearest returns the pod's last landmark at or before the failure and
// its first after it; the whole cluster's when no pod served it.
func (d *Decision) Nearest() (before, after *event.Event) {
	if d.pod == nil {
		return d.facts.a.nearestGlobal(d.Failure.Time)
	}
	return d.pod.nearest(d.Failure.Time)
}

// unexplained is the decision when no rule holds; its Missing list says
// what each rule lacked.
var unexplained = Rule{Cause: CauseUnexplained, Title: "unexplained", Color: "#7F7F7F"}

func (a *Aligner) decide(pf *pending) {
	f := &pf.ev
	t := f.Time
	fx := &a.facts
	*fx = Facts{
		Failure: f, Start: t - max(f.Duration, 0), Inferred: pf.inferred, Proof: pf.proof, Class: f.Reason, Client: unmapAP(f.Local),
		opts: &a.opts, a: a,
	}
	if pf.inferred {
		a.stats.Inferred++
	} else {
		a.stats.ClientFailures++
	}

	// A Service of another cluster: nothing of this one (a pod at the
	// address, a record of the client's port) is its by more than chance.
	var why Unjudged
	other := ""
	if !pf.inferred {
		other = a.otherCluster(f)
	}
	var sv served
	if other != "" {
		why = notHere(other)
	} else {
		sv = a.servedBy(f, pf.inferred)
		if !pf.inferred && f.Reason == event.FailTimeout && f.Duration <= 0 {
			why = startUnknown
		}
	}
	p, via, ks := sv.pod, sv.via, sv.kernel
	proven, likely := false, false
	if fx.Client.IsValid() && !pf.inferred {
		a.stats.WithClientAddr++
		if other == "" {
			proven, likely = a.kernelProof(fx.Client, t)
		}
		if proven {
			a.stats.ProvenByKernel++
		}
		if likely {
			a.stats.ProvenLikely++
		}
	}
	if p != nil && !a.wants(p) {
		return // counted; its cause is not wanted (WantPods)
	}
	fx.Kernel, fx.Via = ks, via
	if other == "" {
		fx.svcs = a.servicesFor(f, p)
	}
	if p != nil {
		// The life of the pod the failure fell in: what ended a
		// container that since restarted in place does not end this one.
		fx.pod = p.at(t)
	}
	if p == nil {
		a.stats.Unresolved++
	}
	if why.Missing == "" && a.cover.Known() {
		if gs := a.gapsFor(fx, p); len(gs) > 0 {
			why = gapUnjudged(gs, t)
			a.stats.InRecorderGap++
		}
	}

	d := &a.dec
	*d = Decision{Failure: f, Inferred: pf.inferred, Proof: pf.proof, Proven: proven, Likely: likely, Via: via, facts: fx, pod: p, Missing: a.missing[:0], Unjudged: why}
	ev := a.scratch[:0]
	for i := range a.opts.Rules {
		r := &a.opts.Rules[i]
		if why.Missing != "" && (len(r.Requires) > 0 || r.Cause != CauseUnexplained) {
			continue // only the table's "unexplained" row, for its text
		}
		n := len(ev)
		ok := true
		for j := range r.Requires {
			m := len(ev)
			if ev = r.Requires[j].Find(fx, ev); len(ev) == m {
				ok = false
				d.Missing = append(d.Missing, Missing{r, &r.Requires[j]})
				break
			}
		}
		if ok {
			d.Rule = r
			d.Evidence = ev[n:]
			break
		}
		ev = ev[:n]
	}
	a.scratch, a.missing = ev, d.Missing
	if d.Rule == nil {
		d.Rule = &unexplained
	}
	if d.Rule.Cause != CauseUnexplained {
		d.Missing = nil
	}

	if p != nil {
		life := fx.pod
		d.Pod, d.Workload, d.Life = p.ref, p.wl, life.since
		d.Terminating = life.terminatingAt(t+int64(a.opts.ExitBefore)) != nil
		p = life
		switch {
		case !a.timelineWanted(p):
			// The counts are the timeline's.
		case pf.inferred:
			if p.inferred == nil {
				p.inferred = map[Cause]int{}
			}
			p.inferred[d.Rule.Cause]++
		default:
			if p.failures == nil {
				p.failures = map[Cause]int{}
			}
			p.failures[d.Rule.Cause]++
		}
	}
	if a.onFailure != nil {
		a.onFailure(d)
	}
}

// nearest returns the last event at or before t and the first after it in
// a time-ordered slice.
func nearest(ls []mark, t int64) (before, after *event.Event) {
	i := sort.Search(len(ls), func(i int) bool { return ls[i].t > t })
	if i > 0 {
		before = ls[i-1].ev
	}
	if i < len(ls) {
		after = ls[i].ev
	}
	return before, after
}

// nearest returns the pod's last landmark or dataplane transition at or
// before t and its first after t; a landmark wins a tie.
func (p *podState) nearest(t int64) (before, after *event.Event) {
	before, after = nearest(p.landmarks, t)
	for i := range p.dp {
		s := p.dp[i].trans
		j := sort.Search(len(s), func(j int) bool { return s[j].t > t })
		if j > 0 && (before == nil || s[j-1].t > before.Time) {
			before = s[j-1].ev
		}
		if j < len(s) && (after == nil || s[j].t < after.Time) {
			after = s[j].ev
		}
	}
	return before, after
}

func (a *Aligner) nearestGlobal(t int64) (before, after *event.Event) {
	g := &a.global
	i := g.search(func(m *mark) bool { return m.t > t })
	if b := g.at(i - 1); b != nil {
		before = b.ev
	}
	if x := g.at(i); x != nil {
		after = x.ev
	}
	return before, after
}
