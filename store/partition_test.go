package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/pgtest"
)

func countPartitions(t *testing.T, s *Postgres) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_inherits WHERE inhparent = 'events'::regclass").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func dayEvents(first time.Time, days int) []event.Event {
	evs := make([]event.Event, days)
	for i := range evs {
		evs[i] = event.Event{Time: first.Add(time.Duration(i) * 24 * time.Hour).UnixNano(), Kind: event.ClientFailure,
			Source: event.SourceClient, Reason: event.FailEOF, Service: "web"}
		evs[i].Seal()
	}
	return evs
}

// A batch spanning more days than MaxBatchDays is refused whole, as a
// row-level error, and creates no partition; a batch Postgres refuses for
// one of its rows leaves none of the partitions it needed behind; reads go
// on answering.
func TestPostgresPartitionBounds(t *testing.T) {
	ctx := context.Background()
	s, err := OpenPostgres(ctx, pgtest.Schema(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := countPartitions(t, s)

	far := dayEvents(time.Date(1971, 1, 1, 0, 0, 0, 0, time.UTC), 3000)
	err = s.Append(ctx, far)
	if err == nil || !RowLevel(err) {
		t.Fatalf("3,000 days in one batch: %v; want a row-level refusal", err)
	}
	t.Logf("refused: %v", err)
	if n := countPartitions(t, s); n != base {
		t.Errorf("%d partitions after the refused batch, want %d", n, base)
	}

	// Three new days, one row Postgres refuses (a NUL, after sealing).
	poisoned := dayEvents(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC), 3)
	poisoned[2].Attrs = map[string]string{"message": "a\x00b"}
	if err := s.Append(ctx, poisoned); err == nil || !RowLevel(err) {
		t.Fatalf("poisoned batch: %v; want a row-level refusal", err)
	}
	if n := countPartitions(t, s); n != base {
		t.Errorf("%d partitions after the rolled-back batch, want %d: the refused batch left schema behind", n, base)
	}
	// The same days without the poison are stored and their partitions stay.
	good := dayEvents(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC), 3)
	if err := s.Append(ctx, good); err != nil {
		t.Fatal(err)
	}
	if n := countPartitions(t, s); n != base+3 {
		t.Errorf("%d partitions, want %d", n, base+3)
	}
	if err := s.Scan(ctx, Query{Lifecycle: true}, func(*event.Event) error { return nil }); err != nil {
		t.Errorf("reading after the refusals: %v", err)
	}
	got, err := Events(ctx, s, Query{})
	if err != nil || len(got) != 3 {
		t.Errorf("%d events stored (%v), want 3", len(got), err)
	}

	// Writers that each create the same new day at once all succeed.
	dsn := pgtest.Schema(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		o, err := OpenPostgres(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			evs := dayEvents(time.Date(2026, 7, 1, 0, 0, i, 0, time.UTC), 2)
			errs[i] = o.Append(ctx, evs)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Errorf("concurrent writers creating one day: %v", err)
	}
}

// An agent that calls drainscope_create_partition in a transaction and
// then sleeps holds no lock a reader or a row writer waits for: readers
// answer at once. Another caller that needs the same lock waits no longer
// than the function's lock_timeout and gets lock_not_available, which a
// writer retries. Days outside the retention window back and two days
// ahead are refused as a data error (a Writer drops those events alone).
func TestPostgresPartitionFunction(t *testing.T) {
	ctx := context.Background()
	owner, agentDSN, serverDSN := setupRoles(t)
	span := 24 * time.Hour
	today := time.Now().UTC().Truncate(span)
	timeout, err := time.ParseDuration(pgPartitionLockTimeout)
	if err != nil {
		t.Fatal(err)
	}
	connect := func(dsn string) *pgx.Conn {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(ctx) })
		return c
	}
	create := func(c *pgx.Conn, day time.Time) error {
		_, err := c.Exec(ctx, "SELECT drainscope_create_partition($1)", day.UnixNano())
		return err
	}
	// Yesterday's partition holds a row for the reader to count.
	agent := connect(agentDSN)
	if err := create(agent, today.AddDate(0, 0, -1)); err != nil {
		t.Fatalf("creating yesterday's partition: %v", err)
	}

	// The holder: a transaction that made tomorrow's partition and sleeps.
	holder, err := connect(agentDSN).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, "SELECT drainscope_create_partition($1)", today.AddDate(0, 0, 1).UnixNano()); err != nil {
		t.Fatalf("holder creates tomorrow's partition: %v", err)
	}

	// A writer of rows and a reader, each bounded by twice the timeout so
	// that a block fails the test instead of hanging it.
	w := connect(serverDSN)
	bounded := func(what string, c *pgx.Conn, q string, args ...any) time.Duration {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 2*timeout)
		defer cancel()
		start := time.Now()
		_, err := c.Exec(cctx, q, args...)
		took := time.Since(start)
		if err != nil {
			t.Errorf("%s while a transaction holds the partition function: %v after %v", what, err, took)
		}
		if took > timeout {
			t.Errorf("%s waited %v behind a transaction holding the partition function, more than lock_timeout %v", what, took, timeout)
		}
		return took
	}
	wrote := bounded("inserting a row", w, "INSERT INTO events (ts, id, kind, node, source) VALUES ($1, 1, 'x', 'n', 's')", today.AddDate(0, 0, -1).UnixNano()+1)
	read := bounded("reading events", w, "SELECT count(*) FROM events")
	t.Logf("insert took %v, count(*) %v, while another transaction held the partition function (lock_timeout %v)", wrote, read, timeout)

	// A second caller that needs the lock gives up after lock_timeout.
	other := connect(agentDSN)
	start := time.Now()
	err = create(other, today.AddDate(0, 0, 2))
	took := time.Since(start)
	if code := pgCode(err); code != "55P03" {
		t.Errorf("a second caller while the first holds the lock: %v (code %q), want lock_not_available (55P03)", err, code)
	}
	if took > 2*timeout {
		t.Errorf("a second caller waited %v, more than twice lock_timeout %v", took, timeout)
	}
	t.Logf("second caller gave up after %v", took)
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// The window: DefaultRetention back, PartitionDaysAhead ahead.
	back := int(DefaultRetention / span)
	for _, tc := range []struct {
		day time.Time
		ok  bool
	}{
		{today.AddDate(0, 0, -back), true},
		{today.AddDate(0, 0, PartitionDaysAhead), true},
		{today.AddDate(0, 0, -back-1), false},
		{today.AddDate(0, 0, PartitionDaysAhead+1), false},
		{time.Date(1677, 9, 22, 0, 0, 0, 0, time.UTC), false},
		{time.Date(2262, 4, 11, 0, 0, 0, 0, time.UTC), false},
	} {
		err := create(agent, tc.day)
		switch {
		case tc.ok && err != nil:
			t.Errorf("day %s (within the window): %v", tc.day.Format(time.DateOnly), err)
		case !tc.ok && pgCode(err) != "22023":
			t.Errorf("day %s (outside the window): %v; want invalid_parameter_value (22023)", tc.day.Format(time.DateOnly), err)
		case !tc.ok && !RowLevel(err):
			t.Errorf("day %s: refusal %v is not row-level, so a Writer would retry it forever", tc.day.Format(time.DateOnly), err)
		}
	}
	var n int
	if err := connect(owner).QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'events'::regclass
		AND inhrelid::regclass::text NOT IN ($1, $2, $3, $4, $5)`,
		partitionName(today.AddDate(0, 0, -1).UnixNano()), partitionName(today.AddDate(0, 0, 1).UnixNano()),
		partitionName(today.AddDate(0, 0, -back).UnixNano()), partitionName(today.AddDate(0, 0, PartitionDaysAhead).UnixNano()),
		partitionName(today.AddDate(0, 0, 2).UnixNano())).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d partitions besides the ones within the window", n)
	}

	// Through the store: an agent's event from a year ago is refused alone.
	st, err := OpenPostgres(ctx, agentDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Append(ctx, dayEvents(today.AddDate(-1, 0, 0), 1)); err == nil || !RowLevel(err) {
		t.Errorf("an event a year old through the agent's role: %v; want a row-level refusal", err)
	}
}
