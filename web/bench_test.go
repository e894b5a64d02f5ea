package web

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/eventgen"
)

// denseRollout is a rollout of a busy Service: few pods, each draining
// thousands of connections over tens of seconds, some failing. It has
// about n events; the same seed gives the same events.
func denseRollout(n, pods int, start time.Time, seed uint64) []event.Event {
	r := rand.New(rand.NewPCG(seed, seed+1))
	rec := &recorder{}
	wl := event.Workload{Kind: "Deployment", Name: "storefront"}
	nodes := []string{"node-a", "node-b", "node-c"}
	per := n / pods
	t0 := start.UnixNano()
	for i := range pods {
		p := &fpod{ref: event.PodRef{Namespace: "shop", Name: fmt.Sprintf("storefront-5b8d9-%03d", i), UID: fmt.Sprintf("d0000000-0000-4000-8000-%012d", i), Container: "app"},
			wl: wl, ip: netip.AddrFrom4([4]byte{10, 245, byte(i / 200), byte(1 + i%200)}), node: nodes[i%3], pid: int32(1000 + i), svc: "storefront", comm: "storefront"}
		np := &fpod{ref: event.PodRef{Namespace: "shop", Name: fmt.Sprintf("storefront-9c1e2-%03d", i), UID: fmt.Sprintf("e0000000-0000-4000-8000-%012d", i), Container: "app"},
			wl: wl, ip: netip.AddrFrom4([4]byte{10, 246, byte(i / 200), byte(1 + i%200)}), node: nodes[(i+1)%3], pid: int32(2000 + i), svc: "storefront", comm: "storefront"}
		created := t0 + int64(i)*40*sec
		ready := rec.start(np, created, nodes)
		del := ready + 100*ms
		d := rec.pod(p, del, event.PodDeletion)
		d.Duration = int64(60 * time.Second)
		rec.add(d)
		for j, node := range nodes {
			rec.endpoint(p, del+int64(300+200*j)*ms, event.EndpointNotReady, node)
			rec.endpoint(p, del+int64(302+200*j)*ms, event.EndpointTerminating, node)
		}
		sigterm := del + 5*sec
		s := rec.kernel(p, sigterm, event.Signal)
		s.Signal, s.PeerPID, s.PeerComm = 15, 1, "containerd-shim"
		rec.add(s)
		lc := rec.kernel(p, sigterm+ms, event.ListenerClosed)
		lc.Local = netip.AddrPortFrom(netip.IPv4Unspecified(), 8080)
		rec.add(lc)
		exit := sigterm + 30*sec
		for k := 0; k < per-16; k++ {
			c := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 250, byte(k >> 16), byte(k >> 8)}), uint16(1024+k%60000))
			t := del + r.Int64N(exit-del)
			kind, reason, flags := event.ConnClosed, "local", event.Flags(0)
			switch x := r.IntN(20); {
			case x < 3:
				kind, reason = event.RSTSent, "NOT_SPECIFIED"
			case x < 6:
				reason = "peer"
			case x < 7:
				t, flags = exit+int64(r.IntN(1000))*1000, event.FlagAtExit
			}
			if k%10 == 9 { // a client saw this one fail
				rec.failure(t+int64(r.IntN(3000))*1000, c, event.FailEOF, p, 2*time.Millisecond, "http://storefront/")
				continue
			}
			e := rec.kernel(p, t, kind)
			e.Local, e.Remote, e.Reason, e.Flags = p.addr(), c, reason, flags
			rec.add(e)
		}
		rec.add(rec.kernel(p, exit, event.ProcessExit))
		for j, node := range nodes {
			rec.endpoint(p, exit+int64(80+20*j)*ms, event.EndpointRemoved, node)
		}
	}
	slices.SortStableFunc(rec.events, func(a, b event.Event) int { return cmp.Compare(a.Time, b.Time) })
	return rec.events
}

// timelineOf serves one timeline request and reports the answer and its
// size.
func timelineOf(tb testing.TB, h http.Handler, path string) (*Timeline, int) {
	tb.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		tb.Fatalf("GET %s: %d %s", path, rec.Code, truncate(rec.Body.String(), 300))
	}
	var tl Timeline
	if err := json.Unmarshal(rec.Body.Bytes(), &tl); err != nil {
		tb.Fatal(err)
	}
	return &tl, rec.Body.Len()
}

// biggest returns the rollout with the most events.
func biggest(tb testing.TB, h http.Handler) RolloutSummary {
	tb.Helper()
	l := decode[Rollouts](tb, do(tb, h, http.MethodGet, "/api/v1/rollouts"))
	if len(l.Rollouts) == 0 {
		tb.Fatal("no rollout")
	}
	best := l.Rollouts[0]
	for _, r := range l.Rollouts {
		if r.Events > best.Events {
			best = r
		}
	}
	return best
}

// TestTimelineBounded: however many events a rollout has, one answer stays
// within the limits, and aggregation loses no event: the density bins and
// the individual marks of a lane add up to the events in the view.
func TestTimelineBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 40,000 events")
	}
	evs := denseRollout(40000, 4, time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC), 1)
	st := storeWith(t, evs)
	lim := Limits{Lanes: 50, Marks: 500, LaneSockets: 40, LaneFailures: 60, LaneLandmarks: 32, Cells: 3000, Buckets: 600}
	s := newTestServer(t, st, func(o *Options) {
		o.Limits = lim
		o.Now = func() time.Time { return time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC) }
	})
	ro := biggest(t, s)
	api := ro.Links.API + "/timeline"
	full, size := timelineOf(t, s, api+"?width=1400")
	if !full.Stats.Aggregated || full.Stats.DensityCells == 0 {
		t.Errorf("a view of %d events was not aggregated: %+v", full.Stats.EventsInView, full.Stats)
	}
	if full.Stats.DensityCells > lim.Cells {
		t.Errorf("%d density cells, limit %d", full.Stats.DensityCells, lim.Cells)
	}
	if full.Stats.Marks > lim.Marks+len(full.Lanes)*lim.LaneLandmarks {
		t.Errorf("%d marks, limit %d", full.Stats.Marks, lim.Marks+len(full.Lanes)*lim.LaneLandmarks)
	}
	if size > 400<<10 {
		t.Errorf("answer of %d bytes for %d events", size, full.Stats.EventsInView)
	}
	if full.Stats.EventsInView < 39000 {
		t.Errorf("view holds %d events, want about 40,000", full.Stats.EventsInView)
	}
	checkCounts(t, full)
	base, _ := strconv.ParseInt(full.Base, 10, 64)
	// Zoomed to 20 ms in the middle of a pod's drain, the marks come out
	// one by one.
	var mid int64
	for _, l := range full.Lanes {
		if l.Role == "old" && l.Phases.Sigterm != nil {
			mid = *l.Phases.Sigterm + 10*sec
			break
		}
	}
	zoom, _ := timelineOf(t, s, fmt.Sprintf("%s?from=%d&to=%d&width=1400", api, base+mid-10*ms, base+mid+10*ms))
	marks := 0
	for _, l := range zoom.Lanes {
		marks += len(l.Sockets) + len(l.FailureMarks)
	}
	if marks == 0 || zoom.Stats.Aggregated {
		t.Errorf("zoomed to 20 ms: %d marks, aggregated %v", marks, zoom.Stats.Aggregated)
	}
	checkCounts(t, zoom)
}

func checkCounts(t *testing.T, tl *Timeline) {
	t.Helper()
	for _, l := range tl.Lanes {
		n := len(l.Sockets)
		for _, s := range l.SocketDensity {
			for _, b := range s.Bins {
				n += int(b[1])
				if b[0] < 0 || int(b[0]) >= tl.Buckets {
					t.Errorf("bin %d outside 0..%d", b[0], tl.Buckets)
				}
			}
		}
		if n != l.SocketCount {
			t.Errorf("lane %s: marks and bins hold %d socket events, the view %d", l.Pod.Name, n, l.SocketCount)
		}
		n = len(l.FailureMarks)
		for _, s := range l.FailureDensity {
			for _, b := range s.Bins {
				n += int(b[1])
			}
		}
		if n != l.FailureCount {
			t.Errorf("lane %s: marks and bins hold %d failures, the view %d", l.Pod.Name, n, l.FailureCount)
		}
	}
}

// BenchmarkTimelineAPI times the timeline API on rollouts of 100,000 events
// (-events to change): "wide" is eventgen's rollout of about a thousand pods,
// "dense" eight pods draining thousands of connections each. It reports
// the first answer (which reads the rollout from SQLite and analyses it)
// and then p50/p99 over answers for the whole rollout and two zoomed views,
// with the largest answer's size and what it carried.
//
//	go test ./web -run '^$' -bench TimelineAPI -benchtime 60x
func BenchmarkTimelineAPI(b *testing.B) {
	start := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	shapes := []struct {
		name string
		gen  func() []event.Event
	}{
		{"wide", func() []event.Event { return eventgen.Rollout(*benchEvents, start, 7, "checkout") }},
		{"dense", func() []event.Event { return denseRollout(*benchEvents, 8, start, 7) }},
	}
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			evs := sh.gen()
			st := storeWith(b, evs)
			s := New(Options{Store: st, Now: func() time.Time { return start.Add(48 * time.Hour) },
				Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
			b.Cleanup(s.Close)
			ro := biggest(b, s)
			s.Close() // stop the list's background reads: the first timeline read below is timed alone
			s = New(s.opts)
			b.Cleanup(s.Close)
			api := ro.Links.API + "/timeline"
			began := time.Now()
			full, _ := timelineOf(b, s, api+"?width=1400")
			cold := time.Since(began)
			base, _ := strconv.ParseInt(full.Base, 10, 64)
			ext := full.Extent
			span := ext.To - ext.From
			views := []string{
				api + "?width=1400",
				fmt.Sprintf("%s?from=%d&to=%d&width=1400", api, base+ext.From+span/3, base+ext.From+span/3+span/10),
				fmt.Sprintf("%s?from=%d&to=%d&width=1400", api, base+ext.From+span/2, base+ext.From+span/2+span/100),
			}
			var took []time.Duration
			maxBytes, maxMarks, maxCells, inView := 0, 0, 0, 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, v := range views {
					t0 := time.Now()
					req := httptest.NewRequest(http.MethodGet, v, nil)
					rec := httptest.NewRecorder()
					s.ServeHTTP(rec, req)
					took = append(took, time.Since(t0))
					if rec.Code != http.StatusOK {
						b.Fatalf("%d", rec.Code)
					}
					maxBytes = max(maxBytes, rec.Body.Len())
				}
			}
			b.StopTimer()
			for _, v := range views {
				tl, _ := timelineOf(b, s, v)
				maxMarks, maxCells = max(maxMarks, tl.Stats.Marks), max(maxCells, tl.Stats.DensityCells)
				inView = max(inView, tl.Stats.EventsInView)
			}
			slices.Sort(took)
			p := func(q float64) time.Duration { return took[min(len(took)-1, int(q*float64(len(took))))] }
			b.ReportMetric(float64(p(0.5).Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(p(0.99).Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(cold.Milliseconds()), "first-ms")
			b.ReportMetric(float64(maxBytes), "max-bytes")
			b.Logf("%s: %d events in the store, %d pods, %d events in the full view; first answer (read + analysis) %v; then %d answers: p50 %v p99 %v; largest answer %d bytes with %d marks and %d density cells",
				sh.name, len(evs), full.LanesTotal, inView, cold.Round(time.Millisecond), len(took), p(0.5), p(0.99), maxBytes, maxMarks, maxCells)
		})
	}
}

var benchEvents = flagInt("events", 100000, "events per rollout in BenchmarkTimelineAPI")
