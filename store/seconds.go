package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/drainscope/drainscope/event"
)

// secondNS is the width of one row of event_seconds (migration 0004): the
// number of events stored in each second, kept in the transaction that
// writes them, so that CountEvents sums a row per second of a window and
// counts events only in its two partial seconds. A digest's check then
// costs what the window's length does, not what the cluster's event rate
// does: at 3,400 events/s a 17-minute window is 3.5 million rows to count,
// against 1,020 rows and two seconds' events. The rows in those counts are
// the ones with counted true (migration 0005); the others are found through
// their own index.
const secondNS = int64(1_000_000_000)

// batchSeconds returns the seconds (ts / secondNS) a batch's events fall
// in, ascending, and how many events each holds.
func batchSeconds(batch []event.Event) (secs, ns []int64) {
	secs = make([]int64, len(batch))
	for i := range batch {
		secs[i] = batch[i].Time / secondNS
	}
	slices.Sort(secs)
	out := secs[:0]
	for _, s := range secs {
		if len(out) > 0 && out[len(out)-1] == s {
			ns[len(ns)-1]++
			continue
		}
		out = append(out, s)
		ns = append(ns, 1)
	}
	return out, ns
}

// pgCountSeconds adds a batch copied whole (its rows counted true) to
// event_seconds, in the batch's transaction. Rows are locked in ascending
// order, so two writers of the same seconds wait for each other but never
// deadlock.
func pgCountSeconds(ctx context.Context, tx pgx.Tx, batch []event.Event) error {
	secs, ns := batchSeconds(batch)
	_, err := tx.Exec(ctx, `INSERT INTO event_seconds (sec, n)
SELECT * FROM unnest($1::bigint[], $2::bigint[]) ORDER BY 1
ON CONFLICT (sec) DO UPDATE SET n = event_seconds.n + EXCLUDED.n`, secs, ns)
	if err != nil {
		return fmt.Errorf("counting the batch's events per second: %w", err)
	}
	return nil
}

// pgCountWindow counts [from, to) in one statement (one snapshot): the
// events of the partial seconds at both ends; the kept counts of the whole
// seconds between them; the rows there that are not in those counts
// (counted false: retried batches, older writers), through the partial
// index events_uncounted; and the counted rows of a whole second a prune
// cut into, whose kept count no longer holds. Event times are positive
// (event.Validate), so ts / 1e9 is the second a row falls in, in Go and in
// Postgres alike.
const pgCountWindow = `SELECT (SELECT count(*) FROM events WHERE ts >= $1 AND ts < $2)
	+ (SELECT count(*) FROM events WHERE ts >= $3 AND ts < $4)
	+ (SELECT coalesce(sum(n), 0)::bigint FROM event_seconds WHERE sec >= $5 AND sec < $6 AND exact)
	+ (SELECT count(*) FROM events WHERE ts >= $2 AND ts < $3 AND NOT counted)
	+ (SELECT count(*) FROM event_seconds c JOIN events e
		ON e.ts >= c.sec * 1000000000 AND e.ts < (c.sec + 1) * 1000000000 AND e.counted
		WHERE c.sec >= $5 AND c.sec < $6 AND NOT c.exact)`

// wholeSeconds returns the seconds [lo, hi) that lie wholly inside w; ok
// is false when there are none (or w reaches before time 0).
func wholeSeconds(w event.Window) (lo, hi int64, ok bool) {
	if w.From < 0 || w.To <= w.From {
		return 0, 0, false
	}
	lo, hi = (w.From+secondNS-1)/secondNS, w.To/secondNS
	return lo, hi, lo < hi
}

// CountEvents implements Digests.
func (s *Postgres) CountEvents(ctx context.Context, w event.Window) (int64, error) {
	var n int64
	var err error
	if lo, hi, ok := wholeSeconds(w); ok {
		// Without JIT: the planner cannot know that few seconds are
		// inexact, prices the join at the cost of a scan, and past
		// jit_above_cost compiling the plan took 12 ms of a 1 ms count.
		err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL jit = off"); err != nil {
				return err
			}
			return tx.QueryRow(ctx, pgCountWindow, w.From, lo*secondNS, hi*secondNS, w.To, lo, hi).Scan(&n)
		})
	} else {
		err = s.pool.QueryRow(ctx, fmt.Sprintf(countEvents, "$1", "$2"), w.From, w.To).Scan(&n)
	}
	if err != nil {
		return 0, fmt.Errorf("store %s: counting events: %s", s.name, oneLine(err))
	}
	return n, nil
}

// pgPruneSeconds drops the counts of the seconds wholly before the cut and
// marks the second the cut falls in to be counted from its events.
func pgPruneSeconds(ctx context.Context, conn *pgx.Conn, before int64) error {
	if before <= 0 {
		return nil
	}
	if _, err := conn.Exec(ctx, "DELETE FROM event_seconds WHERE sec < $1", before/secondNS); err != nil {
		return err
	}
	if before%secondNS == 0 {
		return nil
	}
	_, err := conn.Exec(ctx, "UPDATE event_seconds SET exact = false WHERE sec = $1 AND exact", before/secondNS)
	return err
}
