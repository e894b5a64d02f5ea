package metrics

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC).UnixNano()

const ms = int64(time.Millisecond)

// podEvents builds a pod's termination: deletion at t, then the given
// events at offsets from it.
type seq struct {
	ref  event.PodRef
	wl   event.Workload
	ip   netip.Addr
	evs  []event.Event
	base int64
}

func newSeq(name, uid string, ip string, base int64) *seq {
	return &seq{
		ref:  event.PodRef{Namespace: "shop", Name: name, UID: uid},
		wl:   event.Workload{Kind: "Deployment", Name: "web"},
		ip:   netip.MustParseAddr(ip),
		base: base,
	}
}

func (s *seq) add(off int64, k event.Kind, src event.Source, f func(*event.Event)) *seq {
	e := event.Event{Time: s.base + off, Kind: k, Source: src, Node: "node-a", Pod: s.ref, Workload: s.wl}
	if f != nil {
		f(&e)
	}
	e.Seal()
	s.evs = append(s.evs, e)
	return s
}

func (s *seq) ep(port uint16) func(*event.Event) {
	return func(e *event.Event) {
		e.Local, e.Service, e.Slice = netip.AddrPortFrom(s.ip, port), "web", "web-abcde"
	}
}

var client = netip.MustParseAddrPort("10.244.0.200:40000")

// exitPod: SIGTERM 100 ms after deletion, 300 ms before the endpoint
// leaves rotation; the process exits 200 ms after deletion, closing one
// keep-alive connection at exit; the client's next request on it is reset.
func exitPod() *seq {
	s := newSeq("web-1", "uid-1", "10.244.0.11", t0)
	// Its endpoint was added not ready 20 s earlier and became ready: that
	// is not leaving rotation.
	s.add(-20_000*ms, event.EndpointAdded, event.SourceWatcher, func(e *event.Event) {
		s.ep(8080)(e)
		e.Attrs = map[string]string{event.AttrConditions: "ready=false,serving=false,terminating=false"}
	})
	s.add(-19_000*ms, event.EndpointReady, event.SourceWatcher, s.ep(8080))
	s.add(0, event.PodDeletion, event.SourceWatcher, func(e *event.Event) { e.Duration = int64(30 * time.Second) })
	s.add(100*ms, event.Signal, event.SourceKernel, func(e *event.Event) { e.Signal, e.PID, e.Comm = 15, 42, "server" })
	s.add(200*ms, event.ConnClosed, event.SourceKernel, func(e *event.Event) {
		e.PID, e.Local, e.Remote, e.Reason, e.Flags = 42, netip.AddrPortFrom(s.ip, 8080), client, "local", event.FlagAtExit
	})
	s.add(201*ms, event.ProcessExit, event.SourceKernel, func(e *event.Event) { e.PID, e.Comm = 42, "server" })
	s.add(300*ms, event.RSTSent, event.SourceKernel, func(e *event.Event) {
		e.Local, e.Remote, e.Reason = netip.AddrPortFrom(s.ip, 8080), client, "tcp_abort_on_data"
	})
	s.add(400*ms, event.EndpointNotReady, event.SourceWatcher, s.ep(8080))
	s.add(410*ms, event.EndpointTerminating, event.SourceWatcher, s.ep(8080))
	return s
}

// killedPod: SIGTERM ignored, SIGKILL when the 2 s grace period ran out.
func killedPod() *seq {
	s := newSeq("web-2", "uid-2", "10.244.0.12", t0+5*int64(time.Second))
	s.add(0, event.PodDeletion, event.SourceWatcher, func(e *event.Event) { e.Duration = int64(2 * time.Second) })
	s.add(50*ms, event.EndpointNotReady, event.SourceWatcher, s.ep(8080))
	s.add(100*ms, event.Signal, event.SourceKernel, func(e *event.Event) { e.Signal, e.PID = 15, 43 })
	s.add(2000*ms, event.Signal, event.SourceKernel, func(e *event.Event) { e.Signal, e.PID = 9, 43 })
	s.add(2001*ms, event.ProcessExit, event.SourceKernel, func(e *event.Event) { e.Signal, e.PID = 9, 43 })
	return s
}

// earlyKillPod: a SIGKILL 100 ms after deletion with a 30 s grace period
// (a runtime cleaning up, an OOM kill): not the grace period running out.
func earlyKillPod() *seq {
	s := newSeq("web-3", "uid-3", "10.244.0.13", t0+10*int64(time.Second))
	s.add(0, event.PodDeletion, event.SourceWatcher, func(e *event.Event) { e.Duration = int64(30 * time.Second) })
	s.add(10*ms, event.Signal, event.SourceKernel, func(e *event.Event) { e.Signal, e.PID = 15, 44 })
	s.add(100*ms, event.Signal, event.SourceKernel, func(e *event.Event) { e.Signal, e.PID = 9, 44 })
	s.add(101*ms, event.ProcessExit, event.SourceKernel, func(e *event.Event) { e.Signal, e.PID = 9, 44 })
	return s
}

func counter(t *testing.T, m *Metrics, name string, labels ...string) float64 {
	t.Helper()
	switch name {
	case "cut":
		return testutil.ToFloat64(m.cutAtExit.WithLabelValues(labels...))
	case "kill":
		return testutil.ToFloat64(m.sigkills.WithLabelValues(labels...))
	case "inferred":
		return testutil.ToFloat64(m.inferred.WithLabelValues(labels...))
	case "term":
		return testutil.ToFloat64(m.terminations.WithLabelValues(labels...))
	}
	t.Fatalf("no counter %s", name)
	return 0
}

func TestRolloutSignalsFromShuffledEvents(t *testing.T) {
	m := New("test", "dev")
	r := m.NewRollouts(RolloutOptions{})
	var all []event.Event
	all = append(all, exitPod().evs...)
	all = append(all, killedPod().evs...)
	all = append(all, earlyKillPod().evs...)
	// Producers hand events over out of order (the kernel's arrive late).
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	for i := range all {
		r.Add(&all[i])
	}
	r.Flush()

	wl := []string{"shop", "Deployment/web"}
	if got := counter(t, m, "term", wl...); got != 3 {
		t.Errorf("terminations = %v, want 3", got)
	}
	if got := counter(t, m, "cut", wl...); got != 1 {
		t.Errorf("connections cut at exit = %v, want 1", got)
	}
	if got := counter(t, m, "kill", wl...); got != 1 {
		t.Errorf("SIGKILLs after grace = %v, want 1", got)
	}
	if got := counter(t, m, "inferred", "shop", "Deployment/web", "keepalive_at_exit", "proven"); got != 1 {
		t.Errorf("inferred keep-alive failures = %v, want 1\n%s", got, scrape(t, m))
	}
	// Gaps: web-1 SIGTERM 300 ms before rotation ended; web-2 50 ms after.
	body := scrape(t, m)
	for _, want := range []string{
		`drainscope_rollout_sigterm_minus_endpoint_removal_seconds_count{namespace="shop",workload="Deployment/web"} 2`,
		`drainscope_rollout_sigterm_minus_endpoint_removal_seconds_bucket{namespace="shop",workload="Deployment/web",le="-0.25"} 1`,
		`drainscope_rollout_sigterm_minus_endpoint_removal_seconds_bucket{namespace="shop",workload="Deployment/web",le="0"} 1`,
		`drainscope_rollout_sigterm_minus_endpoint_removal_seconds_bucket{namespace="shop",workload="Deployment/web",le="0.1"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if n := testutil.ToFloat64(m.lateEvents); n != 0 {
		t.Errorf("%v events counted late:\n%s", n, body)
	}
}

// The gap metric is the analysis's: SIGTERM minus the time the last node
// took the endpoint out, each node counting its first leave. Here node-a
// takes it out at once, node-b only when it is removed 8 s later; SIGTERM
// at 5 s came 3 s before the endpoint left rotation everywhere.
func TestGapIsTheLastNodesLeave(t *testing.T) {
	m := New("test", "dev")
	r := m.NewRollouts(RolloutOptions{})
	s := newSeq("web-4", "uid-4", "10.244.0.14", t0)
	s.add(-10_000*ms, event.EndpointReady, event.SourceWatcher, s.ep(8080))
	s.add(-10_000*ms, event.EndpointReady, event.SourceWatcher, func(e *event.Event) { s.ep(8080)(e); e.Node = "node-b" })
	s.add(0, event.PodDeletion, event.SourceWatcher, func(e *event.Event) { e.Duration = int64(30 * time.Second) })
	s.add(100*ms, event.EndpointNotReady, event.SourceWatcher, s.ep(8080))
	s.add(5000*ms, event.Signal, event.SourceKernel, func(e *event.Event) { e.Signal, e.PID = 15, 44 })
	s.add(5001*ms, event.ProcessExit, event.SourceKernel, func(e *event.Event) { e.PID = 44 })
	s.add(8000*ms, event.EndpointRemoved, event.SourceWatcher, func(e *event.Event) { s.ep(8080)(e); e.Node = "node-b" })
	for i := range s.evs {
		r.Add(&s.evs[i])
	}
	r.Flush()
	body := scrape(t, m)
	for _, want := range []string{
		`drainscope_rollout_sigterm_minus_endpoint_removal_seconds_count{namespace="shop",workload="Deployment/web"} 1`,
		`drainscope_rollout_sigterm_minus_endpoint_removal_seconds_sum{namespace="shop",workload="Deployment/web"} -3`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}
}

// The ticker reports a pod once it has been quiet for Retain, without a
// Flush and without any later event.
func TestRolloutSignalsReportedWhenQuiet(t *testing.T) {
	m := New("test", "dev")
	now := time.Unix(0, t0)
	r := m.NewRollouts(RolloutOptions{Now: func() time.Time { return now }, Analysis: defaultRetain(5 * time.Second)})
	for _, e := range exitPod().evs {
		r.Add(&e)
	}
	step := func(d time.Duration) {
		now = now.Add(d)
		r.advance(now.Add(-r.opts.Delay).UnixNano())
	}
	step(6 * time.Second) // analysed up to +3 s: past the lookahead, not yet quiet for Retain
	if got := counter(t, m, "term", "shop", "Deployment/web"); got != 0 {
		t.Fatalf("reported after 2.6 s of quiet: %v", got)
	}
	if got := counter(t, m, "inferred", "shop", "Deployment/web", "keepalive_at_exit", "proven"); got != 1 {
		t.Fatalf("the inferred failure was not decided one lookahead later: %v", got)
	}
	for range 20 {
		step(time.Second)
	}
	if got := counter(t, m, "term", "shop", "Deployment/web"); got != 1 {
		t.Fatalf("terminations = %v after the pod was quiet for Retain", got)
	}
	// An event older than what was analysed is counted, not analysed.
	late := exitPod().evs[0]
	r.Add(&late)
	if got := testutil.ToFloat64(m.lateEvents); got != 1 {
		t.Fatalf("late events = %v", got)
	}
}

func TestRunFlushesAtTheEnd(t *testing.T) {
	m := New("test", "dev")
	// The clock stands at the events' time, so no tick can make them late.
	r := m.NewRollouts(RolloutOptions{Tick: time.Millisecond, Now: func() time.Time { return time.Unix(0, t0) }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	for _, e := range killedPod().evs {
		r.Add(&e)
	}
	cancel()
	<-done
	if got := counter(t, m, "kill", "shop", "Deployment/web"); got != 1 {
		t.Fatalf("SIGKILLs = %v after Run ended", got)
	}
}

func defaultRetain(d time.Duration) (o analysis.Options) {
	o.Retain = d
	return o
}

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

type fakeStore struct {
	store.Store
	fail error
	got  int
}

func (f *fakeStore) Append(_ context.Context, b []event.Event) error {
	if f.fail != nil {
		return f.fail
	}
	f.got += len(b)
	return nil
}

func TestWrapStoreCountsByKindAndTimes(t *testing.T) {
	m := New("test", "dev")
	fs := &fakeStore{}
	st := m.WrapStore(fs)
	evs := append(exitPod().evs, killedPod().evs...)
	if err := st.Append(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	fs.fail = errors.New("down")
	if err := st.Append(context.Background(), evs); err == nil {
		t.Fatal("error swallowed")
	}
	if got := testutil.ToFloat64(m.stored.WithLabelValues("signal")); got != 3 {
		t.Errorf("stored signals = %v, want 3", got)
	}
	body := scrape(t, m)
	for _, want := range []string{
		`drainscope_store_write_duration_seconds_count{outcome="ok"} 1`,
		`drainscope_store_write_duration_seconds_count{outcome="error"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestScrapeTimeSources(t *testing.T) {
	m := New("test", "dev")
	m.WatchWriter(100, func() store.WriterStats {
		return store.WriterStats{Received: 130, Written: 70, Dropped: 30, Rejected: 2, Pending: 28, Failures: 4}
	})
	m.WatchKernel(func() (KernelStats, bool) {
		return KernelStats{
			Produced: map[event.Kind]uint64{event.Signal: 10}, Dropped: map[event.Kind]uint64{event.Signal: 2},
			ProgramsLoaded: 5,
		}, true
	})
	m.WatchWatches(func() WatchStats { return WatchStats{Restarts: 3, SliceRecorder: true, Synced: true} })
	m.WatchReady(func() bool { return true })
	m.SetKernelEvidence(map[string]bool{"refused_connections": false, "signals": true})
	body := scrape(t, m)
	for _, want := range []string{
		`drainscope_events_dropped_total{reason="buffer_full"} 30`,
		`drainscope_events_dropped_total{reason="rejected_row"} 2`,
		`drainscope_events_dropped_total{reason="ring_buffer"} 2`,
		`drainscope_store_backlog_events 28`,
		`drainscope_store_buffer_limit_events 100`,
		`drainscope_store_write_failures_total 4`,
		`drainscope_kernel_records_dropped_total{kind="signal"} 2`,
		`drainscope_kernel_programs_loaded 5`,
		`drainscope_watch_restarts_total 3`,
		`drainscope_endpointslice_recorder 1`,
		`drainscope_ready 1`,
		`drainscope_kernel_evidence_available{evidence="refused_connections"} 0`,
		`drainscope_kernel_evidence_available{evidence="signals"} 1`,
		`drainscope_build_info{component="test",version="dev"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for _, name := range m.Catalog() {
		if !strings.HasPrefix(name, "drainscope_") {
			t.Errorf("catalog name %s", name)
		}
	}
}
