package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// TailOptions configure Rollouts.Tail.
type TailOptions struct {
	// Poll is how often the store is read. Default 1 s.
	Poll time.Duration
	// Start is where the tail begins (UTC ns); default the clock's now
	// minus the Delay. Events before it are not read: a pod terminating
	// while the server starts may be missing from the signals, which is
	// better than counting again, after a restart, a pod already counted.
	Start  int64
	Logger *slog.Logger
}

// Tail computes the rollout signals from the events every agent stores:
// where the endpoint transitions (recorded by one agent in leader mode, by
// every agent otherwise) and each node's kernel events meet. Every Poll it
// reads the events newer than the analysed mark minus the Delay, feeds the
// ones it has not seen (by time and identity: Seal makes the identity
// stable, so an event read twice is one event) to r, then analyses up to
// the poll's start minus the Delay. So an event counts when its agent
// stored it within the Delay of its time; one stored later than that but
// within twice the Delay (a store outage on the agent's side) is counted in
// drainscope_rollout_late_events_total, and anything older is not read
// again. A failed read analyses nothing: the signals wait for the store
// rather than declaring its events late. Tail returns when ctx ends,
// after a last read and a Flush; its error is ctx's.
func (r *Rollouts) Tail(ctx context.Context, st store.Store, o TailOptions) error {
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	delay := int64(r.opts.Delay)
	from := o.Start
	if from == 0 {
		from = r.opts.Now().UnixNano() - delay
	}
	t := &tail{r: r, st: st, log: o.Logger, from: from, seen: map[seenKey]struct{}{}}
	tick := time.NewTicker(o.Poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			// What the agents stored last still counts, if the store
			// answers soon.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			t.read(rctx)
			cancel()
			r.Flush()
			return ctx.Err()
		case <-tick.C:
			t.poll(ctx)
		}
	}
}

type seenKey struct {
	t  int64
	id event.ID
}

type tail struct {
	r    *Rollouts
	st   store.Store
	log  *slog.Logger
	from int64 // the oldest event time read
	seen map[seenKey]struct{}
	errs int // consecutive failed reads
}

// poll reads and, when the read succeeded, analyses up to its start minus
// the Delay: everything stored before the read began is in it.
func (t *tail) poll(ctx context.Context) {
	start := t.r.opts.Now().UnixNano()
	if !t.read(ctx) {
		return
	}
	t.r.advance(start - int64(t.r.opts.Delay))
}

// read feeds r the events from t.from on that it has not seen, and moves
// t.from to the analysed mark minus the Delay.
func (t *tail) read(ctx context.Context) bool {
	q := store.Query{Window: event.Window{From: t.from}}
	err := t.st.Scan(ctx, q, func(e *event.Event) error {
		k := seenKey{e.Time, e.ID}
		if _, ok := t.seen[k]; ok {
			return nil
		}
		t.seen[k] = struct{}{}
		c := e.Clone()
		t.r.Add(&c)
		return nil
	})
	if err != nil {
		if ctx.Err() == nil {
			t.errs++
			// Warn on the first failure and then once a minute of them.
			if t.errs == 1 || t.errs%60 == 0 {
				t.log.Warn("rollout signals: reading the store failed; the signals wait for it", "err", err, "failed_reads", t.errs)
			}
		}
		return false
	}
	if t.errs > 0 {
		t.log.Info("rollout signals: reading the store again", "after_failed_reads", t.errs)
		t.errs = 0
	}
	t.r.mu.Lock()
	mark := t.r.mark
	t.r.mu.Unlock()
	if from := mark - int64(t.r.opts.Delay); from > t.from {
		t.from = from
		for k := range t.seen {
			if k.t < from {
				delete(t.seen, k)
			}
		}
	}
	return true
}
