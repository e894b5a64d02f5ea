package agent_test

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/memtest"
	"github.com/drainscope/drainscope/metrics"
	"github.com/drainscope/drainscope/store"
)

// slowStore is a real SQLite store that takes at most rate events a second,
// the reader the agent cannot outrun.
type slowStore struct {
	store.Store
	rate int
	mu   sync.Mutex
	next time.Time
}

func (s *slowStore) Append(ctx context.Context, batch []event.Event) error {
	s.mu.Lock()
	now := time.Now()
	if s.next.Before(now) {
		s.next = now
	}
	s.next = s.next.Add(time.Duration(len(batch)) * time.Second / time.Duration(s.rate))
	wait := s.next.Sub(now)
	s.mu.Unlock()
	time.Sleep(wait)
	return s.Store.Append(ctx, batch)
}

// TestOverloadAccounting: the agent's pipeline (its metrics around a store
// writer, as agent.Run wires them) fed at twice the rate its store takes
// keeps the accounting exact — every event produced is stored or dropped
// and counted, drainscope_events_dropped_total says how many — and its
// memory stays within the buffer bound however long the overload lasts.
func TestOverloadAccounting(t *testing.T) {
	const (
		rate    = 20_000 // events/s the store takes
		limit   = 10_000 // the agent's --buffer-events
		seconds = 4
	)
	ctx := context.Background()
	sq, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	m := metrics.New("agent", "test")
	w := store.NewWriter(m.WrapStore(&slowStore{Store: sq, rate: rate}), store.WriterOptions{Limit: limit, Interval: 50 * time.Millisecond, Logger: testLogger(t)})
	m.WatchWriter(limit, w.Stats)

	base := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC).UnixNano()
	mk := func(i int) event.Event {
		e := event.Event{Time: base + int64(i)*1000, Kind: event.ConnClosed, Node: "node-a", Source: event.SourceKernel,
			Pod: event.PodRef{Namespace: "shop", Name: "web-1", UID: "u-1", Container: "app"}, Reason: "local",
			Local:  netip.MustParseAddrPort("10.244.0.2:8080"),
			Remote: netip.AddrPortFrom(netip.MustParseAddr("10.244.0.1"), uint16(1024+i%60000))}
		e.Seal()
		return e
	}
	produced, refused := 0, 0
	heap, _ := memtest.Peak(func() {
		// Twice the store's rate, in 10 ms steps, as a busy node's kernel
		// records arrive.
		start := time.Now()
		for step := 0; time.Since(start) < seconds*time.Second; step++ {
			for range 2 * rate / 100 {
				e := mk(produced)
				m.Observe(&e)
				refused += w.Add(e)
				produced++
			}
			time.Sleep(time.Until(start.Add(time.Duration(step+1) * 10 * time.Millisecond)))
		}
		if err := w.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	s := w.Stats()
	stored, _ := countStored(t, sq.Describe())
	t.Logf("produced %d in %d s at %d/s against a store of %d/s: stored %d, dropped %d (refused by Add: %d), pending %d; peak heap %.1f MiB",
		produced, seconds, 2*rate, rate, stored, s.Dropped, refused, s.Pending, float64(heap)/(1<<20))
	if int64(produced) != s.Received || s.Received != int64(stored)+s.Dropped || s.Written != int64(stored) || s.Pending != 0 {
		t.Errorf("produced %d, received %d, written %d, stored %d, dropped %d, pending %d: want produced = stored + dropped",
			produced, s.Received, s.Written, stored, s.Dropped, s.Pending)
	}
	if int64(refused) != s.Dropped || s.Dropped < int64(produced)/4 {
		t.Errorf("dropped %d (Add said %d) of %d produced at twice the store's rate: the overload did not show", s.Dropped, refused, produced)
	}
	body := scrape(t, m)
	if want := fmt.Sprintf(`drainscope_events_dropped_total{reason="buffer_full"} %d`, s.Dropped); !strings.Contains(body, want) {
		t.Errorf("/metrics lacks %s:\n%s", want, grepLines(body, "dropped"))
	}
	// The buffer holds at most limit events (about 1 KiB each with their
	// strings and the batch being written); unbounded, it would have held
	// about half of what was produced.
	if heap > 64<<20 {
		t.Errorf("peak heap %.1f MiB under overload with a %d-event buffer", float64(heap)/(1<<20), limit)
	}
}
