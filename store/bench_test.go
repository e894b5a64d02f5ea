package store

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/eventgen"
	"github.com/drainscope/drainscope/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// benchEvents is the size of the ingest benchmark; benchBatch is how many
// events one Append carries, as the agent batches them.
const (
	benchEvents = 1_000_000
	benchBatch  = 10_000
)

func batches(evs []event.Event, f func([]event.Event) error) error {
	for i := 0; i < len(evs); i += benchBatch {
		if err := f(evs[i:min(i+benchBatch, len(evs))]); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkPostgresIngest writes 1,000,000 realistic events through the
// store, and the same events as pre-built rows through a raw pgx CopyFrom
// into an identical table, in the same run, and reports both rates and
// their ratio. Run: scripts/bench.sh (or go test -run X -bench PostgresIngest ./store/).
func BenchmarkPostgresIngest(b *testing.B) {
	ctx := context.Background()
	evs := eventgen.Rollout(benchEvents, day0, 99, "checkout")
	var storeRate, rawRate float64
	for i := 0; i < b.N; i++ {
		// Raw baseline: a migrated, empty table with its partitions made,
		// fed rows that were converted before the clock started.
		raw, err := OpenPostgres(ctx, pgtest.Schema(b))
		if err != nil {
			b.Fatal(err)
		}
		if err := raw.ensurePartitions(ctx, evs); err != nil {
			b.Fatal(err)
		}
		rows := make([][]any, len(evs))
		for j := range evs {
			rows[j] = appendRow(nil, &evs[j])
		}
		start := time.Now()
		for j := 0; j < len(rows); j += benchBatch {
			chunk := rows[j:min(j+benchBatch, len(rows))]
			err := pgx.BeginFunc(ctx, raw.pool, func(tx pgx.Tx) error {
				_, err := tx.CopyFrom(ctx, pgx.Identifier{"events"}, writeColumns, pgx.CopyFromRows(chunk))
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		rawRate = float64(len(evs)) / time.Since(start).Seconds()
		raw.Close()
		rows = nil

		s, err := OpenPostgres(ctx, pgtest.Schema(b))
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		if err := batches(evs, func(batch []event.Event) error { return s.Append(ctx, batch) }); err != nil {
			b.Fatal(err)
		}
		storeRate = float64(len(evs)) / time.Since(start).Seconds()
		if n := count(b, s, Query{}); n != len(evs) {
			b.Fatalf("stored %d events, want %d", n, len(evs))
		}
		s.Close()
	}
	b.ReportMetric(storeRate, "store-events/s")
	b.ReportMetric(rawRate, "raw-copy-events/s")
	b.ReportMetric(storeRate/rawRate, "store/raw")
	fmt.Printf("postgres ingest of %d events in batches of %d: store %.0f events/s, raw pgx CopyFrom %.0f events/s, ratio %.2f (target >= 0.7)\n",
		len(evs), benchBatch, storeRate, rawRate, storeRate/rawRate)
}

// cpuTime is the user and system CPU time this process has used: on a
// shared machine it shows what a run cost when wall-clock rates are diluted
// by other work.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSQLiteIngest writes 1,000,000 realistic events into a fresh
// SQLite file through the store and reports the rate (target >= 100,000/s).
func BenchmarkSQLiteIngest(b *testing.B) {
	ctx := context.Background()
	evs := eventgen.Rollout(benchEvents, day0, 99, "checkout")
	var rate, cpuRate float64
	for i := 0; i < b.N; i++ {
		s, err := OpenSQLite(ctx, filepath.Join(b.TempDir(), "events.db"))
		if err != nil {
			b.Fatal(err)
		}
		start, cpu0 := time.Now(), cpuTime()
		if err := batches(evs, func(batch []event.Event) error { return s.Append(ctx, batch) }); err != nil {
			b.Fatal(err)
		}
		rate = float64(len(evs)) / time.Since(start).Seconds()
		cpuRate = float64(len(evs)) / (cpuTime() - cpu0).Seconds()
		if n := count(b, s, Query{}); n != len(evs) {
			b.Fatalf("stored %d events, want %d", n, len(evs))
		}
		s.Close()
	}
	b.ReportMetric(rate, "events/s")
	b.ReportMetric(cpuRate, "events/cpu-s")
	fmt.Printf("sqlite ingest of %d events in batches of %d: %.0f events/s wall clock, %.0f events per CPU-second of this process (target >= 100000/s)\n",
		len(evs), benchBatch, rate, cpuRate)
}

// BenchmarkSQLiteSmallBatches appends batches of 10 events, what the
// agent's Writer flushes on a quiet node every 200 ms: the per-Append
// overhead (transaction, statements) rather than the per-row cost.
//
//	go test ./store -run '^$' -bench SQLiteSmallBatches -benchtime 2000x
func BenchmarkSQLiteSmallBatches(b *testing.B) {
	ctx := context.Background()
	s, err := OpenSQLite(ctx, filepath.Join(b.TempDir(), "events.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	day := time.Date(2026, 3, 14, 0, 0, 0, 0, time.UTC)
	evs := eventgen.Rollout(20000, day, 2, "checkout")
	i := 0
	for b.Loop() {
		if i+10 > len(evs) { // a fresh day, so no batch repeats a stored one
			day = day.AddDate(0, 0, 1)
			evs, i = eventgen.Rollout(20000, day, 2, "checkout"), 0
		}
		if err := s.Append(ctx, evs[i:i+10]); err != nil {
			b.Fatal(err)
		}
		i += 10
	}
}
