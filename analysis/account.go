package analysis

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/drainscope/drainscope/event"
)

// The account of disruptions: which pod ends belong together, and what
// began them. It is the one grouping every output reads (the report, the
// web UI's list and timelines, the Events and OpenTelemetry sinks, the
// kubectl plugin): the analysis builds it from its pod timelines, and
// FindDisruptions from the same timelines of the pods that ended.
//
// A disruption is what someone or something did to a workload:
//   - a rollout, from its pod template change until the workload reports
//     it complete, however slow, paused and resumed, or rolled back;
//   - a scale-down, ending as many pods as it removed;
//   - the workload's deletion;
//   - what the pods themselves show ended them (an eviction, a
//     preemption, the kubelet's node-pressure eviction, an OOM kill, a
//     restart), each reason its own disruption;
//   - with none of these, the pods' own deletion (kubectl delete).

// RolloutGap is the longest quiet time inside a disruption that no open
// workload change holds together: pod ends further apart are two.
const RolloutGap = 2 * time.Minute

// TriggerLead is how long after a workload change, with nothing of it
// since, a pod's end may still be that change's, where the workload's
// rollout status was not recorded (a watcher that did not record it, or
// a workload kind without one): with it, a rollout lasts until it is
// complete.
const TriggerLead = 10 * time.Minute

// Change is one workload change inside a disruption: what began it and
// what happened to it on the way (paused, resumed, rolled back,
// complete).
type Change struct {
	Time   int64  `json:"time_ns"`
	Reason string `json:"reason"` // template, scale, deleted, paused, resumed, complete
	// Rollback: a template change back to a template the workload had
	// before.
	Rollback bool `json:"rollback,omitempty"`
}

// podEnd is one pod life's end as the account groups it.
type podEnd struct {
	tl         *PodTimeline
	wl         wlKey
	start, end int64
	own        Trigger // what the pod itself shows ended it; "" when a workload change may have
}

type wlKey struct{ ns, kind, name string }

// group is a disruption being built.
type group struct {
	d       *Disruption
	members []*PodTimeline
	// next is the time of the workload's first change after the group's
	// own ones that is not the group's: pods created from then on are
	// that change's (0: none).
	next int64
	// last is the time of the group's latest end or change: what a
	// quiet gap counts from.
	last int64
	// latestTemplate is, for a rollout, its latest template change: the
	// pods created before it are its to end.
	latestTemplate int64
	complete       int64 // a rollout's completion, 0 until recorded
	statusKnown    bool  // the watcher records this workload's rollout status
	left           int   // a scale-down's pods still to end; -1 unbounded
}

// account collects workload changes and pod ends, then groups them.
type account struct {
	changes []*event.Event
	ends    []podEnd
}

// change records a workload change (a workload_changed event); the event
// is copied.
func (a *account) change(e *event.Event) {
	if e.Kind != event.WorkloadChanged || e.Workload.IsZero() {
		return
	}
	c := e.Clone()
	a.changes = append(a.changes, &c)
}

// end records tl when it shows its pod's life ending.
func (a *account) end(tl *PodTimeline) {
	if !tl.Ended() {
		return
	}
	s, e := tl.EndSpan()
	a.ends = append(a.ends, podEnd{tl: tl, wl: wlKey{tl.Pod.Namespace, tl.Kind, tl.Name}, start: s, end: e, own: ownTrigger(tl)})
}

// ownTrigger is what the pod itself shows ended its life: the API's
// reason for its deletion or its finish, or, with neither, its
// container's end (an OOM kill, a restart); "" for a plain deletion,
// which a workload change may explain.
func ownTrigger(tl *PodTimeline) Trigger {
	if t := triggerOfDisruption(tl.Disruption); t != "" {
		return t
	}
	if tl.Finished != "" {
		if t := triggerOfFinish(tl.Finished); t != "" {
			return t
		}
	}
	if tl.Deletion != 0 {
		return ""
	}
	if tl.Finished != "" {
		return TriggerPodDeleted // finished for a reason no row names: ended, not restarted
	}
	if tl.Terminated != nil && tl.Terminated.Reason == "OOMKilled" {
		return TriggerOOM
	}
	return TriggerRestart
}

// EndSpan is the life's end from its first sign (a deletion, a finish, a
// signal, an exit) to its last (its endpoint's removal); 0, 0 for a life
// not seen ending.
func (t *PodTimeline) EndSpan() (start, end int64) {
	for _, v := range t.endTimes() {
		if v == 0 {
			continue
		}
		if start == 0 || v < start {
			start = v
		}
		end = max(end, v)
	}
	if t.EndpointRemoved != nil {
		end = max(end, t.EndpointRemoved.Last)
	}
	return start, end
}

func (t *PodTimeline) endTimes() [5]int64 {
	var out [5]int64
	out[0] = t.Deletion
	out[1] = t.FinishedAt
	if t.Sigterm != nil {
		out[2] = t.Sigterm.Time
	}
	if t.Kill != nil {
		out[3] = t.Kill.Time
	}
	if t.Exit != nil {
		out[4] = t.Exit.Time
	}
	return out
}

// disruptions groups what was recorded, in order of their start.
func (a *account) disruptions() []*group {
	byWL := map[wlKey][]*event.Event{}
	for _, c := range a.changes {
		k := wlKey{c.Pod.Namespace, c.Workload.Kind, c.Workload.Name}
		byWL[k] = append(byWL[k], c)
	}
	endsBy := map[wlKey][]podEnd{}
	for _, e := range a.ends {
		endsBy[e.wl] = append(endsBy[e.wl], e)
	}
	var out []*group
	for k, ends := range endsBy {
		out = append(out, groupWorkload(k, byWL[k], ends)...)
	}
	slices.SortFunc(out, func(x, y *group) int {
		return cmp.Or(cmp.Compare(x.d.From, y.d.From), cmp.Compare(x.d.Namespace, y.d.Namespace),
			cmp.Compare(x.d.Kind, y.d.Kind), cmp.Compare(x.d.Name, y.d.Name), cmp.Compare(x.d.Trigger, y.d.Trigger))
	})
	// Two disruptions of one workload beginning at the same instant (two
	// pods ending for two reasons at once) keep two keys.
	for i := 1; i < len(out); i++ {
		if p, g := out[i-1].d, out[i].d; p.Key() == g.Key() {
			g.From = p.From + 1
		}
	}
	for _, g := range out {
		g.seal()
	}
	return out
}

// Live says whether d may still grow at now: a rollout whose recorded
// status had not reported it complete, or one whose last pod ended less
// than a quiet RolloutGap before.
func (d *Disruption) Live(now int64) bool {
	return d.InProgress || now-d.Until < int64(RolloutGap)
}

// groupWorkload groups one workload's pod ends by its changes.
func groupWorkload(k wlKey, changes []*event.Event, ends []podEnd) []*group {
	slices.SortStableFunc(changes, func(x, y *event.Event) int { return cmp.Compare(x.Time, y.Time) })
	slices.SortStableFunc(ends, func(x, y podEnd) int {
		return cmp.Or(cmp.Compare(x.start, y.start), cmp.Compare(x.tl.Pod.UID, y.tl.Pod.UID), cmp.Compare(x.tl.Since, y.tl.Since))
	})
	var (
		out   []*group
		roll  *group // the rollout that may still be going on
		scale *group
		del   *group
		plain *group
		own   = map[Trigger]*group{}
	)
	// open makes a group begun at t by a change (trigger) or a pod end.
	open := func(t int64, tr Trigger) *group {
		g := &group{d: &Disruption{Namespace: k.ns, Kind: k.kind, Name: k.name, From: t, Trigger: tr}, last: t, left: -1}
		out = append(out, g)
		return g
	}
	// closeAt records, on the groups a change does not belong to, that
	// the workload changed at t.
	closeAt := func(t int64, keep *group) {
		for _, g := range []*group{roll, scale, del} {
			if g != nil && g != keep && g.next == 0 {
				g.next = t
			}
		}
	}
	attach := func(g *group, c *event.Event) {
		g.d.Changes = append(g.d.Changes, Change{Time: c.Time, Reason: c.Reason, Rollback: c.Attrs[event.AttrRollback] == "true"})
		g.last = max(g.last, c.Time)
		if c.Attrs[event.AttrRolloutSince] != "" || c.Reason == event.ChangeComplete {
			g.statusKnown = true
		}
	}
	// rolloutSince is when the watcher says the rollout in progress at
	// c began, 0 when it does not say.
	rolloutSince := func(c *event.Event) int64 {
		v, err := strconv.ParseInt(c.Attrs[event.AttrRolloutSince], 10, 64)
		if err != nil || v <= 0 || v > c.Time {
			return 0
		}
		return v
	}
	rollOpen := func(t int64) bool {
		if roll == nil || roll.complete != 0 && roll.complete <= t {
			return false
		}
		return roll.statusKnown || t-roll.last <= int64(TriggerLead)
	}
	ci := 0
	applyChange := func(c *event.Event) {
		switch c.Reason {
		case string(TriggerRollout):
			// A new template mid-way, or a rollback, is the same rollout
			// where the workload's status shows it had not completed;
			// where its status was not recorded, a template change
			// begins a rollout of its own (a second rollout restart).
			if rollOpen(c.Time) && (roll.statusKnown || c.Attrs[event.AttrRolloutSince] != "") {
				attach(roll, c)
			} else {
				closeAt(c.Time, nil)
				from := c.Time
				if s := rolloutSince(c); s != 0 {
					from = s
				}
				roll = open(from, TriggerRollout)
				roll.d.TriggerAt = c.Time
				attach(roll, c)
			}
			roll.latestTemplate = c.Time
		case event.ChangePaused, event.ChangeResumed, event.ChangeComplete:
			if !rollOpen(c.Time) {
				s := rolloutSince(c)
				if s == 0 {
					return // nothing of a rollout in progress is known
				}
				// The rollout began before what was read.
				closeAt(c.Time, nil)
				roll = open(s, TriggerRollout)
				roll.latestTemplate = s
			}
			attach(roll, c)
			if c.Reason == event.ChangeComplete {
				roll.complete = c.Time
				roll.d.Until = max(roll.d.Until, c.Time)
			}
		case string(TriggerScale):
			from, err1 := strconv.Atoi(c.Attrs[event.AttrReplicasFrom])
			to, err2 := strconv.Atoi(c.Attrs[event.AttrReplicasTo])
			if err1 == nil && err2 == nil && to >= from {
				return // a scale-up ends no pod
			}
			closeAt(c.Time, roll)
			scale = open(c.Time, TriggerScale)
			scale.d.TriggerAt = c.Time
			attach(scale, c)
			if err1 == nil && err2 == nil {
				scale.left = from - to
			}
		case string(TriggerDeleted):
			closeAt(c.Time, nil)
			del = open(c.Time, TriggerDeleted)
			del.d.TriggerAt = c.Time
			attach(del, c)
			roll = nil
		case event.ChangeCreated:
			// A workload made again under the same name: nothing of the
			// old one goes on.
			closeAt(c.Time, nil)
			roll, scale, del = nil, nil, nil
		}
	}
	join := func(g *group, e podEnd) {
		g.members = append(g.members, e.tl)
		g.last = max(g.last, e.start)
		if g.d.To == 0 || e.end > g.d.To {
			g.d.To = e.end
		}
	}
	createdBefore := func(e podEnd, t int64) bool { return e.tl.Created == 0 || e.tl.Created < t }
	for _, e := range ends {
		for ci < len(changes) && changes[ci].Time <= e.start {
			applyChange(changes[ci])
			ci++
		}
		switch {
		case e.own != "":
			g := own[e.own]
			if g == nil || e.start-g.last > int64(RolloutGap) {
				g = open(e.start, e.own)
				own[e.own] = g
			}
			join(g, e)
		case del != nil && createdBefore(e, del.d.From) && e.start-del.last <= int64(TriggerLead):
			join(del, e)
		case scale != nil && scale.left != 0 && e.start-scale.last <= int64(TriggerLead):
			join(scale, e)
			if scale.left > 0 {
				scale.left--
			}
		case rollOpen(e.start) && createdBefore(e, roll.latestTemplate):
			join(roll, e)
		default:
			if plain == nil || e.start-plain.last > int64(RolloutGap) {
				plain = open(e.start, TriggerPodDeleted)
			}
			join(plain, e)
		}
	}
	for ; ci < len(changes); ci++ {
		applyChange(changes[ci])
	}
	// A change that ended no pod is no disruption.
	kept := out[:0]
	for _, g := range out {
		if len(g.members) > 0 {
			kept = append(kept, g)
		}
	}
	return kept
}

// seal fills in what the members say: the count, the replaced pods, the
// span and the key.
func (g *group) seal() {
	d := g.d
	d.Terminations = len(g.members)
	d.Replaced = make([]PodView, 0, len(g.members))
	for _, tl := range g.members {
		d.Events += tl.eventCount()
		pv := tl.Pod
		pv.Life = tl.Since
		d.Replaced = append(d.Replaced, pv)
	}
	d.Until = max(d.Until, d.To)
	d.InProgress = d.Trigger == TriggerRollout && g.statusKnown && g.complete == 0 && g.next == 0
	d.ID = d.Key().ID()
}
