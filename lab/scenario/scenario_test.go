package scenario_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/analysis/textreport"
	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/lab/sampleapp"
	"github.com/drainscope/drainscope/lab/scenario"
	"github.com/drainscope/drainscope/store"
)

var (
	labStore    = flag.String("lab-store", "", "TestLabEndToEnd, TestLabLongLived or TestLabSidecar (run one): record into this SQLite file (kept) instead of a temporary one")
	labDescribe = flag.String("lab-describe", "", "TestLabEndToEnd: write kubectl describe deployment's output for the exit run, with its Event, to this file")
)

// The test binary is also the sample service the lab node runs.
func TestMain(m *testing.M) {
	if os.Getenv("DRAINSCOPE_LAB_SAMPLEAPP") == "1" {
		os.Exit(sampleapp.Main(os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

func TestSelectRuns(t *testing.T) {
	all, err := scenario.SelectRuns("")
	if err != nil || len(all) != len(scenario.Runs) {
		t.Fatalf("%v %v", all, err)
	}
	some, err := scenario.SelectRuns("drain, control")
	if err != nil || len(some) != 2 || some[0].Name != "control" || some[1].Name != "drain" {
		t.Errorf("want control then drain in the experiment's order: %+v %v", some, err)
	}
	if _, err := scenario.SelectRuns("exit,bogus"); err == nil {
		t.Error("want an error for an unknown run")
	}
	for name, p := range scenario.Profiles {
		if err := p.Validate(); err != nil {
			t.Errorf("profile %s: %v", name, err)
		}
	}
}

// TestLabEndToEnd runs the lab's experiment on a real single-node cluster:
// a control run, the exit, graceful, graceful+preStop and drain behaviours, and checks
// what the lab must show and what drainscope's analysis must find in it.
func TestLabEndToEnd(t *testing.T) {
	testenv.RequireRoot(t)
	if _, err := controlplane.CheckBinaries(""); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	if err := scenario.Preflight(""); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	if testing.Short() {
		t.Skip("end-to-end lab run takes about two minutes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute) // the lab lock may be held by another test for a while
	defer cancel()
	dbPath := filepath.Join(t.TempDir(), "events.db")
	if *labStore != "" {
		dbPath = *labStore // kept for a look afterwards
	}
	st, err := store.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	start := time.Now()
	c, err := scenario.Up(ctx, scenario.Options{
		AppCommand:  []string{os.Args[0]},
		AppEnv:      []string{"DRAINSCOPE_LAB_SAMPLEAPP=1"},
		Store:       st,
		WaitForLock: true,
		Log:         log,
		Progress:    testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	downed := false
	defer func() {
		if !downed {
			c.Down()
		}
	}()
	t.Logf("cluster up in %v; kernel capture: %v (%v)", time.Since(start).Round(time.Millisecond), c.Kernel(), c.KernelErr)
	if !c.Kernel() && testenv.InCI() {
		t.Errorf("the kernel capture must run in CI: %v", c.KernelErr)
	}

	runs, err := scenario.SelectRuns("control,exit,graceful,prestop,drain")
	if err != nil {
		t.Fatal(err)
	}
	// A client that is not drainscope code loads every run's Service from
	// its creation through its rollout to its deletion, beside the lab's own.
	own := startOwnClient(t)
	defer own.stop(t)
	// What drainscope serve --events does, on the lab's API server: the
	// exit run's rollout dropped requests, and kubectl describe shows it
	// on the Deployment before the run's teardown deletes it.
	stopEvents := c.ExportEvents(ctx, 8*time.Second, log)
	defer stopEvents()
	var described string
	var describeErr error
	teardown := func(r scenario.RunResult) {
		own.retire(r)
		if r.Run.Name == "exit" {
			described, describeErr = describeWithEvent(ctx, c, r.Deployment)
		}
	}
	results, err := scenario.Execute(ctx, c, scenario.Config{Profile: scenario.Profiles["ci"], Runs: runs, Progress: testWriter{t}, Log: log,
		OnService: own.add, OnTeardown: teardown})
	own.stop(t)
	if err != nil {
		t.Fatal(err)
	}
	checkDescribe(t, described, describeErr)
	c.Sync()
	var table strings.Builder
	_ = scenario.WriteTable(&table, results)
	t.Logf("runs:\n%s", table.String())
	var diag strings.Builder
	if err := scenario.Diagnose(ctx, &diag, st, results); err != nil {
		t.Error(err)
	}
	t.Logf("diagnosis:\n%s", diag.String())
	t.Logf("events stored: %v", c.Counts())

	byName := map[string]scenario.RunResult{}
	for _, r := range results {
		byName[r.Run.Name] = r
	}
	control, exit, graceful, prestop, drain := byName["control"], byName["exit"], byName["graceful"], byName["prestop"], byName["drain"]
	for _, r := range results {
		for i, f := range r.Load.Failures {
			if i == 12 {
				t.Logf("  … %d more", len(r.Load.Failures)-i)
				break
			}
			t.Logf("%s failure: %s started %s after the load, took %v, client %v → %v, backend %v (%s): %s", r.Run.Name, f.Class,
				f.Start.Sub(r.Start).Round(time.Millisecond), f.Duration.Round(time.Millisecond), f.Local, f.Remote, f.Backend, f.Pod, f.Err)
		}
	}
	if control.Load.Requests < 500 || control.Load.FailedTotal() != 0 {
		t.Errorf("control run: %s; want hundreds of requests and no failure", control.Summary())
	}
	if exit.Load.FailedTotal() == 0 {
		t.Errorf("exit run: %s; want failures", exit.Summary())
	}
	if drain.Load.FailedTotal() != 0 {
		t.Errorf("drain run: %s; want no failure: %+v", drain.Summary(), drain.Load.Failures)
	}
	for _, r := range []scenario.RunResult{exit, graceful, prestop, drain} {
		if len(r.Replaced) != 4 || len(r.New) != 4 {
			t.Errorf("run %s: %d pods replaced by %d, want 4 by 4", r.Run.Name, len(r.Replaced), len(r.New))
		}
	}
	checkRolloutBounds(ctx, t, st, exit, graceful, prestop, drain)

	// Every failure of the exit run was served by a pod that the rollout
	// replaced, and happened while that pod was terminating: the lab's
	// truth (the pod a response or conntrack named), which the stored
	// failures no longer carry.
	events, err := store.Events(ctx, st, store.Query{})
	if err != nil {
		t.Fatal(err)
	}
	oldIP := map[netip.Addr]scenario.PodRecord{}
	for _, p := range exit.Replaced {
		oldIP[p.IP] = p
	}
	deletion := map[string]int64{} // pod UID → deletion observed
	for _, e := range events {
		if e.Kind == event.PodDeletion && deletion[e.Pod.UID] == 0 {
			deletion[e.Pod.UID] = e.Time
		}
	}
	w := exit.Window()
	truthPod := map[string]string{} // client address@end → the pod that served it, by the lab's truth
	for _, f := range exit.Load.Failures {
		at := f.Time.Format(time.StampMilli)
		if !f.Backend.IsValid() {
			// A refused first SYN leaves the client and conntrack nothing
			// that names the pod; the analysis below must find it from
			// kernel evidence.
			if f.Class != event.FailRefused {
				t.Errorf("exit failure at %s (%s): the lab's truth names no backend", at, f.Class)
			}
			continue
		}
		p, ok := oldIP[f.Backend.Addr()]
		if !ok {
			t.Errorf("exit failure %s at %s went to %s, not a replaced pod", f.Class, at, f.Backend)
			continue
		}
		truthPod[fmt.Sprintf("%s@%d", f.Local, f.Time.UnixNano())] = p.UID
		if d := deletion[p.UID]; d == 0 || f.Time.UnixNano() < d-int64(500*time.Millisecond) {
			t.Errorf("exit failure %s at %s on %s before the pod's deletion (%s)", f.Class, at, p.Name, time.Unix(0, d).Format(time.StampMilli))
		}
	}
	failures := 0
	for _, e := range events {
		if e.Kind != event.ClientFailure || !w.Contains(e.Time) || e.Source != event.SourceLab {
			continue
		}
		failures++
		// What is stored is what a real client knows, nothing more.
		if e.Attrs[event.AttrBackend] != "" || !e.Pod.IsZero() || e.Attrs[event.AttrTarget] == "" || !e.Remote.IsValid() || !e.Local.IsValid() {
			t.Errorf("stored exit failure at %s carries backend %q, pod %+v, target %q, remote %v, local %v; want only the target, the Service address and the local address",
				e.At().Format(time.StampMilli), e.Attrs[event.AttrBackend], e.Pod, e.Attrs[event.AttrTarget], e.Remote, e.Local)
		}
	}
	if failures != exit.Load.FailedTotal() {
		t.Errorf("%d client_failure events stored for the exit run, the load counted %d", failures, exit.Load.FailedTotal())
	}
	// drainscope's analysis puts each of them on a replaced pod.
	res, err := analysis.Analyze(ctx, st, store.Query{Window: w, Namespace: scenario.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Failures {
		if f.Inferred {
			continue
		}
		if f.Pod == nil || !slices.ContainsFunc(exit.Replaced, func(p scenario.PodRecord) bool { return p.UID == f.Pod.UID }) {
			t.Errorf("analysis put a failure at %s on %v (cause %s, via %q), not on a replaced pod", time.Unix(0, f.Failure.Time).Format(time.StampMilli), f.Pod, f.Cause, f.Via)
			continue
		}
		// Where the lab knows the pod, the analysis found that one,
		// through the kernel's record of the client's connection.
		if uid, ok := truthPod[fmt.Sprintf("%s@%d", f.Failure.Local, f.Failure.Time)]; ok && uid != f.Pod.UID {
			t.Errorf("analysis put a failure at %s on %s (via %q); the pod that served it was %s", time.Unix(0, f.Failure.Time).Format(time.StampMilli), f.Pod.Name, f.Via, uid)
		}
	}

	checkAnalysis(ctx, t, st, exit, []scenario.RunResult{graceful, prestop}, drain, c.Kernel())

	// Last, as it adds the client's failures to the store: the
	// independent client's log, imported as a user would.
	checkOwnClient(ctx, t, st, own)

	// For every replaced pod: its deletion, the SIGTERM and the exit the
	// kernel saw, and its endpoint's transitions, in a plausible order.
	for _, r := range []scenario.RunResult{exit, graceful, prestop, drain} {
		for _, p := range r.Replaced {
			checkTermination(t, r.Run.Name, p, events, c.Kernel())
		}
	}

	// Teardown leaves nothing behind.
	c.Down()
	downed = true
	left, err := scenario.FindLeftovers()
	if err != nil {
		t.Fatal(err)
	}
	if !left.Empty() {
		t.Errorf("left behind after Down: %s", left)
	}
	t.Logf("whole test %v", time.Since(start).Round(time.Second))
}

// checkAnalysis checks what drainscope's analysis must show on the lab's
// runs: every failure of the exit run on a terminating pod with a cause;
// the graceful runs' failures (with and without preStop) mostly keep-alive
// connections cut at exit, clustered at the exit; with kernel capture, the
// pod side alone recovering most client failures, and inferring none where
// no client failed.
func checkAnalysis(ctx context.Context, t *testing.T, st store.Store, exit scenario.RunResult, graceful []scenario.RunResult, drain scenario.RunResult, kernel bool) {
	t.Helper()
	analyse := func(r scenario.RunResult) *analysis.Result {
		res, err := analysis.Analyze(ctx, st, store.Query{
			Window: r.Window(), Namespace: scenario.Namespace,
			Workload: event.Workload{Kind: "Deployment", Name: r.Deployment},
		})
		if err != nil {
			t.Fatal(err)
		}
		tot := res.Totals
		t.Logf("%s: %d client failures: %d on a terminating pod, %d with a cause, %d both",
			r.Run.Name, tot.ClientFailures, tot.OnTerminatingPod, tot.Explained, tot.ExplainedOnTerminatingPod)
		for _, c := range res.Causes {
			t.Logf("%s:   %s %d; from exit p10 %s p50 %s p90 %s", r.Run.Name, c.Title, c.Count,
				offset(c.FromExit.P10NS), offset(c.FromExit.P50NS), offset(c.FromExit.P90NS))
		}
		for _, line := range textreport.InferenceLines(res.Inference) {
			t.Logf("%s:   kernel evidence alone %s", r.Run.Name, line)
		}
		// The stored failures carry only what a client knows, so a failure
		// is the workload's when the analysis finds its pod through the
		// kernel's record of the client's connection. A new connection that
		// timed out, or was refused, was sent (kube-proxy lagging) to a pod
		// whose network was already gone: nothing on the pod side records
		// it (the refusal is the host's, for an address no longer there),
		// and only the lab's conntrack lookup named its pod. Those may be
		// missing here, nothing else.
		unreachable := 0
		for _, f := range r.Load.Failures {
			if (f.Class == event.FailTimeout || f.Class == event.FailRefused) && !f.Reused {
				unreachable++
			}
		}
		t.Logf("%s: the analysis counted %d of the load's %d client failures (%d timeouts or refusals of new connections no pod-side record may name)",
			r.Run.Name, tot.ClientFailures, r.Load.FailedTotal(), unreachable)
		if n := tot.ClientFailures; n > r.Load.FailedTotal() || n < r.Load.FailedTotal()-unreachable {
			t.Errorf("%s: the analysis counted %d client failures, the load %d, of which %d timeouts or refusals of new connections", r.Run.Name, n, r.Load.FailedTotal(), unreachable)
			logUncounted(ctx, t, st, r, res)
		}
		return res
	}

	ex := analyse(exit)
	if n := ex.Totals.ClientFailures; n == 0 || ex.Totals.ExplainedOnTerminatingPod != n {
		t.Errorf("exit run: %d of %d failures tied to a terminating pod and a cause", ex.Totals.ExplainedOnTerminatingPod, n)
	}

	// What the kernel evidence recovers, split: by a packet that proves
	// the failure, or only by a likely one (a keep-alive connection in use
	// that the exit cut, a refused SYN within the proxy lag).
	var packet, likely, failures, resets, likelyCauses int
	count := func(r scenario.RunResult, res *analysis.Result) {
		in := res.Inference
		if in.ProvenLikely > in.Proven || in.Likely > in.Inferred {
			t.Errorf("%s: inference counts inconsistent: %+v", r.Run.Name, in)
		}
		packet += in.Proven - in.ProvenLikely
		likely += in.ProvenLikely
		failures += in.ClientFailures
		resets += r.Load.Failed[event.FailReset]
		for _, c := range res.Causes {
			if c.Cause == analysis.CauseKeepAliveAtExit || c.Cause == analysis.CauseEndpointRace {
				likelyCauses += c.Count
			}
		}
	}
	count(exit, ex)
	for _, r := range graceful {
		res := analyse(r)
		count(r, res)
		var keepAlive *analysis.CauseSummary
		for i, c := range res.Causes {
			if c.Cause == analysis.CauseKeepAliveAtExit {
				keepAlive = &res.Causes[i]
			}
		}
		switch {
		case res.Totals.ClientFailures == 0:
			t.Errorf("%s run: no client failure, want keep-alive connections cut at exit", r.Run.Name)
		case keepAlive == nil || 2*keepAlive.Count <= res.Totals.ClientFailures:
			t.Errorf("%s run: keep-alive cut at exit is not most of the failures: %+v", r.Run.Name, res.Causes)
		case keepAlive.FromExit.P10NS < -int64(10*time.Millisecond) || keepAlive.FromExit.P90NS > int64(250*time.Millisecond):
			t.Errorf("%s run: keep-alive failures not clustered just after the exit: p10 %s, p90 %s",
				r.Run.Name, offset(keepAlive.FromExit.P10NS), offset(keepAlive.FromExit.P90NS))
		}
	}

	dr := analyse(drain)
	if !kernel {
		return
	}
	t.Logf("kernel evidence alone recovers %d of %d client failures of the exit and graceful runs (%.0f%%): %d proven by a packet, %d likely",
		packet+likely, failures, 100*float64(packet+likely)/float64(max(failures, 1)), packet, likely)
	if 2*(packet+likely) <= failures {
		t.Errorf("kernel evidence alone recovers %d of %d client failures, want most", packet+likely, failures)
	}
	// Every reset a client saw was a packet the pod's kernel sent, which
	// the capture records: at least that many are proven, not likely.
	if packet == 0 || packet < resets {
		t.Errorf("kernel evidence proves %d client failures by a packet, want at least the %d resets the clients saw, and some", packet, resets)
	}
	// Likely evidence exists only for keep-alive connections cut at exit
	// and refused SYNs within the proxy lag: no more failures than the
	// client log puts down to those causes can rest on it.
	if likely > likelyCauses {
		t.Errorf("%d client failures recovered only as likely, more than the %d the client log puts down to keep-alive cuts and endpoint races", likely, likelyCauses)
	}
	// A refused SYN within the proxy lag after the endpoint left rotation
	// is likely, not proven, because the kubelet's readiness probe (which
	// goes on while a pod drains) looks the same from the pod side, as the
	// README says; whether one lands in that second is timing. Every other
	// inference in the drain run would be a failure that did not happen.
	lagging := dr.Inference.ByProof[analysis.ProofRefusedLagging]
	t.Logf("drain run: %d refused SYNs within the proxy lag counted likely (probes or a lagging proxy)", lagging)
	if n := dr.Inference.Inferred - lagging; n != 0 {
		t.Errorf("drain run: no client failed, yet kernel evidence inferred %d failures besides refusals within the proxy lag: %v", n, dr.Inference.ByProof)
		for _, af := range dr.Failures {
			if af.Inferred && af.Proof != analysis.ProofRefusedLagging {
				pod := ""
				if af.Pod != nil {
					pod = af.Pod.Name
				}
				t.Logf("drain run: inferred %s at %s: client %s, pod %s (%s); evidence:", af.Proof,
					time.Unix(0, af.Failure.Time).Format(time.StampMicro), af.Failure.Local, pod, af.Explanation)
				for _, ev := range af.Evidence {
					t.Logf("drain run:   %s %+v", ev.Role, ev.Event)
				}
			}
		}
	}
}

// logUncounted says, for each failure of the load that the analysis did
// not count as the workload's, what the lab knows of it and which
// pod-side connection events the store holds on its client address: what
// a failing check needs to tell a lost record from a wrong match.
func logUncounted(ctx context.Context, t *testing.T, st store.Store, r scenario.RunResult, res *analysis.Result) {
	t.Helper()
	counted := map[string]bool{}
	for _, af := range res.Failures {
		if !af.Inferred {
			counted[af.Failure.Local] = true
		}
	}
	for _, f := range r.Load.Failures {
		if !f.Local.IsValid() || counted[f.Local.String()] {
			continue
		}
		t.Logf("%s: not counted: %s %s from %s (reused %v, lab's backend %s, pod %q, %s): %s", r.Run.Name,
			f.Time.Format(time.StampMicro), f.Class, f.Local, f.Reused, f.Backend, f.Pod, f.Duration, f.Err)
		q := store.Query{Window: event.Window{From: f.Time.Add(-10 * time.Second).UnixNano(), To: f.Time.Add(time.Second).UnixNano()},
			Kinds: []event.Kind{event.ConnClosed, event.RSTSent, event.RSTReceived, event.ConnRefused}}
		err := st.Scan(ctx, q, func(e *event.Event) error {
			if e.Remote == f.Local {
				t.Logf("%s:   kernel %s %s %s→%s pod %s/%s flags %v reason %q", r.Run.Name, time.Unix(0, e.Time).Format(time.StampMicro),
					e.Kind, e.Local, e.Remote, e.Pod.Namespace, e.Pod.Name, e.Flags, e.Reason)
			}
			return nil
		})
		if err != nil {
			t.Logf("%s:   reading the kernel events: %v", r.Run.Name, err)
		}
	}
}

func offset(ns int64) string {
	d := time.Duration(ns).Round(time.Millisecond)
	if d >= 0 {
		return "+" + d.String()
	}
	return d.String()
}

// backInRotation returns a predicate: whether an event returns one of the
// run's old pods to rotation. On a busy machine a readiness probe can fail
// and pass again before the pod's deletion; its endpoint then leaves
// rotation later, and what its first leaving started is void.
func backInRotation(r scenario.RunResult) func(*event.Event) bool {
	old := map[string]bool{}
	for _, p := range r.Replaced {
		old[p.UID] = true
	}
	return func(e *event.Event) bool { return e.Kind == event.EndpointReady && old[e.Pod.UID] }
}

func checkTermination(t *testing.T, run string, p scenario.PodRecord, events []event.Event, kernel bool) {
	t.Helper()
	first := map[string]int64{}
	note := func(key string, at int64) {
		if first[key] == 0 {
			first[key] = at
		}
	}
	for _, e := range events {
		if e.Pod.UID != p.UID {
			continue
		}
		switch {
		case e.Kind == event.EndpointReady && first["endpoint_removed"] == 0:
			delete(first, "endpoint_leaving") // a readiness flap: see backInRotation
		case e.Kind == event.PodDeletion:
			note("deletion", e.Time)
		case e.Kind == event.Signal && e.Signal == int32(syscall.SIGTERM):
			if !kernel || e.Source == event.SourceKernel {
				note("sigterm", e.Time)
			}
		case e.Kind == event.ProcessExit:
			if !kernel || e.Source == event.SourceKernel {
				note("exit", e.Time)
			}
		case e.Kind == event.EndpointNotReady, e.Kind == event.EndpointTerminating:
			note("endpoint_leaving", e.Time)
		case e.Kind == event.EndpointRemoved:
			note("endpoint_removed", e.Time)
		}
	}
	if first["endpoint_leaving"] == 0 && first["endpoint_removed"] != 0 {
		// The EndpointSlice controller may write the pod's removal in the
		// update that would have marked it terminating (a busy machine,
		// a pod gone at once): the removal is its leaving, as the
		// analysis reads it (out of rotation at the first of not ready,
		// terminating or removed).
		t.Logf("run %s pod %s: its endpoint was removed with no not-ready or terminating before", run, p.Name)
		first["endpoint_leaving"] = first["endpoint_removed"]
	}
	missing := false
	for _, k := range []string{"deletion", "sigterm", "exit", "endpoint_leaving", "endpoint_removed"} {
		if first[k] == 0 {
			t.Errorf("run %s pod %s: no %s event", run, p.Name, k)
			missing = true
		}
	}
	if missing {
		return // the order of what is there says nothing more
	}
	before := func(a, b string, slack time.Duration) {
		if first[a] > first[b]+int64(slack) {
			t.Errorf("run %s pod %s: %s at %s is after %s at %s", run, p.Name,
				a, time.Unix(0, first[a]).Format(time.StampMicro), b, time.Unix(0, first[b]).Format(time.StampMicro))
		}
	}
	// The watcher's clock and the kernel's are the same wall clock, but the
	// watcher stamps when its handler runs, and the lab node (the kubelet)
	// may act on the deletion before the watcher hears of it: allow it a
	// little lag against kernel events.
	const watchLag = 250 * time.Millisecond
	before("deletion", "sigterm", watchLag)
	before("sigterm", "exit", 0)
	before("deletion", "exit", watchLag)
	// Both from the watcher, but from two watches: the EndpointSlice
	// controller reacts to the deletion within milliseconds, and the slice's
	// update may be handled before the pod's.
	before("deletion", "endpoint_leaving", 100*time.Millisecond)
	before("endpoint_leaving", "endpoint_removed", 0)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// checkRolloutBounds reads the rollouts as the report and the web UI do
// and checks that each run's rollout begins at its pod template change
// (after the lab asked for it, before the first old pod's deletion),
// counts the four pods it brought up, and that the lab's deletion of the
// Deployment afterwards is a disruption of its own.
func checkRolloutBounds(ctx context.Context, t *testing.T, st store.Store, runs ...scenario.RunResult) {
	t.Helper()
	res, err := analysis.Analyze(ctx, st, store.Query{})
	if err != nil {
		t.Fatal(err)
	}
	deletion := map[string]int64{}
	for _, tl := range res.Timelines {
		deletion[tl.Pod.UID] = tl.Deletion
	}
	stored, err := analysis.FindDisruptions(ctx, st, store.Query{}, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		wl := event.Workload{Kind: "Deployment", Name: "sample-" + r.Run.Name}
		var mine []analysis.Disruption
		for _, ro := range res.Disruptions {
			if ro.Kind == wl.Kind && ro.Name == wl.Name {
				mine = append(mine, ro)
			}
		}
		if len(mine) != 2 {
			t.Errorf("run %s: %d rollouts of %v, want 2 (the rollout, then the deletion): %+v", r.Run.Name, len(mine), wl, mine)
			continue
		}
		ro, del := mine[0], mine[1]
		firstDeletion := int64(0)
		for _, p := range ro.Replaced {
			if d := deletion[p.UID]; d != 0 && (firstDeletion == 0 || d < firstDeletion) {
				firstDeletion = d
			}
		}
		t.Logf("run %s: rollout %s at +%v after the lab's patch, first deletion +%v, %d replaced, %d new; then %s, %d replaced, %d new",
			r.Run.Name, ro.Trigger, time.Duration(ro.From-r.RolloutStart.UnixNano()), time.Duration(firstDeletion-r.RolloutStart.UnixNano()),
			len(ro.Replaced), len(ro.NewPods), del.Trigger, len(del.Replaced), len(del.NewPods))
		if ro.Trigger != analysis.TriggerRollout || ro.From < r.RolloutStart.UnixNano() || firstDeletion == 0 || ro.From > firstDeletion {
			t.Errorf("run %s: rollout %q from %d; want the template change, after the patch (%d) and before the first deletion (%d)",
				r.Run.Name, ro.Trigger, ro.From, r.RolloutStart.UnixNano(), firstDeletion)
		}
		if len(ro.Replaced) != 4 || len(ro.NewPods) != 4 {
			t.Errorf("run %s: rollout replaced %d with %d new pods, want 4 with 4", r.Run.Name, len(ro.Replaced), len(ro.NewPods))
		}
		if del.Trigger != analysis.TriggerDeleted || len(del.Replaced) != 4 || len(del.NewPods) != 0 {
			names := func(ps []analysis.PodView) string {
				var out []string
				for _, p := range ps {
					out = append(out, fmt.Sprintf("%s (deletion %s)", p.Name, time.Unix(0, deletion[p.UID]).UTC().Format("15:04:05.000")))
				}
				return strings.Join(out, ", ")
			}
			t.Errorf("run %s: after the rollout %q replacing %d (%s) with %d new, want the deletion of the 4 new pods; the rollout's own were %s",
				r.Run.Name, del.Trigger, len(del.Replaced), names(del.Replaced), len(del.NewPods), names(ro.Replaced))
		}
		// The list (the account of the pods that ended) agrees: the
		// same disruptions, with the same IDs, triggers and pods.
		for _, want := range []analysis.Disruption{ro, del} {
			n := 0
			for _, g := range stored {
				if g.ID == want.ID && g.Trigger == want.Trigger && len(g.Replaced) == len(want.Replaced) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("run %s: the list's disruptions of %v do not hold the analysed %s (%d matching)", r.Run.Name, wl, want.ID, n)
			}
		}
	}
}
