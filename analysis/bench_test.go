package analysis

import (
	"container/heap"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

// synth streams a long history in time order without holding it, the way a
// store's Scan does: pods deleted 100 ms apart, each with 100 events of its
// own (lifecycle on two nodes, 40 idle connections closed by peers before,
// 40 keep-alive connections closed at exit, 5 resets after close) and 100
// client failures (40 EOFs at exit on those connections, half with the
// backend logged and half found through the kernel events; 20 refusals
// with the backend; 20 EOFs a second after SIGTERM; 20 timeouts no pod
// saw). Pods overlap: about 700 are live at any time.
type synth struct {
	pods, next int
	base       int64
	active     cursorHeap
	tmpl       []step
	ev         event.Event
}

type step struct {
	off  int64
	kind event.Kind
	k    int // connection index, node index …
	arg  int
}

type cursor struct {
	i    int
	at   int64 // deletion time
	pos  int
	ref  event.PodRef
	ip   netip.Addr
	cip  netip.Addr
	next int64
	// backend is the Attrs of the failures that log the pod as their
	// backend, made once: the stream makes no garbage per event, which
	// the aligner's collections would be charged with.
	backend map[string]string
}

type cursorHeap []*cursor

func (h cursorHeap) Len() int           { return len(h) }
func (h cursorHeap) Less(i, j int) bool { return h[i].next < h[j].next }
func (h cursorHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *cursorHeap) Push(x any)        { *h = append(*h, x.(*cursor)) }
func (h *cursorHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

const (
	synthGap   = 100 * ms
	synthStart = -60 * s // first step's offset from deletion
)

func newSynth(pods int) *synth {
	var t []step
	add := func(off int64, k event.Kind, idx, arg int) { t = append(t, step{off, k, idx, arg}) }
	add(-60*s, event.PodCreated, 0, 0)
	add(-58*s, event.PodReady, 0, 0)
	add(-58*s+1*ms, event.EndpointReady, 0, 0)
	add(-58*s+2*ms, event.EndpointReady, 1, 0)
	for k := 0; k < 40; k++ {
		add(-50*s+int64(k)*s, event.ConnClosed, 100+k, 1) // idle connection closed by the peer
	}
	add(0, event.PodDeletion, 0, 0)
	for n := 0; n < 2; n++ {
		add(400*ms+int64(n)*50*ms, event.EndpointNotReady, n, 0)
		add(400*ms+int64(n)*50*ms, event.EndpointTerminating, n, 0)
	}
	for k := 0; k < 20; k++ {
		add(200*ms+int64(k)*5*ms, event.ClientFailure, 200+k, 2) // refused, backend known
	}
	add(5*s, event.Signal, 0, 15)
	add(5*s+1*ms, event.ListenerClosed, 0, 0)
	for k := 0; k < 20; k++ {
		add(6*s+int64(k)*ms, event.ClientFailure, 300+k, 3) // EOF a second after SIGTERM
	}
	for k := 0; k < 20; k++ {
		add(7*s+int64(k)*ms, event.ClientFailure, 400+k, 4) // timeout, no pod
	}
	add(8*s, event.ProcessExit, 0, 0)
	for k := 0; k < 40; k++ {
		add(8*s+int64(k)*10_000+50_000, event.ConnClosed, k, 0) // keep-alive closed at exit
	}
	for k := 0; k < 5; k++ {
		add(8*s+2*ms+int64(k)*ms, event.RSTSent, k, 0)
	}
	for k := 0; k < 40; k++ {
		add(8*s+3*ms+int64(k)*100_000, event.ClientFailure, k, k%2) // 0: kernel only, 1: backend
	}
	for n := 0; n < 2; n++ {
		add(8*s+100*ms+int64(n)*20*ms, event.EndpointRemoved, n, 0)
	}
	add(8*s+150*ms, event.ContainerTerminated, 0, 0)
	sortSteps(t)
	return &synth{pods: pods, base: t0, tmpl: t}
}

func sortSteps(t []step) {
	for i := 1; i < len(t); i++ {
		for j := i; j > 0 && t[j].off < t[j-1].off; j-- {
			t[j], t[j-1] = t[j-1], t[j]
		}
	}
}

// counts per pod: 100 events and 100 failures
func (g *synth) perPod() (events, failures int) {
	for _, st := range g.tmpl {
		if st.kind == event.ClientFailure {
			failures++
		} else {
			events++
		}
	}
	return
}

func (g *synth) activate() {
	i := g.next
	g.next++
	c := &cursor{
		i:  i,
		at: g.base + int64(i)*synthGap,
		ref: event.PodRef{Namespace: "default", Name: fmt.Sprintf("web-%d", i),
			UID: fmt.Sprintf("uid-%08d", i), Container: "app"},
		ip:  netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)}),
		cip: netip.AddrFrom4([4]byte{10, byte(200 + i>>16), byte(i >> 8), byte(i)}),
	}
	c.backend = map[string]string{event.AttrBackend: netip.AddrPortFrom(c.ip, 8080).String()}
	c.next = c.at + g.tmpl[0].off
	heap.Push(&g.active, c)
}

// each calls fn for every event in time order; fn must not keep it.
func (g *synth) each(fn func(*event.Event)) {
	wl := event.Workload{Kind: "Deployment", Name: "web"}
	nodes := [2]string{"node-a", "node-b"}
	clusterIP := netip.MustParseAddrPort("10.96.0.10:80")
	for {
		// Start every pod whose first step is due before the next event.
		for g.next < g.pods && (g.active.Len() == 0 || g.base+int64(g.next)*synthGap+g.tmpl[0].off <= g.active[0].next) {
			g.activate()
		}
		if g.active.Len() == 0 {
			return
		}
		c := g.active[0]
		st := g.tmpl[c.pos]
		e := &g.ev
		*e = event.Event{Time: c.next, Kind: st.kind, Node: nodes[0], Source: event.SourceKernel, Pod: c.ref, Workload: wl, PID: 4242, Comm: "python3"}
		podAddr := netip.AddrPortFrom(c.ip, 8080)
		cli := netip.AddrPortFrom(c.cip, uint16(30000+st.k))
		switch st.kind {
		case event.PodDeletion:
			e.Duration = int64(30 * time.Second)
			e.Source = event.SourceWatcher
		case event.PodReady:
			e.Local = netip.AddrPortFrom(c.ip, 0)
			e.Source = event.SourceWatcher
		case event.EndpointReady, event.EndpointNotReady, event.EndpointTerminating, event.EndpointRemoved:
			e.Node, e.Local, e.Service, e.Source = nodes[st.k], podAddr, "web", event.SourceWatcher
		case event.Signal:
			e.Signal, e.PeerPID, e.PeerComm = 15, 1, "kubelet"
		case event.ConnClosed:
			e.Local, e.Remote, e.Reason = podAddr, cli, "local"
			if st.arg == 1 {
				e.Reason = "peer"
			} else {
				e.Flags = event.FlagAtExit
			}
		case event.RSTSent:
			e.Local, e.Remote, e.Reason = podAddr, cli, "NO_SOCKET"
		case event.ClientFailure:
			*e = event.Event{Time: c.next, Kind: event.ClientFailure, Source: event.SourceClient,
				Local: cli, Remote: clusterIP, Reason: event.FailEOF, Duration: int64(2 * time.Millisecond)}
			withBackend := false
			switch st.arg {
			case 1, 3:
				withBackend = true
			case 2:
				e.Reason, withBackend = event.FailRefused, true
			case 4:
				e.Reason = event.FailTimeout
				e.Local = netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 168, byte(c.i >> 8), byte(c.i)}), uint16(st.k))
			}
			if withBackend {
				e.Attrs = c.backend
			}
		}
		fn(e)
		c.pos++
		if c.pos == len(g.tmpl) {
			heap.Pop(&g.active)
			continue
		}
		c.next = c.at + g.tmpl[c.pos].off
		heap.Fix(&g.active, 0)
	}
}

type alignRun struct {
	events, failures int
	gen, total       time.Duration
	cpu              time.Duration // process CPU (user+system) while generating and aligning, GC included
	genCPU           time.Duration // process CPU generating the stream alone
	peakHeap         uint64
	baseHeap         uint64
	causes           map[Cause]int
	timelines        int
	stats            Stats
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runAlign aligns the synthetic stream of pods; timelines asks for every
// pod's timeline, as a report with no workload named does.
func runAlign(pods int, timelines bool) alignRun {
	var out alignRun
	// The generator alone, to subtract its cost.
	g := newSynth(pods)
	c0 := cpuTime()
	start := time.Now()
	g.each(func(*event.Event) {})
	out.gen = time.Since(start)
	out.genCPU = cpuTime() - c0

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	out.baseHeap = ms.HeapInuse
	out.peakHeap = ms.HeapInuse
	out.causes = map[Cause]int{}
	var onPod func(*PodTimeline)
	if timelines {
		onPod = func(tl *PodTimeline) { out.timelines++ }
	}
	al := NewAligner(Options{}, func(d *Decision) { out.causes[d.Rule.Cause]++ }, onPod)
	g = newSynth(pods)
	n := 0
	cpu0 := cpuTime()
	start = time.Now()
	g.each(func(e *event.Event) {
		if e.Kind == event.ClientFailure {
			out.failures++
		} else {
			out.events++
		}
		if err := al.Add(e); err != nil {
			panic(err)
		}
		if n++; n%100_000 == 0 {
			runtime.ReadMemStats(&ms)
			out.peakHeap = max(out.peakHeap, ms.HeapInuse)
		}
	})
	al.Flush()
	out.total = time.Since(start)
	out.cpu = cpuTime() - cpu0
	runtime.ReadMemStats(&ms)
	out.peakHeap = max(out.peakHeap, ms.HeapInuse)
	out.stats = al.Stats()
	return out
}

// BenchmarkAlignMillion aligns 1,000,000 client failures against 1,000,000
// other events (10,000 pods) and, for contrast, a quarter of that: the
// time should scale with the history and the peak heap should not. Each
// size runs five passes on the same stream; each pass times the generator
// alone, then the generator feeding the aligner, and counts the difference
// as aligning. It reports the median of the five and their spread.
//
// The two sizes ask for no pod's timeline, so the aligner records only
// what the decisions read. timelines=10000 asks for every pod's, as a
// report with no workload named does: it then also records each pod's
// connection ends and failure counts, and builds the 10,000 timelines.
//
//	go test ./analysis -run '^$' -bench AlignMillion -benchtime 1x
func BenchmarkAlignMillion(b *testing.B) {
	const passes = 5
	for _, c := range []struct {
		name      string
		pods      int
		timelines bool
	}{
		{"pods=2500", 2500, false},
		{"pods=10000", 10000, false},
		{"timelines=10000", 10000, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			var runs []alignRun
			for b.Loop() {
				runs = runs[:0]
				for range passes {
					runs = append(runs, runAlign(c.pods, c.timelines))
				}
			}
			reportAlign(b, runs)
		})
	}
}

func reportAlign(b *testing.B, runs []alignRun) {
	mib := func(v uint64) float64 { return float64(v) / (1 << 20) }
	align := spreadOf(runs, func(r alignRun) float64 { return (r.total - r.gen).Seconds() })
	cpu := spreadOf(runs, func(r alignRun) float64 { return (r.cpu - r.genCPU).Seconds() })
	gen := spreadOf(runs, func(r alignRun) float64 { return r.gen.Seconds() })
	heap := spreadOf(runs, func(r alignRun) float64 { return mib(r.peakHeap) })
	r := runs[0]
	b.ReportMetric(align.med, "align-s")
	b.ReportMetric(align.min, "align-min-s")
	b.ReportMetric(align.max, "align-max-s")
	b.ReportMetric(cpu.med, "align-cpu-s")
	b.ReportMetric(heap.max, "peak-heap-MiB")
	b.ReportMetric(float64(r.events+r.failures)/align.med, "items/s")
	var la [3]float64
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Sscan(string(data), &la[0], &la[1], &la[2])
	}
	b.Logf("%d failures against %d events, %d passes: aligning median %.3f s (%.3f–%.3f), CPU with GC %.3f s (%.3f–%.3f); generating the stream (setup, subtracted) median %.3f s; peak HeapInuse %.1f MiB (%.1f–%.1f; %.1f MiB before); load average %.2f %.2f %.2f",
		r.failures, r.events, len(runs), align.med, align.min, align.max, cpu.med, cpu.min, cpu.max, gen.med, heap.med, heap.min, heap.max, mib(r.baseHeap), la[0], la[1], la[2])
	b.Logf("max pending %d, max kernel window %d, pods evicted %d; causes: %v; inferred %d, proven %d of %d client failures; %d timelines built",
		r.stats.MaxPending, r.stats.MaxKernelWindow, r.stats.PodsEvicted, r.causes, r.stats.Inferred, r.stats.ProvenByKernel, r.stats.ClientFailures, r.timelines)
}

type spread struct{ med, min, max float64 }

func spreadOf(runs []alignRun, f func(alignRun) float64) spread {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	slices.Sort(v)
	return spread{med: v[len(v)/2], min: v[0], max: v[len(v)-1]}
}

// The synthetic stream's causes come out as built, so the benchmark
// measures the real work.
func TestSynthCauses(t *testing.T) {
	r := runAlign(30, false)
	want := map[Cause]int{
		CauseKeepAliveAtExit: 30 * (40 + 5), // 40 client EOFs + 5 inferred resets
		CauseEndpointRace:    30 * 20,
		CauseUnexplained:     30 * 40, // EOFs at SIGTERM+1 s, timeouts no pod saw
	}
	for c, n := range want {
		if r.causes[c] != n {
			t.Errorf("%s: %d, want %d (all: %v)", c, r.causes[c], n, r.causes)
		}
	}
	if ev, f := newSynth(1).perPod(); ev != 100 || f != 100 {
		t.Errorf("per pod: %d events, %d failures; want 100 and 100", ev, f)
	}
}

// What only a timeline reads (connection ends, failure counts) is recorded
// for the pods whose timeline is wanted, and only for them; leaving it
// out changes no decision. With WantPods, the other pods' failures are
// counted alike but not decided: the decisions passed are the wanted
// pods' (and those of no pod or no known workload), as they were.
func TestTimelineOnlyState(t *testing.T) {
	type verdict struct {
		cause          Cause
		pod, via       string
		wl             event.Workload
		pieces         int
		proven, likely bool
		offsets        Offsets
	}
	run := func(onPod func(*PodTimeline), want func(string, event.Workload) bool) (*[]verdict, *Aligner) {
		out := new([]verdict)
		al := NewAligner(Options{}, func(d *Decision) {
			*out = append(*out, verdict{d.Rule.Cause, d.Pod.Name, d.Via, d.Workload, len(d.Evidence), d.Proven, d.Likely, d.Offsets()})
		}, onPod)
		if want != nil {
			al.WantPods(want)
		}
		newSynth(30).each(func(e *event.Event) {
			if err := al.Add(e); err != nil {
				t.Fatal(err)
			}
		})
		return out, al
	}
	recorded := func(al *Aligner) (conns, counted int) {
		for _, p := range al.byUID {
			if len(p.conns) > 0 {
				conns++
			}
			if len(p.failures)+len(p.inferred) > 0 {
				counted++
			}
		}
		return conns, counted
	}
	timelines := 0
	all, alAll := run(func(*PodTimeline) { timelines++ }, nil)
	none, alNone := run(nil, nil)
	scoped, alScoped := run(func(*PodTimeline) { timelines++ }, func(_ string, wl event.Workload) bool { return wl.Name == "other" })
	if c, n := recorded(alAll); c != 30 || n != 30 {
		t.Errorf("timelines wanted: %d of 30 pods hold connection ends, %d failure counts; want all", c, n)
	}
	for name, al := range map[string]*Aligner{"no onPod": alNone, "another workload wanted": alScoped} {
		if c, n := recorded(al); c != 0 || n != 0 {
			t.Errorf("%s: %d pods hold connection ends, %d failure counts; want none", name, c, n)
		}
	}
	alAll.Flush()
	alNone.Flush()
	alScoped.Flush()
	if timelines != 30 {
		t.Errorf("%d timelines, want 30 (the wanted run's only)", timelines)
	}
	// 100 client failures a pod and 5 it infers (see TestSynthCauses)
	if len(*all) != 30*105 || !reflect.DeepEqual(*all, *none) {
		t.Errorf("decisions differ: %d with timelines, %d without; want 3150 alike", len(*all), len(*none))
	}
	var wanted []verdict
	for _, v := range *all {
		if v.pod == "" || v.wl.IsZero() || v.wl.Name == "other" {
			wanted = append(wanted, v)
		}
	}
	if len(wanted) == len(*all) || !reflect.DeepEqual(wanted, *scoped) {
		t.Errorf("scoped: %d decisions, want the %d of %d whose pod is wanted, alike", len(*scoped), len(wanted), len(*all))
	}
	if alAll.Stats() != alScoped.Stats() {
		t.Errorf("scoped counts %+v, want those of the whole run %+v", alScoped.Stats(), alAll.Stats())
	}
}

// Pods share noLifecycle, and lifecycles noEvent, for reading until the
// event is seen; nothing may write to either.
func TestNoLifecycleStaysZero(t *testing.T) {
	runAlign(30, true)
	if !reflect.DeepEqual(noEvent, event.Event{}) {
		t.Fatalf("the shared unseen event was written: %+v", noEvent)
	}
	if !reflect.DeepEqual(noLifecycle, *newLifecycle()) {
		t.Fatalf("the shared empty lifecycle was written: %+v", noLifecycle)
	}
}
