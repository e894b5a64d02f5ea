package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/lab/sampleapp"
	"github.com/drainscope/drainscope/store"
)

// The patch profile closes the loop on the real node: its runs roll out
// without a working preStop (and one with a preStop the image cannot run,
// as on a distroless image) and one drains properly (Connection: close
// while draining, behind a preStop sleep); each run's report
// prints a patch computed from what the run measured and the cluster's
// versions; the same runs then roll out again after kubectl ran exactly
// the printed command (Run.PatchCommand).

// PatchRuns are the patch profile's runs.
var PatchRuns = []Run{
	{Name: "exit", Behaviour: sampleapp.Exit, Rollout: true, What: "exit at SIGTERM"},
	{Name: "graceful", Behaviour: sampleapp.Graceful, Rollout: true, What: "close the listener, exit after a delay"},
	{Name: "execsleep", Behaviour: sampleapp.Graceful, PreStopExec: true, Rollout: true,
		What: "graceful, its preStop an exec of sleep, which its image (one static binary) lacks"},
	{Name: "drain", Behaviour: sampleapp.Drain, PreStop: true, Rollout: true,
		What: "Connection: close while draining, exit when idle, behind a preStop sleep"},
}

// RunDisruption is the analysed rollout of r's Deployment: the disruption
// its template change began, as a report of the run's window gives it.
func RunDisruption(ctx context.Context, st store.Store, r RunResult) (*analysis.Disruption, error) {
	q := store.Query{Window: r.Window(), Namespace: Namespace, Workload: event.Workload{Kind: "Deployment", Name: r.Deployment}}
	res, err := analysis.AnalyzeWith(ctx, st, q, analysis.Options{})
	if err != nil {
		return nil, err
	}
	for i := range res.Disruptions {
		d := &res.Disruptions[i]
		if d.Trigger == analysis.TriggerRollout && d.From >= r.RolloutStart.Add(-time.Second).UnixNano() {
			return d, nil
		}
	}
	return nil, fmt.Errorf("run %s: no rollout among the %d disruptions of %s", r.Run.Name, len(res.Disruptions), r.Deployment)
}

// Patched are the runs of results whose rollout's report printed a patch
// command, each to run again with it (Run.PatchCommand), and every run's
// disruption by name.
func Patched(ctx context.Context, st store.Store, results []RunResult) (again []Run, found map[string]*analysis.Disruption, err error) {
	found = map[string]*analysis.Disruption{}
	for _, r := range results {
		if !r.Run.Rollout {
			continue
		}
		d, err := RunDisruption(ctx, st, r)
		if err != nil {
			return nil, found, err
		}
		found[r.Run.Name] = d
		if d.Patch == nil || d.Patch.Command == "" {
			continue
		}
		rr := r.Run
		rr.PatchCommand = d.Patch.Command
		rr.What += ", patched"
		again = append(again, rr)
	}
	return again, found, nil
}
