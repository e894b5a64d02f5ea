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
	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/lab/realnode"
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
// one's, the model is wrong. Counts may differ (timing differs); the set of
// causes may not, and SIGKILL appears on neither.
//
// The real node's side is the whole of what TestLabRealNode was (its
// termination, cause and --keep server checks, subtest "kubelet"), so the
// real runs are made once; subtest "process" adds the process node's.
func TestLabNodeParity(t *testing.T) {
	testenv.RequireRoot(t)
	if _, err := controlplane.CheckBinaries("", "kubelet"); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	if err := scenario.Preflight(""); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	if err := realnode.Available(filepath.Join(controlplane.BinDir(), "kubelet")); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	if testing.Short() {
		t.Skip("the two nodes' lab runs take about four minutes")
	}
	var process, real map[string]map[analysis.Cause]int
	okProcess := t.Run("process", func(t *testing.T) { process = processNodeCauses(t) })
	okReal := t.Run("kubelet", func(t *testing.T) { real = testLabRealNode(t) })
	if process == nil || real == nil {
		if okProcess && okReal {
			t.Skip("only one node's side ran (a -run filter): nothing to compare")
		}
		t.Fatalf("a node's side stopped early (process ok %v, kubelet ok %v): nothing to compare", okProcess, okReal)
	}
	for _, diff := range compareCauses(process, real) {
		t.Error(diff)
	}
}

// compareCauses lists, per run, where the two nodes' causes part: a run
// one side lacks, a cause named on one side only, or SIGKILL on either.
// Each difference is printed with both sides' causes and counts.
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
		if onlyP, onlyK := setMinus(p, k), setMinus(k, p); len(onlyP)+len(onlyK) > 0 {
			diffs = append(diffs, fmt.Sprintf("run %s: the nodes name different causes: only on the process node %v, only on the real node %v (%s)",
				run, onlyP, onlyK, both))
		}
	}
	return diffs
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

// TestCompareCauses: a cause named on one node only, a run on one node
// only and SIGKILL each make a difference naming both sides; different
// counts of the same causes do not.
func TestCompareCauses(t *testing.T) {
	proc := map[string]map[analysis.Cause]int{
		"exit":    {analysis.CauseKeepAliveAtExit: 12, analysis.CauseEndpointRace: 3},
		"prestop": {analysis.CauseKeepAliveAtExit: 9},
	}
	same := map[string]map[analysis.Cause]int{
		"exit":    {analysis.CauseKeepAliveAtExit: 30, analysis.CauseEndpointRace: 1},
		"prestop": {analysis.CauseKeepAliveAtExit: 4},
	}
	if d := compareCauses(proc, same); len(d) != 0 {
		t.Errorf("same causes, other counts: %q, want no difference", d)
	}
	other := map[string]map[analysis.Cause]int{
		"exit":    {analysis.CauseKeepAliveAtExit: 30, analysis.CauseSIGKILL: 2},
		"prestop": {analysis.CauseKeepAliveAtExit: 4},
		"drain":   {},
	}
	d := compareCauses(proc, other)
	want := []string{
		"run drain ran on one node only (process node: not run; real node: none)",
		"run exit: SIGKILL named",
		"run exit: the nodes name different causes: only on the process node [endpoint_race], only on the real node [sigkill] " +
			"(process node: endpoint_race 3, keepalive_at_exit 12; real node: keepalive_at_exit 30, sigkill 2)",
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
