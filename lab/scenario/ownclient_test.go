package scenario_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/ingest"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/lab/netns"
	"github.com/drainscope/drainscope/lab/scenario"
	"github.com/drainscope/drainscope/store"
)

// ownClient is a load client that is not drainscope code
// (lab/testdata/keepalive_client.py, Python's http.client), run through the
// whole lab session as a user would run their own: it is told each run's
// ClusterIP as the Service is created and when the run is over, and knows
// nothing of pods.
type ownClient struct {
	cmd     *exec.Cmd
	targets string
	log     string

	mu   sync.Mutex
	runs []*ownRun // in order; a ClusterIP freed by one run may be the next one's
}

// ownRun is what the test knows of one run, to judge the client's failures.
type ownRun struct {
	name     string // Deployment and Service name
	target   string
	created  time.Time // the Service's creation (just before)
	teardown time.Time // the run's end, just before its deletion
	firstOK  int64     // the client's first answer from it (request start)
}

// runAt is the run whose Service held target when a request began at t.
func (oc *ownClient) runAt(target string, t int64) *ownRun {
	var out *ownRun
	for _, r := range oc.runs {
		if r.target == target && r.created.UnixNano() <= t {
			out = r
		}
	}
	return out
}

const ownClientConns = 10 // per Service; the runs come one at a time

func startOwnClient(t *testing.T) *ownClient {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		testenv.Unavailable(t, "python3 for the independent client: "+err.Error())
	}
	dir := t.TempDir()
	oc := &ownClient{targets: filepath.Join(dir, "targets"), log: filepath.Join(dir, "client.jsonl")}
	if err := os.WriteFile(oc.targets, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("../testdata/keepalive_client.py")
	if err != nil {
		t.Fatal(err)
	}
	oc.cmd = exec.Command(py, script, "--targets", oc.targets, "--log", oc.log,
		"--source", netns.Default.Gateway.Addr().String(), "--conns", fmt.Sprint(ownClientConns),
		"--interval", "0.1", "--timeout", "5")
	oc.cmd.Stderr = testWriter{t}
	if err := oc.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return oc
}

func (oc *ownClient) appendLine(line string) {
	f, err := os.OpenFile(oc.targets, os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, _ = f.WriteString(line + "\n")
		f.Close()
	}
}

// add is scenario.Config.OnService.
func (oc *ownClient) add(r scenario.RunResult) {
	oc.mu.Lock()
	oc.runs = append(oc.runs, &ownRun{name: r.Deployment, target: r.ClusterIP.String(), created: time.Now()})
	oc.mu.Unlock()
	oc.appendLine("add " + r.ClusterIP.String())
}

// retire is scenario.Config.OnTeardown: the client stops dialling the
// Service; its open connections go on until the deletion cuts them.
func (oc *ownClient) retire(r scenario.RunResult) {
	oc.mu.Lock()
	if n := len(oc.runs); n > 0 && oc.runs[n-1].target == r.ClusterIP.String() {
		oc.runs[n-1].teardown = time.Now()
	}
	oc.mu.Unlock()
	oc.appendLine("del " + r.ClusterIP.String())
	// The client reads the file every 50 ms: let it see the line before
	// the Service goes, or it dials an address that no Service holds.
	time.Sleep(300 * time.Millisecond)
}

// stop ends the client; its requests in flight end first (at most the
// 5 s timeout).
func (oc *ownClient) stop(t *testing.T) {
	t.Helper()
	if oc.cmd.Process == nil || oc.cmd.ProcessState != nil {
		return
	}
	_ = oc.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- oc.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the independent client: %v", err)
		}
	case <-time.After(15 * time.Second):
		_ = oc.cmd.Process.Kill()
		<-done
		t.Error("the independent client did not stop within 15 s of SIGTERM")
	}
}

// clientLine is one line of the client's log, as it wrote it.
type clientLine struct {
	Time       string  `json:"time"`
	Target     string  `json:"target"`
	Status     int     `json:"status"`
	Error      string  `json:"error"`
	Client     string  `json:"client"`
	DurationMS float64 `json:"duration_ms"`
	XPod       string  `json:"x_pod"`
}

// checkOwnClient imports the independent client's log through the jsonl
// format, as `drainscope import --format jsonl` does, and checks what the
// analysis makes of its failures against what the client saw.
func checkOwnClient(ctx context.Context, t *testing.T, st store.Store, oc *ownClient) {
	t.Helper()
	f, err := ingest.LookupFormat("jsonl")
	if err != nil {
		t.Fatal(err)
	}
	parse, err := f.Parser(ingest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(oc.log)
	if err != nil {
		t.Fatal(err)
	}
	im := &ingest.Importer{Store: st, Parser: parse, Strict: true}
	sum, err := im.Import(ctx, oc.log, in)
	in.Close()
	if err != nil {
		t.Fatalf("importing the independent client's log: %v", err)
	}
	t.Logf("independent client: %d lines, %d successes, %d failures stored", sum.Lines, sum.Successes, sum.Stored)

	// The truth: each failure's X-Pod (the last answer on its connection),
	// and when the client first got an answer through each Service.
	oc.mu.Lock()
	defer oc.mu.Unlock()
	truth := map[string]clientLine{} // client@time_ns
	lf, err := os.Open(oc.log)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(lf)
	for sc.Scan() {
		var l clientLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("client log line %q: %v", sc.Text(), err)
		}
		ts, err := time.Parse(time.RFC3339Nano, l.Time)
		if err != nil {
			t.Fatal(err)
		}
		if l.Error == "" {
			start := ts.UnixNano() - int64(l.DurationMS*float64(time.Millisecond))
			if or := oc.runAt(l.Target, start); or != nil && (or.firstOK == 0 || start < or.firstOK) {
				or.firstOK = start
			}
			continue
		}
		truth[fmt.Sprintf("%s@%d", l.Client, ts.UnixNano())] = l
	}
	lf.Close()

	res, err := analysis.AnalyzeWith(ctx, st, store.Query{}, analysis.Options{MaxFailures: -1})
	if err != nil {
		t.Fatal(err)
	}
	// The disruptions whose trigger is the Deployment's deletion, by workload.
	deleted := map[string]map[string]bool{} // workload name → replaced pod UIDs
	for _, ro := range res.Disruptions {
		if ro.Trigger != analysis.TriggerDeleted {
			continue
		}
		if deleted[ro.Name] == nil {
			deleted[ro.Name] = map[string]bool{}
		}
		for _, p := range ro.Replaced {
			deleted[ro.Name][p.UID] = true
		}
	}
	// When each Service first had an endpoint, and a ready one, as the
	// watcher saw it.
	firstEndpoint, firstReady := map[string]int64{}, map[string]int64{} // Service name → time
	events, err := store.Events(ctx, st, store.Query{Namespace: scenario.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if strings.HasPrefix(string(e.Kind), "endpoint_") && firstEndpoint[e.Service] == 0 {
			firstEndpoint[e.Service] = e.Time
		}
		if e.Kind == event.EndpointReady || e.Kind == event.EndpointAdded && strings.HasPrefix(e.Attrs[event.AttrConditions], "ready=true") {
			if firstReady[e.Service] == 0 {
				firstReady[e.Service] = e.Time
			}
		}
	}

	// The pod-side kernel records of each client address: what the
	// analysis can tie a failure to a pod by when the client logged none.
	type podRecord struct {
		t   int64
		pod string
	}
	records := map[string][]podRecord{} // client address → records, in time order
	for _, e := range events {
		switch e.Kind {
		case event.ConnClosed, event.RSTSent, event.RSTReceived, event.ConnRefused:
			if e.Remote.IsValid() && e.Pod.Name != "" {
				records[e.Remote.String()] = append(records[e.Remote.String()], podRecord{e.Time, e.Pod.Name})
			}
		}
	}
	// hasRecord says whether the kernel recorded pod's side of the
	// client's connection in the analysis's window around the failure.
	opts := analysis.DefaultOptions()
	hasRecord := func(client string, start, end int64, pod string) bool {
		for _, r := range records[client] {
			if r.pod == pod && r.t >= start-int64(opts.KernelWindow) && r.t <= end+int64(opts.Lookahead) {
				return true
			}
		}
		return false
	}

	var (
		noRecord                                                                                                             []string
		total, named, served, attributed, noReady, noReadyOK, atDeletion, atDeletionOK, lag, lagNamed, preView, preViewNamed int
		byCause                                                                                                              = map[analysis.Cause]int{}
		unexplained, lagged, early, wrongPod, badNoReady, badDeletion                                                        []string
	)
	for _, af := range res.Failures {
		fv := af.Failure
		if af.Inferred || fv.Source != event.SourceClient {
			continue
		}
		l, ok := truth[fmt.Sprintf("%s@%d", fv.Local, fv.Time)]
		if !ok {
			t.Errorf("analysed failure %s at %d matches no line of the client's log", fv.Local, fv.Time)
			continue
		}
		total++
		byCause[af.Cause]++
		start := fv.Time - fv.Duration
		or := oc.runAt(l.Target, start)
		desc := fmt.Sprintf("%s %s (%s) %q pod %q served by %q: %s", fv.TimeHuman, l.Target, runName(or), l.Error, podName(af.Pod), l.XPod, af.Cause)
		// A refusal after the watcher saw the Service's first ready
		// endpoint, before the client's first answer through it: the API
		// had an endpoint, kube-proxy's rules did not yet (it syncs at
		// most once a second), and still rejected the Service.
		proxyLag := or != nil && fv.Reason == event.FailRefused && firstReady[or.name] != 0 &&
			start >= firstReady[or.name] && (or.firstOK == 0 || start < or.firstOK)
		// A refusal that began after the Service's creation, before the
		// watcher recorded any endpoint of it.
		beforeEndpoints := or != nil && fv.Reason == event.FailRefused && start >= or.created.UnixNano() &&
			firstEndpoint[or.name] != 0 && start < firstEndpoint[or.name]
		if proxyLag {
			lag++
		}
		if beforeEndpoints {
			preView++
		}
		if af.Cause != analysis.CauseUnexplained {
			named++
			if proxyLag {
				lagNamed++
			}
			if beforeEndpoints {
				preViewNamed++
			}
		} else {
			why := desc + "; missing: " + strings.Join(af.Missing, "; ") + neighbours(af)
			switch {
			case proxyLag:
				lagged = append(lagged, why)
			case beforeEndpoints:
				early = append(early, why)
			default:
				unexplained = append(unexplained, why)
			}
		}
		if l.XPod != "" {
			served++
			switch {
			case af.Pod != nil && af.Pod.Name == l.XPod:
				attributed++
			case af.Pod == nil && !hasRecord(fv.Local, start, fv.Time, l.XPod):
				// Nothing in the store ties the client's address to
				// the pod: the kernel's record of that connection is
				// missing (an address NAT rewrote, or an event lost).
				// No analysis can attribute it; counted apart, bounded.
				noRecord = append(noRecord, desc)
			default:
				wrongPod = append(wrongPod, desc+"; "+podSideRecords(ctx, st, fv))
			}
		}
		// A refusal that began after the Service's creation and before the
		// watcher saw its first ready endpoint: the Service had none.
		if or != nil && fv.Reason == event.FailRefused && start >= or.created.UnixNano() &&
			(firstReady[or.name] == 0 || start < firstReady[or.name]) {
			noReady++
			if af.Cause == analysis.CauseNoReadyEndpoints {
				noReadyOK++
			} else if !beforeEndpoints {
				badNoReady = append(badNoReady, desc+"; "+podSideRecords(ctx, st, fv))
			}
		}
		// A failure after the run was over: the Deployment's deletion cut it.
		if or != nil && !or.teardown.IsZero() && fv.Time >= or.teardown.UnixNano() {
			atDeletion++
			if af.Pod != nil && deleted[or.name][af.Pod.UID] {
				atDeletionOK++
			} else {
				badDeletion = append(badDeletion, desc)
			}
		}
	}
	pct := func(a, b int) float64 { return 100 * float64(a) / float64(max(b, 1)) }
	t.Logf("independent client: %d failures; %d with a named cause (%.1f%%); %d on a connection a pod had answered, %d attributed to that pod (%.1f%%); "+
		"%d with no pod-side record of their connection; %d refused before the Service had a ready endpoint, %d of them no ready endpoints; %d refused after the first ready endpoint before kube-proxy routed to it, %d of them named; "+
		"%d refused having begun between the Service's creation and its first endpoint event, %d of them named; "+
		"outside those two, %d of %d named (%.1f%%); %d at a Deployment's deletion, %d in its deleted disruption; by cause %v",
		total, named, pct(named, total), served, attributed, pct(attributed, served), len(noRecord), noReady, noReadyOK, lag, lagNamed,
		preView, preViewNamed, named-lagNamed-preViewNamed, total-lag-preView, pct(named-lagNamed-preViewNamed, total-lag-preView),
		atDeletion, atDeletionOK, byCause)
	show := func(what string, ls []string, most int) {
		sort.Strings(ls)
		for i, s := range ls {
			if i == most {
				t.Logf("  … %d more", len(ls)-i)
				break
			}
			t.Logf("  %s: %s", what, s)
		}
	}
	show("unexplained", unexplained, 40)
	show("unexplained, in kube-proxy's lag after the first ready endpoint", lagged, 3)
	show("unexplained, begun before the Service's first endpoint event", early, 3)
	show("not on the pod that served it", wrongPod, 40)
	show("served by a pod the kernel recorded nothing of the connection for", noRecord, 40)
	show("refused without a ready endpoint, yet", badNoReady, 40)
	show("at deletion, not in the deleted disruption", badDeletion, 40)

	if total == 0 || total != sum.Stored {
		t.Errorf("the analysis saw %d of the client's %d stored failures, want all, and some", total, sum.Stored)
	}
	if noReady == 0 {
		t.Error("the client saw no refusal before the Services had a ready endpoint; it must load each Service from its creation")
	}
	if atDeletion == 0 {
		t.Error("the client saw no failure at the Deployments' deletion")
	}
	// Refusals at a Service's start count like every other failure: those
	// begun before the watcher's first endpoint event are judged from the
	// Service's creation, and those within kube-proxy's lag after the first
	// ready endpoint (its --min-sync-period, the analysis's ProxyLag) are
	// "no ready endpoints" too. Both kinds are still counted apart above.
	if 100*named < 95*total {
		t.Errorf("%d of %d of the client's failures have a named cause (%.1f%%), want at least 95%%", named, total, pct(named, total))
	}
	// Every failure the store holds evidence for goes on the pod that
	// served it; one whose connection the kernel left no record of at
	// all may go on none, but such gaps must stay rare.
	if len(wrongPod) > 0 {
		t.Errorf("%d of %d failures on a connection a pod had answered are attributed to another pod or to none despite the kernel's record, want none", len(wrongPod), served)
	}
	if 50*len(noRecord) > served {
		t.Errorf("%d of %d failures on a connection a pod had answered have no pod-side kernel record of that connection, want at most 2%%", len(noRecord), served)
	}
	if noReadyOK != noReady {
		t.Errorf("%d of %d refusals before the Service had a ready endpoint are no ready endpoints, want all", noReadyOK, noReady)
	}
	if atDeletionOK != atDeletion {
		t.Errorf("%d of %d failures at a Deployment's deletion belong to its deleted disruption, want all", atDeletionOK, atDeletion)
	}
}

func runName(or *ownRun) string {
	if or == nil {
		return "no run"
	}
	return or.name
}

func podName(p *analysis.PodView) string {
	if p == nil {
		return ""
	}
	return p.Name
}

func neighbours(af analysis.AlignedFailure) string {
	s := ""
	if af.Before != nil {
		s += fmt.Sprintf("; before %s %s", offset(af.Before.Offset), af.Before.Event.Summary)
	}
	if af.After != nil {
		s += fmt.Sprintf("; after %s %s", offset(af.After.Offset), af.After.Event.Summary)
	}
	return s
}
