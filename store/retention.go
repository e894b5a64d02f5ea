package store

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// DefaultRetention is how long events are kept when --retention is not
// given: two weeks of rollouts.
const DefaultRetention = 14 * 24 * time.Hour

// DefaultPruneInterval is how often a Retention prunes after the first
// pass at start.
const DefaultPruneInterval = time.Hour

// Pruned is what one pruning pass removed.
type Pruned struct {
	Events     int64 // rows deleted, and the rows of the partitions dropped
	Partitions int   // Postgres day partitions dropped whole
	Skipped    bool  // another process was pruning the same database
}

// detailedPruner is a store that can say more than Prune's count.
type detailedPruner interface {
	PruneDetail(ctx context.Context, before int64) (Pruned, error)
}

// readOnlyStore is a store that knows it cannot be written.
type readOnlyStore interface{ ReadOnly() bool }

// pruneDetail prunes st and reports what went.
func pruneDetail(ctx context.Context, st Store, before int64) (Pruned, error) {
	if d, ok := st.(detailedPruner); ok {
		return d.PruneDetail(ctx, before)
	}
	n, err := st.Prune(ctx, before)
	return Pruned{Events: n}, err
}

// RetentionStats are a Retention's counters, for /metrics.
type RetentionStats struct {
	Keep        time.Duration // the retention itself
	Runs        uint64        // passes that pruned (or found nothing to prune)
	Failures    uint64        // passes that failed; the next one retries
	Events      uint64        // events removed, in all
	Partitions  uint64        // partitions dropped, in all
	LastSuccess time.Time     // end of the last pass that succeeded; zero before it
}

// Retention prunes a store on a schedule: once when Run starts, then every
// Interval (give or take a tenth, so that processes started together do not
// prune together), deleting the events older than Keep. Pruning works in
// short statements of its own and never holds what a writer needs for long,
// so Run goes on beside the writers. The agent and the server both run one;
// Active decides, at each pass, whether this process is the one to prune.
type Retention struct {
	Store    Store         // the store as opened, not a wrapper that hides its methods
	Keep     time.Duration // events older than this go; 0 or less prunes nothing
	Interval time.Duration // default DefaultPruneInterval
	// Active, when set, is asked before each pass; false skips the pass and
	// asks again within a minute (an agent that is not the lease holder).
	Active func() bool
	Logger *slog.Logger

	now   func() time.Time                     // for tests; default time.Now
	after func(time.Duration) <-chan time.Time // for tests; default time.After

	mu    sync.Mutex
	stats RetentionStats
}

// Stats returns the counters so far.
func (r *Retention) Stats() RetentionStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Keep = r.Keep
	return s
}

// Run prunes until ctx ends. It returns at once when Keep is 0 or the
// store is read-only, saying so in the log.
func (r *Retention) Run(ctx context.Context) {
	log := r.Logger
	if log == nil {
		log = slog.Default()
	}
	if r.Keep <= 0 {
		log.Info("retention off: events are kept until deleted by hand", "store", r.Store.Describe())
		return
	}
	if ro, ok := r.Store.(readOnlyStore); ok && ro.ReadOnly() {
		log.Info("retention off: the store is read-only", "store", r.Store.Describe())
		return
	}
	now, after := r.now, r.after
	if now == nil {
		now = time.Now
	}
	if after == nil {
		after = time.After
	}
	interval := r.Interval
	if interval <= 0 {
		interval = DefaultPruneInterval
	}
	// Jitter of ±10%: agents restarted together by a rollout spread out.
	jitter := func(d time.Duration) time.Duration {
		return d - d/10 + time.Duration(rand.Int64N(int64(d/5)+1))
	}
	for {
		wait := jitter(interval)
		if r.Active != nil && !r.Active() {
			wait = jitter(min(interval, time.Minute))
		} else {
			r.pass(ctx, log, now)
		}
		select {
		case <-ctx.Done():
			return
		case <-after(wait):
		}
	}
}

// pass prunes once and records the outcome.
func (r *Retention) pass(ctx context.Context, log *slog.Logger, now func() time.Time) {
	start := now()
	before := start.Add(-r.Keep)
	p, err := pruneDetail(ctx, r.Store, before.UnixNano())
	took := now().Sub(start)
	r.mu.Lock()
	if err != nil {
		r.stats.Failures++
	} else {
		r.stats.Runs++
		r.stats.Events += uint64(max(p.Events, 0))
		r.stats.Partitions += uint64(p.Partitions)
		r.stats.LastSuccess = now() // when skipped, another process is pruning it now
	}
	r.mu.Unlock()
	switch {
	case err != nil && ctx.Err() != nil:
		// Shutting down: the next start prunes again.
	case err != nil:
		log.Warn("pruning the store failed; retrying at the next pass", "before", before.UTC().Format(time.RFC3339), "err", err)
	case p.Skipped:
		log.Debug("pruning skipped: another process is pruning this store", "store", r.Store.Describe())
	case p.Events > 0 || p.Partitions > 0:
		log.Info("pruned the store", "before", before.UTC().Format(time.RFC3339), "events", p.Events,
			"partitions", p.Partitions, "took", took.Round(time.Millisecond))
	default:
		log.Debug("nothing to prune", "before", before.UTC().Format(time.RFC3339), "took", took.Round(time.Millisecond))
	}
}

// deleteOlder deletes the rows older than before a chunk at a time, each
// chunk a statement (and a transaction) of its own, so that no single
// statement holds the store's locks for long. nth returns the time of the
// row chunk places past the oldest one (false when fewer rows than that are
// older than before); del deletes the rows older than below, or also those
// at below when through is set. After each chunk it calls rest with the
// time the chunk took, to let writers in.
func deleteOlder(ctx context.Context, before int64, chunk int,
	nth func(ctx context.Context, before int64, chunk int) (int64, bool, error),
	del func(ctx context.Context, below int64, through bool) (int64, error),
	rest func(took time.Duration)) (int64, error) {
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		start := time.Now()
		hi, ok, err := nth(ctx, before, chunk)
		if err != nil {
			return total, fmt.Errorf("finding the next chunk: %w", err)
		}
		if !ok {
			n, err := del(ctx, before, false)
			return total + n, err
		}
		n, err := del(ctx, hi, false)
		if err == nil && n == 0 {
			// More than a chunk of rows share hi's time: take them all.
			n, err = del(ctx, hi, true)
		}
		total += n
		if err != nil {
			return total, err
		}
		if rest != nil {
			rest(time.Since(start))
		}
	}
}
