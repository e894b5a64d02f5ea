package event

import (
	"sort"
	"strconv"
	"time"
)

// Window is a half-open time range [From, To) in UTC nanoseconds. A zero To
// means "until now and beyond".
type Window struct {
	From int64
	To   int64
}

// Contains reports whether t lies in the window.
func (w Window) Contains(t int64) bool {
	return t >= w.From && (w.To == 0 || t < w.To)
}

// Termination summarises one pod's end as the events show it. Fields are 0
// when no event of that kind was seen.
type Termination struct {
	Pod      PodRef
	Workload Workload
	Deletion int64 // first pod_deletion
	Signal   int64 // first SIGTERM delivered to a process of the pod
	Kill     int64 // first SIGKILL
	Exit     int64 // last process_exit of the pod
	Removed  int64 // last endpoint_removed of the pod
	Events   int   // events of the pod in the window
	// Reason is what the pod itself shows ended it, where it shows: the
	// API's reason for deleting it (eviction, preemption, taint,
	// node-pressure) or its container's end with the pod kept (oom,
	// restart). Such a pod's end is never put on a workload change.
	Reason string
	// Created is the pod's creation (0 unknown): a template change ends
	// only pods created before it.
	Created int64
}

// Start is the earliest of the times that mark a pod's termination.
func (t Termination) Start() int64 {
	s := int64(0)
	for _, v := range []int64{t.Deletion, t.Signal, t.Kill, t.Exit} {
		if v != 0 && (s == 0 || v < s) {
			s = v
		}
	}
	return s
}

// End is the latest of them.
func (t Termination) End() int64 {
	e := int64(0)
	for _, v := range []int64{t.Deletion, t.Signal, t.Kill, t.Exit, t.Removed} {
		if v > e {
			e = v
		}
	}
	return e
}

// Rollout groups the terminations of one workload that belong together:
// those after one trigger (the workload change that set them going, when
// one was recorded), each starting within RolloutGap of the previous one's
// end.
type Rollout struct {
	Namespace    string
	Workload     Workload
	From, To     int64 // the trigger (else the first termination's start), the last termination's end
	Terminations []Termination
	// Trigger is the workload change that began it (Reason of a
	// workload_changed event: template, scale, deleted); empty when none
	// was recorded. TriggerAt is its time, and then From.
	Trigger   string
	TriggerAt int64
}

// RolloutGap is the longest quiet time inside one rollout.
const RolloutGap = 2 * time.Minute

// TriggerLead is how long before a pod's end a workload change may have
// happened and still be what ended it: a rollout with maxSurge waits for a
// new pod to be ready before it ends the first old one.
const TriggerLead = 10 * time.Minute

// GroupRollouts clusters terminations into rollouts per workload. Pods with
// no known workload form rollouts of their own namespace's unnamed workload.
// A pod's own Reason names its rollout (an eviction, an OOM kill); other
// pods' ends belong to the latest change of their workload at most
// TriggerLead before they began that could have ended them (see ends),
// and a newer change begins a new rollout, however close in time.
// triggers are workload_changed events (others are ignored).
func GroupRollouts(ts []Termination, triggers []Event) []Rollout {
	sorted := append([]Termination(nil), ts...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Start() < sorted[j].Start() })
	type key struct{ ns, kind, name, reason string }
	changes := map[key][]*Event{}
	for i := range triggers {
		e := &triggers[i]
		if e.Kind != WorkloadChanged || e.Reason == ChangeCreated {
			continue // a new workload ends no pod
		}
		k := key{e.Pod.Namespace, e.Workload.Kind, e.Workload.Name, ""}
		changes[k] = append(changes[k], e)
	}
	for _, cs := range changes {
		sort.SliceStable(cs, func(i, j int) bool { return cs[i].Time < cs[j].Time })
	}
	// trigger is the latest change of k in [start-TriggerLead, start]
	// that could have ended t.
	trigger := func(k key, t Termination) *Event {
		cs := changes[k]
		start := t.Start()
		i := sort.Search(len(cs), func(i int) bool { return cs[i].Time > start })
		for i--; i >= 0 && cs[i].Time >= start-int64(TriggerLead); i-- {
			if ends(cs[i], t) {
				return cs[i]
			}
		}
		return nil
	}
	open := map[key]int{} // index into out of the workload's latest rollout
	var out []Rollout
	for _, t := range sorted {
		k := key{t.Pod.Namespace, t.Workload.Kind, t.Workload.Name, t.Reason}
		var tr *Event
		if t.Reason == "" {
			tr = trigger(k, t)
		}
		at := int64(0)
		if tr != nil {
			at = tr.Time
		}
		if i, ok := open[k]; ok && t.Start()-out[i].To <= int64(RolloutGap) && at <= out[i].TriggerAt {
			r := &out[i]
			r.Terminations = append(r.Terminations, t)
			r.To = max(r.To, t.End())
			continue
		}
		open[k] = len(out)
		r := Rollout{
			Namespace: t.Pod.Namespace, Workload: t.Workload,
			From: t.Start(), To: t.End(), Terminations: []Termination{t},
		}
		switch {
		case tr != nil:
			r.Trigger, r.TriggerAt, r.From = tr.Reason, tr.Time, tr.Time
		case t.Reason != "":
			r.Trigger = t.Reason
		}
		out = append(out, r)
	}
	return out
}

// ends reports whether workload change c can have ended t's pod: a
// template change ends the pods created before it; a scale change only
// when it lowered the replicas (an HPA scaling up ends no pod); a deleted
// workload all of its pods. A change whose replicas or the pod's creation
// were not recorded is taken as able to.
func ends(c *Event, t Termination) bool {
	switch c.Reason {
	case ChangeTemplate:
		return t.Created == 0 || t.Created < c.Time
	case ChangeScale:
		from, err1 := strconv.Atoi(c.Attrs[AttrReplicasFrom])
		to, err2 := strconv.Atoi(c.Attrs[AttrReplicasTo])
		return err1 != nil || err2 != nil || to < from
	}
	return true
}
