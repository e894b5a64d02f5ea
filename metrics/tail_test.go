package metrics

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/pgtest"
	"github.com/drainscope/drainscope/store"
)

// stored is an event with the delay after which its agent stored it.
type stored struct {
	e     event.Event
	after time.Duration
}

// leaderModeStream is what two agents in leader mode store for one
// rollout of shop/Deployment/web. node-a holds the Lease: it records the
// EndpointSlice transitions of every node's pods, and its own pods' pod and
// kernel events. node-b records only its own pods' pod and kernel events.
//
//   - web-b1 runs on node-b (the non-leader) and exits at SIGTERM, 50 ms
//     after its deletion, while its endpoint stays in rotation until
//     300 ms: the endpoint-removal race, SIGTERM 250 ms before removal. A
//     SYN its closed port refuses at 150 ms is a failure the kernel proves.
//   - web-a1 runs on node-a with a 5 s preStop: SIGTERM 4.9 s after its
//     endpoint left rotation.
//
// Watch events are stored 50 ms after their time, kernel events 200 ms
// after; one connection close of web-a1 is stored 5 s late (a short store
// outage on node-a, longer than the 3 s Delay) and one 20 s late.
func leaderModeStream(base int64) []stored {
	var out []stored
	ep := func(ip string) func(*event.Event) {
		return func(e *event.Event) {
			e.Local, e.Service, e.Slice = netip.AddrPortFrom(netip.MustParseAddr(ip), 8080), "web", "web-abcde"
		}
	}
	add := func(pod *seq, node string, off int64, k event.Kind, after time.Duration, f func(*event.Event)) {
		pod.add(off, k, sourceOf(k), func(e *event.Event) {
			e.Node = node
			if f != nil {
				f(e)
			}
		})
		out = append(out, stored{pod.evs[len(pod.evs)-1], after})
	}
	watch, kernel := 50*time.Millisecond, 200*time.Millisecond

	b := newSeq("web-b1", "uid-b1", "10.244.1.11", base)
	add(b, "node-a", -20_000*ms, event.EndpointReady, watch, ep("10.244.1.11"))
	add(b, "node-b", 0, event.PodDeletion, watch, func(e *event.Event) { e.Duration = int64(30 * time.Second) })
	add(b, "node-b", 50*ms, event.Signal, kernel, func(e *event.Event) { e.Signal, e.PID, e.Comm = 15, 42, "server" })
	add(b, "node-b", 60*ms, event.ListenerClosed, kernel, func(e *event.Event) {
		e.PID, e.Local, e.Flags = 42, netip.MustParseAddrPort("10.244.1.11:8080"), event.FlagAtExit
	})
	add(b, "node-b", 61*ms, event.ProcessExit, kernel, func(e *event.Event) { e.PID, e.Comm = 42, "server" })
	add(b, "node-b", 150*ms, event.ConnRefused, kernel, func(e *event.Event) {
		e.Local, e.Remote = netip.MustParseAddrPort("10.244.1.11:8080"), netip.MustParseAddrPort("10.244.0.200:41000")
	})
	add(b, "node-a", 300*ms, event.EndpointNotReady, watch, ep("10.244.1.11"))
	add(b, "node-a", 310*ms, event.EndpointTerminating, watch, ep("10.244.1.11"))
	add(b, "node-b", 400*ms, event.ContainerTerminated, watch, nil)
	add(b, "node-a", 1_000*ms, event.EndpointRemoved, watch, ep("10.244.1.11"))

	a := newSeq("web-a1", "uid-a1", "10.244.0.11", base+2_000*ms)
	add(a, "node-a", -20_000*ms, event.EndpointReady, watch, ep("10.244.0.11"))
	add(a, "node-a", 0, event.PodDeletion, watch, func(e *event.Event) { e.Duration = int64(30 * time.Second) })
	add(a, "node-a", 100*ms, event.EndpointNotReady, watch, ep("10.244.0.11"))
	add(a, "node-a", 110*ms, event.EndpointTerminating, watch, ep("10.244.0.11"))
	add(a, "node-a", 5_000*ms, event.Signal, kernel, func(e *event.Event) { e.Signal, e.PID = 15, 43 })
	add(a, "node-a", 5_010*ms, event.ListenerClosed, kernel, func(e *event.Event) {
		e.PID, e.Local = 43, netip.MustParseAddrPort("10.244.0.11:8080")
	})
	add(a, "node-a", 5_500*ms, event.ConnClosed, 5*time.Second, func(e *event.Event) {
		e.PID, e.Local, e.Remote, e.Reason = 43, netip.MustParseAddrPort("10.244.0.11:8080"), netip.MustParseAddrPort("10.244.0.201:40001"), "local"
	})
	add(a, "node-a", 5_600*ms, event.ConnClosed, 20*time.Second, func(e *event.Event) {
		e.PID, e.Local, e.Remote, e.Reason = 43, netip.MustParseAddrPort("10.244.0.11:8080"), netip.MustParseAddrPort("10.244.0.201:40002"), "local"
	})
	add(a, "node-a", 6_000*ms, event.ProcessExit, kernel, func(e *event.Event) { e.PID = 43 })
	add(a, "node-a", 7_000*ms, event.EndpointRemoved, watch, ep("10.244.0.11"))
	return out
}

func sourceOf(k event.Kind) event.Source {
	if k.IsKernel() {
		return event.SourceKernel
	}
	return event.SourceWatcher
}

// TestTailComputesEveryNodesSignals stores two leader-mode agents' events
// in a real store as the agents would, over time and some of them late,
// while a server's Tail reads them: the pod on the non-leader gets its
// SIGTERM-versus-removal gap (the race) and its proven failure, which the
// non-leader alone could not compute, and each late event is either
// analysed or counted.
func TestTailComputesEveryNodesSignals(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			var st store.Store
			var err error
			ctx := context.Background()
			if backend == "sqlite" {
				st, err = store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "events.db"))
			} else {
				st, err = store.OpenPostgres(ctx, pgtest.Schema(t))
			}
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			testTail(t, st)
		})
	}
}

func testTail(t *testing.T, st store.Store) {
	ctx := context.Background()
	base := t0
	stream := leaderModeStream(base)
	// The clock starts 1 s before the deletion; what an agent stored
	// before then (the endpoints becoming ready) is in the store already.
	now := time.Unix(0, base-int64(time.Second))
	m := New("serve", "dev")
	r := m.NewRollouts(RolloutOptions{Now: func() time.Time { return now }, Analysis: defaultRetain(5 * time.Second)})
	tl := &tail{r: r, st: st, log: testLogger(), from: now.UnixNano() - 30*int64(time.Second), seen: map[seenKey]struct{}{}}
	storedAt := func(s stored) int64 { return s.e.Time + int64(s.after) }
	slices.SortFunc(stream, func(a, b stored) int { return int(storedAt(a) - storedAt(b)) })
	next := 0
	end := now.Add(40 * time.Second)
	for ; now.Before(end); now = now.Add(250 * time.Millisecond) {
		// The agents' writers: one batch per node each step, of what is due.
		var batch []event.Event
		for next < len(stream) && storedAt(stream[next]) <= now.UnixNano() {
			batch = append(batch, stream[next].e)
			next++
		}
		if len(batch) > 0 {
			if err := st.Append(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
		tl.poll(ctx)
	}
	if next != len(stream) {
		t.Fatalf("%d events never stored", len(stream)-next)
	}

	body := scrape(t, m)
	wl := []string{"shop", "Deployment/web"}
	if got := counter(t, m, "term", wl...); got != 2 {
		t.Errorf("terminations = %v, want 2\n%s", got, body)
	}
	for _, want := range []string{
		// Both pods have a gap; web-b1's, on the non-leader, is the race.
		`drainscope_rollout_sigterm_minus_endpoint_removal_seconds_count{namespace="shop",workload="Deployment/web"} 2`,
		`drainscope_rollout_sigterm_minus_endpoint_removal_seconds_bucket{namespace="shop",workload="Deployment/web",le="-0.25"} 1`,
		`drainscope_rollout_sigterm_minus_endpoint_removal_seconds_bucket{namespace="shop",workload="Deployment/web",le="0"} 1`,
		`drainscope_rollout_sigterm_minus_endpoint_removal_seconds_bucket{namespace="shop",workload="Deployment/web",le="5"} 2`,
		`drainscope_rollout_sigterm_minus_endpoint_removal_seconds_sum{namespace="shop",workload="Deployment/web"} 4.65`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if got := counter(t, m, "inferred", "shop", "Deployment/web", "endpoint_race", "proven"); got != 1 {
		t.Errorf("inferred endpoint-race failures = %v, want the refused SYN on node-b\n%s", got, grep(body, "inferred"))
	}
	// The close stored 5 s late is read again (within twice the Delay)
	// and counted late; the one stored 20 s late is not read at all.
	if got := testutil.ToFloat64(m.lateEvents); got != 1 {
		t.Errorf("late events = %v, want 1", got)
	}
	// Rescans read most events several times; each counted once.
	if got := counter(t, m, "cut", wl...); got != 0 {
		t.Errorf("connections cut at exit = %v, want 0", got)
	}
	if n := len(tl.seen); n > len(stream) {
		t.Errorf("the tail remembers %d events, more than were stored", n)
	}
}

// Without the server, each agent analyses its own events: in leader mode
// the non-leader has no endpoint transition, so its pod has no gap and the
// race goes unseen. This is what the tail exists for.
func TestOneNodesEventsMissTheRace(t *testing.T) {
	m := New("agent", "dev")
	r := m.NewRollouts(RolloutOptions{})
	for _, s := range leaderModeStream(t0) {
		if s.e.Node == "node-b" {
			r.Add(&s.e)
		}
	}
	r.Flush()
	body := scrape(t, m)
	if !strings.Contains(body, `drainscope_rollout_sigterm_minus_endpoint_removal_seconds_count{namespace="shop",workload="Deployment/web"} 0`) {
		t.Fatalf("node-b alone computed a gap:\n%s", grep(body, "sigterm_minus"))
	}
	if got := counter(t, m, "term", "shop", "Deployment/web"); got != 1 {
		t.Fatalf("terminations = %v, want node-b's one pod", got)
	}
}

// Tail itself, on the real clock: it reads the store until its context
// ends, then reads once more and flushes, so every pod stored is reported.
func TestTailRunsUntilCancelled(t *testing.T) {
	ctx := context.Background()
	st, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := New("serve", "dev")
	r := m.NewRollouts(RolloutOptions{})
	base := time.Now().Add(-time.Minute).UnixNano()
	var batch []event.Event
	for _, s := range leaderModeStream(base) {
		batch = append(batch, s.e)
	}
	if err := st.Append(ctx, batch); err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- r.Tail(tctx, st, TailOptions{Poll: 10 * time.Millisecond, Start: base - int64(time.Minute), Logger: testLogger()})
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("Tail returned %v", err)
	}
	if got := counter(t, m, "term", "shop", "Deployment/web"); got != 2 {
		t.Fatalf("terminations = %v, want 2", got)
	}
	body := scrape(t, m)
	if !strings.Contains(body, `drainscope_rollout_sigterm_minus_endpoint_removal_seconds_bucket{namespace="shop",workload="Deployment/web",le="0"} 1`) {
		t.Fatalf("no race reported:\n%s", grep(body, "sigterm_minus"))
	}
}

func testLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A workload's series exist at zero from the moment one of its pods begins
// to end, before its signals are reported: Prometheus sees no increase in
// a series whose first sample is already 1, so without them an alert on a
// workload's first race would not fire.
func TestSeriesExistBeforeTheFirstSignal(t *testing.T) {
	m := New("serve", "dev")
	now := time.Unix(0, t0)
	r := m.NewRollouts(RolloutOptions{Now: func() time.Time { return now }, Analysis: defaultRetain(5 * time.Second)})
	for _, s := range leaderModeStream(t0) {
		if s.e.Pod.Name == "web-b1" {
			r.Add(&s.e)
		}
	}
	r.advance(t0 + 100*ms) // the deletion and SIGTERM analysed, nothing reported
	body := scrape(t, m)
	for _, want := range []string{
		`drainscope_rollout_sigterm_minus_endpoint_removal_seconds_bucket{namespace="shop",workload="Deployment/web",le="0"} 0`,
		`drainscope_rollout_inferred_failures_total{cause="endpoint_race",evidence="proven",namespace="shop",workload="Deployment/web"} 0`,
		`drainscope_rollout_pod_terminations_total{namespace="shop",workload="Deployment/web"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("before any signal, metrics lack %s", want)
		}
	}
	r.advance(t0 + 10_000*ms)
	if got := counter(t, m, "inferred", "shop", "Deployment/web", "endpoint_race", "proven"); got != 1 {
		t.Errorf("inferred endpoint-race failures = %v, want 1", got)
	}
}
