package dataplane

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
)

// BenchmarkIPTablesReaderCPU measures what reading kube-proxy's iptables
// rules costs, without kube-proxy (the Kubernetes binaries are not
// needed): in a network namespace of its own, the backend's
// iptables-restore writes 50 Service chains of 20 endpoints as
// kube-proxy's iptables mode does, then each round rewrites every Service
// chain twice (one endpoint dropped, then back: 100 restores, as 100
// partial syncs would), with the reader on in every other round. It
// reports this process's CPU per round with and without the reader
// (children's included: the legacy reader's iptables-legacy-save) and
// the restores' own CPU, as medians with p25–p75 (go test ./dataplane
// -run '^$' -bench IPTablesReaderCPU -benchtime 1x, as root).
func BenchmarkIPTablesReaderCPU(b *testing.B) {
	for _, backend := range []string{"nft", "legacy"} {
		b.Run(backend, func(b *testing.B) { benchIPTablesReader(b, backend) })
	}
}

func benchIPTablesReader(b *testing.B, backend string) {
	testenv.RequireRoot(b)
	testenv.RequireBinary(b, "iptables-"+backend+"-restore")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nsPath := make(chan string, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			close(nsPath)
			return
		}
		nsPath <- fmt.Sprintf("/proc/%d/task/%d/ns/net", unix.Getpid(), unix.Gettid())
		<-ctx.Done()
	}()
	ns, ok := <-nsPath
	if !ok {
		b.Fatal("unshare failed")
	}
	nsFD, err := unix.Open(ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(nsFD)
	var mu sync.Mutex
	var stamp float64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if stamp > 0 {
			fmt.Fprintf(w, "%s{ip_family=\"IPv4\"} %s\n", syncMetric, strconv.FormatFloat(stamp, 'g', -1, 64))
		}
	}))
	defer srv.Close()
	var restoreCPU time.Duration
	restore := func(in string) {
		cmd := exec.Command("nsenter", "--net="+ns, "iptables-"+backend+"-restore", "--noflush")
		cmd.Stdin = strings.NewReader(in)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("restore: %v: %s", err, out)
		}
		restoreCPU += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		mu.Lock()
		stamp = float64(time.Now().UnixNano()) / 1e9
		mu.Unlock()
	}
	const services, perService = 50, 20
	svcChain := func(i int) string { return fmt.Sprintf("KUBE-SVC-%016d", i) }
	sepChain := func(i, j int) string { return fmt.Sprintf("KUBE-SEP-%08d%08d", i, j) }
	addr := func(j int) string { return fmt.Sprintf("10.244.%d.%d:8080", j/200, 10+j%200) }
	rules := func(i int, skip int) string {
		var s strings.Builder
		n := perService
		if skip >= 0 {
			n--
		}
		k := 0
		for j := range perService {
			if j == skip {
				continue
			}
			fmt.Fprintf(&s, "-A %s -m comment --comment \"dp/svc-%02d:http -> %s\"", svcChain(i), i, addr(j))
			if k < n-1 {
				fmt.Fprintf(&s, " -m statistic --mode random --probability %.11f", 1/float64(n-k))
			}
			fmt.Fprintf(&s, " -j %s\n", sepChain(i, j))
			k++
		}
		return s.String()
	}
	var all strings.Builder
	all.WriteString("*nat\n:KUBE-SERVICES - [0:0]\n")
	for i := range services {
		fmt.Fprintf(&all, ":%s - [0:0]\n", svcChain(i))
		for j := range perService {
			fmt.Fprintf(&all, ":%s - [0:0]\n", sepChain(i, j))
		}
	}
	for i := range services {
		fmt.Fprintf(&all, "-A KUBE-SERVICES -d 10.96.1.%d/32 -p tcp -m comment --comment \"dp/svc-%02d:http cluster IP\" -m tcp --dport 80 -j %s\n", i, i, svcChain(i))
		for j := range perService {
			fmt.Fprintf(&all, "-A %s -p tcp -m comment --comment dp/svc-%02d:http -m tcp -j DNAT --to-destination %s\n", sepChain(i, j), i, addr(j))
		}
		all.WriteString(rules(i, -1))
	}
	all.WriteString("COMMIT\n")
	restore(all.String())

	var on, off, writer []float64
	var changes uint64
	const rounds = 12
	b.ResetTimer()
	for r := range rounds {
		watching := r%2 == 1
		var stop func() uint64
		if watching {
			var mu sync.Mutex
			evs := 0
			emit := func(event.Event) { mu.Lock(); evs++; mu.Unlock() }
			wctx, wcancel := context.WithCancel(ctx)
			done := make(chan struct{})
			if backend == "nft" {
				w, _ := New(Options{Node: "n1", Emit: emit, Logger: quiet})
				go func() {
					defer close(done)
					// Its sockets are made on a thread in the namespace.
					runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
					if err := unix.Setns(nsFD, unix.CLONE_NEWNET); err != nil {
						return
					}
					_ = w.Run(wctx)
				}()
			} else {
				lp, _ := NewLegacy(LegacyOptions{Node: "n1", Emit: emit, Logger: quiet, Metrics: strings.TrimPrefix(srv.URL, "http://"),
					Save: [][]string{{"nsenter", "--net=" + ns, "iptables-legacy-save", "-t", "nat"}}})
				go func() { defer close(done); _ = lp.Run(wctx) }()
			}
			time.Sleep(500 * time.Millisecond) // its first read, outside the measure
			stop = func() uint64 { wcancel(); <-done; mu.Lock(); defer mu.Unlock(); return uint64(evs) }
		}
		c0, w0 := selfCPU(), restoreCPU
		for i := range services {
			restore("*nat\n:" + svcChain(i) + " - [0:0]\n" + rules(i, r%perService) + "COMMIT\n")
			time.Sleep(20 * time.Millisecond)
		}
		for i := range services {
			restore("*nat\n:" + svcChain(i) + " - [0:0]\n" + rules(i, -1) + "COMMIT\n")
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond) // the last reads
		c1, w1 := selfCPU(), restoreCPU
		// This process's CPU less the restores' (its own children too).
		cpu := (c1 - c0 - (w1 - w0)).Seconds()
		writer = append(writer, (w1 - w0).Seconds())
		if watching {
			changes += stop()
			on = append(on, cpu)
		} else {
			off = append(off, cpu)
		}
	}
	b.StopTimer()
	cancel()
	q := func(v []float64) (float64, float64, float64) {
		s := slices.Clone(v)
		slices.Sort(s)
		at := func(p float64) float64 { return s[int(p*float64(len(s)-1)+0.5)] }
		return at(0.5), at(0.25), at(0.75)
	}
	mOn, lOn, hOn := q(on)
	mOff, lOff, hOff := q(off)
	mw, lw, hw := q(writer)
	b.Logf("iptables-%s, per round (%d Service chains × %d endpoints, %d restores; %d endpoint changes read in %d rounds):",
		backend, services, perService, 2*services, changes, len(on))
	b.Logf("  this process with the reader %.3f s CPU (p25–p75 %.3f–%.3f), without %.3f s (%.3f–%.3f): the reader's %.1f ms",
		mOn, lOn, hOn, mOff, lOff, hOff, (mOn-mOff)*1000)
	b.Logf("  the restores %.3f s CPU (p25–p75 %.3f–%.3f): the reader costs %.1f %% of the writer's CPU", mw, lw, hw, 100*(mOn-mOff)/mw)
	b.ReportMetric((mOn-mOff)*1000, "reader-ms/round")
	b.ReportMetric(100*(mOn-mOff)/mw, "%-of-restores")
}
