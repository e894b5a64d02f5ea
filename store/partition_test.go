package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

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
	if _, err := Rollouts(ctx, s, Query{}); err != nil {
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
