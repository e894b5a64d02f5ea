package ebpf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/drainscope/drainscope/event"
)

// Run the benchmarks as root, once each:
//
//	go test ./ebpf -run '^$' -bench . -benchtime 1x
//
// DRAINSCOPE_BENCH_DURATION_MS (default 500) and DRAINSCOPE_BENCH_REPS
// (default 15) set the length and number of the HTTP measurement rounds.

func benchEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// loadClient drives url with conc concurrent clients for d and returns the
// requests completed. keepAlive false opens a connection per request (the
// client sends "Connection: close", so the server closes first).
func loadClient(url string, keepAlive bool, conc int, d time.Duration) int64 {
	tr := &http.Transport{DisableKeepAlives: !keepAlive, MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	var n atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for i := 0; i < conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				resp, err := client.Get(url)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	return n.Load()
}

// cpuTime is the CPU time used by this process (client and reader) and by
// the server's cgroup.
func cpuTime(b *testing.B, serverCgroup string) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	self := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	data, err := os.ReadFile(serverCgroup + "/cpu.stat")
	if err != nil {
		b.Fatal(err)
	}
	var usec int64
	fmt.Sscanf(strings.SplitN(string(data), "\n", 2)[0], "usage_usec %d", &usec)
	return self + time.Duration(usec)*time.Microsecond
}

// probeState is one configuration of the overhead benchmark.
type probeState int

const (
	probesOff probeState = iota
	probesUntracked
	probesTracked
)

func (s probeState) String() string {
	return [...]string{"off", "untracked", "tracked"}[s]
}

// quantile returns the q-quantile of v (nearest rank).
func quantile(v []float64, q float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[int(q*float64(len(v)-1)+0.5)]
}

// threadCPU returns the CPU time of one thread of this process.
func threadCPU(tid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/schedstat", tid))
	if err != nil {
		return 0
	}
	var ns int64
	fmt.Sscan(string(data), &ns)
	return time.Duration(ns)
}

// BenchmarkHTTPOverhead measures a loopback HTTP server in its own cgroup,
// without the probes, with the probes attached but the server's cgroup
// untracked, and with it tracked (its events read by a Run loop in this
// process), for keep-alive and connection-per-request traffic.
//
// Throughput: each round runs the three states back to back (in rotating
// order) and yields one ratio per state; the benchmark reports the median
// and the interquartile range over the rounds, which shows how much other
// load on the machine disturbed the measurement.
//
// Cost: with BPF run-time statistics on, it then measures per request the
// run time of all programs and the CPU time of the reader's thread, and
// relates them to the CPU time a request costs without probes (this
// process plus the server's cgroup): the throughput ratio a CPU-bound
// server would see, which is robust against other load.
func BenchmarkHTTPOverhead(b *testing.B) {
	p := newTestPod(b, false)
	h := p.start(b, "serve", "DRAINSCOPE_HELPER_ADDR=127.0.0.1:0", "DRAINSCOPE_HELPER_ON_TERM=exit")
	url := "http://" + h.Ready + "/"
	d := time.Duration(benchEnv("DRAINSCOPE_BENCH_DURATION_MS", 500)) * time.Millisecond
	reps := benchEnv("DRAINSCOPE_BENCH_REPS", 15)
	conc := 4

	// One collector for the whole run, its reader always running on a
	// thread of its own: the states differ only in attached programs and
	// the tracked set, so no loading (and no garbage from parsing kernel
	// BTF) falls into a round.
	c := openCollector(b, Config{Node: "bench"})
	var delivered atomic.Uint64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	tidc := make(chan int, 1)
	go func() {
		runtime.LockOSThread()
		tidc <- syscall.Gettid()
		c.Run(ctx, func(*event.Event) { delivered.Add(1) })
		close(done)
	}()
	readerTID := <-tidc
	defer func() { cancel(); <-done }()
	setState := func(state probeState) {
		var err error
		switch state {
		case probesOff:
			err = errors.Join(c.detach(), c.Untrack(p.PodCgroupID))
		case probesUntracked:
			err = errors.Join(c.Untrack(p.PodCgroupID), c.attach())
		case probesTracked:
			err = errors.Join(c.Track(p.PodCgroupID), c.attach())
		}
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
	}

	type sample struct {
		n    int64
		wall time.Duration
		cpu  time.Duration // this process and the server's cgroup
	}
	measure := func(ka bool, d time.Duration) sample {
		t0, c0 := time.Now(), cpuTime(b, p.Cgroup)
		n := loadClient(url, ka, conc, d)
		return sample{n, time.Since(t0), cpuTime(b, p.Cgroup) - c0}
	}
	rps := func(s sample) float64 { return float64(s.n) / s.wall.Seconds() }

	type key struct {
		state     probeState
		keepAlive bool
	}
	loadClient(url, true, conc, d/2) // warm up
	b.ResetTimer()
	rounds := map[key][]sample{}
	for rep := 0; rep < reps; rep++ {
		for _, ka := range []bool{true, false} {
			for i := 0; i < 3; i++ {
				state := probeState((i + rep) % 3) // rotate the order each round
				setState(state)
				rounds[key{state, ka}] = append(rounds[key{state, ka}], measure(ka, d))
			}
		}
	}
	b.StopTimer()

	var out strings.Builder
	fmt.Fprintf(&out, "\nloopback HTTP, %d clients, %d rounds of %v per state\n", conc, reps, d)
	fmt.Fprintf(&out, "throughput, median req/s and median [p25-p75] of per-round ratios:\n")
	fmt.Fprintf(&out, "  %-24s %8s %8s %8s   %-22s %-22s\n", "traffic", "off", "untr", "trk", "untracked/off", "tracked/off")
	name := func(ka bool) (string, string) {
		if ka {
			return "keep-alive", "keepalive"
		}
		return "connection-per-request", "connperreq"
	}
	baseCPU := map[bool]float64{} // ns of CPU per request without probes
	for _, ka := range []bool{true, false} {
		label, metric := name(ka)
		var rate, ratio [3][]float64
		var cpuPerReq []float64
		for i, off := range rounds[key{probesOff, ka}] {
			cpuPerReq = append(cpuPerReq, float64(off.cpu.Nanoseconds())/float64(off.n))
			for st := probesOff; st <= probesTracked; st++ {
				s := rounds[key{st, ka}][i]
				rate[st] = append(rate[st], rps(s))
				ratio[st] = append(ratio[st], rps(s)/rps(off))
			}
		}
		baseCPU[ka] = quantile(cpuPerReq, 0.5)
		iqr := func(v []float64) string {
			return fmt.Sprintf("%.3f [%.3f-%.3f]", quantile(v, 0.5), quantile(v, 0.25), quantile(v, 0.75))
		}
		fmt.Fprintf(&out, "  %-24s %8.0f %8.0f %8.0f   %-22s %-22s\n", label, quantile(rate[probesOff], 0.5),
			quantile(rate[probesUntracked], 0.5), quantile(rate[probesTracked], 0.5),
			iqr(ratio[probesUntracked]), iqr(ratio[probesTracked]))
		b.ReportMetric(quantile(ratio[probesUntracked], 0.5), metric+"-untracked/off")
		b.ReportMetric(quantile(ratio[probesTracked], 0.5), metric+"-tracked/off")
	}

	// Cost per request, with run-time statistics on (they add two clock
	// reads per program run, so they stay off while throughput is measured).
	stats, err := EnableRunStats()
	if err != nil {
		b.Fatal(err)
	}
	defer stats.Close()
	progTime := func() (total time.Duration, per map[string]ProgramStats) {
		s, err := c.Stats()
		if err != nil {
			b.Fatal(err)
		}
		per = map[string]ProgramStats{}
		for _, ps := range s.Programs {
			total += ps.RunTime
			per[ps.Name] = ps
		}
		return total, per
	}
	fmt.Fprintf(&out, "cost per request (BPF run time from kernel.bpf_stats_enabled, reader thread CPU):\n")
	fmt.Fprintf(&out, "  %-24s %-9s %10s %9s %9s %10s %12s\n", "traffic", "server", "cpu/req", "bpf/req", "events", "reader/req", "est. ratio")
	perProg := map[probeState]map[string][2]ProgramStats{}
	for _, ka := range []bool{true, false} {
		label, metric := name(ka)
		for _, state := range []probeState{probesUntracked, probesTracked} {
			setState(state)
			bpf0, per0 := progTime()
			r0, ev0 := threadCPU(readerTID), delivered.Load()
			s := measure(ka, 2*d)
			bpf1, per1 := progTime()
			// Let the reader drain what the flush interval held back.
			time.Sleep(2 * c.flush)
			r1, ev1 := threadCPU(readerTID), delivered.Load()
			bpfPer := float64((bpf1 - bpf0).Nanoseconds()) / float64(s.n)
			readerPer := float64((r1 - r0).Nanoseconds()) / float64(s.n)
			est := baseCPU[ka] / (baseCPU[ka] + bpfPer + readerPer)
			fmt.Fprintf(&out, "  %-24s %-9s %8.1fµs %7.2fµs %9.2f %8.2fµs %12.4f\n", label, state,
				baseCPU[ka]/1e3, bpfPer/1e3, float64(ev1-ev0)/float64(s.n), readerPer/1e3, est)
			b.ReportMetric(est, metric+"-"+state.String()+"/off-estimated")
			if perProg[state] == nil {
				perProg[state] = map[string][2]ProgramStats{}
			}
			for n, a := range per1 {
				old := per0[n]
				acc := perProg[state][n]
				acc[0].RunCount += a.RunCount - old.RunCount
				acc[0].RunTime += a.RunTime - old.RunTime
				perProg[state][n] = acc
			}
		}
	}
	// Resets, for the two reset programs: aborted connections to the
	// server (it receives RST) and connections to a closed port.
	for _, state := range []probeState{probesUntracked, probesTracked} {
		setState(state)
		_, per0 := progTime()
		resetTraffic(b, h.Ready, 200)
		_, per1 := progTime()
		for n, a := range per1 {
			acc := perProg[state][n]
			acc[0].RunCount += a.RunCount - per0[n].RunCount
			acc[0].RunTime += a.RunTime - per0[n].RunTime
			perProg[state][n] = acc
		}
	}
	for _, state := range []probeState{probesUntracked, probesTracked} {
		fmt.Fprintf(&out, "BPF average run time per invocation, server cgroup %s:\n", state)
		for _, def := range programDefs {
			ps := perProg[state][def.name][0]
			fmt.Fprintf(&out, "  %-20s %9d runs %7d ns/run\n", def.name, ps.RunCount, ps.AvgRunTime().Nanoseconds())
			if ps.RunCount > 0 {
				b.ReportMetric(float64(ps.AvgRunTime().Nanoseconds()), def.name+"-"+state.String()+"-ns/run")
			}
		}
	}
	if l, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Fprintf(&out, "load average at the end (2 CPUs): %s", l)
	}
	b.Log(out.String())
	fmt.Print(out.String())
}

// resetTraffic opens n connections to server and aborts them (SO_LINGER 0),
// and makes n connections to a closed loopback port.
func resetTraffic(b *testing.B, server string, n int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	for i := 0; i < n; i++ {
		if c, err := net.Dial("tcp", server); err == nil {
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
		if c, err := net.Dial("tcp", closed); err == nil {
			c.Close()
		}
	}
}

// BenchmarkDecode measures turning one raw record into a sealed, attributed
// event, the reader's per-event work after the ring buffer read, with the
// pod resolution cache warm.
func BenchmarkDecode(b *testing.B) {
	p := &testPod{UID: newUID(), ContainerID: randHex(64), IP: netip.MustParseAddr("10.0.0.2")}
	pods := &fakePods{}
	pods.add(p)
	c := &Collector{
		resolver: newResolver(pods, nil, 1, slog.Default()),
		decoder:  decoder{node: "bench", rstReasons: []string{"not_specified", "no_socket"}},
		clock:    newWallClock(time.Second),
	}
	c.resolver.byCgroup[42] = CgroupPod{PodUID: p.UID, ContainerID: p.ContainerID}
	raw := probesEvent{Kind: kindConnClose, CgroupId: 42, Netns: 7, Pid: 100, Flags: flagOwner | flagAtExit,
		Comm: comm("server"), Family: afInet, Laddr: addr16("10.0.0.2"), Lport: 8080, Raddr: addr16("10.0.0.9"), Rport: 40000}
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	raw.TsNs = uint64(ts.Nano())
	rec := rawBytes(&raw)
	var scratch probesEvent
	var ev event.Event
	c.handle(rec, &scratch, &ev) // first sight of the command name interns it
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.handle(rec, &scratch, &ev); err != nil {
			b.Fatal(err)
		}
	}
	if ev.Pod.UID != p.UID || ev.ID == 0 {
		b.Fatalf("event not attributed or sealed: %s", describe(&ev))
	}
}

// BenchmarkDecodeReader measures the whole read path on real kernel events: a
// helper process sends itself signals the programs record, and a Run loop
// in this process (which does nothing else) delivers them. It reports
// allocations per delivered event from the runtime's malloc count.
func BenchmarkDecodeReader(b *testing.B) {
	p := newTestPod(b, false)
	// No exit window: events pass through the delay line without waiting,
	// so that the time measured is the reader's work, not the window.
	c := openCollector(b, Config{Signals: []syscall.Signal{syscall.SIGUSR1}, RingBufferSize: 64 << 20, ExitWindow: -1})
	if err := c.Track(p.PodCgroupID); err != nil {
		b.Fatal(err)
	}
	const n = 200000
	var got atomic.Uint64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var before, after runtime.MemStats
	// Produce first, then read everything in one go, so that the helper's
	// start and exit do not share the measured window.
	// Run-time statistics on while producing: every signal_generate run
	// emits an event, so its average is the kernel's cost of one event.
	rs, err := EnableRunStats()
	if err != nil {
		b.Fatal(err)
	}
	p.start(b, "signal-self", "DRAINSCOPE_HELPER_N="+strconv.Itoa(n)).Wait(b)
	rs.Close()
	var kernelNs float64
	if s, err := c.Stats(); err == nil {
		for _, ps := range s.Programs {
			if ps.Name == "signal_generate" && ps.RunCount > 0 {
				kernelNs = float64(ps.AvgRunTime().Nanoseconds())
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	b.ResetTimer()
	var elapsed time.Duration
	go func() {
		c.Run(ctx, func(*event.Event) {
			if got.Add(1) == n+1 { // the signals and the helper's exit
				elapsed = time.Since(start)
				runtime.ReadMemStats(&after)
				cancel()
			}
		})
		close(done)
	}()
	<-done
	b.StopTimer()
	s, _ := c.Stats()
	if got.Load() < n {
		b.Fatalf("delivered %d of %d (dropped %d)", got.Load(), n, s.Dropped)
	}
	allocs := float64(after.Mallocs-before.Mallocs) / float64(got.Load())
	b.ReportMetric(allocs, "allocs/event")
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(got.Load()), "ns/event")
	b.ReportMetric(kernelNs, "kernel-ns/event")
	msg := fmt.Sprintf("reader: %d events in %v, %.0f ns/event, %.4f allocs/event (%d mallocs in the process while reading); "+
		"kernel side %.0f ns per emitted event (signal_generate average run time)",
		got.Load(), elapsed.Round(time.Millisecond), float64(elapsed.Nanoseconds())/float64(got.Load()), allocs,
		after.Mallocs-before.Mallocs, kernelNs)
	b.Log(msg)
	fmt.Println(msg)
}
