package scenario

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/flight"
	"github.com/drainscope/drainscope/store"
)

// recorder batches events into the store from any goroutine: the load's
// failures, the kernel capture's events, the watcher's transitions.
type recorder struct {
	st  store.Store
	log *slog.Logger
	ch  chan item
	// flight holds ordinary connection closes until their pod's
	// disruption, as the agent's does.
	flight *flight.Recorder

	done   chan struct{}
	once   sync.Once
	sendMu sync.RWMutex // Add holds it shared, Close exclusively
	closed bool

	mu     sync.Mutex
	counts map[event.Kind]int
	failed int // events the store refused after retries
}

// item is an event to store, or a request to flush (synced is closed once
// everything before it is stored).
type item struct {
	e      event.Event
	synced chan struct{}
}

func newRecorder(st store.Store, log *slog.Logger) *recorder {
	r := &recorder{st: st, log: log, ch: make(chan item, 1<<16), done: make(chan struct{}), counts: map[event.Kind]int{}}
	r.flight = flight.New(flight.Config{}, r.enqueue)
	go r.loop()
	return r
}

// Add takes one event through the flight recorder.
func (r *recorder) Add(e event.Event) { r.flight.Add(e) }

// enqueue queues one event for the store, sealed here unless the caller
// sealed it.
func (r *recorder) enqueue(e event.Event) {
	if e.ID == 0 {
		e.Seal()
	}
	r.sendMu.RLock()
	defer r.sendMu.RUnlock()
	if !r.closed {
		r.ch <- item{e: e}
	}
}

func (r *recorder) loop() {
	defer close(r.done)
	const maxBatch = 4096
	batch := make([]event.Event, 0, maxBatch)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	flush := func() {
		if len(batch) == 0 {
			return
		}
		var err error
		for try := 0; try < 5; try++ {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err = r.st.Append(ctx, batch)
			cancel()
			if err == nil {
				break
			}
			time.Sleep(time.Duration(try+1) * 200 * time.Millisecond)
		}
		r.mu.Lock()
		if err != nil {
			r.failed += len(batch)
			r.log.Error("writing events to the store", "events", len(batch), "err", err)
		} else {
			for i := range batch {
				r.counts[batch[i].Kind]++
			}
		}
		r.mu.Unlock()
		batch = batch[:0]
	}
	for {
		select {
		case it, ok := <-r.ch:
			if !ok {
				flush()
				return
			}
			if it.synced != nil {
				flush()
				close(it.synced)
				continue
			}
			batch = append(batch, it.e)
			if len(batch) >= maxBatch {
				flush()
			}
		case <-t.C:
			flush()
		}
	}
}

// Sync waits until everything queued so far is in the store.
func (r *recorder) Sync() {
	synced := make(chan struct{})
	r.sendMu.RLock()
	if r.closed {
		r.sendMu.RUnlock()
		return
	}
	r.ch <- item{synced: synced}
	r.sendMu.RUnlock()
	<-synced
}

// Close flushes and stops. Add must not be called afterwards.
func (r *recorder) Close() {
	r.once.Do(func() {
		r.sendMu.Lock()
		r.closed = true
		close(r.ch)
		r.sendMu.Unlock()
	})
	<-r.done
}

// Counts returns how many events of each kind were stored.
func (r *recorder) Counts() map[event.Kind]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[event.Kind]int, len(r.counts))
	for k, v := range r.counts {
		out[k] = v
	}
	return out
}
