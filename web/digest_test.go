package web

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/pgtest"
	"github.com/drainscope/drainscope/store"
)

// builtStats are the timeline's fields that say when and how fast the
// model was read; they differ between two reads of the same rollout.
var builtStats = regexp.MustCompile(`"(built_ns|build_took_ns)":-?[0-9]+`)

// rolloutAnswers fetches every answer drawn from one rollout's model.
func rolloutAnswers(t *testing.T, s *Server, ro RolloutSummary) map[string]string {
	t.Helper()
	api := ro.Links.API
	full, _ := timelineOf(t, s, api+"/timeline?width=1400")
	base, _ := strconv.ParseInt(full.Base, 10, 64)
	span := full.Extent.To - full.Extent.From
	mid := base + full.Extent.From + span/2
	paths := []string{
		api + "/timeline?width=1400",
		fmt.Sprintf("%s/timeline?from=%d&to=%d&width=900", api, mid-span/50, mid+span/50),
		fmt.Sprintf("%s/timeline?from=%d&to=%d&width=900&failures=all", api, mid-span/2000, mid+span/2000),
		api + "/timeline?width=1400&failures=all",
		api + "/timeline?width=1400&failures=inferred&lane_offset=1&lane_limit=3",
		api,
		api + "/alignment",
		api + "/failures",
		api + "/failures/0",
	}
	out := map[string]string{}
	for _, p := range paths {
		r := do(t, s, "GET", p)
		if r.code != 200 {
			t.Fatalf("GET %s: %d %s", p, r.code, truncate(r.body, 300))
		}
		out[p] = builtStats.ReplaceAllString(r.body, `"$1":0`)
	}
	if !regexp.MustCompile(`"failure_marks":\[\{`).MatchString(strings.Join(slices.Collect(maps.Values(out)), "")) {
		t.Fatal("no view shows a failure one by one")
	}
	return out
}

func modelOf(s *Server, id string) *model {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, c := range s.models {
		if k.ID() == id {
			return c.m
		}
	}
	return nil
}

// TestDigestAnswersLikeReading: a server that finds a rollout's digest in
// the store answers exactly as the one that read and analysed its events,
// the timeline from the digest's timeline part alone, everything else from
// the whole analysis; and a digest is not used once an event has been
// added to its window.
func TestDigestAnswersLikeReading(t *testing.T) {
	start := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	evs := denseRollout(6000, 4, start, 3)
	// Another namespace's pods re-observed every minute around it: the
	// rollout's read leaves them out (analysis.AnalyzeWith), and its
	// digest is kept all the same.
	for at := start.Add(-30 * time.Minute); at.Before(start.Add(time.Hour)); at = at.Add(time.Minute) {
		for i := range 3 {
			e := event.Event{Time: at.UnixNano() + int64(i), Kind: event.PodReady, Source: event.SourceWatcher, Node: "node-a",
				Pod:   event.PodRef{Namespace: "apps", Name: fmt.Sprintf("batch-%d", i), UID: fmt.Sprintf("f0000000-0000-4000-8000-%012d", i)},
				Local: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 247, 0, byte(1 + i)}), 0), Flags: event.FlagObserved}
			e.Seal()
			evs = append(evs, e)
		}
	}
	st := storeWith(t, evs)
	now := func(o *Options) { o.Now = func() time.Time { return start.Add(48 * time.Hour) } }
	first := newTestServer(t, st, now)
	ro := biggest(t, first)
	want := rolloutAnswers(t, first, ro)
	if m := modelOf(first, ro.ID); m == nil || m.fromDigest {
		t.Fatalf("the first server's model came from a digest: %+v", m)
	}
	waitDigest(t, first, ro)

	// The timeline alone: the digest's timeline part.
	s := newTestServer(t, st, now)
	tl := do(t, s, "GET", ro.Links.API+"/timeline?width=1400")
	if m := modelOf(s, ro.ID); m == nil || !m.fromDigest || !m.partial {
		t.Fatalf("the timeline was not answered from the digest's timeline part: %+v", m)
	}
	if got := builtStats.ReplaceAllString(tl.body, `"$1":0`); got != want[ro.Links.API+"/timeline?width=1400"] {
		t.Errorf("timeline from the digest differs:\n got %s\nwant %s", truncate(got, 600), truncate(want[ro.Links.API+"/timeline?width=1400"], 600))
	}
	// Then every answer, the others from the whole analysis.
	got := rolloutAnswers(t, s, ro)
	if m := modelOf(s, ro.ID); m == nil || !m.fromDigest || m.partial {
		t.Fatalf("the other answers were not read from the whole digest: %+v", m)
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("GET %s from the digest differs:\n got %s\nwant %s", p, truncate(got[p], 600), truncate(w, 600))
		}
	}

	// A client failure imported later, inside the window, is seen.
	var late event.Event
	for _, e := range evs {
		if e.Kind == event.ClientFailure {
			late = e.Clone()
			break
		}
	}
	late.Time += int64(time.Millisecond)
	late.Reason = event.FailReset
	late.ID = 0
	late.Seal()
	if err := st.Append(context.Background(), []event.Event{late}); err != nil {
		t.Fatal(err)
	}
	again := newTestServer(t, st, now)
	do(t, again, "GET", ro.Links.API+"/timeline?width=1400")
	if m := modelOf(again, ro.ID); m == nil || m.fromDigest {
		t.Fatalf("a digest was used after an event was added to its window")
	}
}

// TestDigestPrunedWithItsWindow: pruning into a digest's window deletes the
// digest, on both stores.
func TestDigestPrunedWithItsWindow(t *testing.T) {
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			var st store.Store
			if name == "sqlite" {
				st = storeWith(t, nil)
			} else {
				var err error
				if st, err = store.Open(context.Background(), pgtest.Schema(t)); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
			}
			ctx := context.Background()
			d := st.(store.Digests)
			for i, from := range []int64{1000, 5000} {
				if err := d.PutDigest(ctx, store.Digest{Key: strconv.Itoa(i), Window: event.Window{From: from, To: from + 100}, Timeline: []byte("t"), Analysis: []byte("a")}); err != nil {
					t.Fatal(err)
				}
			}
			prune(t, st, 2000)
			if _, ok, err := d.GetDigest(ctx, "0", false); err != nil || ok {
				t.Errorf("digest of a pruned window: kept %v, err %v", ok, err)
			}
			g, ok, err := d.GetDigest(ctx, "1", true)
			if err != nil || !ok || string(g.Timeline) != "t" || string(g.Analysis) != "a" {
				t.Errorf("digest after the cut: %+v %v %v", g, ok, err)
			}
		})
	}
}

// TestDigestRoundTrip: the timeline part gives back every lane as it was,
// each lane decoded over the one before it (a mark's zero fields are not
// the previous lane's); and a part cut short anywhere is refused, not
// read as a rollout with fewer lanes.
func TestDigestRoundTrip(t *testing.T) {
	start := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	st := storeWith(t, denseRollout(6000, 4, start, 3))
	s := newTestServer(t, st, func(o *Options) { o.Now = func() time.Time { return start.Add(48 * time.Hour) } })
	ro := biggest(t, s)
	do(t, s, "GET", ro.Links.API+"/timeline?width=1400")
	m := modelOf(s, ro.ID)
	if m == nil || len(m.lanes) < 2 {
		t.Fatalf("no model with lanes: %+v", m)
	}
	// A mark with every field set, then one with none but its time and
	// summary, in the next lane at the same place.
	a, b := m.lanes[0], m.lanes[1]
	if len(a.marks) == 0 || len(b.marks) == 0 {
		t.Fatalf("lanes without marks: %d, %d", len(a.marks), len(b.marks))
	}
	a.marks[0] = landmark{t: a.marks[0].t, id: 7, kind: event.Signal, signal: 9, node: "node-a", summary: "every field"}
	b.marks[0] = landmark{t: b.marks[0].t, summary: "none"}
	view, full, err := encodeDigest(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeDigest(m.key, view, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.lanes) != len(m.lanes) || len(got.result.Timelines) != len(m.result.Timelines) {
		t.Fatalf("%d lanes and %d timelines, want %d and %d", len(got.lanes), len(got.result.Timelines), len(m.lanes), len(m.result.Timelines))
	}
	for i, w := range m.lanes {
		g := got.lanes[i]
		if (g.tl == nil) != (w.tl == nil) || g.tl != nil && g.tl.Pod != w.tl.Pod {
			t.Errorf("lane %s: timeline %v, want %v", w.key, g.tl, w.tl)
		}
		type lanePart struct {
			key, role, node      string
			first, last, start   int64
			dropped              int
			marks                []landmark
			socks                []sockMark
			fails, inferred, all []failMark
		}
		part := func(l *lane) lanePart {
			return lanePart{l.key, l.role, l.node, l.first, l.last, l.start, l.dropped, l.marks, l.socks, l.fails, l.inferred, l.all}
		}
		if !reflect.DeepEqual(part(g), part(w)) {
			t.Errorf("lane %s differs:\n got %+v\nwant %+v", w.key, part(g), part(w))
		}
	}
	if _, err := decodeDigest(m.key, view, full); err != nil {
		t.Errorf("with the whole analysis: %v", err)
	}
	for _, n := range []int{0, 10, len(view) / 3, len(view) / 2, len(view) - 1} {
		if _, err := decodeDigest(m.key, view[:n], nil); err == nil {
			t.Errorf("the timeline part cut to %d of %d bytes was read", n, len(view))
		}
	}
}

// prune prunes st before the instant, again while another test's prune of
// the same Postgres database (another package's, run beside this one)
// holds the lock that lets one process prune at a time.
func prune(t *testing.T, st store.Store, before int64) {
	t.Helper()
	dp, ok := st.(interface {
		PruneDetail(context.Context, int64) (store.Pruned, error)
	})
	if !ok {
		if _, err := st.Prune(context.Background(), before); err != nil {
			t.Fatal(err)
		}
		return
	}
	for range 200 {
		p, err := dp.PruneDetail(context.Background(), before)
		if err != nil {
			t.Fatal(err)
		}
		if !p.Skipped {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("another prune held the database's prune lock for 10 s")
}
