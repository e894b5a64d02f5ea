package web

import (
	"github.com/drainscope/drainscope/analysis"
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
	Trigger analysis.Trigger `json:"trigger,omitempty"`
	// What names the disruption by its trigger, for people: "rollout (new
	// pod template)", "OOM kill", "node-pressure eviction".
	What string `json:"what"`
	// Changes are the workload's changes that belong to it: the one that
	// began it, then pauses, resumes, rollbacks and its completion.
	Changes      []analysis.Change `json:"changes,omitempty"`
	PodsReplaced int               `json:"pods_replaced"`
	Events       int               `json:"events"` // events of the replaced pods, as the store counts them

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
	// RecordGaps say where the record of it is incomplete (a node's
	// recorder not running, without its capture, or losing events):
	// its failures there are unexplained.
	RecordGaps []string `json:"record_gaps,omitempty"`

	Links Links `json:"links"`
}

// Links are where the pages and the API show a rollout.
type Links struct {
	Timeline  string `json:"timeline"`
	Alignment string `json:"alignment"`
	API       string `json:"api"`
}

func linksFor(k analysis.DisruptionKey) Links {
	id := k.ID()
	return Links{Timeline: "/rollouts/" + id, Alignment: "/rollouts/" + id + "/alignment", API: "/api/v1/rollouts/" + id}
}

// summaryOf is d as the rollouts list shows it; live says it may still
// grow.
func summaryOf(d *analysis.Disruption, live bool) RolloutSummary {
	return RolloutSummary{
		ID: d.ID, Namespace: d.Namespace, WorkloadKind: d.Kind, WorkloadName: d.Name,
		From: d.From, To: d.To, Live: live, Trigger: d.Trigger, What: d.Words().Heading, Changes: d.Changes,
		PodsReplaced: d.Terminations, Events: d.Events,
		NewPods: len(d.NewPods), Failures: d.Failures, ByCause: d.ByCause,
		Inferred: d.Inferred, InferredByCause: d.InferredByCause, Unattributed: d.Unattributed,
		WorstGap: d.WorstSigtermAfterRotation, LongestExitWait: d.LongestExitAfterSigterm,
		RecordGaps: gapTexts(d.RecorderGaps),
		Links:      linksFor(d.Key()),
	}
}

// gapTexts says each recorder gap as the reports do.
func gapTexts(gs []analysis.RecorderGap) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.String())
	}
	return out
}
