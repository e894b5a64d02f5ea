package analysis

import (
	"time"
)

// NewPod is a pod of the workload created since the disruption's trigger
// (or, with none recorded, that became ready from RolloutLead before its
// first pod's end) and ready by its end.
type NewPod struct {
	Pod     PodView `json:"pod"`
	Created int64   `json:"created_ns,omitempty"`
	Ready   int64   `json:"ready_ns"`
	// ReadyAfter is Ready minus Created.
	ReadyAfter int64 `json:"ready_after_ns,omitempty"`
}

// RolloutLead is how long before a disruption's first pod end a new pod of
// the workload may have become ready and still belong to it, when no
// trigger was recorded: with maxSurge the replacement is ready just before
// the old pod is deleted.
const RolloutLead = time.Minute

// disruptions is the account of the pods in scope, each disruption that
// overlaps the window with what the analysis found on its pods; r holds
// the rules and the causes' fixes as rendered.
func (c *collector) disruptions(r *Result) []Disruption {
	out := []Disruption{}
	groups := c.acct.disruptions()
	newPodOwner := c.newPodOwners(groups)
	for _, g := range groups {
		d := g.d
		if c.q.Window.To != 0 && d.From >= c.q.Window.To || d.Until < c.q.Window.From {
			continue
		}
		d.next = g.next
		d.Analysed = true
		d.FailureCounts = newFailureCounts()
		d.NewPods, d.Explained = []NewPod{}, []AlignedFailure{}
		for _, tl := range g.members {
			d.Likely += c.likely[lifeKey(tl.Pod.UID, tl.Pod.Namespace, tl.Pod.Name, tl.Since)]
			for cause, n := range tl.Failures {
				d.ByCause[cause] += n
				d.Failures += n
			}
			for cause, n := range tl.InferredFailures {
				d.InferredByCause[cause] += n
				d.Inferred += n
			}
			d.keepWorst(tl.Gaps.SigtermAfterRotation, tl.Gaps.ExitAfterSigterm)
		}
		if d.Trigger.Info().Replaced {
			for _, tl := range c.order {
				if tl.Pod.Namespace != d.Namespace || tl.Kind != d.Kind || tl.Name != d.Name || d.has(PodView{Namespace: tl.Pod.Namespace, Name: tl.Pod.Name, UID: tl.Pod.UID, Life: tl.Since}) {
					continue
				}
				if !newPodOf(d, tl) || newPodOwner[tl] != g {
					continue
				}
				np := NewPod{Pod: tl.Pod, Created: tl.Created, Ready: tl.Ready}
				if tl.Created != 0 && tl.Ready >= tl.Created {
					np.ReadyAfter = tl.Ready - tl.Created
				}
				d.NewPods = append(d.NewPods, np)
				// The disruption ends when its last new pod is ready too.
				d.Until = max(d.Until, tl.Ready)
			}
		}
		for sec, n := range c.unattr {
			if sec*1e9 >= d.From-1e9 && sec*1e9 <= d.To+int64(c.opts.ExitAfter) {
				d.Unattributed += n
			}
		}
		d.Causes = disruptionCauses(&d.FailureCounts, r)
		d.Patch = d.plan(r)
		out = append(out, *d)
	}
	return out
}

// newPodOwners gives each pod that could be a new pod of several
// disruptions of its workload to one: the latest that began before it was
// created (or ready) among those whose trigger replaces pods. A pod made
// for an eviction is not also a scale-down's before it, nor a restart's.
func (c *collector) newPodOwners(groups []*group) map[*PodTimeline]*group {
	owner := map[*PodTimeline]*group{}
	for _, g := range groups {
		d := g.d
		d.next = g.next
		if !d.Trigger.Info().Replaced {
			continue
		}
		for _, tl := range c.order {
			if tl.Pod.Namespace != d.Namespace || tl.Kind != d.Kind || tl.Name != d.Name || !newPodOf(d, tl) {
				continue
			}
			if o := owner[tl]; o == nil || o.d.From < d.From && d.From <= bornAt(tl)+triggerSlack {
				owner[tl] = g
			}
		}
	}
	return owner
}

// bornAt is when a pod came to be as far as it was seen: its creation,
// else its readiness.
func bornAt(tl *PodTimeline) int64 {
	if tl.Created != 0 {
		return tl.Created
	}
	return tl.Ready
}

// triggerSlack allows for the clocks of the nodes that saw a workload change
// and a pod's creation: the pod cannot be older than the change that made it.
const triggerSlack = int64(time.Second)

// newPodOf tells whether tl is a pod that disruption d brought up: created
// since its trigger, before the workload's next change and before
// RolloutLead after its last old pod ended (a pod the watch saw only once
// running counts by its readiness), or without a recorded trigger, ready
// from RolloutLead before the first pod's end. A new pod that was never
// ready does not count; nor does a pod whose life began with a restart in
// place (the pod is not new).
func newPodOf(d *Disruption, tl *PodTimeline) bool {
	if tl.Ready == 0 || tl.Since != 0 {
		return false
	}
	if d.next != 0 && tl.Created >= d.next {
		return false // the next change's pod
	}
	if d.TriggerAt == 0 {
		return tl.Ready >= d.From-int64(RolloutLead) && tl.Ready <= d.To
	}
	born := tl.Created
	if born == 0 {
		born = tl.Ready
	}
	return born >= d.From-triggerSlack && born <= d.To+int64(RolloutLead)
}
