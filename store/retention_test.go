package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/eventgen"
	"github.com/drainscope/drainscope/internal/pgtest"
)

func openPostgres(t testing.TB) *Postgres {
	t.Helper()
	s, err := OpenPostgres(context.Background(), pgtest.Schema(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func openSQLite(t *testing.T) *SQLite {
	t.Helper()
	s, err := OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// partitionNames lists the partitions of events, sorted.
func partitionNames(t *testing.T, s *Postgres) []string {
	t.Helper()
	parts, err := s.pool.Query(context.Background(), `SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'events'::regclass ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for parts.Next() {
		var n string
		if err := parts.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	return names
}

// insertAt writes one bare row at ts straight into table, bypassing Append
// (and any bound it puts on times), as a hand-made or hostile row would.
func insertAt(t *testing.T, s *Postgres, table string, ts int64) {
	t.Helper()
	if _, err := s.pool.Exec(context.Background(),
		"INSERT INTO "+table+" (ts, id, kind, node, source) VALUES ($1, $2, 'process_exit', 'n', 'kernel')", ts, ts%1e9+1); err != nil {
		t.Fatal(err)
	}
}

// TestPostgresPruneByBounds: what may be dropped is decided by what a
// partition can hold, not by its name. Partitions for far-past days go, a
// partition for a far-future day and the one the cut falls in stay, a
// default partition stays with only its recent rows, and a hand-made
// partition reaching past the cut is kept however it is named.
func TestPostgresPruneByBounds(t *testing.T) {
	ctx := context.Background()
	s := openPostgres(t)
	var all []event.Event
	for d := 0; d < 3; d++ {
		all = append(all, eventgen.Rollout(300, day0.AddDate(0, 0, d), uint64(20+d), "checkout")...)
	}
	if err := s.Append(ctx, all); err != nil {
		t.Fatal(err)
	}
	day := int64(24 * time.Hour)
	mk := func(name string, from, to int64) {
		if _, err := s.pool.Exec(ctx, fmt.Sprintf("CREATE TABLE %s PARTITION OF events FOR VALUES FROM (%d) TO (%d)", name, from, to)); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Date(1971, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	future := time.Date(2261, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	mk(partitionName(past), past, past+day)
	insertAt(t, s, "events", past+5)
	mk(partitionName(future), future, future+day)
	insertAt(t, s, "events", future+5)
	// A week ending two days after the cut's day, named as no day is.
	weekFrom := day0.AddDate(0, 0, -30).UnixNano()
	mk("events_manual_old", weekFrom, weekFrom+7*day)
	insertAt(t, s, "events", weekFrom+day)
	if _, err := s.pool.Exec(ctx, "CREATE TABLE events_default PARTITION OF events DEFAULT"); err != nil {
		t.Fatal(err)
	}
	oldDefault := day0.AddDate(0, 0, -100).UnixNano()
	recentDefault := day0.AddDate(0, 0, 40).UnixNano()
	insertAt(t, s, "events", oldDefault)
	insertAt(t, s, "events", recentDefault)

	cut := day0.AddDate(0, 0, 1).UnixNano() + int64(time.Minute)
	p, err := s.PruneDetail(ctx, cut)
	if err != nil {
		t.Fatal(err)
	}
	wantGone := 3 // the 1971 day, the manual week, day 0
	if p.Partitions != wantGone {
		t.Errorf("dropped %d partitions, want %d", p.Partitions, wantGone)
	}
	names := partitionNames(t, s)
	want := []string{"events_default", partitionName(partitionStart(day0.AddDate(0, 0, 1).UnixNano())),
		partitionName(partitionStart(day0.AddDate(0, 0, 2).UnixNano())), partitionName(future)}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("partitions after prune %v, want %v", names, want)
	}
	var removed int64 = 3 // the rows of 1971, the manual week and the default's old one
	keep := 2             // the 2261 row and the default's recent one
	for _, e := range all {
		if e.Time < cut {
			removed++
		} else {
			keep++
		}
	}
	if p.Events != removed {
		t.Errorf("Pruned.Events = %d, want %d", p.Events, removed)
	}
	if n := count(t, s, Query{}); n != keep {
		t.Errorf("%d events left, want %d", n, keep)
	}
	if n := count(t, s, Query{Window: event.Window{To: cut}}); n != 0 {
		t.Errorf("%d events older than the cut remain", n)
	}
	// A second pass finds nothing; writing into a pruned day works again.
	if p, err := s.PruneDetail(ctx, cut); err != nil || p.Events != 0 || p.Partitions != 0 {
		t.Errorf("second pass: %+v, %v; want nothing pruned", p, err)
	}
	if err := s.Append(ctx, all[:10]); err != nil {
		t.Fatal(err)
	}
}

// waitForQuery waits until another session runs a statement containing
// what, and it is waiting on a lock.
func waitForQuery(t *testing.T, s *Postgres, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var n int
		if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE state = 'active' AND wait_event_type = 'Lock' AND query LIKE '%'||$1||'%' AND pid <> pg_backend_pid()`, what).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
	}
	t.Fatalf("no session came to wait in %q", what)
}

// TestPostgresPruneDoesNotBlockWriters: a report reading events holds its
// lock for as long as it reads. Dropping a partition meanwhile must not make
// every writer queue behind the drop.
func TestPostgresPruneDoesNotBlockWriters(t *testing.T) {
	ctx := context.Background()
	s := openPostgres(t)
	// The new events' partition exists already: creating one waits for
	// the reader whatever the prune does.
	later := day0.AddDate(0, 0, 3)
	if err := s.Append(ctx, append(eventgen.Rollout(100, day0, 30, "checkout"), eventgen.Rollout(1, later, 37, "cart")...)); err != nil {
		t.Fatal(err)
	}
	reader, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback(ctx)
	var n int
	if err := reader.QueryRow(ctx, "SELECT count(*) FROM events").Scan(&n); err != nil {
		t.Fatal(err)
	}
	var pruned atomic.Bool
	done := make(chan error, 1)
	go func() {
		_, err := s.PruneDetail(ctx, day0.AddDate(0, 0, 2).UnixNano())
		pruned.Store(true)
		done <- err
	}()
	waitForQuery(t, s, "DETACH PARTITION")
	actx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := s.Append(actx, eventgen.Rollout(100, later, 31, "checkout")); err != nil {
		t.Fatalf("a write while the prune waits for the reader: %v", err)
	}
	if pruned.Load() {
		t.Fatal("the prune finished before the reader did: it cannot have waited for it")
	}
	reader.Rollback(ctx)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, Query{}); n != 101 {
		t.Fatalf("%d events after the prune, want the 101 new ones", n)
	}
}

// TestPostgresPruneWithDefaultGivesUp: with a default partition Postgres
// cannot detach concurrently; the detach then waits for its lock only
// briefly and the pass fails, to be retried, rather than queue writers.
func TestPostgresPruneWithDefaultGivesUp(t *testing.T) {
	ctx := context.Background()
	s := openPostgres(t)
	if _, err := s.pool.Exec(ctx, "CREATE TABLE events_default PARTITION OF events DEFAULT"); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, eventgen.Rollout(100, day0, 32, "checkout")); err != nil {
		t.Fatal(err)
	}
	reader, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback(ctx)
	var n int
	if err := reader.QueryRow(ctx, "SELECT count(*) FROM events").Scan(&n); err != nil {
		t.Fatal(err)
	}
	cut := day0.AddDate(0, 0, 2).UnixNano()
	_, err = s.PruneDetail(ctx, cut)
	if err == nil || !strings.Contains(err.Error(), "lock timeout") {
		t.Fatalf("prune while a reader holds events: %v; want a lock timeout", err)
	}
	if got := len(partitionNames(t, s)); got != 2 {
		t.Fatalf("%d partitions after a failed pass, want both still there", got)
	}
	reader.Rollback(ctx)
	if p, err := s.PruneDetail(ctx, cut); err != nil || p.Partitions != 1 || p.Events != 100 {
		t.Fatalf("retry: %+v, %v; want one partition and 100 events", p, err)
	}
	if names := partitionNames(t, s); !slices.Equal(names, []string{"events_default"}) {
		t.Fatalf("partitions %v, want only the default", names)
	}
}

// TestPostgresPruneOneAtATime: a second process pruning the same database
// while one is at it skips its pass.
func TestPostgresPruneOneAtATime(t *testing.T) {
	ctx := context.Background()
	s := openPostgres(t)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", pruneLockKey); err != nil {
		t.Fatal(err)
	}
	if p, err := s.PruneDetail(ctx, day0.UnixNano()); err != nil || !p.Skipped {
		t.Fatalf("prune while another holds the lock: %+v, %v; want skipped", p, err)
	}
	conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", pruneLockKey)
	if p, err := s.PruneDetail(ctx, day0.UnixNano()); err != nil || p.Skipped {
		t.Fatalf("prune after: %+v, %v; want it to run", p, err)
	}
}

// TestSQLitePruneLetsWritersIn: a prune of many rows deletes them a chunk
// at a time, so writes go in between the chunks instead of waiting for the
// whole prune. One write must begin after a chunk was deleted and end
// while old rows remain: with one long delete there is no such moment.
func TestSQLitePruneLetsWritersIn(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t)
	const total = 8 * sqlitePruneChunk
	if err := s.Append(ctx, eventgen.Rollout(total, day0, 33, "checkout")); err != nil {
		t.Fatal(err)
	}
	cut := day0.AddDate(0, 0, 30).UnixNano()
	old := func() int {
		var n int
		if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM events WHERE ts < ?", cut).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var pruned atomic.Bool
	done := make(chan error, 1)
	var removed int64
	go func() {
		var err error
		removed, err = s.Prune(ctx, cut)
		pruned.Store(true)
		done <- err
	}()
	between, writes := false, 0
	for i := 0; !pruned.Load(); i++ {
		before := old()
		if err := s.Append(ctx, eventgen.Rollout(5, day0.AddDate(0, 0, 40).Add(time.Duration(i)*time.Second), uint64(100+i), "cart")); err != nil {
			t.Fatal(err)
		}
		writes++
		if before < total && old() > 0 {
			between = true
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !between {
		t.Errorf("none of %d writes went in between the prune's chunks", writes)
	}
	if removed != total || old() != 0 {
		t.Errorf("Prune = %d, %d old events left; want %d and none", removed, old(), total)
	}
}

// TestPruneRunsOfOneTime: more rows than a chunk holds at one time are all
// pruned (the chunk boundary cannot split them).
func TestPruneRunsOfOneTime(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t)
	base := eventgen.Rollout(1, day0, 35, "checkout")[0]
	batch := make([]event.Event, sqlitePruneChunk*2+7)
	for i := range batch {
		batch[i] = base.Clone()
		batch[i].PID = int32(i + 1)
		batch[i].Seal()
	}
	later := eventgen.Rollout(5, day0.Add(time.Hour), 36, "checkout")
	if err := s.Append(ctx, append(batch, later...)); err != nil {
		t.Fatal(err)
	}
	n, err := s.Prune(ctx, day0.Add(time.Minute).UnixNano())
	if err != nil || n != int64(len(batch)) {
		t.Fatalf("Prune = %d, %v; want %d", n, err, len(batch))
	}
	if got := count(t, s, Query{}); got != len(later) {
		t.Fatalf("%d events left, want %d", got, len(later))
	}
}

// fakeStore counts prunes and can fail them.
type fakeStore struct {
	Store
	calls atomic.Int32
	fail  atomic.Bool
	ro    bool
	cut   atomic.Int64
}

func (f *fakeStore) Describe() string { return "fake" }
func (f *fakeStore) ReadOnly() bool   { return f.ro }
func (f *fakeStore) Prune(ctx context.Context, before int64) (int64, error) {
	f.calls.Add(1)
	f.cut.Store(before)
	if f.fail.Load() {
		return 0, errors.New("refused")
	}
	return 7, nil
}

// TestRetentionSchedule drives a Retention with a clock of its own: it
// prunes at start and at each tick, skips while not active, counts
// failures, and stops when its context ends.
func TestRetentionSchedule(t *testing.T) {
	st := &fakeStore{}
	ticks := make(chan time.Time)
	waits := make(chan time.Duration, 16)
	now := time.Unix(1_800_000_000, 0)
	var active atomic.Bool
	active.Store(true)
	r := &Retention{Store: st, Keep: 48 * time.Hour, Interval: time.Hour,
		Active: active.Load,
		now:    func() time.Time { return now },
		after: func(d time.Duration) <-chan time.Time {
			waits <- d
			return ticks
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()

	wait := <-waits // the pass at start has run
	if st.calls.Load() != 1 {
		t.Fatalf("%d prunes at start, want 1", st.calls.Load())
	}
	if got, want := st.cut.Load(), now.Add(-48*time.Hour).UnixNano(); got != want {
		t.Errorf("pruned before %d, want now - retention = %d", got, want)
	}
	if wait < 54*time.Minute || wait > 66*time.Minute {
		t.Errorf("next pass in %v, want an hour give or take a tenth", wait)
	}
	st.fail.Store(true)
	ticks <- time.Time{}
	<-waits
	if st.calls.Load() != 2 || r.Stats().Failures != 1 {
		t.Errorf("after a failing pass: %d prunes, stats %+v", st.calls.Load(), r.Stats())
	}
	active.Store(false)
	ticks <- time.Time{}
	if wait := <-waits; wait > 66*time.Second {
		t.Errorf("an inactive process asks again in %v, want about a minute", wait)
	}
	if st.calls.Load() != 2 {
		t.Errorf("pruned while not active")
	}
	st.fail.Store(false)
	active.Store(true)
	ticks <- time.Time{}
	<-waits
	s := r.Stats()
	if st.calls.Load() != 3 || s.Runs != 2 || s.Events != 14 || s.Keep != 48*time.Hour || !s.LastSuccess.Equal(now) {
		t.Errorf("after three passes: %d prunes, stats %+v", st.calls.Load(), s)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return when its context ended")
	}
}

// TestRetentionOff: retention 0, or a read-only store, never prunes.
func TestRetentionOff(t *testing.T) {
	for _, tc := range []struct {
		name string
		keep time.Duration
		ro   bool
	}{{"zero", 0, false}, {"read-only", time.Hour, true}} {
		st := &fakeStore{ro: tc.ro}
		done := make(chan struct{})
		go func() { (&Retention{Store: st, Keep: tc.keep}).Run(context.Background()); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Run went on", tc.name)
		}
		if st.calls.Load() != 0 {
			t.Errorf("%s: pruned %d times", tc.name, st.calls.Load())
		}
	}
}

// BenchmarkSQLitePruneWriteLatency prunes 200,000 events while a writer
// appends batches of 10, and reports the writer's worst and 99th-percentile
// latency and the prune's duration: chunked as Prune does it, and as one
// DELETE for comparison.
func BenchmarkSQLitePruneWriteLatency(b *testing.B) {
	const total = 200_000
	for _, mode := range []string{"chunked", "one-delete"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			var worst, p99, took time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				s, err := OpenSQLite(ctx, filepath.Join(b.TempDir(), "events.db"))
				if err != nil {
					b.Fatal(err)
				}
				old := eventgen.Rollout(total, day0, 40, "checkout")
				for j := 0; j < total; j += 20_000 {
					if err := s.Append(ctx, old[j:j+20_000]); err != nil {
						b.Fatal(err)
					}
				}
				cut := day0.AddDate(0, 0, 30).UnixNano()
				b.StartTimer()
				var done atomic.Bool
				errc := make(chan error, 1)
				start := time.Now()
				go func() {
					var err error
					if mode == "chunked" {
						_, err = s.Prune(ctx, cut)
					} else {
						_, err = s.db.ExecContext(ctx, "DELETE FROM events WHERE ts < ?", cut)
					}
					took = time.Since(start)
					done.Store(true)
					errc <- err
				}()
				var lat []time.Duration
				for k := 0; !done.Load(); k++ {
					t0 := time.Now()
					if err := s.Append(ctx, eventgen.Rollout(10, day0.AddDate(0, 0, 40).Add(time.Duration(k)*time.Second), uint64(1000+k), "cart")); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(t0))
				}
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				slices.Sort(lat)
				worst, p99 = lat[len(lat)-1], lat[len(lat)*99/100]
				s.Close()
			}
			b.ReportMetric(float64(worst.Microseconds())/1000, "worst-write-ms")
			b.ReportMetric(float64(p99.Microseconds())/1000, "p99-write-ms")
			b.ReportMetric(took.Seconds(), "prune-s")
		})
	}
}

// TestPostgresPruneFinishesAnInterruptedDetach: a pass stopped while it
// waited to detach a partition concurrently (the server shut down) leaves
// the partition "detach pending"; the next pass finishes and drops it, and
// the other old partitions with it.
func TestPostgresPruneFinishesAnInterruptedDetach(t *testing.T) {
	ctx := context.Background()
	s := openPostgres(t)
	if err := s.Append(ctx, append(eventgen.Rollout(50, day0, 41, "checkout"), eventgen.Rollout(70, day0.AddDate(0, 0, 1), 42, "checkout")...)); err != nil {
		t.Fatal(err)
	}
	reader, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback(ctx)
	var n int
	if err := reader.QueryRow(ctx, "SELECT count(*) FROM events").Scan(&n); err != nil {
		t.Fatal(err)
	}
	part := partitionName(partitionStart(day0.UnixNano()))
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The server cancels it, as it would a pass whose process went away.
	if _, err := conn.Exec(ctx, "SET statement_timeout = '300ms'"); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, "ALTER TABLE events DETACH PARTITION "+part+" CONCURRENTLY")
	conn.Exec(ctx, "RESET statement_timeout")
	conn.Release()
	if err == nil {
		t.Fatal("the detach did not wait for the reader")
	}
	reader.Rollback(ctx)
	var pending bool
	if err := s.pool.QueryRow(ctx, `SELECT i.inhdetachpending FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE c.relname = $1`, part).Scan(&pending); err != nil || !pending {
		t.Fatalf("partition %s: detach pending %v, %v; the test needs it interrupted", part, pending, err)
	}
	p, err := s.PruneDetail(ctx, day0.AddDate(0, 0, 2).UnixNano())
	if err != nil || p.Partitions != 2 || p.Events != 120 {
		t.Fatalf("PruneDetail = %+v, %v; want both partitions and their 120 events", p, err)
	}
	if names := partitionNames(t, s); len(names) != 0 {
		t.Fatalf("partitions left: %v", names)
	}
}
