package web

import (
	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
)

// RolloutSummary is one row of the rollouts list. Counts that need the
// analysis are present once Analysed is true.
type RolloutSummary struct {
	ID           string `json:"id"` // ns/kind/name/start, each segment path-escaped, "-" when empty
	Namespace    string `json:"namespace"`
	WorkloadKind string `json:"workload_kind"`
	WorkloadName string `json:"workload_name"`
	From         int64  `json:"from_ns"`
	To           int64  `json:"to_ns"`
	Live         bool   `json:"live"` // the last termination is recent: the rollout may still grow
	// Trigger is the workload change that began it (template, scale,
	// deleted), empty when none was recorded; From is then its time.
	Trigger      string `json:"trigger,omitempty"`
	PodsReplaced int    `json:"pods_replaced"`
	Events       int    `json:"events"` // events of the replaced pods, as the store counts them

	Analysed        bool                   `json:"analysed"`
	Lanes           int                    `json:"lanes,omitempty"`
	NewPods         int                    `json:"new_pods"`
	Failures        int                    `json:"failures"`
	ByCause         map[analysis.Cause]int `json:"by_cause"`
	Inferred        int                    `json:"inferred_failures"`
	InferredByCause map[analysis.Cause]int `json:"inferred_by_cause"`
	Unattributed    int                    `json:"unattributed_failures"`
	// WorstGap is the most negative SIGTERM minus the time the last node
	// took the pod out of rotation: below zero, some node still routed to a
	// pod that had been told to stop.
	WorstGap        *int64 `json:"worst_sigterm_after_rotation_ns,omitempty"`
	LongestExitWait *int64 `json:"longest_exit_after_sigterm_ns,omitempty"`

	Links Links `json:"links"`
}

// Links are where the pages and the API show a rollout.
type Links struct {
	Timeline  string `json:"timeline"`
	Alignment string `json:"alignment"`
	API       string `json:"api"`
}

func linksFor(k RolloutKey) Links {
	id := k.ID()
	return Links{Timeline: "/rollouts/" + id, Alignment: "/rollouts/" + id + "/alignment", API: "/api/v1/rollouts/" + id}
}

// baseSummary is what the store alone says about a rollout.
func baseSummary(r event.Rollout, live bool) RolloutSummary {
	k := keyOf(r)
	s := RolloutSummary{
		ID: k.ID(), Namespace: r.Namespace, WorkloadKind: r.Workload.Kind, WorkloadName: r.Workload.Name,
		From: r.From, To: r.To, Live: live, Trigger: r.Trigger, PodsReplaced: len(r.Terminations),
		ByCause: map[analysis.Cause]int{}, InferredByCause: map[analysis.Cause]int{},
		Links: linksFor(k),
	}
	for _, t := range r.Terminations {
		s.Events += t.Events
	}
	return s
}

// summarize adds the analysis's counts for the rollout: those of the
// analysed rollouts of the same workload that overlap it (the analysis
// groups from its own timelines, so its boundaries may differ slightly).
func summarize(r event.Rollout, res *analysis.Result, live bool) RolloutSummary {
	s := baseSummary(r, live)
	for _, ro := range res.Rollouts {
		if ro.Namespace != r.Namespace || ro.Kind != r.Workload.Kind || ro.Name != r.Workload.Name {
			continue
		}
		if ro.To < r.From || ro.From > r.To {
			continue
		}
		if s.Trigger == "" {
			s.Trigger = ro.Trigger // what the pods show, when no workload change was recorded
		}
		s.NewPods += len(ro.NewPods)
		s.Failures += ro.Failures
		s.Inferred += ro.Inferred
		s.Unattributed += ro.Unattributed
		for c, n := range ro.ByCause {
			s.ByCause[c] += n
		}
		for c, n := range ro.InferredByCause {
			s.InferredByCause[c] += n
		}
		if g := ro.WorstSigtermAfterRotation; g != nil && (s.WorstGap == nil || *g < *s.WorstGap) {
			v := *g
			s.WorstGap = &v
		}
		if g := ro.LongestExitAfterSigterm; g != nil && (s.LongestExitWait == nil || *g > *s.LongestExitWait) {
			v := *g
			s.LongestExitWait = &v
		}
	}
	return s
}
