package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/relay"
	"github.com/drainscope/drainscope/store"
)

// recorder is a real SQLite store that records each Append's size, holds
// the Appends while hold is set, and refuses (row-level) a batch holding
// an event of pod "bad", as a store refuses one bad row.
type recorder struct {
	store.Store
	mu    sync.Mutex
	sizes []int
	hold  chan struct{}
	in    chan struct{}
}

func (r *recorder) Append(ctx context.Context, b []event.Event) error {
	r.mu.Lock()
	r.sizes = append(r.sizes, len(b))
	hold := r.hold
	r.mu.Unlock()
	if hold != nil {
		r.in <- struct{}{}
		<-hold
	}
	for i := range b {
		if b[i].Pod.Name == "bad" {
			return fmt.Errorf("%w: event %d of pod bad", store.ErrRefused, i)
		}
	}
	return r.Store.Append(ctx, b)
}

// TestHandlerMergesBatches: batches that arrive while both merged writers
// are busy are stored in one Append, each request answered with its own
// count; a merged write refused for one row is written batch by batch, so
// that only the batch with the bad event is refused.
func TestHandlerMergesBatches(t *testing.T) {
	rec := &recorder{Store: sqlite(t), hold: make(chan struct{}), in: make(chan struct{}, relay.MergeWriters)}
	h := &relay.Handler{Store: rec, Auth: nodeToken{}, MaxConcurrent: 16}
	srv := httptest.NewServer(h)
	defer srv.Close()
	base := time.Now().Add(-time.Minute)

	var wg sync.WaitGroup
	codes := map[string]int{}
	var mu sync.Mutex
	send := func(node string, evs []event.Event) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, _ := json.Marshal(relay.Batch{Events: evs})
			code := postRaw(t, srv.URL, "node:"+node, b, false)
			mu.Lock()
			codes[node] = code
			mu.Unlock()
		}()
	}
	waitQueued := func(n int) {
		for deadline := time.Now().Add(10 * time.Second); h.Queued() < n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d batches queued, want %d", h.Queued(), n)
			}
		}
	}
	// entered waits for a store write to begin, rather than hang the test.
	entered := func() {
		select {
		case <-rec.in:
		case <-time.After(10 * time.Second):
			rec.mu.Lock()
			defer rec.mu.Unlock()
			t.Fatalf("no store write began in 10 s; writes so far of %v events", rec.sizes)
		}
	}
	// Both writers busy with one batch each; three more queue up. b is
	// sent once a's write has begun, or the two could be merged.
	send("a", events("a", base, 5, "p"))
	entered()
	send("b", events("b", base, 5, "p"))
	entered()
	for _, n := range []string{"c", "d", "e"} {
		send(n, events(n, base, 3, "p"))
	}
	waitQueued(3)
	rec.mu.Lock()
	close(rec.hold)
	rec.hold = nil
	rec.mu.Unlock()
	wg.Wait()
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		if codes[n] != http.StatusOK {
			t.Errorf("node %s's batch: %d, want 200", n, codes[n])
		}
	}
	if !slices.Contains(rec.sizes, 9) {
		t.Errorf("store writes of %v events: want one of 9, the three queued batches merged", rec.sizes)
	}

	// A merged write with a bad event: only its batch is refused.
	rec.mu.Lock()
	rec.sizes, rec.hold = nil, make(chan struct{})
	rec.mu.Unlock()
	send("a", events("a", base.Add(time.Second), 1, "p"))
	entered()
	send("b", events("b", base.Add(time.Second), 1, "p"))
	entered()
	send("c", events("c", base.Add(time.Second), 2, "p"))
	send("d", events("d", base.Add(time.Second), 2, "bad"))
	waitQueued(2)
	rec.mu.Lock()
	close(rec.hold)
	rec.hold = nil
	rec.mu.Unlock()
	wg.Wait()
	if codes["c"] != http.StatusOK || codes["d"] != http.StatusBadRequest {
		t.Errorf("good batch %d, bad batch %d: want 200 and 400", codes["c"], codes["d"])
	}
	if !slices.Contains(rec.sizes, 4) {
		t.Errorf("store writes of %v events: want the merged 4 first", rec.sizes)
	}
	for n, want := range map[string]int{"a": 6, "b": 6, "c": 5, "d": 3} {
		if got := count(t, rec.Store, n); got != want {
			t.Errorf("node %s: %d events stored, want %d", n, got, want)
		}
	}
}

// TestHandlerStages: each batch reports its stages to Handler.Stages; one
// that waited for both writers reports that wait as its queue stage, the
// held writes as their write stage, and a batch refused at the node check
// reports no queue or write.
func TestHandlerStages(t *testing.T) {
	rec := &recorder{Store: sqlite(t), hold: make(chan struct{}), in: make(chan struct{}, relay.MergeWriters)}
	var mu sync.Mutex
	stages := map[string][]time.Duration{}
	h := &relay.Handler{Store: rec, Auth: nodeToken{}, MaxConcurrent: 16, Stages: func(s string, d time.Duration) {
		mu.Lock()
		stages[s] = append(stages[s], d)
		mu.Unlock()
	}}
	srv := httptest.NewServer(h)
	defer srv.Close()
	base := time.Now().Add(-time.Minute)
	var wg sync.WaitGroup
	send := func(token string, evs []event.Event, want int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, _ := json.Marshal(relay.Batch{Events: evs})
			if code := postRaw(t, srv.URL, "node:"+token, b, false); code != want {
				t.Errorf("batch of node %s: %d, want %d", token, code, want)
			}
		}()
	}
	entered := func() {
		select {
		case <-rec.in:
		case <-time.After(10 * time.Second):
			t.Fatal("no store write began in 10 s")
		}
	}
	send("a", events("a", base, 2, "p"), http.StatusOK)
	entered()
	send("b", events("b", base, 2, "p"), http.StatusOK)
	entered()
	send("c", events("c", base, 2, "p"), http.StatusOK)
	for deadline := time.Now().Add(10 * time.Second); h.Queued() < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the third batch was not queued")
		}
	}
	const held = 150 * time.Millisecond
	time.Sleep(held)
	rec.mu.Lock()
	close(rec.hold)
	rec.hold = nil
	rec.mu.Unlock()
	wg.Wait()
	send("a", events("b", base, 1, "p"), http.StatusForbidden) // another node's event
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	want := map[string]int{relay.StageReview: 4, relay.StageSlot: 4, relay.StageBody: 4, relay.StageCheck: 4, relay.StageQueue: 3, relay.StageWrite: 3}
	for s, n := range want {
		if len(stages[s]) != n {
			t.Errorf("stage %s reported %d times, want %d (all: %v)", s, len(stages[s]), n, stages)
		}
	}
	if q := slices.Max(stages[relay.StageQueue]); q < held {
		t.Errorf("longest queue stage %v, want at least the %v both writers were held", q, held)
	}
	if w := slices.Max(stages[relay.StageWrite]); w < held {
		t.Errorf("longest write stage %v, want at least the %v the writes were held", w, held)
	}
}
