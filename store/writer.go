package store

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/drainscope/drainscope/event"
)

// WriterOptions tune a Writer. Zero values take the defaults.
type WriterOptions struct {
	// Batch is the most events one Append carries (default 5,000).
	Batch int
	// Interval is the longest an event waits before a write (default 200 ms).
	Interval time.Duration
	// Limit bounds the events held in memory while the store is slow or
	// down (default 1,000,000). Events past it are dropped and counted.
	Limit int
	// RetryMax caps the pause between failed writes (default 10 s).
	RetryMax time.Duration
	// MaxAge, when set, drops the events older than it when their write
	// comes, counted in Rejected, for a store that refuses them: the
	// server's relay takes an agent's events of the last hour only. Sent,
	// a buffer of such events held through a long outage would be refused
	// and split down to single events, two requests each.
	MaxAge time.Duration
	Logger *slog.Logger
}

// WriterStats counts what a Writer did.
type WriterStats struct {
	Received int64 // events handed to Add
	Written  int64 // events the store accepted
	Dropped  int64 // events refused because the buffer was full (reason buffer_full)
	Rejected int64 // events the store refused for what is in them, dropped (reason rejected_row)
	Pending  int   // events held, not yet written
	Failures int64 // Append calls that failed for a transient reason; their events were kept
	LastErr  string
}

// Writer batches events into a Store from any number of producers. It
// keeps events until the store accepts them, so a database outage loses
// nothing within Limit; past Limit it drops new events and counts them,
// never silently. Append is idempotent, so a batch that failed after the
// database committed it is simply written again.
//
// A batch the store refuses for a row-level reason (see RowLevel) would
// fail on every retry and hold up everything behind it. The Writer splits
// it in halves and writes each, down to single events, stores all the
// others and drops the events the store refuses alone, logging each once
// and counting them in Rejected.
type Writer struct {
	st   Store
	opt  WriterOptions
	wake chan struct{} // a batch is full
	stop chan struct{} // Close was called
	done chan struct{} // loop has returned
	// abandon ends the loop's write once Close gives up on it: a store
	// that honours its context returns then, instead of holding the loop.
	abandon context.CancelFunc
	loopCtx context.Context

	mu      sync.Mutex
	pending []event.Event
	stats   WriterStats
	closed  bool
}

// NewWriter starts a Writer that flushes until Close is called.
func NewWriter(st Store, opt WriterOptions) *Writer {
	if opt.Batch <= 0 {
		opt.Batch = 5000
	}
	if opt.Interval <= 0 {
		opt.Interval = 200 * time.Millisecond
	}
	if opt.Limit <= 0 {
		opt.Limit = 1_000_000
	}
	if opt.RetryMax <= 0 {
		opt.RetryMax = 10 * time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	w := &Writer{st: st, opt: opt, wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	w.loopCtx, w.abandon = context.WithCancel(context.Background())
	go w.loop()
	return w
}

// Add queues events. It never blocks on the store; it reports how many of
// evs were dropped because the buffer was full.
func (w *Writer) Add(evs ...event.Event) (dropped int) {
	w.mu.Lock()
	w.stats.Received += int64(len(evs))
	room := w.opt.Limit - len(w.pending)
	if w.closed {
		room = 0
	}
	if room < len(evs) {
		dropped = len(evs) - max(room, 0)
		evs = evs[:max(room, 0)]
		w.stats.Dropped += int64(dropped)
	}
	w.pending = append(w.pending, evs...)
	full := len(w.pending) >= w.opt.Batch
	w.mu.Unlock()
	if full {
		w.poke()
	}
	return dropped
}

// AddOver queues e even when the buffer is full: a recorder's account of
// what it dropped (an agent's recorder_coverage span, one an interval)
// must not be dropped itself. It goes past Limit by one event per call;
// only a closed writer refuses it (reported false, and counted dropped).
func (w *Writer) AddOver(e event.Event) bool {
	w.mu.Lock()
	w.stats.Received++
	if w.closed {
		w.stats.Dropped++
		w.mu.Unlock()
		return false
	}
	w.pending = append(w.pending, e)
	full := len(w.pending) >= w.opt.Batch
	w.mu.Unlock()
	if full {
		w.poke()
	}
	return true
}

func (w *Writer) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Stats returns a snapshot of the counters.
func (w *Writer) Stats() WriterStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stats
	s.Pending = len(w.pending)
	return s
}

// Close stops taking events and writes what is held, trying until ctx ends.
// Whatever could not be written is reported as an error with its count.
// A store that hangs (an Append that never returns) holds Close no longer
// than ctx: a shutdown must not wait forever on it. The events it was
// writing are still held, and counted in Stats' Pending, until that
// Append returns.
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	again := w.closed
	w.closed = true
	w.mu.Unlock()
	if !again {
		close(w.stop)
	}
	res := make(chan error, 1)
	go func() {
		<-w.done // the loop ends once its write in progress returns
		if again {
			res <- nil
			return
		}
		res <- w.drain(ctx)
	}()
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		w.abandon()
		return &UnwrittenError{Events: w.Stats().Pending, Err: ctx.Err()}
	}
}

// drain writes what is held, retrying until ctx ends.
func (w *Writer) drain(ctx context.Context) error {
	backoff := 50 * time.Millisecond
	for {
		n, err := w.flushOnce(ctx)
		if err == nil && n == 0 {
			return nil
		}
		if err != nil {
			select {
			case <-ctx.Done():
				left := w.Stats().Pending
				return &UnwrittenError{Events: left, Err: err}
			case <-time.After(backoff):
				backoff = min(2*backoff, w.opt.RetryMax)
			}
		}
	}
}

// UnwrittenError reports events still held when a Writer had to stop.
type UnwrittenError struct {
	Events int
	Err    error
}

func (e *UnwrittenError) Error() string {
	return "store writer: " + strconv.Itoa(e.Events) + " events not written: " + e.Err.Error()
}

func (e *UnwrittenError) Unwrap() error { return e.Err }

// loop writes a batch whenever one is full or Interval has passed, backing
// off while the store fails, until Close.
func (w *Writer) loop() {
	defer close(w.done)
	tick := time.NewTicker(w.opt.Interval)
	defer tick.Stop()
	backoff := time.Duration(0)
	for {
		wait := (<-chan time.Time)(tick.C)
		if backoff > 0 {
			wait = time.After(backoff)
		}
		select {
		case <-w.stop:
			return
		case <-wait:
		case <-w.wake:
			if backoff > 0 {
				continue // a full batch does not cut a backoff short
			}
		}
		for {
			n, err := w.flushOnce(w.loopCtx)
			if err != nil && w.loopCtx.Err() != nil {
				return // Close gave up on this write: no retry, no warning
			}
			if err != nil {
				backoff = min(max(2*backoff, 100*time.Millisecond), w.opt.RetryMax)
				w.opt.Logger.Warn("store write failed; events kept for retry",
					"err", err, "pending", w.Stats().Pending, "retry_in", backoff)
				break
			}
			backoff = 0
			if n < w.opt.Batch {
				break
			}
		}
	}
}

// flushOnce writes the oldest batch held and reports how many of its
// events are settled: written, or rejected and dropped. Events leave the
// buffer only once settled; on a transient error the rest stay, and the
// error is returned.
func (w *Writer) flushOnce(ctx context.Context) (int, error) {
	w.mu.Lock()
	n := min(len(w.pending), w.opt.Batch)
	stale, oldest := 0, int64(0)
	if w.opt.MaxAge > 0 && n > 0 {
		// Under the lock: Add may be copying the buffer to grow it.
		stale, oldest = staleFirst(w.pending[:n], time.Now().Add(-w.opt.MaxAge).UnixNano())
	}
	batch := w.pending[stale:n:n]
	w.mu.Unlock()
	if n == 0 {
		return 0, nil
	}
	if stale > 0 {
		w.opt.Logger.Warn("events older than the store takes; dropped (counted in drainscope_events_dropped_total{reason=\"rejected_row\"})",
			"events", stale, "max_age", w.opt.MaxAge, "oldest", time.Unix(0, oldest).UTC())
		w.settled(0, stale)
		if len(batch) == 0 {
			return n, nil
		}
	}
	if _, err := w.settle(ctx, batch, false); err != nil {
		w.mu.Lock()
		w.stats.Failures++
		w.stats.LastErr = err.Error()
		w.mu.Unlock()
		return 0, err
	}
	return n, nil
}

// staleFirst moves the events of evs older than cut to its front, the
// others after them in their order, and reports how many there are and
// the oldest time among them.
func staleFirst(evs []event.Event, cut int64) (stale int, oldest int64) {
	for i := range evs {
		if evs[i].Time < cut {
			if stale == 0 || evs[i].Time < oldest {
				oldest = evs[i].Time
			}
			stale++
		}
	}
	if stale == 0 || stale == len(evs) {
		return stale, oldest
	}
	fresh := make([]event.Event, 0, len(evs)-stale)
	j := 0
	for i := range evs {
		if evs[i].Time < cut {
			evs[j] = evs[i]
			j++
		} else {
			fresh = append(fresh, evs[i])
		}
	}
	copy(evs[j:], fresh)
	return stale, oldest
}

// settle writes batch, the oldest events held, isolating the events the
// store refuses by bisection, and reports how many it dropped. Halves are
// written in order, so what is settled is always a prefix of the buffer
// and leaves it at once. bad says the batch is known to hold a refused
// event (the whole failed and its first half went in), which saves writing
// it whole; a single event is always tried, so only the store's own
// refusal drops it. One refused event in a batch of n costs about
// 2·log2(n) writes.
func (w *Writer) settle(ctx context.Context, batch []event.Event, bad bool) (rejected int, err error) {
	if !bad || len(batch) == 1 {
		if err = w.st.Append(ctx, batch); err == nil {
			w.settled(len(batch), 0)
			return 0, nil
		}
		if !RowLevel(err) {
			return 0, err
		}
	}
	if len(batch) == 1 {
		e := &batch[0]
		w.opt.Logger.Warn("store refused an event; dropped (counted in drainscope_events_dropped_total{reason=\"rejected_row\"})",
			"kind", e.Kind, "pod", e.Pod.String(), "time", e.Time, "id", e.ID, "err", err)
		w.mu.Lock()
		w.stats.LastErr = err.Error()
		w.mu.Unlock()
		w.settled(0, 1)
		return 1, nil
	}
	half := len(batch) / 2
	first, err := w.settle(ctx, batch[:half], false)
	if err != nil {
		return first, err
	}
	// The whole was refused: if its first half held nothing refused, the
	// second half does.
	second, err := w.settle(ctx, batch[half:], first == 0)
	return first + second, err
}

// settled removes the n+rejected oldest events from the buffer, counting
// n as written and rejected as dropped.
func (w *Writer) settled(n, rejected int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats.Written += int64(n)
	w.stats.Rejected += int64(rejected)
	// Producers only append past the end, so the oldest events are still
	// the batch's. Dropping them by reslicing is O(1); append reallocates,
	// and copies only the live tail, as the buffer grows.
	w.pending = w.pending[n+rejected:]
}
