package scenario_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/lab/scenario"
	"github.com/drainscope/drainscope/store"
)

// parityRuns are the runs both nodes make for TestLabNodeParity.
const parityRuns = "exit,prestop"

// TestLabNodeParity runs the exit and prestop runs on the process node
// (lab/simnode) and on the real node (lab/realnode: kubelet, containerd,
// runc), with the same profile, and requires that the analysis names the
// same causes for the client failures of each run on both: the process
// node is a model of the kubelet, and where its answers part from the real
// one's, the model is wrong. Counts may differ (timing differs); per run
// the main cause must be the same, SIGKILL appears on neither, and a cause
// named on one node only must be one that timing alone explains
// (timingCauses).
//
// The real node's side is the whole of what TestLabRealNode was (its
// termination, cause and --keep server checks, subtest "kubelet"), so the
// real runs are made once; subtest "process" adds the process node's.
func TestLabNodeParity(t *testing.T) {
	requireRealNode(t, "the two nodes' lab runs take about four minutes")
	var process, real map[string]map[analysis.Cause]int
	okProcess := t.Run("process", func(t *testing.T) { process = processNodeCauses(t) })
	okReal := t.Run("kubelet", func(t *testing.T) { real = testLabRealNode(t) })
	if process == nil || real == nil {
		if okProcess && okReal {
			t.Skip("only one node's side ran (a -run filter): nothing to compare")
		}
		t.Fatalf("a node's side stopped early (process ok %v, kubelet ok %v): nothing to compare", okProcess, okReal)
	}
	for _, run := range slices.Sorted(maps.Keys(process)) {
		t.Logf("%s: process node: %s; real node: %s", run, causeList(process[run], true), causeList(real[run], real[run] != nil))
	}
	for _, diff := range compareCauses(process, real) {
		t.Error(diff)
	}
}

// timingCauses are the causes that depend on where one request stood, to
// the millisecond, when a container exited or its endpoint left the
// dataplane: a request in flight at the exit, a new connection sent to the
// old pod between its exit and its endpoint's removal. The two nodes time
// these steps differently (the real node's endpoints leave 0.1 to 0.7 s
// after the exit in the exit run, through containerd, runc and the
// kubelet's status loop), so a run may name one of them for a few failures
// on one node and not the other; they must not be a run's main cause.
var timingCauses = []analysis.Cause{analysis.CauseInFlight, analysis.CauseEndpointRace, analysis.CauseEndpointRaceLikely}

// compareCauses lists, per run, where the two nodes' causes part: a run
// one side lacks, SIGKILL on either, a different main cause (the one named
// for most failures), or a cause named on one node only that is not one of
// timingCauses. Each difference is printed with both sides' causes and
// counts. Counts may differ.
func compareCauses(process, real map[string]map[analysis.Cause]int) []string {
	var diffs []string
	all := maps.Clone(process)
	maps.Copy(all, real)
	for _, run := range slices.Sorted(maps.Keys(all)) {
		p, okP := process[run]
		k, okK := real[run]
		both := fmt.Sprintf("process node: %s; real node: %s", causeList(p, okP), causeList(k, okK))
		switch {
		case !okP || !okK:
			diffs = append(diffs, fmt.Sprintf("run %s ran on one node only (%s)", run, both))
			continue
		case p[analysis.CauseSIGKILL] > 0 || k[analysis.CauseSIGKILL] > 0:
			diffs = append(diffs, fmt.Sprintf("run %s: SIGKILL named, the apps exit well within the grace period (%s)", run, both))
		}
		if mp, mk := mainCause(p), mainCause(k); mp != mk {
			diffs = append(diffs, fmt.Sprintf("run %s: main cause %q on the process node, %q on the real node (%s)", run, mp, mk, both))
		}
		onlyP, onlyK := untimed(setMinus(p, k)), untimed(setMinus(k, p))
		if len(onlyP)+len(onlyK) > 0 {
			diffs = append(diffs, fmt.Sprintf("run %s: the nodes name different causes: only on the process node %v, only on the real node %v (%s)",
				run, onlyP, onlyK, both))
		}
	}
	return diffs
}

// mainCause is the cause named for the most failures ("" for none; the
// first in order on a tie).
func mainCause(m map[analysis.Cause]int) analysis.Cause {
	var best analysis.Cause
	for _, c := range slices.Sorted(maps.Keys(m)) {
		if m[c] > m[best] {
			best = c
		}
	}
	return best
}

func untimed(cs []analysis.Cause) []analysis.Cause {
	return slices.DeleteFunc(cs, func(c analysis.Cause) bool { return slices.Contains(timingCauses, c) })
}

func setMinus(a, b map[analysis.Cause]int) []analysis.Cause {
	var out []analysis.Cause
	for c, n := range a {
		if n > 0 && b[c] == 0 {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

func causeList(m map[analysis.Cause]int, ran bool) string {
	if !ran {
		return "not run"
	}
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", c, m[c]))
	}
	return strings.Join(parts, ", ")
}

// processNodeCauses makes the parity runs on the process node, as
// TestLabEndToEnd brings it up, and returns the causes the analysis names
// per run.
func processNodeCauses(t *testing.T) map[string]map[analysis.Cause]int {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute) // the lab lock may be held for a while
	defer cancel()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := scenario.Up(ctx, scenario.Options{
		Node:        scenario.NodeProcess,
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
	defer c.Down()
	start := time.Now()
	if !c.Kernel() {
		// The real node's side needs the capture; without it the two
		// would not be asked the same question.
		t.Fatalf("the kernel capture must run for the parity runs: %v", c.KernelErr)
	}
	runs, err := scenario.SelectRuns(parityRuns)
	if err != nil {
		t.Fatal(err)
	}
	results, err := scenario.Execute(ctx, c, scenario.Config{Profile: scenario.Profiles["ci"], Runs: runs, Progress: testWriter{t}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	c.Sync()
	requireRelayed(t, ctx, c, st)
	var table strings.Builder
	_ = scenario.WriteTable(&table, results)
	t.Logf("runs (%v):\n%s", time.Since(start).Round(time.Second), table.String())
	causes := map[string]map[analysis.Cause]int{}
	for _, r := range results {
		res, err := analysis.Analyze(ctx, st, store.Query{
			Window: r.Window(), Namespace: scenario.Namespace,
			Workload: event.Workload{Kind: "Deployment", Name: r.Deployment},
		})
		if err != nil {
			t.Fatal(err)
		}
		named := map[analysis.Cause]int{}
		for _, cs := range res.Causes {
			named[cs.Cause] += cs.Count
		}
		t.Logf("%s: %d client failures; causes: %s", r.Run.Name, res.Totals.ClientFailures, causeList(named, true))
		if res.Totals.ClientFailures == 0 {
			t.Errorf("%s run: no client failure on the process node: nothing to compare", r.Run.Name)
		}
		causes[r.Run.Name] = named
	}
	return causes
}

// TestCompareCauses: a run on one node only, SIGKILL, a different main
// cause and a cause on one node only that timing does not explain each
// make a difference naming both sides; other counts, and a timing cause on
// one side (as in the first parity run: exit, endpoint_race 4 on the real
// node only; prestop, inflight_cut 1 on the process node only) do not.
func TestCompareCauses(t *testing.T) {
	proc := map[string]map[analysis.Cause]int{
		"exit":    {analysis.CauseInFlight: 1, analysis.CauseKeepAliveAtExit: 26},
		"prestop": {analysis.CauseInFlight: 1, analysis.CauseKeepAliveAtExit: 19},
	}
	same := map[string]map[analysis.Cause]int{
		"exit":    {analysis.CauseEndpointRace: 4, analysis.CauseInFlight: 5, analysis.CauseKeepAliveAtExit: 34},
		"prestop": {analysis.CauseKeepAliveAtExit: 20},
	}
	if d := compareCauses(proc, same); len(d) != 0 {
		t.Errorf("same main causes, timing causes on one side: %q, want no difference", d)
	}
	other := map[string]map[analysis.Cause]int{
		"exit":    {analysis.CauseKeepAliveAtExit: 30, analysis.CauseSIGKILL: 2, analysis.CauseUnexplained: 1},
		"prestop": {analysis.CauseEndpointRace: 20, analysis.CauseKeepAliveAtExit: 4},
		"drain":   {},
	}
	d := compareCauses(proc, other)
	want := []string{
		"run drain ran on one node only (process node: not run; real node: none)",
		"run exit: SIGKILL named",
		"run exit: the nodes name different causes: only on the process node [], only on the real node [sigkill unexplained] " +
			"(process node: inflight_cut 1, keepalive_at_exit 26; real node: keepalive_at_exit 30, sigkill 2, unexplained 1)",
		`run prestop: main cause "keepalive_at_exit" on the process node, "endpoint_race" on the real node`,
	}
	if len(d) != len(want) {
		t.Fatalf("differences %q, want %d", d, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(d[i], want[i]) {
			t.Errorf("difference %d: %q, want it to start %q", i, d[i], want[i])
		}
	}
}
