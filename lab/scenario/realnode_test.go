package scenario_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/lab/realnode"
	"github.com/drainscope/drainscope/lab/scenario"
	"github.com/drainscope/drainscope/store"
)

// buildStatic builds drainscope as deploy/Dockerfile does (static, no C
// library) for the real node's images.
func buildStatic(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "drainscope")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "../../cmd/drainscope")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building a static drainscope: %v\n%s", err, b)
	}
	return out
}

// hostState is what the real node must leave as it found: the host's CNI
// configuration and state, the kubelet's log links, the iptables rules.
func hostState(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range []string{"/etc/cni/net.d", "/var/lib/cni", "/var/log/containers", "/run/netns", "/var/lib/kubelet", "/var/lib/containerd", "/run/containerd"} {
		var names []string
		_ = filepath.WalkDir(d, func(p string, _ os.DirEntry, err error) error {
			// The process lab's namespaces (dslab-*) come and go with
			// other labs on this machine, FindLeftovers covers them; the
			// ebpf tests' (dstest*) with those tests.
			if b := filepath.Base(p); err == nil && !strings.HasPrefix(b, "dslab-") && !strings.HasPrefix(b, "dstest") {
				names = append(names, p)
			}
			return nil
		})
		out[d] = strings.Join(names, " ")
	}
	if _, err := exec.LookPath("iptables-save"); err == nil {
		b, _ := exec.Command("iptables-save").Output()
		var rules []string
		for _, l := range strings.Split(string(b), "\n") {
			switch {
			case strings.HasPrefix(l, "-A"):
				rules = append(rules, l)
			case strings.HasPrefix(l, ":"): // a chain, without its counters
				rules = append(rules, strings.Fields(l)[0])
			}
		}
		out["iptables"] = strings.Join(rules, ",")
	}
	return out
}

// checkNothingLeft fails t for each place, file or rule that is in after
// and was not in before (hostState's). What was there before and is gone
// is no fault: the snapshot before is taken before the lab lock, while
// another lab on this machine may still be running and then tear its
// own things down.
func checkNothingLeft(t *testing.T, who string, before, after map[string]string) {
	t.Helper()
	for k, v := range after {
		sep := " "
		if k == "iptables" {
			sep = ","
		}
		had := map[string]bool{}
		for _, e := range strings.Split(before[k], sep) {
			had[e] = true
		}
		var added []string
		for _, e := range strings.Split(v, sep) {
			if e != "" && !had[e] {
				added = append(added, e)
			}
		}
		if len(added) > 0 {
			t.Errorf("%s left %d entries in %s that were not there before: %s", who, len(added), k, strings.Join(added[:min(len(added), 8)], " "))
		}
	}
}

// upRealNode opens the test's store (the -lab-store file when given, kept)
// and brings up the real node's cluster recording into it, waiting for
// the lab lock, with the kernel capture on; sidecar adds the sidecar
// profile's images. The store closes at the test's end; Down is the
// caller's, and a caller that checks the host takes hostState before.
func upRealNode(ctx context.Context, t *testing.T, sidecar bool) realLab {
	t.Helper()
	bin := buildStatic(t)
	dbPath := filepath.Join(t.TempDir(), "events.db")
	if *labStore != "" {
		dbPath = *labStore // kept for a look afterwards
	}
	st, err := store.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := scenario.Up(ctx, scenario.Options{
		Node:        scenario.NodeKubelet,
		Binary:      bin,
		Sidecar:     sidecar,
		Store:       st,
		WaitForLock: true,
		Log:         log,
		Progress:    testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Kernel() {
		c.Down()
		t.Fatalf("the kernel capture must run on the real node: %v", c.KernelErr)
	}
	return realLab{c, st, dbPath, log}
}

// realLab is upRealNode's cluster, its store and the store's file, and
// the log the lab writes to.
type realLab struct {
	c      *scenario.Cluster
	st     store.Store
	dbPath string
	log    *slog.Logger
}

var containerID = regexp.MustCompile(`^[0-9a-f]{64}$`)

// testLabRealNode, the real node's side of TestLabNodeParity, runs the exit and preStop runs on a real kubelet with
// containerd and runc, and checks from the store that the kernel capture
// attributed the runtime's signals and the exits to the right pod and
// container through containerd's cgroup paths, that the kubelet's preStop
// window, the pods' connection endings and the endpoint transitions are
// there, and that the analysis names the causes the process node's runs
// get.
// It returns the causes the analysis names per run, with their counts;
// nil when it stopped early.
func testLabRealNode(t *testing.T) map[string]map[analysis.Cause]int {
	requireRealNode(t, "the real node's lab runs take about three minutes")
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute) // the lab lock may be held for a while
	defer cancel()
	// Before Up, and so before the lab lock: another real node's lab may
	// still be running (checkNothingLeft).
	before := hostState(t)
	lab := upRealNode(ctx, t, false)
	c, st, log, dbPath := lab.c, lab.st, lab.log, lab.dbPath
	downed := false
	defer func() {
		if !downed {
			c.Down()
		}
	}()
	start := time.Now()
	if d := c.NodeDescription(); !strings.Contains(d, "containerd://") || !strings.Contains(d, "kubelet v1.37") {
		t.Errorf("node description %q does not name the real runtime and kubelet", d)
	}
	runs, err := scenario.SelectRuns("exit,prestop")
	if err != nil {
		t.Fatal(err)
	}
	p := scenario.Profiles["ci"]
	results, err := scenario.Execute(ctx, c, scenario.Config{Profile: p, Runs: runs, Progress: testWriter{t}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	c.Sync()
	requireRelayed(t, ctx, c, st)
	var table, diag strings.Builder
	_ = scenario.WriteTable(&table, results)
	_ = scenario.Diagnose(ctx, &diag, st, results)
	t.Logf("runs (%v):\n%s\n%s", time.Since(start).Round(time.Second), table.String(), diag.String())
	events, err := store.Events(ctx, st, store.Query{})
	if err != nil {
		t.Fatal(err)
	}

	causes := map[string]map[analysis.Cause]int{}
	for _, r := range results {
		if len(r.Replaced) != 4 || len(r.New) != 4 {
			t.Errorf("run %s: %d pods replaced by %d, want 4 by 4", r.Run.Name, len(r.Replaced), len(r.New))
		}
		// A pod may hold no client's connection at its SIGTERM (the
		// clients' keep-alive connections went elsewhere, or ended in its
		// preStop sleep); the run's replaced pods together hold some.
		conns := 0
		for _, pod := range r.Replaced {
			conns += checkRealTermination(t, r, pod, events, p)
		}
		if conns == 0 {
			t.Errorf("run %s: no FIN or RST of any replaced pod's connections after its SIGTERM", r.Run.Name)
		}
		causes[r.Run.Name] = checkRealCauses(ctx, t, st, r)
	}
	checkServerOnRealNode(ctx, t, c, dbPath, results)

	c.Down()
	downed = true
	left, err := scenario.FindLeftovers()
	if err != nil {
		t.Fatal(err)
	}
	if !left.Empty() {
		t.Errorf("left behind after Down: %s", left)
	}
	checkNothingLeft(t, "the real node", before, hostState(t))
	return causes
}

// checkRealTermination checks one replaced pod's termination as the store
// holds it: the watcher's deletion, the runtime's SIGTERM to the app
// container's process (attributed by containerd's cgroup path to this pod
// and container), after the preStop sleep where the run has one, its exit,
// and its endpoint leaving rotation and being removed. It returns how many
// of its connections' FINs and RSTs after SIGTERM the kernel recorded.
func checkRealTermination(t *testing.T, r scenario.RunResult, pod scenario.PodRecord, events []event.Event, p scenario.Profile) (conns int) {
	t.Helper()
	app := pod.Containers["app"]
	if !containerID.MatchString(app) {
		t.Errorf("run %s pod %s: app container ID %q from the pod's status is not containerd's", r.Run.Name, pod.Name, app)
		return
	}
	var deletion, sigterm, exit, leaving, removed int64
	var sender string
	flaps := 0
	for _, e := range events {
		if e.Pod.UID != pod.UID {
			continue
		}
		kernelApp := e.Source == event.SourceKernel && e.Pod.Container == app
		switch {
		case e.Kind == event.PodDeletion && deletion == 0:
			deletion = e.Time
		case e.Kind == event.Signal && e.Signal == int32(syscall.SIGTERM) && kernelApp && e.PeerPID != e.PID && sigterm == 0:
			sigterm, sender = e.Time, e.PeerComm
			if e.Pod.Name != pod.Name || e.Workload.Name != r.Deployment {
				t.Errorf("run %s: SIGTERM to %s attributed to pod %q of %v", r.Run.Name, pod.Name, e.Pod.Name, e.Workload)
			}
		case e.Kind == event.ProcessExit && kernelApp && sigterm != 0 && exit == 0:
			exit = e.Time
		case (e.Kind == event.ConnClosed || e.Kind == event.RSTSent) && e.Source == event.SourceKernel && sigterm != 0:
			conns++
		case (e.Kind == event.EndpointNotReady || e.Kind == event.EndpointTerminating) && leaving == 0:
			leaving = e.Time
		case e.Kind == event.EndpointReady && leaving != 0 && removed == 0:
			flaps++ // see backInRotation
			leaving = 0
		case e.Kind == event.EndpointRemoved && removed == 0:
			removed = e.Time
		}
	}
	name := r.Run.Name + " pod " + pod.Name
	switch {
	case deletion == 0:
		t.Errorf("%s: no deletion", name)
	case sigterm == 0:
		t.Errorf("%s: no SIGTERM to the app container %s recorded by the kernel", name, app[:12])
	case exit == 0:
		t.Errorf("%s: no exit of the app container after SIGTERM", name)
	case leaving == 0 || removed == 0:
		t.Errorf("%s: endpoint leaving %d, removed %d: want both", name, leaving, removed)
	default:
		// runc delivers the signal the shim asks it to (runc kill).
		if sender != "runc" && !strings.HasPrefix(sender, "containerd-shim") {
			t.Errorf("%s: SIGTERM sent by %q, want the runtime (runc)", name, sender)
		}
		wait := time.Duration(sigterm - deletion)
		if r.Run.PreStop {
			// The kubelet runs the preStop sleep, then sends SIGTERM.
			if wait < p.PreStop-300*time.Millisecond || wait > p.PreStop+3*time.Second {
				t.Errorf("%s: SIGTERM %v after deletion, want the preStop sleep of %v first", name, wait, p.PreStop)
			}
		} else if wait > 3*time.Second {
			t.Errorf("%s: SIGTERM %v after deletion, want it at once (no preStop)", name, wait)
		}
		if exit < sigterm {
			t.Errorf("%s: exit before SIGTERM", name)
		}
		if leaving > removed || leaving < deletion-int64(100*time.Millisecond) {
			t.Errorf("%s: endpoint left rotation at %d, removed at %d, deletion at %d: out of order", name, leaving, removed, deletion)
		}
		t.Logf("%s: deletion → SIGTERM from %s %v → exit %v → endpoint removed %v; %d connection endings, %d readiness flaps before", name, sender,
			time.Duration(sigterm-deletion).Round(time.Millisecond), time.Duration(exit-sigterm).Round(time.Millisecond),
			time.Duration(removed-deletion).Round(time.Millisecond), conns, flaps)
	}
	return conns
}

// checkRealCauses checks that the analysis finds, on the real node, what
// TestLabEndToEnd requires of the same runs on the process node: every
// exit-run failure on a terminating pod with a cause; the preStop run's
// failures mostly keep-alive connections cut at exit, just after the exit;
// and no SIGKILL in either (the apps exit well within the grace period).
// It returns the causes named, with their counts.
func checkRealCauses(ctx context.Context, t *testing.T, st store.Store, r scenario.RunResult) map[analysis.Cause]int {
	t.Helper()
	res, err := analysis.Analyze(ctx, st, store.Query{
		Window: r.Window(), Namespace: scenario.Namespace,
		Workload: event.Workload{Kind: "Deployment", Name: r.Deployment},
	})
	if err != nil {
		t.Fatal(err)
	}
	tot := res.Totals
	var causes []string
	named := map[analysis.Cause]int{}
	for _, c := range res.Causes {
		named[c.Cause] += c.Count
		causes = append(causes, string(c.Cause))
		t.Logf("%s: %s %d; from exit p10 %s p90 %s", r.Run.Name, c.Title, c.Count, offset(c.FromExit.P10NS), offset(c.FromExit.P90NS))
	}
	if slices.Contains(causes, string(analysis.CauseSIGKILL)) {
		t.Errorf("%s run: the analysis names SIGKILL (%v); the app exited long before the grace period ended", r.Run.Name, causes)
	}
	switch r.Run.Name {
	case "exit":
		if tot.ClientFailures == 0 || tot.ExplainedOnTerminatingPod != tot.ClientFailures {
			t.Errorf("exit run: %d of %d failures tied to a terminating pod and a cause", tot.ExplainedOnTerminatingPod, tot.ClientFailures)
		}
	case "prestop":
		var keepAlive *analysis.CauseSummary
		for i, c := range res.Causes {
			if c.Cause == analysis.CauseKeepAliveAtExit {
				keepAlive = &res.Causes[i]
			}
		}
		switch {
		case tot.ClientFailures == 0:
			t.Errorf("prestop run: no client failure, want keep-alive connections cut at exit")
		case keepAlive == nil || 2*keepAlive.Count <= tot.ClientFailures:
			t.Errorf("prestop run: keep-alive cut at exit is not most of the failures: %+v", res.Causes)
		case keepAlive.FromExit.P10NS < -int64(10*time.Millisecond) || keepAlive.FromExit.P90NS > int64(250*time.Millisecond):
			t.Errorf("prestop run: keep-alive failures not clustered just after the exit: p10 %s, p90 %s",
				offset(keepAlive.FromExit.P10NS), offset(keepAlive.FromExit.P90NS))
		}
	}
	return named
}

// checkServerOnRealNode deploys --keep's server (drainscope serve in a pod,
// as the chart runs it) over the lab's own SQLite store, which the lab is
// still writing, and asks it for the runs' rollouts: the container must
// open the host's file, and not restart.
func checkServerOnRealNode(ctx context.Context, t *testing.T, c *scenario.Cluster, dbPath string, results []scenario.RunResult) {
	t.Helper()
	token, err := scenario.DeployServer(ctx, c, dbPath)
	if err != nil {
		t.Errorf("--keep's server on the real node: %v", err)
		return
	}
	pod, err := c.Client.CoreV1().Pods(scenario.Namespace).Get(ctx, scenario.ServerName+"-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.RestartCount != 0 {
			t.Errorf("the server's container restarted %d times", cs.RestartCount)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(pod.Status.PodIP, "8080")+"/api/v1/rollouts?since=all", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("asking the server's pod for the rollouts: %v", err)
	}
	defer resp.Body.Close()
	var list struct {
		Rollouts []struct {
			WorkloadName string `json:"workload_name"`
			Failures     int    `json:"failures"`
		} `json:"rollouts"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the server's pod answered %s, %v", resp.Status, err)
	}
	for _, r := range results {
		found := false
		for _, ro := range list.Rollouts {
			found = found || ro.WorkloadName == r.Deployment
		}
		if !found {
			t.Errorf("the server's pod lists no rollout of %s: %+v", r.Deployment, list.Rollouts)
		}
	}
	t.Logf("--keep's server on the real node (store %s mounted from the host): %d rollouts listed", dbPath, len(list.Rollouts))
}

// requireRealNode stops a test that needs the real node where it cannot
// run: without root, the kubelet binary, the lab's preflight or the
// container runtime it fails in CI and is reported unavailable elsewhere;
// with -short it is skipped, saying how long it takes (long).
func requireRealNode(t *testing.T, long string) {
	t.Helper()
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
		t.Skip(long)
	}
}
