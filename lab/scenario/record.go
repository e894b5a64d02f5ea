package scenario

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/flight"
	"github.com/drainscope/drainscope/relay"
	"github.com/drainscope/drainscope/store"
)

// recorder batches events into the store from any goroutine: the load's
// failures, the kernel capture's events, the watcher's transitions. What
// an agent records (relay.AgentSource) goes to agent, the lab's relay
// client, when it is set; the rest straight to st.
type recorder struct {
	st    store.Store
	agent store.Store
	log   *slog.Logger
	ch    chan item
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

func newRecorder(st, agent store.Store, log *slog.Logger) *recorder {
	r := &recorder{st: st, agent: agent, log: log, ch: make(chan item, 1<<16), done: make(chan struct{}), counts: map[event.Kind]int{}}
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
	var agentBatch []event.Event
	flush := func() {
		if len(batch) == 0 {
			return
		}
		if r.agent != nil {
			agentBatch = agentBatch[:0]
			n := 0
			for _, e := range batch {
				if agentsOwn(e) {
					agentBatch = append(agentBatch, e)
				} else {
					batch[n] = e
					n++
				}
			}
			r.write(r.agent, agentBatch)
			batch = batch[:n]
		}
		r.write(r.st, batch)
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

// agentsOwn tells the lab node's agent's events, which go through the
// relay, from the rest: the load's client failures, the lab's own events,
// and an ingress's dataplane records (node "haproxy"), which a cluster's
// proxy sends to the ingest endpoint, not an agent.
func agentsOwn(e event.Event) bool {
	return relay.AgentSource(e.Source) && (e.Node == "" || e.Node == NodeName)
}

// write stores batch in st, retrying a failure that is not the events'
// own. A batch refused for one event (store.RowLevel: the relay's
// refusals too) is split in halves until the refused events are alone,
// as the agent's store.Writer does, so that one loses only itself.
func (r *recorder) write(st store.Store, batch []event.Event) {
	if len(batch) == 0 {
		return
	}
	var err error
	for try := 0; try < 5; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = st.Append(ctx, batch)
		cancel()
		if err == nil || store.RowLevel(err) {
			break
		}
		time.Sleep(time.Duration(try+1) * 200 * time.Millisecond)
	}
	if err != nil && store.RowLevel(err) && len(batch) > 1 {
		r.write(st, batch[:len(batch)/2])
		r.write(st, batch[len(batch)/2:])
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed += len(batch)
		r.log.Error("writing events to the store", "store", st.Describe(), "events", len(batch), "err", err)
		return
	}
	for i := range batch {
		r.counts[batch[i].Kind]++
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
