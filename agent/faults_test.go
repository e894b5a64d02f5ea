package agent_test

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/lab/scenario"
	"github.com/drainscope/drainscope/store"
)

// transitionWatch is the test's own watch of the cluster's EndpointSlices
// and Pods, apart from every agent's: it counts each endpoint and pod
// transition the API server made, by the rules the event kinds document
// (an endpoint added or removed; ready, serving, terminating turning; a
// pod's readiness turning, its deletion requested), so that what an agent
// stored can be checked against it: each transition recorded exactly
// once, none twice, none invented.
type transitionWatch struct {
	mu     sync.Mutex
	counts map[string]int // transition key → how many times the API server made it
	times  map[string][]time.Time
	eps    map[string]epSeen // "ns/slice addr uid" → last state
	pods   map[string]podSeen
	from   time.Time // counting starts (the list before it is the baseline)
	until  time.Time // counting stopped
	stop   chan struct{}
}

type epSeen struct {
	ready, serving, terminating bool
	key                         string // "ns svc addr uid"
}

type podSeen struct {
	ready, deleting bool
}

func startTransitionWatch(t *testing.T, cs kubernetes.Interface) *transitionWatch {
	t.Helper()
	w := &transitionWatch{counts: map[string]int{}, times: map[string][]time.Time{}, eps: map[string]epSeen{}, pods: map[string]podSeen{}, stop: make(chan struct{})}
	f := informers.NewSharedInformerFactory(cs, 0)
	f.Discovery().V1().EndpointSlices().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.slice(o.(*discoveryv1.EndpointSlice), false) },
		UpdateFunc: func(_, o any) { w.slice(o.(*discoveryv1.EndpointSlice), false) },
		DeleteFunc: func(o any) {
			if s, ok := o.(*discoveryv1.EndpointSlice); ok {
				w.slice(s, true)
			} else if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				w.slice(d.Obj.(*discoveryv1.EndpointSlice), true)
			}
		},
	})
	f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.pod(o.(*corev1.Pod)) },
		UpdateFunc: func(_, o any) { w.pod(o.(*corev1.Pod)) },
	})
	f.Start(w.stop)
	for typ, ok := range f.WaitForCacheSync(w.stop) {
		if !ok {
			t.Fatalf("the test's own watch of %v did not sync", typ)
		}
	}
	t.Cleanup(func() { close(w.stop) })
	return w
}

// countFrom starts counting transitions: those before are the baseline.
func (w *transitionWatch) countFrom(at time.Time) {
	w.mu.Lock()
	w.from = at
	w.mu.Unlock()
}

// countUntil stops counting: what the agents recorded is compared up to
// there.
func (w *transitionWatch) countUntil(at time.Time) {
	w.mu.Lock()
	w.until = at
	w.mu.Unlock()
}

func (w *transitionWatch) saw(key string) {
	if w.from.IsZero() || !w.until.IsZero() {
		return
	}
	w.counts[key]++
	w.times[key] = append(w.times[key], time.Now())
}

func (w *transitionWatch) slice(s *discoveryv1.EndpointSlice, deleted bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	svc := s.Labels[discoveryv1.LabelServiceName]
	if svc == "" {
		svc = "slice:" + s.Name
	}
	prefix := s.Namespace + "/" + s.Name + " "
	present := map[string]bool{}
	if !deleted {
		for _, ep := range s.Endpoints {
			uid := ""
			if ep.TargetRef != nil {
				uid = string(ep.TargetRef.UID)
			}
			for _, a := range ep.Addresses {
				addr, err := netip.ParseAddr(a)
				if err != nil {
					continue
				}
				id := prefix + addr.String() + " " + uid
				present[id] = true
				cur := epSeen{
					ready:       ep.Conditions.Ready == nil || *ep.Conditions.Ready,
					serving:     ep.Conditions.Serving == nil || *ep.Conditions.Serving,
					terminating: ep.Conditions.Terminating != nil && *ep.Conditions.Terminating,
					key:         s.Namespace + " " + svc + " " + addr.String() + " " + uid,
				}
				prev, known := w.eps[id]
				w.eps[id] = cur
				if !known {
					w.saw("endpoint_added " + cur.key)
					continue
				}
				if prev.ready && !cur.ready {
					w.saw("endpoint_not_ready " + cur.key)
				}
				if prev.serving && !cur.serving {
					w.saw("endpoint_not_serving " + cur.key)
				}
				if !prev.terminating && cur.terminating {
					w.saw("endpoint_terminating " + cur.key)
				}
				if !prev.ready && cur.ready {
					w.saw("endpoint_ready " + cur.key)
				}
				if !prev.serving && cur.serving {
					w.saw("endpoint_serving " + cur.key)
				}
			}
		}
	}
	for id, st := range w.eps {
		if strings.HasPrefix(id, prefix) && !present[id] {
			delete(w.eps, id)
			w.saw("endpoint_removed " + st.key)
		}
	}
}

func (w *transitionWatch) pod(p *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ready := false
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	cur := podSeen{ready: ready, deleting: p.DeletionTimestamp != nil}
	prev, known := w.pods[string(p.UID)]
	w.pods[string(p.UID)] = cur
	if !known {
		return // its creation: pod_created, not compared
	}
	key := p.Namespace + "/" + p.Name + " " + string(p.UID)
	if prev.ready != cur.ready {
		k := "pod_not_ready "
		if cur.ready {
			k = "pod_ready "
		}
		w.saw(k + key)
	}
	if !prev.deleting && cur.deleting {
		w.saw("pod_deletion " + key)
	}
}

// snapshot returns the transitions counted so far.
func (w *transitionWatch) snapshot() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.counts))
	for k, n := range w.counts {
		out[k] = n
	}
	return out
}

// transitionKey is the key transitionWatch counts e under, "" for events
// that are no transition it counts.
func transitionKey(e *event.Event) string {
	if e.Flags.Has(event.FlagObserved) || e.Source != event.SourceWatcher {
		return ""
	}
	switch {
	case e.Kind.IsEndpoint():
		return string(e.Kind) + " " + e.Pod.Namespace + " " + e.Service + " " + e.Local.Addr().String() + " " + e.Pod.UID
	case e.Kind == event.PodReady, e.Kind == event.PodNotReady, e.Kind == event.PodDeletion:
		return string(e.Kind) + " " + e.Pod.Namespace + "/" + e.Pod.Name + " " + e.Pod.UID
	}
	return ""
}

// transitionCount compares what a store recorded over [from, to] with
// what the API server made (want): how many transitions it made, how
// many the store holds once, twice or more (duplicated), how many it
// lacks and which, and how many it holds that were never made.
type transitionCount struct {
	Made, Recorded, Duplicated, Missing, Invented int
	MissingKeys, InventedKeys                     []string
	// MissingTimes are when the test's watch saw each missing one.
	MissingTimes []time.Time
}

func compareTransitions(t *testing.T, dsn string, from, to time.Time, w *transitionWatch) transitionCount {
	t.Helper()
	ctx := context.Background()
	st := openDSN(t, dsn)
	got := map[string]int{}
	err := st.Scan(ctx, store.Query{Window: event.Window{From: from.UnixNano(), To: to.UnixNano()}}, func(e *event.Event) error {
		if k := transitionKey(e); k != "" {
			got[k]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := w.snapshot()
	w.mu.Lock()
	times := w.times
	w.mu.Unlock()
	var c transitionCount
	for k, n := range want {
		c.Made += n
		g := got[k]
		c.Recorded += min(g, n)
		if g > n {
			c.Duplicated += g - n
		}
		if g < n {
			c.Missing += n - g
			c.MissingKeys = append(c.MissingKeys, k)
			c.MissingTimes = append(c.MissingTimes, times[k]...)
		}
	}
	for k, g := range got {
		if want[k] == 0 {
			c.Invented += g
			c.InventedKeys = append(c.InventedKeys, k)
		}
	}
	sort.Strings(c.MissingKeys)
	sort.Strings(c.InventedKeys)
	return c
}

func (c transitionCount) String() string {
	return fmt.Sprintf("made %d, recorded %d, duplicated %d, missing %d, invented %d", c.Made, c.Recorded, c.Duplicated, c.Missing, c.Invented)
}

// coverageOf reads the recorder gaps a store's spans leave in w.
func coverageOf(t *testing.T, dsn string, w event.Window) []analysis.RecorderGap {
	t.Helper()
	ctx := context.Background()
	st := openDSN(t, dsn)
	c, err := analysis.ReadCoverage(ctx, st, w.From, w.To)
	if err != nil {
		t.Fatal(err)
	}
	return c.InWindow(w)
}

// sumAttr sums an integer attribute over a store's events of kind k.
func sumAttr(t *testing.T, dsn string, k event.Kind, attr string) (sum int64, n int) {
	t.Helper()
	ctx := context.Background()
	st := openDSN(t, dsn)
	err := st.Scan(ctx, store.Query{Kinds: []event.Kind{k}}, func(e *event.Event) error {
		n++
		var v int64
		fmt.Sscan(e.Attrs[attr], &v)
		sum += v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sum, n
}

// copyClientFailures copies a store's client failures into another, as
// `drainscope import` would put a client's log beside an agent's record.
func copyClientFailures(t *testing.T, from store.Store, dsn string) int {
	t.Helper()
	ctx := context.Background()
	evs, err := store.Events(ctx, from, store.Query{Kinds: []event.Kind{event.ClientFailure}})
	if err != nil {
		t.Fatal(err)
	}
	if err := openDSN(t, dsn).Append(ctx, evs); err != nil {
		t.Fatal(err)
	}
	return len(evs)
}

// faultTimes are when the faults of TestAgentInTheLab landed.
type faultTimes struct {
	killAt, restartAt, pauseAt, resumeAt time.Time
	lastScrape                           writeCounts
	// upgradeAt is when the fourth agent got SIGTERM, upgradedAt when
	// its new process started; upgradeStats the old one's last counters.
	upgradeAt, upgradedAt time.Time
	upgradeStats          map[string]int64
}

// writeCounts is what an agent's /metrics said of its store writes.
type writeCounts struct {
	written, backlog, dropped float64
	ok                        bool
}

func (s writeCounts) String() string {
	if !s.ok {
		return "no /metrics answer"
	}
	return fmt.Sprintf("its /metrics: %.0f written, %.0f waiting, %.0f dropped", s.written, s.backlog, s.dropped)
}

func scrapeWritten(p *agentProc) writeCounts {
	code, body := p.get("/metrics")
	if code != 200 {
		return writeCounts{}
	}
	w, _ := metricValue(body, "drainscope_store_events_written_total")
	b, _ := metricValue(body, "drainscope_store_backlog_events")
	d, _ := metricValue(body, "drainscope_events_dropped_total")
	return writeCounts{written: w, backlog: b, dropped: d, ok: true}
}

// faultRun is what checkFaults reads: the three agents' stores and their
// last counters, the test's own watch, when the faults landed.
type faultRun struct {
	c                                          *scenario.Cluster
	tw                                         *transitionWatch
	f                                          faultTimes
	from, to                                   time.Time
	labStore                                   store.Store
	big, small, killed, upgraded               string           // DSNs
	bigStats, smallStats, killedSt, upgradedSt map[string]int64 // as each logged when it stopped
}

// checkFaults checks what each fault cost, against the API server's own
// transitions and the agents' own counts, and logs the rows of
// docs/reliability.md's table ("reliability row:").
func checkFaults(t *testing.T, r faultRun) {
	t.Helper()
	w := event.Window{From: r.from.UnixNano(), To: r.to.UnixNano()}
	f := r.f
	row := func(format string, a ...any) { t.Logf("reliability row: "+format, a...) }

	// Postgres unreachable 30 s and the API server frozen 20 s, under an
	// agent whose buffer outlasts both: nothing lost, nothing doubled,
	// and no gap in its record.
	tc := compareTransitions(t, r.big, r.from, r.to, r.tw)
	gaps := coverageOf(t, r.big, w)
	t.Logf("agent (buffer 1,000,000) through both outages: transitions %s; gaps %v", tc, gaps)
	if tc.Made == 0 || tc.Missing != 0 || tc.Duplicated != 0 || tc.Invented != 0 {
		t.Errorf("transitions %s: want every one the API server made recorded exactly once; missing %q, invented %q", tc, tc.MissingKeys, tc.InventedKeys)
	}
	if len(gaps) != 0 {
		t.Errorf("the agent whose buffer covered the outages has gaps in its record: %v", gaps)
	}
	row("| Postgres unreachable (agent's buffer 1,000,000) | 30 s | %d | %d | %d | 0 | %d made, %d recorded | none: no gap | – |",
		r.bigStats["received"], r.bigStats["written"], r.bigStats["dropped"], tc.Made, tc.Recorded)
	row("| kube-apiserver frozen (SIGSTOP) | %.1f s | (same agent) | | | 0 | (as above) | none: no gap | – |", f.resumeAt.Sub(f.pauseAt).Seconds())

	// The 200-event buffer: every drop counted in the spans that
	// vouch for its record, and said as a gap.
	spanDrops, spans := sumAttr(t, r.small, event.RecorderCoverage, event.AttrDropped)
	gapsS := coverageOf(t, r.small, event.Window{From: r.from.Add(-time.Minute).UnixNano(), To: r.to.UnixNano()})
	var saidDrops int64
	for _, g := range gapsS {
		if g.What == analysis.GapDropped {
			saidDrops += g.Lost
		}
	}
	tcS := compareTransitions(t, r.small, r.from, r.to, r.tw)
	t.Logf("agent (buffer 200): dropped %d; its %d spans count %d dropped; gaps in the window say %d; transitions %s",
		r.smallStats["dropped"], spans, spanDrops, saidDrops, tcS)
	if spanDrops != r.smallStats["dropped"] || saidDrops == 0 {
		t.Errorf("the spans count %d dropped events and the gaps %d, the agent %d: want every drop counted and said", spanDrops, saidDrops, r.smallStats["dropped"])
	}
	if tcS.Duplicated != 0 || tcS.Invented != 0 {
		t.Errorf("overloaded agent: transitions %s: none may be doubled or invented", tcS)
	}
	row("| agent overloaded (buffer 200 events) | the outage | %d | %d | %d, every one counted in its spans | 0 | %d made, %d recorded | dropped: %d gap spans | unexplained where a failure's evidence lies in one |",
		r.smallStats["received"], r.smallStats["written"], r.smallStats["dropped"], tcS.Made, tcS.Recorded, countWhat(gapsS, analysis.GapDropped))

	// The agent SIGKILLed and started again, and the one upgraded: each
	// gap found from the agent's own spans, the transitions it missed all
	// inside it, none doubled by its relist, and the failures whose
	// evidence lies in it unexplained, naming it.
	copyClientFailures(t, r.labStore, r.big)
	resB := analyzeDSN(t, r.big, w)
	t.Logf("the window from the whole record: %s", causeCounts(resB))
	k := checkRestart(t, r, w, r.killed, "SIGKILLed", f.killAt, f.restartAt)
	row("| agent SIGKILLed, started again 4 s later | %.1f s down; its record's gap %.1f s | %.0f written before (its /metrics), %d after | %d | what it held is lost with it (%.0f waiting at its last /metrics) | %d | %d made, %d recorded | %s |",
		f.restartAt.Sub(f.killAt).Seconds(), k.gapSeconds(), f.lastScrape.written, r.killedSt["received"], k.stored, f.lastScrape.backlog,
		k.tc.Duplicated, k.tc.Made, k.tc.Recorded, k.said)
	u := checkRestart(t, r, w, r.upgraded, "upgraded", f.upgradeAt, f.upgradedAt)
	produced := f.upgradeStats["received"] + r.upgradedSt["received"]
	dropped := f.upgradeStats["dropped"] + r.upgradedSt["dropped"]
	t.Logf("upgraded agent: produced %d (%d + %d), stored %d, dropped %d", produced, f.upgradeStats["received"], r.upgradedSt["received"], u.stored, dropped)
	if int64(u.stored) != produced || dropped != 0 || produced == 0 {
		t.Errorf("upgraded agent: produced %d, stored %d, dropped %d: SIGTERM flushes, want every event stored", produced, u.stored, dropped)
	}
	row("| agent upgraded (SIGTERM, the new one started at once) | %.1f s down; its record's gap %.1f s | %d + %d | %d | %d | %d | %d made, %d recorded | %s |",
		f.upgradedAt.Sub(f.upgradeAt).Seconds(), u.gapSeconds(), f.upgradeStats["received"], r.upgradedSt["received"], u.stored, dropped,
		u.tc.Duplicated, u.tc.Made, u.tc.Recorded, u.said)
}

// restartCheck is what checkRestart found of one agent's restart.
type restartCheck struct {
	gap    analysis.RecorderGap
	tc     transitionCount
	stored int
	said   string // what the report said of the failures in the gap
}

func (c restartCheck) gapSeconds() float64 { return float64(c.gap.To-c.gap.From) / 1e9 }

// checkRestart checks the record of an agent stopped at at (how) and
// started again at started.
func checkRestart(t *testing.T, r faultRun, w event.Window, dsn, how string, at, started time.Time) restartCheck {
	t.Helper()
	var out restartCheck
	gaps := coverageOf(t, dsn, w)
	found := false
	for _, g := range gaps {
		// The gap of the restart: it overlaps the time from the stop to
		// the new process's start (an agent stopped with SIGTERM ends
		// its last span a moment after the signal was sent).
		if g.What == analysis.GapNotRunning && g.From <= started.UnixNano() && g.To >= at.UnixNano() && g.Node != "" {
			out.gap, found = g, true
		}
	}
	if !found {
		t.Fatalf("%s agent: no not-running gap at %s in its record: %v", how, at.UTC().Format("15:04:05.000"), gaps)
	}
	lead, lag := at.Sub(time.Unix(0, out.gap.From)), time.Unix(0, out.gap.To).Sub(started)
	t.Logf("%s agent's gap: %s (from %v before it stopped to %v after the new one started)", how, out.gap, lead, lag)
	if lead < -time.Second || lead > 2500*time.Millisecond || lag < 0 || lag > time.Minute {
		t.Errorf("%s agent's gap %s: want it from at most 2.5 s (twice the 1 s interval) before it stopped (or the moment after, for a SIGTERM) to the new one's readiness", how, out.gap)
	}
	out.tc = compareTransitions(t, dsn, r.from, r.to, r.tw)
	outside := 0
	for _, m := range out.tc.MissingTimes {
		if m.UnixNano() < out.gap.From || m.UnixNano() > out.gap.To+int64(time.Second) {
			outside++
		}
	}
	t.Logf("%s agent: transitions %s; missing %q", how, out.tc, out.tc.MissingKeys)
	if out.tc.Duplicated != 0 || out.tc.Invented != 0 || outside != 0 {
		t.Errorf("%s agent: transitions %s, %d missing outside its gap: want none doubled or invented, and every one missed inside the gap", how, out.tc, outside)
	}
	out.stored, _ = countStored(t, dsn)

	nf := copyClientFailures(t, r.labStore, dsn)
	res := analyzeDSN(t, dsn, w)
	inGap, named, wrong, near := 0, 0, 0, 0
	var examples []string
	for _, af := range res.Failures {
		tt := af.Failure.Time
		if tt < out.gap.From || tt > out.gap.To {
			if strings.Contains(strings.Join(af.Missing, " "), "a complete record: ") {
				near++ // its evidence (the kernel window before it) reaches into a gap
			}
			continue
		}
		inGap++
		if af.Cause != analysis.CauseUnexplained {
			wrong++
			t.Errorf("%s agent: failure at %s inside the gap %s: cause %s; want unexplained", how, time.Unix(0, tt).UTC().Format("15:04:05.000"), out.gap, af.Cause)
		}
		if strings.Contains(strings.Join(af.Missing, " "), out.gap.String()) {
			named++
		} else if len(examples) < 3 {
			examples = append(examples, fmt.Sprintf("%s: %q", af.Cause, af.Missing))
		}
	}
	t.Logf("%s agent: client failures copied: %d; in its gap: %d, %d naming it (%v), %d with a cause; outside it, %d whose evidence reaches into a gap; its record's causes: %s",
		how, nf, inGap, named, examples, wrong, near, causeCounts(res))
	if inGap > 0 && named != inGap {
		t.Errorf("%s agent: %d of %d failures inside the gap name it", how, named, inGap)
	}
	if res.Stats.InRecorderGap < inGap {
		t.Errorf("%s agent: the analysis counts %d failures in a gap, fewer than the %d inside it", how, res.Stats.InRecorderGap, inGap)
	}
	out.said = "none fell in it"
	if inGap > 0 {
		out.said = fmt.Sprintf("%d failures, every one unexplained: %q; %d more whose evidence reaches into it; its record's causes: %s",
			inGap, "unexplained: "+out.gap.String(), near, causeCounts(res))
	}
	return out
}

func countWhat(gs []analysis.RecorderGap, what string) int {
	n := 0
	for _, g := range gs {
		if g.What == what {
			n++
		}
	}
	return n
}

func analyzeDSN(t *testing.T, dsn string, w event.Window) *analysis.Result {
	t.Helper()
	ctx := context.Background()
	st := openDSN(t, dsn)
	res, err := analysis.AnalyzeWith(ctx, st, store.Query{Window: w}, analysis.Options{MaxFailures: -1})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func causeCounts(r *analysis.Result) string {
	var parts []string
	for _, c := range r.Causes {
		parts = append(parts, fmt.Sprintf("%s %d", c.Cause, c.Count))
	}
	return strings.Join(parts, ", ")
}
