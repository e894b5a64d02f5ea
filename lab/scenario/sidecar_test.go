package scenario_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/analysis/textreport"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/lab/sampleapp"
	"github.com/drainscope/drainscope/lab/scenario"
	"github.com/drainscope/drainscope/store"
)

// TestLabSidecar runs the sidecar profile's three runs on the real node,
// on one cluster, with shorter loads than the profile's, and checks what
// the lab knows for certain: every pod held the app, the proxy and the
// redirect; the classic proxy's exit at SIGTERM drops requests and the
// native and draining proxies drop none or very few; the kernel's records
// of the proxy's signal and exit carry its container ID, after the app's
// exit where the kubelet orders it so; the watcher's container_started
// names the proxy with role app (a regular container) or sidecar (a native
// one); and the analysis names the classic proxy's exit before its app,
// on the right pods and containers, and no proxy exit in the other runs
// (checkSidecarCauses).
func TestLabSidecar(t *testing.T) {
	requireRealNode(t, "the sidecar profile's runs on the real node take three to six minutes")
	if err := scenario.PreflightSidecar(); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute) // the lab lock may be held for a while
	defer cancel()
	before := hostState(t) // before the lab lock: see checkNothingLeft
	lab := upRealNode(ctx, t, true)
	c, st, log := lab.c, lab.st, lab.log
	downed := false
	defer func() {
		if !downed {
			c.Down()
		}
	}()
	start := time.Now()
	p := scenario.Profiles["sidecar"]
	// Long enough for the last replaced pod's end: on this machine its
	// deletion came up to 30 s into the rollout (each new pod starts an
	// init container, the proxy and the app), the draining proxy leaves
	// 15 s later.
	p.Duration, p.RolloutAt = 45*time.Second, 3*time.Second
	// Before each run's teardown, ask its Service on new connections
	// which address the app saw each come to: the proxy's connection to
	// 127.0.0.1:8080, not the client's to the pod's address.
	seen := map[string]map[string]int{}
	teardown := func(r scenario.RunResult) { seen[r.Run.Name] = appAddresses(ctx, t, c, r) }
	results, err := scenario.Execute(ctx, c, scenario.Config{Profile: p, Runs: scenario.SidecarRuns, Progress: testWriter{t}, Log: log,
		OnTeardown: teardown})
	if err != nil {
		t.Fatal(err)
	}
	for run, addrs := range seen {
		if len(addrs) != 1 || addrs[fmt.Sprintf("127.0.0.1:%d", 8080)] == 0 {
			t.Errorf("%s: the app saw the Service's connections come to %v, want 127.0.0.1:8080 only (through the proxy)", run, addrs)
		}
	}
	c.Sync()
	var table, diag strings.Builder
	_ = scenario.WriteTable(&table, results)
	if err := scenario.Diagnose(ctx, &diag, st, results); err != nil {
		t.Error(err)
	}
	t.Logf("runs (%v):\n%s\n%s", time.Since(start).Round(time.Second), table.String(), diag.String())
	events, err := store.Events(ctx, st, store.Query{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		checkSidecarRun(ctx, t, st, r, events)
	}

	c.Down()
	downed = true
	if left, err := scenario.FindLeftovers(); err != nil || !left.Empty() {
		t.Errorf("left behind after Down: %s (%v)", left, err)
	}
	checkNothingLeft(t, "the sidecar runs", before, hostState(t))
}

// maxQuietFailures is what the native and draining proxies' runs may drop:
// one request per replaced pod, for a timing the lab does not control.
const maxQuietFailures = 4

// checkSidecarRun checks one sidecar run's pods, load and records.
func checkSidecarRun(ctx context.Context, t *testing.T, st store.Store, r scenario.RunResult, events []event.Event) {
	t.Helper()
	name := r.Run.Name
	if len(r.Replaced) != 4 || len(r.New) != 4 {
		t.Errorf("%s: %d pods replaced by %d, want 4 by 4", name, len(r.Replaced), len(r.New))
	}
	failed := r.Load.FailedTotal()
	switch r.Run.Sidecar {
	case scenario.SidecarClassic:
		if failed == 0 {
			t.Errorf("%s: no failed request; the proxy's exit at SIGTERM must cut the clients' connections", name)
		}
	default:
		if failed > maxQuietFailures {
			t.Errorf("%s: %d failed requests (%v), want at most %d", name, failed, r.Load.Failed, maxQuietFailures)
		}
	}
	t.Logf("%s: %d requests, %d failed %v", name, r.Load.Requests, failed, r.Load.Failed)

	wantRole := event.ContainerRoleApp
	if r.Run.Sidecar == scenario.SidecarNative {
		wantRole = event.ContainerRoleSidecar
	}
	for _, pod := range slices.Concat(r.Replaced, r.New) {
		for _, ctr := range []string{"app", scenario.ProxyContainer, scenario.RedirectContainer} {
			if !containerID.MatchString(pod.Containers[ctr]) {
				t.Errorf("%s pod %s: container %s has ID %q: want every pod to hold app, proxy and redirect (%v)", name, pod.Name, ctr, pod.Containers[ctr], pod.Containers)
			}
		}
		proxyID := pod.Containers[scenario.ProxyContainer]
		started := false
		for _, e := range events {
			if e.Pod.UID == pod.UID && e.Kind == event.ContainerStarted && e.Pod.Container == scenario.ProxyContainer {
				started = true
				if got := e.Attrs[event.AttrContainerRole]; got != wantRole || e.Attrs[event.AttrContainerID] != proxyID {
					t.Errorf("%s pod %s: container_started of the proxy with role %q, ID %q; want %q, %s", name, pod.Name, got, e.Attrs[event.AttrContainerID], wantRole, proxyID)
				}
			}
		}
		if !started {
			t.Errorf("%s pod %s: no container_started names the proxy", name, pod.Name)
		}
	}
	for _, pod := range r.Replaced {
		checkProxyEnd(t, r, pod, events)
	}
	res, err := analysis.Analyze(ctx, st, store.Query{
		Window: r.Window(), Namespace: scenario.Namespace,
		Workload: event.Workload{Kind: "Deployment", Name: r.Deployment},
	})
	if err != nil {
		t.Fatal(err)
	}
	var causes []string
	for _, cs := range res.Causes {
		causes = append(causes, fmt.Sprintf("%s %d", cs.Cause, cs.Count))
	}
	t.Logf("%s: analysis: %d client failures, %d explained on a terminating pod; causes: %s", name,
		res.Totals.ClientFailures, res.Totals.ExplainedOnTerminatingPod, strings.Join(causes, ", "))
	checkSidecarCauses(t, r, res)
}

// checkSidecarCauses holds the run's analysis to what the lab knows: in
// the classic run, the failures named are the proxy's exit before its
// app, on the replaced pods, the explanation naming the proxy container
// and the fix the native sidecar (the proxy is none of a mesh's); the
// report lists the pod's containers and the proxy's own end. In the
// native and draining runs the proxy outlived the app, so no failure is
// the proxy's exit.
func checkSidecarCauses(t *testing.T, r scenario.RunResult, res *analysis.Result) {
	t.Helper()
	name := r.Run.Name
	// Each pod's init container (the redirect) runs to completion as the
	// pod starts: no disruption but the rollout (and the Deployment's
	// deletion after it) ends the run's pods, none a container's restart.
	for _, d := range res.Disruptions {
		if d.Trigger != analysis.TriggerRollout && d.Trigger != analysis.TriggerDeleted {
			t.Errorf("%s: a disruption begun by %s (%d pods): want only the rollout and the deletion", name, d.Trigger, len(d.Replaced))
		}
	}
	if n := res.Inference.Inferred; r.Run.Sidecar != scenario.SidecarClassic && n > 0 {
		t.Errorf("%s: %d failures inferred from the kernel's records where the clients saw none", name, n)
	}
	replaced := map[string]bool{}
	for _, p := range r.Replaced {
		replaced[p.Name] = true
	}
	var sidecar *analysis.CauseSummary
	for i, cs := range res.Causes {
		if cs.Cause == analysis.CauseSidecarExit {
			sidecar = &res.Causes[i]
		}
	}
	if r.Run.Sidecar != scenario.SidecarClassic {
		if sidecar != nil {
			t.Errorf("%s: %d failures named the proxy's exit before its app, but the proxy outlived the app: %s", name, sidecar.Count, sidecar.Explanation)
		}
		return
	}
	if sidecar == nil {
		t.Errorf("%s: no failure named the proxy's exit before its app; causes %+v", name, res.Causes)
		return
	}
	// Every failure the analysis names is the proxy's: the app drained.
	for _, cs := range res.Causes {
		if cs.Cause != analysis.CauseSidecarExit && cs.Cause != analysis.CauseUnexplained {
			t.Errorf("%s: %d failures named %s beside the proxy's exit: %s", name, cs.Count, cs.Cause, cs.Explanation)
		}
	}
	if sidecar.Count*10 < r.Load.FailedTotal()*9 {
		t.Errorf("%s: %d of the client's %d failures named the proxy's exit, want at least 90 %%", name, sidecar.Count, r.Load.FailedTotal())
	}
	for _, pc := range sidecar.Pods {
		if _, pod, _ := strings.Cut(pc.Pod, "/"); !replaced[pod] {
			t.Errorf("%s: %d failures put on %s, not a replaced pod", name, pc.Count, pc.Pod)
		}
	}
	if !strings.Contains(sidecar.Fix, "native sidecar") || !strings.Contains(sidecar.Fix, "restartPolicy: Always") {
		t.Errorf("%s: the fix %q is not the native sidecar's", name, sidecar.Fix)
	}
	for _, f := range res.Failures {
		if f.Cause == analysis.CauseSidecarExit && !strings.Contains(f.Explanation, "the container "+scenario.ProxyContainer+",") {
			t.Errorf("%s: the explanation %q does not name the container %s", name, f.Explanation, scenario.ProxyContainer)
			break
		}
	}
	var report strings.Builder
	if err := textreport.WriteText(&report, res); err != nil {
		t.Fatal(err)
	}
	// Each replaced pod's containers, in the order their records came.
	lines := 0
	for _, l := range strings.Split(report.String(), "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "containers: ") {
			continue
		}
		lines++
		// The proxy is marked the inbound proxy once it held a client's
		// connection, which a replaced pod's SIGTERM row below shows.
		for _, part := range []string{scenario.RedirectContainer + " (init container)", "app (the app: serves the Service's port)",
			scenario.ProxyContainer} {
			if !slices.ContainsFunc(strings.Split(strings.TrimPrefix(l, "containers: "), "; "), func(c string) bool {
				return c == part || strings.HasPrefix(c, part+" (")
			}) {
				t.Errorf("%s: the report's %q does not name %q", name, l, part)
			}
		}
	}
	if lines < len(r.Replaced) {
		t.Errorf("%s: %d pods' containers listed in the report, want the %d replaced pods' at least", name, lines, len(r.Replaced))
	}
	for _, want := range []string{
		"SIGTERM to container " + scenario.ProxyContainer + " (the inbound proxy)",
		"container " + scenario.ProxyContainer + " (the inbound proxy) exited",
	} {
		if !strings.Contains(report.String(), want) {
			t.Errorf("%s: the report does not say %q", name, want)
		}
	}
}

// checkProxyEnd checks the kernel's record of a replaced pod's proxy: its
// main process's exit carries its container ID, and so does the runtime's
// SIGTERM to it where SIGTERM stops it. A classic proxy exits before the
// app (SIGTERM at the deletion; the app waits out its preStop sleep); a
// native one is signalled only after the app has exited; the draining one
// is stopped by SIGUSR1 (its image's STOPSIGNAL), which the capture does
// not record (it records SIGTERM, SIGKILL, SIGINT and SIGQUIT, as the
// agent does): no SIGTERM reaches it, and it exits after the app.
func checkProxyEnd(t *testing.T, r scenario.RunResult, pod scenario.PodRecord, events []event.Event) {
	t.Helper()
	proxyID, appID := pod.Containers[scenario.ProxyContainer], pod.Containers["app"]
	var deletion, proxyTerm, proxyExit, appExit int64
	var sender string
	for _, e := range events {
		if e.Pod.UID != pod.UID {
			continue
		}
		if e.Kind == event.PodDeletion && deletion == 0 {
			deletion = e.Time
		}
		if e.Source != event.SourceKernel || deletion == 0 {
			continue // runc's own processes exit in the container's cgroup as it starts
		}
		switch {
		case e.Kind == event.Signal && e.Pod.Container == proxyID && e.PeerPID != e.PID && e.Signal == int32(syscall.SIGTERM) && proxyTerm == 0:
			proxyTerm, sender = e.Time, e.PeerComm
		case e.Kind == event.ProcessExit && e.Flags.Has(event.FlagMain) && e.Pod.Container == proxyID:
			proxyExit = e.Time
		case e.Kind == event.ProcessExit && e.Flags.Has(event.FlagMain) && e.Pod.Container == appID:
			appExit = e.Time
		}
	}
	name := r.Run.Name + " pod " + pod.Name
	switch {
	case deletion == 0:
		t.Errorf("%s: no deletion recorded", name)
		return
	case proxyExit == 0 || appExit == 0:
		t.Errorf("%s: the kernel's exits of the main processes after the deletion: proxy %d, app %d; want both", name, proxyExit, appExit)
		return
	}
	switch r.Run.Sidecar {
	case scenario.SidecarClassic:
		if proxyTerm == 0 {
			t.Errorf("%s: no SIGTERM to the proxy container %.12s recorded by the kernel", name, proxyID)
		}
		if proxyExit > appExit {
			t.Errorf("%s: the classic proxy exited %v after the app, want before", name, time.Duration(proxyExit-appExit))
		}
	case scenario.SidecarNative:
		if proxyTerm == 0 {
			t.Errorf("%s: no SIGTERM to the proxy container %.12s recorded by the kernel", name, proxyID)
		} else if proxyTerm < appExit {
			t.Errorf("%s: the native proxy got SIGTERM %v before the app's exit, want after", name, time.Duration(appExit-proxyTerm))
		}
	case scenario.SidecarDraining:
		if proxyTerm != 0 {
			t.Errorf("%s: SIGTERM to the draining proxy, want its image's SIGUSR1", name)
		}
		if proxyExit < appExit {
			t.Errorf("%s: the draining proxy exited %v before the app, want after", name, time.Duration(appExit-proxyExit))
		}
	}
	term := "none"
	if proxyTerm != 0 {
		term = offset(proxyTerm-deletion) + " from " + sender
	}
	t.Logf("%s: from the deletion: proxy SIGTERM %s, proxy exit %s, app exit %s", name, term, offset(proxyExit-deletion), offset(appExit-deletion))
}

// appAddresses asks r's Service on new connections from the lab's client
// address and counts the local addresses the app answered from
// (sampleapp.HeaderBackend).
func appAddresses(ctx context.Context, t *testing.T, c *scenario.Cluster, r scenario.RunResult) map[string]int {
	d := &net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: c.ClientSource().AsSlice()}}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: d.DialContext, Proxy: nil}}
	out := map[string]int{}
	for range 8 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.ClusterIP.String()+"/", nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Errorf("%s: asking the Service: %v", r.Run.Name, err)
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		out[resp.Header.Get(sampleapp.HeaderBackend)]++
	}
	return out
}
