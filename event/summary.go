package event

import (
	"sort"
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

// Rollout groups the terminations of one workload that belong together: each
// starts within RolloutGap of the previous one's end.
type Rollout struct {
	Namespace    string
	Workload     Workload
	From, To     int64 // first termination start, last termination end
	Terminations []Termination
}

// RolloutGap is the longest quiet time inside one rollout.
const RolloutGap = 2 * time.Minute

// GroupRollouts clusters terminations into rollouts per workload. Pods with
// no known workload form rollouts of their own namespace's unnamed workload.
func GroupRollouts(ts []Termination) []Rollout {
	sorted := append([]Termination(nil), ts...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Start() < sorted[j].Start() })
	type key struct{ ns, kind, name string }
	open := map[key]int{} // index into out of the workload's latest rollout
	var out []Rollout
	for _, t := range sorted {
		k := key{t.Pod.Namespace, t.Workload.Kind, t.Workload.Name}
		if i, ok := open[k]; ok && t.Start()-out[i].To <= int64(RolloutGap) {
			r := &out[i]
			r.Terminations = append(r.Terminations, t)
			r.To = max(r.To, t.End())
			continue
		}
		open[k] = len(out)
		out = append(out, Rollout{
			Namespace: t.Pod.Namespace, Workload: t.Workload,
			From: t.Start(), To: t.End(), Terminations: []Termination{t},
		})
	}
	return out
}
