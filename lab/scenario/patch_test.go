package scenario_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/analysis/textreport"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/lab/scenario"
	"github.com/drainscope/drainscope/metrics"
	"github.com/drainscope/drainscope/store"
)

// TestLabPatch closes the loop on the real kubelet: the runs without a
// working preStop drop requests (their clients' keep-alive connections
// meet the race only now and then: the patch then guards against it, the
// budget showing it open), the report of each prints a patch
// computed from what the run measured and the cluster's versions (the
// sleep action on this 1.37 cluster, replacing the exec that failed),
// drainscope check calls those workloads risky and the draining one not
// (the exported series agreeing), and the same rollouts run again after
// kubectl ran exactly the printed command drop no request of a cause the
// patch covers; check then calls none of them risky. Failures that need
// code (keep-alive cuts at exit) are named as such and not counted
// against the patch.
func TestLabPatch(t *testing.T) {
	requireRealNode(t, "the patch loop's seven runs on the real node take about five minutes")
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute) // the lab lock may be held for a while
	defer cancel()
	before := hostState(t)
	lab := upRealNode(ctx, t, false)
	c, st, log := lab.c, lab.st, lab.log
	downed := false
	defer func() {
		if !downed {
			c.Down()
		}
	}()
	p := scenario.Profiles["patch"]
	// Shorter loads than the profile's, for CI's time: every rollout's
	// last old pod leaves within them (the drain run's, the latest, at
	// about +18 s: its 5 s preStop and its drain).
	p.Duration = 22 * time.Second

	first, err := scenario.Execute(ctx, c, scenario.Config{Profile: p, Runs: p.Runs(), Progress: testWriter{t}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	c.Sync()
	again, found, err := scenario.Patched(ctx, st, first)
	if err != nil {
		t.Fatal(err)
	}
	patches := map[string]*analysis.Patch{}
	for _, r := range first {
		d := found[r.Run.Name]
		logPatch(t, r, d)
		failed := r.Load.FailedTotal()
		switch r.Run.Name {
		case "drain":
			if failed > maxQuietFailures {
				t.Errorf("drain: %d failed requests (%v), want at most %d", failed, r.Load.Failed, maxQuietFailures)
			}
			if d.Patch != nil && d.Patch.Command != "" {
				t.Errorf("drain: a patch for a run that drained: %s", d.Patch.Command)
			}
			continue
		case "execsleep":
			// Named: the failures it shows (the clients' keep-alive
			// connections may meet none of the refusals) and check's
			// verdict below.
			if d.ByCause[analysis.CausePreStopFailed]+d.InferredByCause[analysis.CausePreStopFailed] == 0 {
				t.Logf("execsleep: no failure named prestop_failed: %v, inferred %v", d.ByCause, d.InferredByCause)
			}
			checkHookFailedRecorded(ctx, t, st, r)
			if d.Patch == nil || !strings.Contains(d.Patch.Strategic, `"exec":null`) || !strings.Contains(d.Patch.Strategic, `"sleep":{"seconds":`) ||
				!slices.Contains(append(slices.Clone(d.Patch.Covers), d.Patch.Guards...), analysis.CausePreStopFailed) {
				t.Errorf("execsleep: the patch does not replace the failed exec with the sleep action against the failed hook: %+v", d.Patch)
			}
		}
		if failed == 0 {
			t.Errorf("%s: no failed request; without a working preStop the rollout must drop some", r.Run.Name)
		}
		if d.Patch == nil || d.Patch.Command == "" || len(d.Patch.Covers)+len(d.Patch.Guards) == 0 {
			t.Errorf("%s: no patch printed: %+v", r.Run.Name, d.Patch)
			continue
		}
		if !strings.Contains(d.Patch.Strategic, `"sleep":{"seconds":`) {
			t.Errorf("%s: the patch's preStop is not the sleep action on a 1.37 cluster: %s", r.Run.Name, d.Patch.Strategic)
		}
		if !slices.ContainsFunc(d.Patch.Values, func(v analysis.PatchValue) bool { return strings.Contains(v.From, "its node's kubelet") }) {
			t.Errorf("%s: the preStop's form does not go by the node's kubelet version: %+v", r.Run.Name, d.Patch.Values)
		}
		patches[r.Run.Name] = d.Patch
	}
	if len(again) != 3 {
		t.Errorf("%d runs to patch, want exit, graceful and execsleep", len(again))
	}
	w := event.Window{From: first[0].Start.UnixNano(), To: first[len(first)-1].Window().To}
	checkVerdicts(ctx, t, st, w, map[string]bool{"exit": true, "graceful": true, "execsleep": true, "drain": false},
		map[string]string{"execsleep": analysis.RiskHook})
	if t.Failed() {
		return
	}

	second, err := scenario.Execute(ctx, c, scenario.Config{Profile: p, Runs: again, Progress: testWriter{t}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	c.Sync()
	for _, r := range second {
		d, err := scenario.RunDisruption(ctx, st, r)
		if err != nil {
			t.Error(err)
			continue
		}
		if r.Run.PatchCommand != patches[r.Run.Name].Command {
			t.Errorf("%s: ran %q, not the printed %q", r.Run.Name, r.Run.PatchCommand, patches[r.Run.Name].Command)
		}
		logPatch(t, r, d)
		pt := patches[r.Run.Name]
		for _, cause := range append(slices.Clone(pt.Covers), pt.Guards...) {
			if n := d.ByCause[cause] + d.InferredByCause[cause]; n > 0 {
				t.Errorf("%s, patched: %d failures of %s, which the patch covers", r.Run.Name, n, cause)
			}
		}
		for cause, n := range d.ByCause {
			if n > 0 && !slices.Contains(pt.NeedsCode, cause) && !slices.Contains(pt.Covers, cause) {
				t.Logf("%s, patched: %d failures of %s, which the patch neither covers nor names as the code's", r.Run.Name, n, cause)
			}
		}
	}
	w2 := event.Window{From: second[0].Start.UnixNano(), To: second[len(second)-1].Window().To}
	checkVerdicts(ctx, t, st, w2, map[string]bool{"exit": false, "graceful": false, "execsleep": false}, nil)

	c.Down()
	downed = true
	checkNothingLeft(t, "the patch runs", before, hostState(t))
}

// logPatch logs a run's causes and its patch as the report prints them.
func logPatch(t *testing.T, r scenario.RunResult, d *analysis.Disruption) {
	t.Helper()
	var b strings.Builder
	head, cmd, lines := textreport.PatchLines(d.Patch, nil)
	if head != "" {
		b.WriteString("\n  " + head + "\n    " + cmd)
	}
	for _, l := range lines {
		b.WriteString("\n  " + l)
	}
	t.Logf("%s: %d requests, %d failed %v; causes %v, inferred %v%s", r.Run.Name, r.Load.Requests, r.Load.FailedTotal(), r.Load.Failed, d.ByCause, d.InferredByCause, b.String())
}

// checkHookFailedRecorded: the kubelet's FailedPreStopHook about the
// app's container of each replaced pod is in the store.
func checkHookFailedRecorded(ctx context.Context, t *testing.T, st store.Store, r scenario.RunResult) {
	t.Helper()
	events, err := store.Events(ctx, st, store.Query{Window: r.Window(), Kinds: []event.Kind{event.KubeletEvent}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range r.Replaced {
		if !slices.ContainsFunc(events, func(e event.Event) bool {
			return e.Pod.UID == p.UID && e.Pod.Container == "app" && e.Reason == event.KubeletFailedPreStopHook
		}) {
			t.Errorf("execsleep: no FailedPreStopHook recorded for %s's app (%d kubelet events)", p.Name, len(events))
		}
	}
}

// checkVerdicts: drainscope check over w calls each run's workload risky
// or not as want says, for the reason reason says where it says one, and
// the exported series says the same.
func checkVerdicts(ctx context.Context, t *testing.T, st store.Store, w event.Window, want map[string]bool, reason map[string]string) {
	t.Helper()
	checks, _, err := analysis.Check(ctx, st, store.Query{Window: w, Namespace: scenario.Namespace}, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]analysis.WorkloadCheck{}
	for _, c := range checks {
		got[strings.TrimPrefix(c.Name, "sample-")] = c
	}
	m := metrics.New("serve", "test")
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.RunChecks(mctx, st, metrics.CheckOptions{Every: time.Hour, Window: time.Since(time.Unix(0, w.From)) + time.Minute})
	}()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if lastRun(t, m) > 0 {
			break
		}
	}
	cancel()
	<-done
	for run, risky := range want {
		c, ok := got[run]
		if !ok {
			t.Errorf("check over the runs: no verdict for sample-%s (%d checked)", run, len(checks))
			continue
		}
		t.Logf("check: sample-%s risky=%v %v; %s", run, c.Risky, c.Reasons, strings.Join(c.Why, "; "))
		if c.Risky != risky {
			t.Errorf("check: sample-%s risky=%v, want %v: %s", run, c.Risky, risky, strings.Join(c.Why, "; "))
		}
		if r := reason[run]; r != "" && !slices.Contains(c.Reasons, r) {
			t.Errorf("check: sample-%s's reasons %v lack %s", run, c.Reasons, r)
		}
		series := riskSeries(t, m, "Deployment/sample-"+run)
		if risky != (series > 0) {
			t.Errorf("drainscope_workload_rollout_risk of sample-%s sums to %v; check said risky=%v", run, series, risky)
		}
	}
}

func lastRun(t *testing.T, m *metrics.Metrics) float64 {
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "drainscope_workload_check_last_run_timestamp_seconds" && len(mf.Metric) == 1 {
			return mf.Metric[0].GetGauge().GetValue()
		}
	}
	return 0
}

// riskSeries sums drainscope_workload_rollout_risk of one workload.
func riskSeries(t *testing.T, m *metrics.Metrics, workload string) float64 {
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "drainscope_workload_rollout_risk" {
			continue
		}
		for _, x := range mf.Metric {
			for _, l := range x.Label {
				if l.GetName() == "workload" && l.GetValue() == workload {
					sum += x.GetGauge().GetValue()
				}
			}
		}
	}
	return sum
}
