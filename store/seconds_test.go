package store

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/eventgen"
	"github.com/drainscope/drainscope/internal/pgtest"
)

// CountEvents agrees with the events a window holds, to the nanosecond at
// both ends, after batches copied whole, a retried batch that overlaps
// what is stored, a prune that cuts inside a second, and a write into the
// pruned span again. In Postgres the whole seconds come from
// event_seconds, which the test checks is what was counted.
func TestContractCountEvents(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := b.open(t)
		d, ok := s.(Digests)
		if !ok {
			t.Fatalf("%T keeps no digests", s)
		}
		all := eventgen.Rollout(6000, day0, 21, "checkout")
		from, to := all[0].Time, all[0].Time
		for _, e := range all {
			from, to = min(from, e.Time), max(to, e.Time)
		}
		if to-from < 5*secondNS {
			t.Fatalf("the events span %v: too little for whole seconds", time.Duration(to-from))
		}
		r := rand.New(rand.NewPCG(21, 0))
		check := func(stage string) {
			t.Helper()
			windows := []event.Window{{From: from, To: to + 1}, {From: 0, To: to + secondNS}, {From: from, To: from},
				{From: from / secondNS * secondNS, To: (to/secondNS + 1) * secondNS}}
			for range 40 {
				a, z := from-secondNS+r.Int64N(to-from+2*secondNS), from-secondNS+r.Int64N(to-from+2*secondNS)
				windows = append(windows, event.Window{From: min(a, z), To: max(a, z)})
			}
			for _, w := range windows {
				got, err := d.CountEvents(ctx, w)
				if err != nil {
					t.Fatal(err)
				}
				if want := count(t, s, Query{Window: w}); got != int64(want) {
					t.Fatalf("%s: CountEvents(%d, %d) = %d, the window holds %d", stage, w.From, w.To, got, want)
				}
			}
		}
		pg, _ := s.(*Postgres)
		// In Postgres: the events counted in exact seconds, the seconds
		// not exact, and the rows not counted.
		kept := func() (exact, inexact, uncounted int64) {
			if pg == nil {
				return 0, 0, 0
			}
			if err := pg.pool.QueryRow(ctx, `SELECT coalesce(sum(n) FILTER (WHERE exact), 0), count(*) FILTER (WHERE NOT exact),
				(SELECT count(*) FROM events WHERE NOT counted) FROM event_seconds`).Scan(&exact, &inexact, &uncounted); err != nil {
				t.Fatal(err)
			}
			return exact, inexact, uncounted
		}

		first := all[:4000]
		for i := 0; i < len(first); i += 1000 {
			if err := s.Append(ctx, first[i:i+1000]); err != nil {
				t.Fatal(err)
			}
		}
		if exact, inexact, uncounted := kept(); pg != nil && (exact != 4000 || inexact != 0 || uncounted != 0) {
			t.Fatalf("after 4,000 events copied: %d counted in exact seconds, %d seconds inexact, %d rows uncounted; want 4000, 0, 0", exact, inexact, uncounted)
		}
		check("copied")

		// A retry of the last 1,000 with 2,000 new ones goes through ON
		// CONFLICT DO NOTHING: the 2,000 it inserts are counted by index.
		if err := s.Append(ctx, all[3000:]); err != nil {
			t.Fatal(err)
		}
		if exact, _, uncounted := kept(); pg != nil && (exact != 4000 || uncounted != 2000) {
			t.Fatalf("after the retry: %d counted, %d rows uncounted; want 4000 and 2000", exact, uncounted)
		}
		check("retried")

		// The cut falls between two events of a second only copied whole
		// (in Postgres an exact one): its count must not hold the events
		// the prune took.
		cut := cutInside(t, all[:3000], all[3000:])
		if _, err := s.Prune(ctx, cut); err != nil {
			t.Fatal(err)
		}
		check("pruned")
		if err := s.Append(ctx, all[:100]); err != nil {
			t.Fatal(err)
		}
		check("written again")
		if pg != nil {
			// A writer of the schema before event_seconds, still running
			// after the upgrade: its COPY names no counted column.
			older := eventgen.Rollout(1000, day0, 22, "checkout")
			err := pgx.BeginFunc(ctx, pg.pool, func(tx pgx.Tx) error {
				_, err := tx.CopyFrom(ctx, pgx.Identifier{"events"}, writeColumns, newPgRows(older, false))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			check("an older writer's rows")
		}
	})
}

// cutInside returns a time between two events of the same second of
// copied that no event of retried falls in, after the first third.
func cutInside(t *testing.T, copied, retried []event.Event) int64 {
	t.Helper()
	touched := map[int64]bool{}
	for _, e := range retried {
		touched[e.Time/secondNS] = true
	}
	bySec := map[int64][]int64{}
	for _, e := range copied {
		if sec := e.Time / secondNS; !touched[sec] {
			bySec[sec] = append(bySec[sec], e.Time)
		}
	}
	secs := slices.Sorted(maps.Keys(bySec))
	for _, sec := range secs[len(secs)/3:] {
		if ts := bySec[sec]; len(ts) >= 2 {
			slices.Sort(ts)
			if ts[0] < ts[len(ts)-1] {
				return ts[len(ts)-1]
			}
		}
	}
	t.Fatal("no second of the copied events holds two times apart")
	return 0
}

func TestBatchSeconds(t *testing.T) {
	mk := func(ts ...int64) []event.Event {
		out := make([]event.Event, len(ts))
		for i, x := range ts {
			out[i].Time = x
		}
		return out
	}
	secs, ns := batchSeconds(mk(3*secondNS+5, secondNS, 3*secondNS, 2*secondNS-1, 3*secondNS+secondNS-1))
	if want := []int64{1, 3}; len(secs) != 2 || secs[0] != want[0] || secs[1] != want[1] {
		t.Fatalf("seconds %v, want %v", secs, want)
	}
	if ns[0] != 2 || ns[1] != 3 {
		t.Fatalf("counts %v, want [2 3]", ns)
	}
	for _, c := range []struct {
		w      event.Window
		lo, hi int64
		ok     bool
	}{
		{event.Window{From: 0, To: 3 * secondNS}, 0, 3, true},
		{event.Window{From: 1, To: 3*secondNS - 1}, 1, 2, true},
		{event.Window{From: 1, To: 2*secondNS - 1}, 1, 1, false},
		{event.Window{From: -1, To: 5 * secondNS}, 0, 0, false},
		{event.Window{From: 5, To: 5}, 0, 0, false},
	} {
		lo, hi, ok := wholeSeconds(c.w)
		if ok != c.ok || (ok && (lo != c.lo || hi != c.hi)) {
			t.Errorf("wholeSeconds(%+v) = %d, %d, %v; want %d, %d, %v", c.w, lo, hi, ok, c.lo, c.hi, c.ok)
		}
	}
}

// BenchmarkCountEvents counts a digest's window the way CountEvents does
// (the kept counts of its whole seconds and the events of its two partial
// ones) and the way it did before (count(*) of the window's rows), in
// alternating pairs on one Postgres store holding 1,000,000 events over
// 5 minutes (3,333/s, the 5,000-node simulation's rate), and prints the
// median of the pairs' ratios with their spread.
//
//	go test ./store -run '^$' -bench CountEvents -benchtime 1x
func BenchmarkCountEvents(b *testing.B) {
	ctx := context.Background()
	const n, span, pairs = 1_000_000, int64(5 * time.Minute), 21
	evs := eventgen.Rollout(n, day0, 7, "checkout")
	start := day0.UnixNano()
	for i := range evs {
		evs[i].Time = start + int64(i)*(span/n)
		evs[i].Seal()
	}
	s := openPostgres(b)
	if err := batches(evs, func(batch []event.Event) error { return s.Append(ctx, batch) }); err != nil {
		b.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, "VACUUM ANALYZE events"); err != nil {
		b.Fatal(err)
	}
	// A digest's window starts and ends inside a second.
	w := event.Window{From: start + secondNS/3, To: start + span - secondNS/7}
	plain := func() (int64, error) {
		var c int64
		err := s.pool.QueryRow(ctx, fmt.Sprintf(countEvents, "$1", "$2"), w.From, w.To).Scan(&c)
		return c, err
	}
	timed := func(f func() (int64, error)) (time.Duration, int64) {
		t0 := time.Now()
		c, err := f()
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(t0), c
	}
	var ratios, ours, rows []float64
	for b.Loop() {
		ratios, ours, rows = ratios[:0], ours[:0], rows[:0]
		for range pairs {
			dn, cn := timed(func() (int64, error) { return s.CountEvents(ctx, w) })
			dp, cp := timed(plain)
			if cn != cp {
				b.Fatalf("CountEvents = %d, count(*) = %d", cn, cp)
			}
			ratios = append(ratios, dn.Seconds()/dp.Seconds())
			ours, rows = append(ours, dn.Seconds()*1e3), append(rows, dp.Seconds()*1e3)
		}
	}
	med := func(v []float64) (float64, float64, float64) {
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2], v[0], v[len(v)-1]
	}
	r, rlo, rhi := med(ratios)
	o, olo, ohi := med(ours)
	p, plo, phi := med(rows)
	b.ReportMetric(r, "per-second/count(*)")
	b.ReportMetric(o, "per-second-ms")
	b.ReportMetric(p, "count(*)-ms")
	fmt.Printf("counting a %v window of %d events, %d alternating pairs: per-second counts %.2f ms (%.2f–%.2f), count(*) of the rows %.1f ms (%.1f–%.1f); ratio median %.4f (%.4f–%.4f)\n",
		time.Duration(w.To-w.From).Round(time.Second), n, pairs, o, olo, ohi, p, plo, phi, r, rlo, rhi)
}

// Two writers of batches that share their seconds, as the server's two
// merged writes do: each waits for the other's rows of event_seconds,
// neither deadlocks, and the counts add up.
func TestPostgresCountSecondsConcurrent(t *testing.T) {
	ctx := context.Background()
	s := openPostgres(t)
	all := eventgen.Rollout(8000, day0, 33, "checkout")
	// Writer w takes every other event, in batches of 500 that each
	// span the same seconds as the other writer's.
	var halves [2][]event.Event
	for i := range all {
		halves[i%2] = append(halves[i%2], all[i])
	}
	errs := make(chan error, 2)
	for w := range halves {
		go func(evs []event.Event) {
			for i := 0; i < len(evs); i += 500 {
				if err := s.Append(ctx, evs[i:min(i+500, len(evs))]); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}(halves[w])
	}
	for range halves {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var kept, inexact int64
	if err := s.pool.QueryRow(ctx, "SELECT coalesce(sum(n), 0), count(*) FILTER (WHERE NOT exact) FROM event_seconds").Scan(&kept, &inexact); err != nil {
		t.Fatal(err)
	}
	if kept != int64(len(all)) || inexact != 0 {
		t.Fatalf("event_seconds holds %d events (%d seconds inexact), want %d and 0", kept, inexact, len(all))
	}
	n, err := s.CountEvents(ctx, event.Window{From: 1, To: day0.AddDate(0, 0, 2).UnixNano()})
	if err != nil || n != int64(len(all)) {
		t.Fatalf("CountEvents = %d, %v; want %d", n, err, len(all))
	}
}

// A store of the schema before the counts (version 3), holding events,
// upgraded by opening it: its events are counted, and so are those a
// writer of that version still copies afterwards.
func TestPostgresUpgradeCounts(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Schema(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	m := pgMigrator{pool}
	if _, err := m.version(ctx); err != nil {
		t.Fatal(err)
	}
	for _, mg := range mustMigrations(BackendPostgres)[:3] {
		if err := m.apply(ctx, mg); err != nil {
			t.Fatalf("migration %d: %v", mg.version, err)
		}
	}
	// What a writer of version 3 copies: writeColumns, no counted.
	copyOld := func(p *pgxpool.Pool, evs []event.Event) {
		t.Helper()
		err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			if err := createPartitions(ctx, tx, []int64{partitionStart(evs[0].Time)}); err != nil {
				return err
			}
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"events"}, writeColumns, newPgRows(evs, false))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	before := eventgen.Rollout(3000, day0, 41, "checkout")
	copyOld(pool, before)

	s, err := OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, err := s.Version(ctx); err != nil || v != LatestVersion {
		t.Fatalf("version %d, %v; want %d", v, err, LatestVersion)
	}
	var kept, uncounted int64
	if err := pool.QueryRow(ctx, "SELECT (SELECT sum(n) FROM event_seconds), (SELECT count(*) FROM events WHERE NOT counted)").Scan(&kept, &uncounted); err != nil {
		t.Fatal(err)
	}
	if kept != 3000 || uncounted != 0 {
		t.Fatalf("after the upgrade event_seconds holds %d and %d rows are uncounted; want 3000 and 0", kept, uncounted)
	}
	after := eventgen.Rollout(1000, day0, 42, "checkout")
	copyOld(pool, after)
	w := event.Window{From: 1, To: day0.AddDate(0, 0, 1).UnixNano()}
	if n, err := s.CountEvents(ctx, w); err != nil || n != 4000 {
		t.Fatalf("CountEvents = %d, %v; want the 4,000 stored", n, err)
	}
}
