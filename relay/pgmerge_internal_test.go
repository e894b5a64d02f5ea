package relay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/pgtest"
	"github.com/drainscope/drainscope/store"
)

// holdFirst is a store whose first n Appends wait for release, so that
// the batches behind them queue and are merged; it records each Append's
// size.
type holdFirst struct {
	store.Store
	mu      sync.Mutex
	n       int
	in      chan struct{}
	release chan struct{}
	sizes   []int
}

func (g *holdFirst) Append(ctx context.Context, b []event.Event) error {
	g.mu.Lock()
	g.sizes = append(g.sizes, len(b))
	hold := g.n > 0
	g.n--
	g.mu.Unlock()
	if hold {
		g.in <- struct{}{}
		<-g.release
	}
	return g.Store.Append(ctx, b)
}

// TestMergedWriteRowTooLongForPostgres: nine agents' batches merged into
// one write to a real Postgres, one of them holding an event whose index
// row Postgres refuses for its length (SQLSTATE 54000, an entity key of
// 10 KB). The refusal is the bad row's own (store.RowLevel): the merged
// write is retried batch by batch, the eight honest batches are stored
// and only the ninth is refused. The event reaches the store here without
// the handler's decode, which refuses it for its bound: this is the
// store's own answer, for whatever gets past the bounds.
func TestMergedWriteRowTooLongForPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pg, err := store.OpenPostgres(ctx, pgtest.Schema(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	g := &holdFirst{Store: pg, n: MergeWriters, in: make(chan struct{}, MergeWriters), release: make(chan struct{})}
	h := &Handler{Store: g}
	base := time.Now().Add(-time.Minute)
	batch := func(node string, n int) []event.Event {
		evs := make([]event.Event, n)
		for i := range evs {
			evs[i] = event.Event{Time: base.Add(time.Duration(i) * time.Millisecond).UnixNano(), Kind: event.Signal, Node: node,
				Source: event.SourceKernel, Pod: event.PodRef{Namespace: "shop", Name: "web-" + node, UID: "uid-" + node}, PID: 7, Signal: 15}
			evs[i].Seal()
		}
		return evs
	}
	// Both writers busy with a batch each.
	var wg sync.WaitGroup
	results := map[string]error{}
	var mu sync.Mutex
	send := func(node string, evs []event.Event) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := h.append(ctx, evs)
			mu.Lock()
			results[node] = w.err
			mu.Unlock()
		}()
	}
	for i := range MergeWriters {
		send(fmt.Sprintf("busy-%d", i), batch(fmt.Sprintf("busy-%d", i), 2))
		<-g.in
	}
	// Nine batches queue behind them; node-4's holds the long row.
	for i := range 9 {
		node := fmt.Sprintf("node-%d", i)
		evs := batch(node, 3)
		if i == 4 {
			long := make([]byte, 10_000) // random: Postgres compresses an index row before it measures it
			r := rand.New(rand.NewPCG(1, 2))
			for j := range long {
				long[j] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[r.IntN(64)]
			}
			e := &evs[1]
			e.Kind, e.Source, e.Service, e.Local = event.DataplaneEndpointRemoved, event.SourceDataplane, "web", netip.MustParseAddrPort("10.244.0.9:8080")
			e.Pod = event.PodRef{Namespace: "shop"}
			e.Attrs = map[string]string{event.AttrProxy: string(long)}
			e.Seal()
		}
		send(node, evs)
	}
	for deadline := time.Now().Add(10 * time.Second); h.Queued() < 9; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d batches queued, want 9", h.Queued())
		}
	}
	close(g.release)
	wg.Wait()
	g.mu.Lock()
	sizes := slices.Clone(g.sizes)
	g.mu.Unlock()
	if !slices.Contains(sizes, 27) {
		t.Errorf("store writes of %v events: want one of 27, the nine queued batches merged", sizes)
	}
	for node, err := range results {
		switch {
		case node == "node-4":
			if !store.RowLevel(err) || !strings.Contains(err.Error(), "54000") {
				t.Errorf("the batch with the long row: %v, want a row-level refusal, SQLSTATE 54000", err)
			}
		case err != nil:
			t.Errorf("honest batch of %s: %v, want stored", node, err)
		}
	}
	for i := range 9 {
		node := fmt.Sprintf("node-%d", i)
		evs, err := store.Events(ctx, pg, store.Query{Node: node})
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: 0, false: 3}[i == 4]; len(evs) != want {
			t.Errorf("%s: %d events stored, want %d", node, len(evs), want)
		}
	}
}
