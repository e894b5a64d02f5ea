package agent_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/lab/cgroup"
	"github.com/drainscope/drainscope/lab/netns"
	"github.com/drainscope/drainscope/lab/scenario"
	"github.com/drainscope/drainscope/store"
)

// The agent's whole cost, measured as a user pays it: `drainscope agent`
// running as a process on the lab's node (real control plane, kube-proxy,
// pods as processes in their own network namespaces and kubelet-shaped
// cgroups), recording into a SQLite store with its kernel capture and
// /metrics on (scraped every 5 s), under HTTP load through a Service's
// ClusterIP. Run as root:
//
//	go test ./agent -run '^$' -bench AgentCost -benchtime 1x -timeout 60m
//	go test ./agent -run '^$' -bench AgentIdle -benchtime 1x -timeout 30m
//
// DRAINSCOPE_BENCH_PAIRS (default 20) and DRAINSCOPE_BENCH_DURATION_MS
// (default 5000) set the rounds.

func benchInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// costLab brings up the lab without its own kernel capture (the agent
// under test is the only one) and returns it with the pods' cgroup root.
func costLab(b *testing.B) (*scenario.Cluster, cgroup.Tree, string) {
	if err := scenario.Preflight(""); err != nil {
		testenv.Unavailable(b, err.Error())
	}
	tree, err := cgroup.Detect()
	if err != nil {
		testenv.Unavailable(b, err.Error())
	}
	labStore, err := store.OpenSQLite(context.Background(), filepath.Join(b.TempDir(), "lab.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { labStore.Close() })
	exe, err := buildOnce()
	if err != nil {
		b.Fatal(err)
	}
	c, err := scenario.Up(context.Background(), scenario.Options{AppCommand: []string{exe, "lab", "sampleapp"},
		Store: labStore, NoKernel: true, WaitForLock: true, Log: testLogger(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Down)
	podRoot := filepath.Join(tree.Root(), "kubepods")
	if err := os.MkdirAll(podRoot, 0o755); err != nil {
		b.Fatal(err)
	}
	return c, tree, podRoot
}

// costAgent is `drainscope agent` in a cgroup of its own.
type costAgent struct {
	cmd   *exec.Cmd
	group *cgroup.Group
	url   string
	log   *syncBuffer
	done  chan error
	stop  chan struct{}
	wg    sync.WaitGroup
}

func startCostAgent(b *testing.B, c *scenario.Cluster, tree cgroup.Tree, podRoot, name string, args ...string) *costAgent {
	exe, err := buildOnce()
	if err != nil {
		b.Fatal(err)
	}
	g, err := cgroup.Create(filepath.Join(tree.Root(), "bench-"+name))
	if err != nil {
		b.Fatal(err)
	}
	addr := freePort(b)
	a := &costAgent{group: g, url: "http://" + addr, log: &syncBuffer{}, done: make(chan error, 1), stop: make(chan struct{})}
	a.cmd = exec.Command(exe, "agent", "--metrics-listen="+addr, "--kubeconfig="+c.CP.Kubeconfig(),
		"--cgroup-root="+podRoot, "--netns-dir="+netns.RunDir, "--netns-glob="+netns.Prefix+"-*",
		"--store=sqlite:"+filepath.Join(b.TempDir(), "agent.db"))
	a.cmd.Args = append(a.cmd.Args, args...)
	a.cmd.Env = append(os.Environ(), "NODE_NAME="+scenario.NodeName, "POD_NAMESPACE=drainscope")
	a.cmd.Stderr = a.log
	a.cmd.SysProcAttr = &syscall.SysProcAttr{}
	g.Place(a.cmd.SysProcAttr)
	if err := a.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() { a.done <- a.cmd.Wait() }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if resp, err := http.Get(a.url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			a.kill()
			b.Fatalf("the agent was not ready within 2 minutes:\n%s", tail(a.log.String(), 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Prometheus's part: a scrape every 5 s.
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-a.stop:
				return
			case <-t.C:
				if resp, err := http.Get(a.url + "/metrics"); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}
	}()
	return a
}

// metrics reads the agent's /metrics once.
func (a *costAgent) metrics() string {
	resp, err := http.Get(a.url + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// stored is how many events the agent's store writer has written.
func (a *costAgent) stored() float64 {
	v, _ := metricValue(a.metrics(), "drainscope_store_events_written_total")
	return v
}

func (a *costAgent) kill() {
	close(a.stop)
	a.wg.Wait()
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(time.Minute):
		a.cmd.Process.Kill()
		<-a.done
	}
	a.group.Close()
	cgroup.Remove(a.group.Path, 10*time.Second)
}

// rss is the agent's resident memory.
func (a *costAgent) rss() int64 {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.cmd.Process.Pid))
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// cgroupCPU is the CPU time (user and system) charged to a cgroup tree.
func cgroupCPU(b *testing.B, dir string) time.Duration {
	f, err := os.Open(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "usage_usec "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return time.Duration(n) * time.Microsecond
		}
	}
	b.Fatalf("%s/cpu.stat has no usage_usec", dir)
	return 0
}

// loadRound runs the load client as a process in its own cgroup for d and
// returns the requests it completed and the CPU the client, the pods and
// (when agent is set) the agent used meanwhile.
func loadRound(b *testing.B, client *cgroup.Group, podRoot string, agent *costAgent, target string, keepAlive bool, d time.Duration) (int64, time.Duration) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestCostLoadChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DRAINSCOPE_COST_TARGET="+target, "DRAINSCOPE_COST_KEEPALIVE="+strconv.FormatBool(keepAlive),
		"DRAINSCOPE_COST_MS="+strconv.FormatInt(d.Milliseconds(), 10))
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	client.Place(cmd.SysProcAttr)
	cpu := func() time.Duration {
		t := cgroupCPU(b, client.Path) + cgroupCPU(b, podRoot)
		if agent != nil {
			t += cgroupCPU(b, agent.group.Path)
		}
		return t
	}
	before := cpu()
	out, err := cmd.CombinedOutput()
	after := cpu()
	if err != nil {
		b.Fatalf("load client: %v\n%s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "cost-requests "); ok {
			var n, failed int64
			fmt.Sscan(v, &n, &failed)
			loadFailures.Add(failed)
			return n, after - before
		}
	}
	b.Fatalf("load client printed no count:\n%s", out)
	return 0, 0
}

// loadFailures counts the requests the load clients saw fail (a dial
// refused or timed out, a status other than 200): each costs CPU and
// serves nothing, so they are printed beside the ratios.
var loadFailures atomic.Int64

// TestCostLoadChild is the load client of BenchmarkAgentCost, in a process
// of its own; it does nothing in a normal run.
func TestCostLoadChild(t *testing.T) {
	target := os.Getenv("DRAINSCOPE_COST_TARGET")
	if target == "" {
		t.Skip("run by BenchmarkAgentCost")
	}
	keepAlive := os.Getenv("DRAINSCOPE_COST_KEEPALIVE") == "true"
	ms, _ := strconv.Atoi(os.Getenv("DRAINSCOPE_COST_MS"))
	const conc = 8
	tr := &http.Transport{DisableKeepAlives: !keepAlive, MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	var n, failed atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(time.Duration(ms) * time.Millisecond)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				resp, err := client.Get(target)
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					n.Add(1)
				} else {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	fmt.Printf("cost-requests %d %d\n", n.Load(), failed.Load())
}

// BenchmarkAgentCost measures the CPU every request costs on the node (the
// load client, the pods' servers and, with it, the agent: user and kernel
// time from their cgroups' cpu.stat) and the requests served, with and
// without the agent, keep-alive and with one connection per request. A
// pair of rounds runs both, in alternating order, back to back; each pair
// gives one ratio, and the benchmark prints the median and the spread
// (p10–p90, min–max) over the pairs, and the machine's load average.
// With a connection per request each pair has a third round, the agent
// with --flight-recorder=false (every connection's close stored), so the
// flight recorder's effect is measured side by side; every agent round
// also gives the events its store writer wrote per 1,000 requests.
func BenchmarkAgentCost(b *testing.B) {
	c, tree, podRoot := costLab(b)
	p := scenario.Profiles["ci"]
	p.Replicas = 4
	ctx := context.Background()
	res, err := scenario.Deploy(ctx, c, scenario.Own, p)
	if err != nil {
		b.Fatal(err)
	}
	target := "http://" + res.ClusterIP.String() + "/"
	client, err := cgroup.Create(filepath.Join(tree.Root(), "bench-client"))
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	pairs := benchInt("DRAINSCOPE_BENCH_PAIRS", 20)
	d := time.Duration(benchInt("DRAINSCOPE_BENCH_DURATION_MS", 5000)) * time.Millisecond
	for _, keepAlive := range []bool{true, false} {
		name := "keepalive"
		if !keepAlive {
			name = "conn-per-request"
		}
		b.Run(name, func(b *testing.B) {
			// The agent as it ships (flight recorder on), and, with a
			// connection per request, the same agent storing every
			// connection's close (--flight-recorder=false), each against
			// no agent in the same pair.
			variants := []costVariant{{name: "agent"}}
			if !keepAlive {
				variants = append(variants, costVariant{name: "agent --flight-recorder=false", args: []string{"--flight-recorder=false"}})
			}
			var rateRatio []float64
			load0 := loadAvg()
			loadFailures.Store(0)
			for i := 0; i < pairs; i++ {
				var nOff int64
				var cOff time.Duration
				type onRound struct {
					n      int64
					cpu    time.Duration
					stored float64
				}
				ons := make([]onRound, len(variants))
				rounds := []func(){func() { nOff, cOff = loadRound(b, client, podRoot, nil, target, keepAlive, d) }}
				for v := range variants {
					rounds = append(rounds, func() {
						a := startCostAgent(b, c, tree, podRoot, "agent", variants[v].args...)
						time.Sleep(time.Second) // past the start's own work
						before := a.stored()
						n, cpu := loadRound(b, client, podRoot, a, target, keepAlive, d)
						time.Sleep(500 * time.Millisecond) // the writer's flush interval, twice
						ons[v] = onRound{n, cpu, a.stored() - before}
						if i == 0 {
							b.Logf("%s: /metrics after the first round: %s", variants[v].name, pipelineLine(a.metrics()))
						}
						a.kill()
					})
				}
				// Rotate the order, so that no variant always runs first.
				for k := range rounds {
					rounds[(i+k)%len(rounds)]()
				}
				for v, on := range ons {
					if on.n == 0 || nOff == 0 {
						b.Fatalf("pair %d: %d requests with the %s, %d without", i, on.n, variants[v].name, nOff)
					}
					pOn, pOff := float64(on.cpu)/float64(on.n), float64(cOff)/float64(nOff)
					vr := &variants[v]
					vr.perOn, vr.perOff = append(vr.perOn, pOn), append(vr.perOff, pOff)
					vr.cpuRatio = append(vr.cpuRatio, pOn/pOff)
					vr.storedPerK = append(vr.storedPerK, 1000*on.stored/float64(on.n))
					if v == 0 {
						rateRatio = append(rateRatio, float64(on.n)/float64(nOff))
					}
				}
			}
			b.ReportMetric(quant(variants[0].cpuRatio, 0.5), "cpu/req-ratio")
			b.ReportMetric(quant(rateRatio, 0.5), "req/s-ratio")
			b.ReportMetric(quant(variants[0].storedPerK, 0.5), "stored/1k-req")
			for _, v := range variants {
				b.Logf("%s, %s, %d pairs of %v (load average %s at the start, %s at the end): CPU per request with the %s ÷ without: median %.4f (p10–p90 %.4f–%.4f, min–max %.4f–%.4f); %.1f µs vs %.1f µs per request (medians); stored events per 1,000 requests: median %.1f (min–max %.1f–%.1f)",
					name, v.name, pairs, d, load0, loadAvg(), v.name, quant(v.cpuRatio, 0.5), quant(v.cpuRatio, 0.1), quant(v.cpuRatio, 0.9), slices.Min(v.cpuRatio), slices.Max(v.cpuRatio),
					quant(v.perOn, 0.5)/1e3, quant(v.perOff, 0.5)/1e3, quant(v.storedPerK, 0.5), slices.Min(v.storedPerK), slices.Max(v.storedPerK))
			}
			b.Logf("%s: requests served with the agent ÷ without: median %.4f (p10–p90 %.4f–%.4f); %d requests failed in all rounds; conntrack %s entries at the end",
				name, quant(rateRatio, 0.5), quant(rateRatio, 0.1), quant(rateRatio, 0.9), loadFailures.Load(), conntrack())
		})
	}
}

// costVariant is one way of running the agent in BenchmarkAgentCost,
// with its figures over the pairs.
type costVariant struct {
	name                                string
	args                                []string
	cpuRatio, perOn, perOff, storedPerK []float64
}

// BenchmarkAgentIdle measures the agent's cost on a node with 100 tracked
// pods and no traffic: its CPU (millicores, from its cgroup) over
// DRAINSCOPE_BENCH_IDLE_S (default 60) seconds once it is ready and its
// resident memory at the end, in DRAINSCOPE_BENCH_IDLE_RUNS (default 3)
// runs.
func BenchmarkAgentIdle(b *testing.B) {
	c, tree, podRoot := costLab(b)
	p := scenario.Profiles["ci"]
	p.Replicas = 100
	if _, err := scenario.Deploy(context.Background(), c, scenario.Own, p); err != nil {
		b.Fatal(err)
	}
	d := time.Duration(benchInt("DRAINSCOPE_BENCH_IDLE_S", 60)) * time.Second
	runs := benchInt("DRAINSCOPE_BENCH_IDLE_RUNS", 3)
	var mc, rss []float64
	for range runs {
		a := startCostAgent(b, c, tree, podRoot, "idle")
		time.Sleep(5 * time.Second) // the start's own work: caches, BPF load, cgroup index
		before, t0 := cgroupCPU(b, a.group.Path), time.Now()
		time.Sleep(d)
		used, took := cgroupCPU(b, a.group.Path)-before, time.Since(t0)
		mc = append(mc, 1000*used.Seconds()/took.Seconds())
		rss = append(rss, float64(a.rss())/(1<<20))
		if len(mc) == 1 {
			b.Logf("agent /metrics: %s", pipelineLine(a.metrics()))
		}
		a.kill()
	}
	b.ReportMetric(quant(mc, 0.5), "millicores")
	b.ReportMetric(quant(rss, 0.5), "rss-MiB")
	b.Logf("idle with %d tracked pods, %d runs of %v (load average %s): CPU median %.2f millicores (%.2f–%.2f), RSS median %.1f MiB (%.1f–%.1f)",
		p.Replicas, runs, d, loadAvg(), quant(mc, 0.5), slices.Min(mc), slices.Max(mc), quant(rss, 0.5), slices.Min(rss), slices.Max(rss))
}

// pipelineLine picks the agent's event counters out of its /metrics.
func pipelineLine(body string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		for _, m := range []string{"drainscope_events_observed_total", "drainscope_events_stored_total", "drainscope_events_dropped_total", "drainscope_kernel_records", "drainscope_flight_events_total"} {
			if strings.HasPrefix(l, m) {
				out = append(out, l)
			}
		}
	}
	return strings.Join(out, "; ")
}

func quant(v []float64, q float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1)+0.5)]
}

func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}

// conntrack says how full the kernel's connection tracking table is: a
// connection per request fills it (entries stay 120 s after the close),
// and once full new connections are dropped.
func conntrack() string {
	n, _ := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_count")
	m, _ := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_max")
	return strings.TrimSpace(string(n)) + " of " + strings.TrimSpace(string(m))
}
