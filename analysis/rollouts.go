package analysis

import (
	"time"

	"github.com/drainscope/drainscope/event"
)

// Rollout is the terminations of one workload that belong together, with
// the pods that replaced them.
type Rollout struct {
	Namespace string `json:"namespace"`
	Workload  string `json:"workload"`
	Kind      string `json:"workload_kind,omitempty"`
	Name      string `json:"workload_name,omitempty"`
	From      int64  `json:"from_ns"`
	To        int64  `json:"to_ns"`
	// Trigger is the workload change that began the rollout (template,
	// scale, deleted) and TriggerAt its time, which is then From; empty
	// when none was recorded, and From is the first pod's end.
	Trigger   string    `json:"trigger,omitempty"`
	TriggerAt int64     `json:"trigger_ns,omitempty"`
	Replaced  []PodView `json:"replaced"`
	NewPods   []NewPod  `json:"new_pods"`

	FailureCounts
}

// NewPod is a pod of the workload created since the rollout's trigger (or,
// with none recorded, that became ready from RolloutLead before its first
// termination) and ready by its end.
type NewPod struct {
	Pod     PodView `json:"pod"`
	Created int64   `json:"created_ns,omitempty"`
	Ready   int64   `json:"ready_ns"`
	// ReadyAfter is Ready minus Created.
	ReadyAfter int64 `json:"ready_after_ns,omitempty"`
}

// RolloutLead is how long before a rollout's first termination a new pod of
// the workload may have become ready and still belong to it, when no
// trigger was recorded: with maxSurge the replacement is ready just before
// the old pod is deleted.
const RolloutLead = time.Minute

func (c *collector) rollouts() []Rollout {
	var terms []event.Termination
	for _, t := range c.order {
		if t.Ended() {
			tm := t.Termination()
			tm.Reason, tm.Created = podReason(t), t.Created
			terms = append(terms, tm)
		}
	}
	groups := event.GroupRollouts(terms, c.triggers)
	out := make([]Rollout, 0, len(groups))
	for _, g := range groups {
		r := Rollout{
			Namespace: g.Namespace, Workload: g.Workload.String(), Kind: g.Workload.Kind, Name: g.Workload.Name,
			From: g.From, To: g.To, Trigger: g.Trigger, TriggerAt: g.TriggerAt,
			FailureCounts: newFailureCounts(), Replaced: []PodView{}, NewPods: []NewPod{},
		}
		if r.Trigger == "" {
			r.Trigger = podTrigger(g, c.tls)
		}
		replaced := map[string]bool{}
		for _, t := range g.Terminations {
			k := podKey(t.Pod.UID, t.Pod.Namespace, t.Pod.Name)
			replaced[k] = true
			tl := c.tls[k]
			if tl == nil {
				continue
			}
			r.Replaced = append(r.Replaced, tl.Pod)
			for cause, n := range tl.Failures {
				r.ByCause[cause] += n
				r.Failures += n
			}
			for cause, n := range tl.InferredFailures {
				r.InferredByCause[cause] += n
				r.Inferred += n
			}
			r.keepWorst(tl.Gaps.SigtermAfterRotation, tl.Gaps.ExitAfterSigterm)
		}
		for _, tl := range c.order {
			k := podKey(tl.Pod.UID, tl.Pod.Namespace, tl.Pod.Name)
			if replaced[k] || tl.Pod.Namespace != g.Namespace || tl.Kind != g.Workload.Kind || tl.Name != g.Workload.Name {
				continue
			}
			if !newPodOf(g, tl, c.nextChange(g)) {
				continue
			}
			np := NewPod{Pod: tl.Pod, Created: tl.Created, Ready: tl.Ready}
			if tl.Created != 0 && tl.Ready >= tl.Created {
				np.ReadyAfter = tl.Ready - tl.Created
			}
			r.NewPods = append(r.NewPods, np)
			// The rollout ends when its last new pod is ready too.
			r.To = max(r.To, tl.Ready)
		}
		for sec, n := range c.unattr {
			if sec*1e9 >= g.From-1e9 && sec*1e9 <= g.To+int64(c.opts.ExitAfter) {
				r.Unattributed += n
			}
		}
		out = append(out, r)
	}
	return out
}

// Triggers the pods themselves show, when no workload change was recorded
// before them (Rollout.Trigger).
const (
	TriggerEviction     = "eviction"   // the Eviction API: a node drain, kubectl evict
	TriggerPreemption   = "preemption" // the scheduler made room for another pod
	TriggerTaint        = "taint"      // the taint manager: a NoExecute taint
	TriggerNodePressure = "node-pressure"
	TriggerPodDeleted   = "pod-deleted" // deleted with no reason given: kubectl delete, or a controller whose change was not recorded
	TriggerOOM          = "oom"         // a container killed for memory, the pod kept
	TriggerRestart      = "restart"     // a container ended and restarted, the pod kept: a failed liveness probe, a crash
)

// podReason is what the pod itself shows ended it (event.Termination's
// Reason): the API's reason for its deletion, or, with no deletion, its
// container's end (an OOM kill, a restart); "" for a deletion without a
// reason, which a workload change may explain.
func podReason(tl *PodTimeline) string {
	switch tl.Disruption {
	case "EvictionByEvictionAPI":
		return TriggerEviction
	case "PreemptionByScheduler":
		return TriggerPreemption
	case "DeletionByTaintManager":
		return TriggerTaint
	case "TerminationByKubelet":
		return TriggerNodePressure
	}
	if tl.Deletion != 0 {
		return ""
	}
	if tl.Terminated != nil && tl.Terminated.Reason == "OOMKilled" {
		return TriggerOOM
	}
	if tl.Terminated != nil || tl.Exit != nil || tl.Kill != nil || tl.Sigterm != nil {
		return TriggerRestart
	}
	return ""
}

// podTrigger says what ended the pods of g when no workload change did: the
// API's reason for a disruption, a plain deletion, or a container's end
// without one (an OOM kill, a restart).
func podTrigger(g event.Rollout, tls map[string]*PodTimeline) string {
	deleted, oom := false, false
	for _, t := range g.Terminations {
		tl := tls[podKey(t.Pod.UID, t.Pod.Namespace, t.Pod.Name)]
		if tl == nil {
			continue
		}
		switch tl.Disruption {
		case "EvictionByEvictionAPI":
			return TriggerEviction
		case "PreemptionByScheduler":
			return TriggerPreemption
		case "DeletionByTaintManager":
			return TriggerTaint
		case "TerminationByKubelet":
			return TriggerNodePressure
		}
		deleted = deleted || tl.Deletion != 0
		oom = oom || (tl.Terminated != nil && tl.Terminated.Reason == "OOMKilled")
	}
	switch {
	case deleted:
		return TriggerPodDeleted
	case oom:
		return TriggerOOM
	}
	return TriggerRestart
}

// nextChange is the time of the first change of g's workload after its
// trigger (0 when none): the pods created from then on are that change's.
func (c *collector) nextChange(g event.Rollout) int64 {
	if g.TriggerAt == 0 {
		return 0
	}
	next := int64(0)
	for i := range c.triggers {
		e := &c.triggers[i]
		if e.Time > g.TriggerAt && e.Reason != event.ChangeCreated && e.Pod.Namespace == g.Namespace &&
			e.Workload == g.Workload && (next == 0 || e.Time < next) {
			next = e.Time
		}
	}
	return next
}

// triggerSlack allows for the clocks of the nodes that saw a workload change
// and a pod's creation: the pod cannot be older than the change that made it.
const triggerSlack = int64(time.Second)

// newPodOf tells whether tl is a pod that rollout g brought up: created
// since its trigger, before the workload's next change (next, 0 for none)
// and before RolloutLead after its last old pod ended (a
// pod the watch saw only once running counts by its readiness), or without a recorded trigger, ready from RolloutLead before
// the first termination. A new pod that was never ready does not count.
func newPodOf(g event.Rollout, tl *PodTimeline, next int64) bool {
	if tl.Ready == 0 {
		return false
	}
	if next != 0 && tl.Created >= next {
		return false // the next change's pod
	}
	if g.TriggerAt == 0 {
		return tl.Ready >= g.From-int64(RolloutLead) && tl.Ready <= g.To
	}
	born := tl.Created
	if born == 0 {
		born = tl.Ready
	}
	return born >= g.TriggerAt-triggerSlack && born <= g.To+int64(RolloutLead)
}
