package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/pgtest"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/lab/cgroup"
	"github.com/drainscope/drainscope/lab/netns"
	"github.com/drainscope/drainscope/lab/scenario"
	"github.com/drainscope/drainscope/store"
)

// buildDir holds the drainscope binary the tests build; TestMain removes it.
var buildDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// buildOnce builds the command once per test binary.
var buildOnce = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "drainscope-agent-test-")
	if err != nil {
		return "", err
	}
	buildDir = dir
	exe := filepath.Join(dir, "drainscope")
	// The flags of deploy/Dockerfile (and its test): one build cache entry.
	ldflags := "-s -w"
	if os.Getenv("DRAINSCOPE_TEST_SYMBOLS") != "" {
		ldflags = "" // symbols for perf, when profiling the agent's process
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", exe, "../cmd/drainscope")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building drainscope: %v\n%s", err, out)
	}
	return exe, nil
})

// agentProc is `drainscope agent` started as the DaemonSet starts it: its
// node name, its store DSN, its metrics port, SIGTERM to stop.
type agentProc struct {
	cmd    *exec.Cmd
	url    string
	stderr *syncBuffer
	done   chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freePort(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func startAgentProc(t *testing.T, exe string, env []string, args ...string) *agentProc {
	t.Helper()
	addr := freePort(t)
	p := &agentProc{url: "http://" + addr, stderr: &syncBuffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(exe, append([]string{"agent", "--metrics-listen=" + addr}, args...)...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("agent %s log (tail):\n%s", args, tail(p.stderr.String(), 30))
		}
	})
	return p
}

// startServeProc starts `drainscope serve` on dsn with its metrics on a
// port of their own, as the chart runs it.
func startServeProc(t *testing.T, exe, dsn string, args ...string) *agentProc {
	t.Helper()
	addr := freePort(t)
	p := &agentProc{url: "http://" + addr, stderr: &syncBuffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(exe, append([]string{"serve", "--listen=127.0.0.1:0", "--metrics-listen=" + addr, "--store=" + dsn}, args...)...)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("server log (tail):\n%s", tail(p.stderr.String(), 30))
		}
	})
	waitFor(t, time.Minute, "the server's /metrics", func() bool { code, _ := p.get("/metrics"); return code == 200 })
	return p
}

func (p *agentProc) get(path string) (int, string) {
	resp, err := http.Get(p.url + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// stop sends SIGTERM, as the kubelet does, and returns the counters the
// agent logged when it had flushed.
func (p *agentProc) stop(t *testing.T) map[string]int64 {
	t.Helper()
	st, err := p.stopErr()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// stopErr is stop for any goroutine: it returns what went wrong.
func (p *agentProc) stopErr() (map[string]int64, error) {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			return nil, fmt.Errorf("agent exited with %v:\n%s", err, tail(p.stderr.String(), 20))
		}
	case <-time.After(time.Minute):
		return nil, errors.New("agent did not stop within a minute of SIGTERM")
	}
	return stoppedStats(p.stderr.String())
}

var statRE = regexp.MustCompile(`(received|written|dropped|pending|write_failures)=(\d+)`)

func stoppedStats(log string) (map[string]int64, error) {
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		if !strings.Contains(sc.Text(), `msg="agent stopped"`) {
			continue
		}
		out := map[string]int64{}
		for _, m := range statRE.FindAllStringSubmatch(sc.Text(), -1) {
			out[m[1]], _ = strconv.ParseInt(m[2], 10, 64)
		}
		return out, nil
	}
	return nil, fmt.Errorf("the agent logged no \"agent stopped\" line:\n%s", tail(log, 20))
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// metricValue sums the samples of a metric whose label text contains all
// of the given fragments.
func metricValue(body, name string, fragments ...string) (float64, bool) {
	sum, found := 0.0, false
	for _, l := range strings.Split(body, "\n") {
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		ok := true
		for _, f := range fragments {
			ok = ok && strings.Contains(l, f)
		}
		if !ok {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
			found = true
		}
	}
	return sum, found
}

// progressHook watches the lab's progress lines and calls fn once on the
// first line containing match.
type progressHook struct {
	t     *testing.T
	match string
	fn    func()
	once  sync.Once
}

func (h *progressHook) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		h.t.Log("lab: " + l)
		if strings.Contains(l, h.match) {
			h.once.Do(h.fn)
		}
	}
	return len(p), nil
}

// TestAgentInTheLab starts the drainscope binary's agent the way the
// DaemonSet runs it, on the lab's node, while the lab rolls out a
// Deployment whose pods exit at SIGTERM under keep-alive load. Postgres is
// unreachable for 30 s from the start of the rollout. The agent stores
// every event it produced once the database is back, and the server's
// /metrics show the rollout signals of the workload, computed from the
// store; a second agent with a 200-event buffer drops the excess and
// reports exactly how many, in its coverage spans too. During the same
// rollout the API server is frozen for 20 s and a third agent is
// SIGKILLed and started again, a fourth upgraded (SIGTERM, then started
// again) at the same time; checkFaults compares each agent's record
// with the test's own watch of the transitions the API server made, and
// the analysis of the killed agent's record with its gap. These are the
// rows of docs/reliability.md's table.
func TestAgentInTheLab(t *testing.T) {
	if err := scenario.Preflight(""); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	dsn, dsnSmall, dsnKill, dsnUp := pgtest.Schema(t), pgtest.Schema(t), pgtest.Schema(t), pgtest.Schema(t)
	px, pxSmall := pgtest.NewProxy(t, dsn), pgtest.NewProxy(t, dsnSmall)
	exe, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	tree, err := cgroup.Detect()
	if err != nil {
		testenv.Unavailable(t, err.Error())
	}
	labStore, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "lab.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer labStore.Close()

	const outage = 30 * time.Second
	var outageStart time.Time
	restarted := make(chan struct{})
	// More faults during the same rollout: the API server frozen
	// (SIGSTOP) for 20 s from 1.5 s in; then a fourth agent upgraded and
	// a third SIGKILLed and started again 4 s later.
	var (
		c        *scenario.Cluster
		tw       *transitionWatch
		killed   *agentProc
		upgraded *agentProc
		killArgs []string
		killEnv  []string
		upEnv    []string
		f        faultTimes
		faultsMu sync.Mutex
		faults   = make(chan struct{})
	)
	hook := &progressHook{t: t, match: "rollout started", fn: func() {
		px.Stop()
		pxSmall.Stop()
		outageStart = time.Now()
		tw.countFrom(outageStart)
		t.Logf("Postgres unreachable from now for %v", outage)
		time.AfterFunc(outage, func() {
			px.Start()
			pxSmall.Start()
			t.Logf("Postgres reachable again after %.1fs", time.Since(outageStart).Seconds())
			close(restarted)
		})
		go func() {
			defer close(faults)
			// The API server frozen mid-rollout (the first old pod
			// leaves about 1 s in), then, once the rollout goes on,
			// one agent SIGKILLed and started again 4 s later.
			time.Sleep(1500 * time.Millisecond)
			f.pauseAt = time.Now()
			t.Logf("kube-apiserver SIGSTOPped for 20s")
			if err := c.CP.PauseAPIServer(20 * time.Second); err != nil {
				t.Errorf("pausing the API server: %v", err)
			}
			f.resumeAt = time.Now()
			t.Logf("kube-apiserver SIGCONTed after %.1fs", f.resumeAt.Sub(f.pauseAt).Seconds())
			time.Sleep(time.Second)
			// The fourth agent upgraded, as its DaemonSet's rolling
			// update does: SIGTERM (it flushes), the new one started.
			f.upgradeAt = time.Now()
			if st, err := upgraded.stopErr(); err != nil {
				t.Errorf("upgrading: %v", err)
			} else {
				f.upgradeStats = st
			}
			faultsMu.Lock()
			upgraded = startAgentProc(t, exe, upEnv, killArgs...)
			faultsMu.Unlock()
			f.upgradedAt = time.Now()
			faultsMu.Lock()
			f.lastScrape = scrapeWritten(killed)
			f.killAt = time.Now()
			killed.cmd.Process.Kill()
			<-killed.done
			faultsMu.Unlock()
			t.Logf("agent %q SIGKILLed; %s before", "killed", f.lastScrape)
			time.Sleep(4 * time.Second)
			faultsMu.Lock()
			f.restartAt = time.Now()
			killed = startAgentProc(t, exe, killEnv, killArgs...)
			faultsMu.Unlock()
		}()
	}}

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, err = scenario.Up(ctx, scenario.Options{
		AppCommand:  []string{exe, "lab", "sampleapp"},
		Store:       labStore,
		WaitForLock: true,
		Log:         testLogger(t),
		Progress:    hook,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Down()

	// The kubelet makes the pods' parent cgroup before any pod; the lab node
	// makes it with the first pod, after the agents start.
	podRoot := filepath.Join(tree.Root(), "kubepods")
	if err := os.MkdirAll(podRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	// As the DaemonSet runs it: node name from the environment, the store
	// DSN from the environment, the kubeconfig in place of the in-cluster
	// service account, the lab's pod cgroups and namespaces.
	common := []string{
		"--kubeconfig=" + c.CP.Kubeconfig(),
		"--cgroup-root=" + podRoot,
		"--netns-dir=" + netns.RunDir, "--netns-glob=" + netns.Prefix + "-*",
		"--flush-interval=100ms", "--shutdown-timeout=30s", "--coverage-interval=1s",
	}
	env := func(dsn string) []string {
		return []string{"NODE_NAME=" + scenario.NodeName, "POD_NAMESPACE=drainscope", "DRAINSCOPE_STORE=" + dsn}
	}
	// The test's own watch, to count the transitions the API server made.
	tw = startTransitionWatch(t, c.CP.Client())
	big := startAgentProc(t, exe, env(px.DSN(dsn)), append(common, "--buffer-events=1000000")...)
	small := startAgentProc(t, exe, env(pxSmall.DSN(dsnSmall)), append(common, "--buffer-events=200")...)
	killEnv, killArgs, upEnv = env(dsnKill), append(common, "--buffer-events=1000000"), env(dsnUp)
	killed = startAgentProc(t, exe, killEnv, killArgs...)
	upgraded = startAgentProc(t, exe, upEnv, killArgs...)
	for _, a := range []*agentProc{big, small, killed, upgraded} {
		waitFor(t, 2*time.Minute, "the agent's /readyz", func() bool { code, _ := a.get("/readyz"); return code == 200 })
	}
	// The server computes the rollout signals from the store. Its delay
	// outlasts the outage: the agents store those events ~35 s late.
	server := startServeProc(t, exe, dsn, "--signals-after=5s", "--signals-delay=60s")

	p := scenario.Profiles["ci"]
	p.Name, p.Duration, p.RolloutAt = "agent-test", 70*time.Second, 5*time.Second
	runs, _ := scenario.SelectRuns("exit")
	results, err := scenario.Execute(ctx, c, scenario.Config{Profile: p, Runs: runs, Progress: hook, Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-restarted:
	case <-time.After(2 * time.Minute):
		t.Fatal("the outage never ended")
	}
	<-faults
	res := results[0]
	t.Logf("lab run: %s", res.Summary())
	runEnd := time.Now()
	tw.countUntil(runEnd)
	faultsMu.Lock()
	killedNow, upgradedNow := killed, upgraded
	faultsMu.Unlock()
	for _, a := range []*agentProc{killedNow, upgradedNow} {
		waitFor(t, 2*time.Minute, "the restarted agents' /readyz", func() bool { code, _ := a.get("/readyz"); return code == 200 })
	}

	// Let the agents catch up, then read their metrics as Prometheus would.
	waitFor(t, 2*time.Minute, "the agents' backlog to drain", func() bool {
		_, b1 := big.get("/metrics")
		v, ok := metricValue(b1, "drainscope_store_backlog_events")
		return ok && v == 0
	})
	_, smallBody := small.get("/metrics")
	_, agentBody := big.get("/metrics")
	if strings.Contains(agentBody, "drainscope_rollout_pod_terminations_total{") {
		t.Errorf("the agent exports rollout signals; the server computes them")
	}
	wl := `workload="Deployment/sample-exit"`
	// A pod's signals are reported 5 s after its last event, once the
	// server's 60 s delay has passed.
	var body string
	waitFor(t, 3*time.Minute, "the server's rollout signals", func() bool {
		_, body = server.get("/metrics")
		v, _ := metricValue(body, "drainscope_rollout_pod_terminations_total", wl)
		return v >= 4
	})
	for _, m := range []string{
		"drainscope_rollout_pod_terminations_total",
		"drainscope_rollout_sigterm_minus_endpoint_removal_seconds_count",
		"drainscope_rollout_connections_cut_at_exit_total",
		"drainscope_rollout_inferred_failures_total",
	} {
		v, _ := metricValue(body, m, wl)
		t.Logf("%s{%s} = %v", m, wl, v)
		if v == 0 {
			t.Errorf("%s{%s} is zero after a rollout with the exit behaviour", m, wl)
		}
	}
	// Pods that exit at SIGTERM get it before the endpoint leaves rotation:
	// the endpoint-removal race DrainscopeEndpointRemovalRace alerts on.
	raced, _ := metricValue(body, "drainscope_rollout_sigterm_minus_endpoint_removal_seconds_bucket", wl, `le="0"`)
	gapSum, _ := metricValue(body, "drainscope_rollout_sigterm_minus_endpoint_removal_seconds_sum", wl)
	t.Logf("pods with SIGTERM at or before their endpoint left rotation: %v; summed gap %.3fs", raced, gapSum)
	if raced == 0 {
		t.Errorf("no pod got SIGTERM before its endpoint left rotation, in a run whose pods exit at SIGTERM")
	}
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "drainscope_rollout_inferred_failures_total{") || strings.HasPrefix(l, "drainscope_rollout_sigterm_minus_endpoint_removal_seconds_bucket{") {
			t.Log(l)
		}
	}
	// The flight recorder: the rollout's connection closes stored (handed
	// on from the ring at a trigger, or passed during the disruption), and
	// its per-pod counts served.
	held, _ := metricValue(agentBody, "drainscope_flight_events_total", `outcome="held"`)
	persisted, _ := metricValue(agentBody, "drainscope_flight_events_total", `outcome="persisted"`)
	passed, _ := metricValue(agentBody, "drainscope_flight_events_total", `outcome="passed"`)
	discarded, _ := metricValue(agentBody, "drainscope_flight_events_total", `outcome="discarded"`)
	t.Logf("flight recorder: held %v, persisted %v, discarded %v, passed %v", held, persisted, discarded, passed)
	if persisted+passed == 0 {
		t.Errorf("the flight recorder stored no connection close during a rollout")
	}
	if code, body := big.get("/debug/flight"); code != 200 || !strings.Contains(body, `"enabled":true`) || !strings.Contains(body, `"total":{"held":`) {
		t.Errorf("/debug/flight: %d %s", code, body)
	}
	if v, _ := metricValue(agentBody, "drainscope_store_write_failures_total"); v == 0 {
		t.Errorf("no failed store write reported during the outage")
	}

	// Produced = stored for the agent whose buffer outlasted the outage.
	st := big.stop(t)
	stored, byKind := countStored(t, dsn)
	t.Logf("agent (buffer 1,000,000): produced %d, stored %d, dropped %d, failed writes %d; stored by kind %v",
		st["received"], stored, st["dropped"], st["write_failures"], byKind)
	if st["dropped"] != 0 || st["pending"] != 0 || int64(stored) != st["received"] || st["received"] == 0 {
		t.Errorf("produced %d, stored %d, dropped %d, pending %d: want every produced event stored", st["received"], stored, st["dropped"], st["pending"])
	}
	for _, k := range []event.Kind{event.PodDeletion, event.EndpointTerminating, event.EndpointRemoved, event.ContainerTerminated,
		event.Signal, event.ProcessExit, event.ConnClosed, event.ListenerClosed} {
		if byKind[k] == 0 {
			t.Errorf("no %s event stored", k)
		}
	}

	// The small buffer: drops counted, reported, and the rest stored.
	ss := small.stop(t)
	storedSmall, _ := countStored(t, dsnSmall)
	reported, _ := metricValue(smallBody, "drainscope_events_dropped_total", `reason="buffer_full"`)
	t.Logf("agent (buffer 200): produced %d, stored %d, dropped %d (metrics before shutdown: %v)", ss["received"], storedSmall, ss["dropped"], reported)
	if ss["dropped"] == 0 || int64(storedSmall) != ss["received"]-ss["dropped"] || reported == 0 {
		t.Errorf("small buffer: produced %d, stored %d, dropped %d, reported %v: want drops past the bound counted and reported, the rest stored",
			ss["received"], storedSmall, ss["dropped"], reported)
	}

	ks := killedNow.stop(t)
	us := upgradedNow.stop(t)
	checkFaults(t, faultRun{
		c: c, tw: tw, f: f, from: outageStart, to: runEnd, labStore: labStore,
		big: dsn, small: dsnSmall, killed: dsnKill, upgraded: dsnUp, bigStats: st, smallStats: ss, killedSt: ks, upgradedSt: us,
	})
}
