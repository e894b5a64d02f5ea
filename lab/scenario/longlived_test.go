package scenario_test

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/analysis/textreport"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/lab/scenario"
	"github.com/drainscope/drainscope/store"
)

var (
	longSettle = flag.Duration("longlived-settle", 30*time.Second, "TestLabLongLived: the pods' settle time under the load before the rollout")
	longGap    = flag.Duration("longlived-gap", 30*time.Second, "TestLabLongLived: the time between one disruption's end and the next's start")
	longReady  = flag.Duration("longlived-min-ready", 10*time.Second, "TestLabLongLived: the slow rollout's minReadySeconds")
)

// TestLabLongLived runs the long-lived sequence, shortened, on the real
// kubelet: pods with an exec readiness probe every 2 s, a worker replaced
// every 30 s and a log shipper beside the app, in two Services, settle
// under the load; then a rollout, a scale-down, an eviction through the
// Eviction API, a container OOM kill, the second Service's deletion, a
// slow rollout (minReadySeconds), a rollout paused and resumed, and the
// kubelet's eviction of a pod past its ephemeral-storage limit follow.
// Over a window that begins after the pods were ready, the analysis must
// name the rollouts' failures as it does the short profile's exit run,
// name each disruption by what it was (the report and the web API's list
// alike), take none of the shipper's ends for the app's, and name no cause
// for a failure on a pod that was not terminating.
func TestLabLongLived(t *testing.T) {
	requireRealNode(t, "the long-lived sequence takes about five minutes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute) // the lab lock may be held for a while
	defer cancel()
	lab := upRealNode(ctx, t, false)
	c, st, log := lab.c, lab.st, lab.log
	defer c.Down()
	p := scenario.Profiles["longlived"]
	p.Settle, p.Gap, p.MinReady = *longSettle, *longGap, *longReady
	start := time.Now()
	res, err := scenario.RunLongLived(ctx, c, scenario.Config{Profile: p, Progress: testWriter{t}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	c.Sync()
	var steps strings.Builder
	scenario.WriteSteps(&steps, res)
	t.Logf("long-lived sequence (%v):\n%s", time.Since(start).Round(time.Second), steps.String())

	w := res.ReportWindow(scenario.ReportLead(p.Settle))
	if w.From <= res.Ready.UnixNano() {
		t.Fatalf("the report's window begins at %d, not after the pods were ready at %d", w.From, res.Ready.UnixNano())
	}
	r, err := analysis.AnalyzeWith(ctx, st, store.Query{Window: w}, analysis.Options{MaxFailures: -1})
	if err != nil {
		t.Fatal(err)
	}
	var report strings.Builder
	_ = textreport.WriteText(&report, r)
	t.Logf("drainscope report --since %s --until %s:\n%s", time.Unix(0, w.From).UTC().Format(time.RFC3339Nano),
		time.Unix(0, w.To).UTC().Format(time.RFC3339Nano), report.String())

	byName := map[string]scenario.Step{}
	for _, s := range res.Steps {
		byName[s.Name] = s
	}
	for _, n := range []string{scenario.StepRollout, scenario.StepScaleDown, scenario.StepEviction, scenario.StepOOM,
		scenario.StepSlowRollout, scenario.StepPauseResume, scenario.StepKubeletEviction} {
		if s, ok := byName[n]; !ok || len(s.Pods) == 0 {
			t.Fatalf("step %s missing or without pods: %+v", n, res.Steps)
		}
	}
	if _, ok := byName[scenario.StepServiceDelete]; !ok {
		t.Fatalf("step %s missing: %+v", scenario.StepServiceDelete, res.Steps)
	}
	// A real OOM kill by the kernel's memory cgroup, as the kubelet
	// reports it, not the app's own exit (sampleapp.ExitNoOOM).
	if oom := byName[scenario.StepOOM]; !strings.Contains(oom.Note, "OOMKilled") {
		t.Errorf("oom step: %q, want the container OOMKilled", oom.Note)
	}
	checkLongLivedExtras(ctx, t, st, res)
	checkStepsDone(t, res, byName)
	checkLongLivedDisruptions(t, r, byName)
	list, err := analysis.FindDisruptions(ctx, st, store.Query{Window: w}, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkListMatchesReport(t, r.Disruptions, list)
	for _, n := range []string{scenario.StepRollout, scenario.StepSlowRollout, scenario.StepPauseResume} {
		checkLongLivedRollout(ctx, t, st, r, byName[n])
	}
	checkKubeletEviction(ctx, t, st, w, byName[scenario.StepKubeletEviction])
	checkShipper(ctx, t, st, w, r, res.Steps)
	checkNoCauseOffTermination(t, r, res.Steps)
}

// checkLongLivedExtras checks that what the test is about happened: exec
// probes and worker recycling ran processes in the app containers that
// exited while no pod was terminating.
func checkLongLivedExtras(ctx context.Context, t *testing.T, st store.Store, res scenario.LongLivedResult) {
	t.Helper()
	events, err := store.Events(ctx, st, store.Query{Window: event.Window{From: res.Ready.UnixNano(), To: res.SettleEnd.UnixNano()}})
	if err != nil {
		t.Fatal(err)
	}
	exits := map[string]int{}
	for _, e := range events {
		if e.Kind == event.ProcessExit && e.Source == event.SourceKernel && e.Pod.Name != "" {
			exits[e.Pod.Name+" "+e.Comm]++
		}
	}
	t.Logf("process exits in the pods while they settled (pod comm: count): %v", exits)
	if len(exits) == 0 {
		t.Errorf("no process exited in any pod while they settled: the exec probes and the worker did not run, or the kernel did not see them")
	}
}

// podSideRecords says what the pods' kernels recorded of connections from
// the failure's client address: on its port, in the window the analysis
// reads (KernelWindow before, Lookahead after), what it could tie the
// failure to a pod by; on the address's other ports within 200 ms, a
// sign that NAT rewrote the client's port. It explains a failure put on
// no pod, or on the wrong one.
func podSideRecords(ctx context.Context, st store.Store, f analysis.EventView) string {
	client, err := netip.ParseAddrPort(f.Local)
	if err != nil {
		return "no client address"
	}
	opts := analysis.DefaultOptions()
	const near = int64(200 * time.Millisecond)
	events, err := store.Events(ctx, st, store.Query{Window: event.Window{
		From: f.Time - int64(opts.KernelWindow), To: f.Time + int64(opts.Lookahead) + 1}})
	if err != nil {
		return "reading the store: " + err.Error()
	}
	var own, other []string
	for _, e := range events {
		switch e.Kind {
		case event.ConnClosed, event.RSTSent, event.RSTReceived, event.ConnRefused:
		default:
			continue
		}
		if e.Remote.Addr().Unmap() != client.Addr().Unmap() {
			continue
		}
		d := e.Time - f.Time
		rec := fmt.Sprintf("%s %s %+d ms", e.Pod.Name, e.Kind, d/int64(time.Millisecond))
		switch {
		case e.Remote.Port() == client.Port():
			own = append(own, rec)
		case d >= -near && d <= near && len(other) < 12:
			other = append(other, fmt.Sprintf("port %d: %s", e.Remote.Port(), rec))
		}
	}
	return fmt.Sprintf("pod-side records of %s from %s before to %s after: [%s]; of its other ports within 200 ms: [%s]",
		client, opts.KernelWindow, opts.Lookahead, strings.Join(own, "; "), strings.Join(other, "; "))
}

// stepOf names the step that ended uid's life in a disruption that began
// at at: the step whose pods include uid and whose time (its request, a
// second before, to its end, 5 s after) holds at. A pod can be two steps'
// (an OOM kill, the pod kept; then a rollout), each ending one of its
// lives.
func stepOf(uid string, at int64, steps map[string]scenario.Step) string {
	for name, s := range steps {
		if slices.ContainsFunc(s.Pods, func(p scenario.PodRecord) bool { return p.UID == uid }) && stepHolds(s, at) {
			return name
		}
	}
	return ""
}

func stepHolds(s scenario.Step, at int64) bool {
	return at >= s.Start.Add(-time.Second).UnixNano() && at <= s.End.Add(5*time.Second).UnixNano()
}

// checkStepsDone checks that the lab did what the steps are about: the
// slow rollout's old pods ended at least minReadySeconds apart, the paused
// rollout's on both sides of its pause and none while it held, and the
// kubelet left the pod it evicted in place.
func checkStepsDone(t *testing.T, res scenario.LongLivedResult, steps map[string]scenario.Step) {
	t.Helper()
	slow := steps[scenario.StepSlowRollout]
	ends := endTimes(slow)
	if len(ends) != len(slow.Pods) {
		t.Errorf("slow rollout: %d of %d old pods seen ending", len(ends), len(slow.Pods))
	}
	for i := 1; i < len(ends); i++ {
		// A new pod is available minReadySeconds after it is ready; only
		// then does the next old pod end.
		if gap := ends[i].Sub(ends[i-1]); gap < res.MinReady-time.Second {
			t.Errorf("slow rollout: old pods ended %v apart, want minReadySeconds (%v) or more", gap.Round(time.Millisecond), res.MinReady)
		}
	}
	pr := steps[scenario.StepPauseResume]
	var before, during, after int
	for _, e := range endTimes(pr) {
		switch {
		case e.Before(pr.Paused):
			before++
		case e.Before(pr.Resumed):
			// The controller may have deleted an old pod as the pause
			// was written: allow it a second.
			if e.After(pr.Paused.Add(time.Second)) {
				during++
			}
		default:
			after++
		}
	}
	t.Logf("paused rollout: %d old pods ended before the pause, %d while paused, %d after the resume", before, during, after)
	if before == 0 || after == 0 || during > 0 {
		t.Errorf("paused rollout: %d old pods ended before the pause, %d while it held, %d after the resume: want some before, none during, some after", before, during, after)
	}
	if ke := steps[scenario.StepKubeletEviction]; !strings.Contains(ke.Note, "reason Evicted") {
		t.Errorf("kubelet eviction: %q, want the pod Failed with reason Evicted", ke.Note)
	}
}

func endTimes(s scenario.Step) []time.Time {
	var out []time.Time
	for _, e := range s.Ends {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// checkLongLivedDisruptions checks that each disruption the analysis found
// is one of the steps, named by what it was, and that each step that ends
// pods is one, replacing every pod it ended; that a rollout's disruption
// holds the changes that held it together (its completion, its pause and
// resume); and that the Service's deletion is none.
func checkLongLivedDisruptions(t *testing.T, r *analysis.Result, steps map[string]scenario.Step) {
	t.Helper()
	want := map[string][]analysis.Trigger{
		scenario.StepRollout:   {analysis.TriggerRollout},
		scenario.StepScaleDown: {analysis.TriggerScale},
		scenario.StepEviction:  {analysis.TriggerEviction},
		// A container restart, the pod kept: by the kubelet's reason
		// (OOMKilled) or as a restart.
		scenario.StepOOM: {analysis.TriggerOOM, analysis.TriggerRestart},
		// Leaving one of two Services ends no pod.
		scenario.StepServiceDelete: nil,
		// One rollout however far apart its pods end, held together by
		// the workload's status until it reported the rollout complete.
		scenario.StepSlowRollout: {analysis.TriggerRollout},
		scenario.StepPauseResume: {analysis.TriggerRollout},
		// pod_finished Evicted, no deletion.
		scenario.StepKubeletEviction: {analysis.TriggerNodePressure},
	}
	wantChanges := map[string][]string{
		scenario.StepSlowRollout: {event.ChangeTemplate, event.ChangeComplete},
		scenario.StepPauseResume: {event.ChangeTemplate, event.ChangePaused, event.ChangeResumed, event.ChangeComplete},
	}
	found := map[string]int{}
	for _, ro := range r.Disruptions {
		var pods, of []string
		for _, p := range ro.Replaced {
			pods = append(pods, p.Name)
			if s := stepOf(p.UID, ro.From, steps); s != "" && !slices.Contains(of, s) {
				of = append(of, s)
			}
		}
		var changes []string
		for _, c := range ro.Changes {
			changes = append(changes, c.Reason)
		}
		desc := fmt.Sprintf("disruption %s %q of %s at %s, %d pods (%s), changes %v", ro.ID, ro.Trigger, ro.Workload(),
			time.Unix(0, ro.From).UTC().Format("15:04:05.000"), len(ro.Replaced), strings.Join(pods, ", "), changes)
		t.Logf("%s: steps %v, %d failures %v", desc, of, ro.Failures, ro.ByCause)
		if s, ok := steps[scenario.StepServiceDelete]; ok && stepHolds(s, ro.From) {
			t.Errorf("%s: begun while the second Service was deleted, which ends no pod", desc)
		}
		switch len(of) {
		case 0:
			t.Errorf("%s: no step ended these pods: a disruption that never happened", desc)
		case 1:
			name := of[0]
			found[name]++
			if !slices.Contains(want[name], ro.Trigger) {
				t.Errorf("%s: the %s step's pods, want it named %v", desc, name, want[name])
			}
			if n := len(steps[name].Pods); len(ro.Replaced) != n {
				t.Errorf("%s: %d pods, want the %d the %s step ended", desc, len(ro.Replaced), n, name)
			}
			for _, c := range wantChanges[name] {
				if !slices.Contains(changes, c) {
					t.Errorf("%s: the %s step's changes lack %s, want %v", desc, name, c, wantChanges[name])
				}
			}
			if wantChanges[name] != nil && ro.InProgress {
				t.Errorf("%s: in progress, want it complete", desc)
			}
		default:
			t.Errorf("%s: joins the pods of the steps %v, want one disruption each", desc, of)
		}
	}
	for name, tr := range want {
		if n := min(len(tr), 1); found[name] != n {
			t.Errorf("the %s step is in %d disruptions, want %d", name, found[name], n)
		}
	}
}

// checkKubeletEviction checks what the store holds of the kubelet's
// eviction: the pod's finish, Evicted, and no deletion of it.
func checkKubeletEviction(ctx context.Context, t *testing.T, st store.Store, w event.Window, s scenario.Step) {
	t.Helper()
	victim := s.Pods[0]
	events, err := store.Events(ctx, st, store.Query{Window: w, PodUIDs: []string{victim.UID},
		Kinds: []event.Kind{event.PodFinished, event.PodDeletion}})
	if err != nil {
		t.Fatal(err)
	}
	finished := 0
	for _, e := range events {
		t.Logf("kubelet eviction: %s %s %s reason %q attrs %v", time.Unix(0, e.Time).UTC().Format("15:04:05.000"), e.Kind, e.Pod.Name, e.Reason, e.Attrs)
		switch {
		case e.Kind == event.PodDeletion:
			t.Errorf("kubelet eviction: %s was deleted; the kubelet evicts a pod without deleting it", victim.Name)
		case e.Reason == "Evicted":
			finished++
		}
	}
	if finished != 1 {
		t.Errorf("kubelet eviction: %d pod_finished Evicted of %s, want 1", finished, victim.Name)
	}
}

// checkShipper checks that the log shipper's ends are never taken for the
// app's: every ended life of a step's pod shows both containers with the
// app marked, and no failure's explanation rests on the shipper's SIGTERM
// or exit (as evidence, or as the exit it counts from).
func checkShipper(ctx context.Context, t *testing.T, st store.Store, w event.Window, r *analysis.Result, steps []scenario.Step) {
	t.Helper()
	shipper := map[string]string{} // pod UID → the shipper's container ID
	for _, s := range steps {
		for _, p := range s.Pods {
			if id := p.Containers[scenario.ShipperName]; id != "" {
				shipper[p.UID] = id
			} else {
				t.Errorf("pod %s: no %s container in its status", p.Name, scenario.ShipperName)
			}
		}
	}
	isShipper := func(uid, ctr string) bool {
		return ctr != "" && (ctr == scenario.ShipperName || ctr == shipper[uid])
	}
	events, err := store.Events(ctx, st, store.Query{Window: w, Kinds: []event.Kind{event.ProcessExit, event.Signal, event.ContainerTerminated}})
	if err != nil {
		t.Fatal(err)
	}
	exits := map[string][]int64{} // pod UID → the shipper's main process's exits
	for _, e := range events {
		if e.Kind == event.ProcessExit && e.Flags.Has(event.FlagMain) && isShipper(e.Pod.UID, e.Pod.Container) {
			exits[e.Pod.UID] = append(exits[e.Pod.UID], e.Time)
		}
	}
	t.Logf("the shipper's main process exited in %d of the %d pods the steps ended", len(exits), len(shipper))
	if len(exits) == 0 {
		t.Errorf("no exit of the %s container's main process was recorded: the check below would see nothing", scenario.ShipperName)
	}

	ended := 0
	for _, tl := range r.Timelines {
		if _, ok := shipper[tl.Pod.UID]; !ok || !tl.Ended() {
			continue
		}
		ended++
		var app, ship, apps int
		for _, cv := range tl.Containers {
			if cv.App {
				apps++
			}
			switch {
			case cv.Name == "app" && cv.App:
				app++
			case cv.Name == scenario.ShipperName && !cv.App:
				ship++
			}
		}
		if app != 1 || ship != 1 || apps != 1 {
			t.Errorf("timeline of %s (life since %d): containers %+v, want app (the app) and %s", tl.Pod.Name, tl.Since, tl.Containers, scenario.ShipperName)
		}
		if tl.Exit != nil && slices.Contains(exits[tl.Pod.UID], tl.Exit.Time) {
			t.Errorf("timeline of %s: its exit at %d is the %s's", tl.Pod.Name, tl.Exit.Time, scenario.ShipperName)
		}
	}
	if ended == 0 {
		t.Error("no timeline of a pod a step ended")
	}

	for _, f := range r.Failures {
		if f.Cause == analysis.CauseUnexplained || f.Pod == nil {
			continue
		}
		if off, ok := f.Offsets["from_exit"]; ok && slices.Contains(exits[f.Pod.UID], f.Failure.Time-off) {
			t.Errorf("failure %s on %s, %s: counts from the %s's exit: %s", describeFailure(f), f.Pod.Name, f.Cause, scenario.ShipperName, f.Explanation)
		}
		for _, ev := range f.Evidence {
			switch ev.Event.Kind {
			case event.ProcessExit, event.Signal, event.ContainerTerminated:
			default:
				continue
			}
			if ev.Event.Pod != nil && isShipper(ev.Event.Pod.UID, ev.Event.Pod.Container) {
				t.Errorf("failure %s on %s, %s: its evidence %q (%s) is the %s's", describeFailure(f), f.Pod.Name, f.Cause, ev.Role, ev.Event.Summary, scenario.ShipperName)
			}
		}
	}
}

// checkListMatchesReport checks that the web API's list of disruptions
// (FindDisruptions over the same store and window) gives the report's:
// the same IDs, in the same order, each with the same trigger and pods.
func checkListMatchesReport(t *testing.T, report []analysis.Disruption, list []*analysis.Disruption) {
	t.Helper()
	key := func(d *analysis.Disruption) string {
		var pods []string
		for _, p := range d.Replaced {
			pods = append(pods, fmt.Sprintf("%s@%d", p.Name, p.Life))
		}
		slices.Sort(pods)
		return fmt.Sprintf("%s %s [%s]", d.ID, d.Trigger, strings.Join(pods, " "))
	}
	var a, b []string
	for i := range report {
		a = append(a, key(&report[i]))
	}
	for _, d := range list {
		b = append(b, key(d))
		t.Logf("listed: %s", key(d))
	}
	if !slices.Equal(a, b) {
		t.Errorf("the list (FindDisruptions) differs from the report:\n  report: %s\n  list:   %s",
			strings.Join(a, "\n          "), strings.Join(b, "\n          "))
	}
}

// checkLongLivedRollout asks of a rollout step what TestLabRealNode asks
// of the short profile's exit run on the same node: failures, every one of
// them during the rollout on a pod it replaced and with a cause, and no
// SIGKILL.
func checkLongLivedRollout(ctx context.Context, t *testing.T, st store.Store, r *analysis.Result, s scenario.Step) {
	t.Helper()
	from, to := s.Start.UnixNano(), s.End.Add(5*time.Second).UnixNano()
	n := 0
	causes := map[analysis.Cause]int{}
	for _, f := range r.Failures {
		if f.Inferred || f.Failure.Time < from || f.Failure.Time > to {
			continue
		}
		n++
		causes[f.Cause]++
		replaced := func(uid string) bool {
			return slices.ContainsFunc(s.Pods, func(p scenario.PodRecord) bool { return p.UID == uid })
		}
		onReplaced := f.Pod != nil && replaced(f.Pod.UID)
		// A new connection that no record ties to a pod (a connect
		// timeout into an exited pod) is a likely endpoint race whose
		// candidates must all be pods the rollout replaced.
		if f.Pod == nil && f.Likely && len(f.Candidates) > 0 {
			onReplaced = !slices.ContainsFunc(f.Candidates, func(c analysis.PodView) bool { return !replaced(c.UID) })
		}
		if !onReplaced || f.Cause == analysis.CauseUnexplained {
			t.Errorf("%s failure %s: on pod %s (replaced: %v), cause %s: want a replaced pod and a cause; %s; %s",
				s.Name, describeFailure(f), podName(f.Pod), onReplaced, f.Cause, f.Explanation, podSideRecords(ctx, st, f.Failure))
		}
	}
	t.Logf("%s: %d client failures, by cause %v", s.Name, n, causes)
	if n == 0 {
		t.Errorf("%s: no client failure; the app exits at SIGTERM under keep-alive load, want some", s.Name)
	}
	if causes[analysis.CauseSIGKILL] > 0 || causes[analysis.CauseNoReadyEndpoints] > 0 {
		t.Errorf("%s: causes %v; the app exits at SIGTERM long before its grace period, with three or four endpoints ready", s.Name, causes)
	}
}

// checkNoCauseOffTermination checks that a failure outside every step's
// time on its pod (the step's request to its end, plus 5 s) has no cause:
// a worker's recycling or an exec probe ends no pod.
func checkNoCauseOffTermination(t *testing.T, r *analysis.Result, steps []scenario.Step) {
	t.Helper()
	const slack = 5 * time.Second
	during := func(f analysis.AlignedFailure, s scenario.Step) bool {
		start := f.Failure.Time - f.Failure.Duration // a timeout is logged at its end
		return f.Failure.Time >= s.Start.Add(-time.Second).UnixNano() && start <= s.End.Add(slack).UnixNano()
	}
	off, offInferred := 0, 0
	for _, f := range r.Failures {
		// Inferred failures too: an exec probe's connection closed at
		// its exit is no client's connection cut.
		terminating := false
		for _, s := range steps {
			if !during(f, s) {
				continue
			}
			// A failure no pod was found for is judged by time alone.
			if f.Pod == nil || slices.ContainsFunc(s.Pods, func(p scenario.PodRecord) bool { return p.UID == f.Pod.UID }) {
				terminating = true
			}
		}
		if terminating {
			continue
		}
		if f.Inferred {
			offInferred++
		} else {
			off++
		}
		if f.Cause != analysis.CauseUnexplained {
			t.Errorf("failure %s on pod %s, which was not terminating, named %s: %s", describeFailure(f), podName(f.Pod), f.Cause, f.Explanation)
		}
	}
	t.Logf("%d client failures and %d inferred on pods that were not terminating", off, offInferred)
	if r.Truncated {
		t.Errorf("the result lists only some failures: the check above saw %d", len(r.Failures))
	}
}

func describeFailure(f analysis.AlignedFailure) string {
	return fmt.Sprintf("%s at %s (%s, took %v)", f.Failure.Reason, time.Unix(0, f.Failure.Time).UTC().Format("15:04:05.000"),
		f.Failure.Local, time.Duration(f.Failure.Duration).Round(time.Millisecond))
}
