package ingest

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// memStore is a store.Store in memory with the contract's Append
// semantics (atomic batches, (Time, ID) kept once), for tests that need no
// database.
type memStore struct {
	mu      sync.Mutex
	events  []event.Event
	keys    map[[2]int64]bool
	appends int
	failAt  int  // fail the failAt-th Append (1-based); 0 never
	discard bool // count appends, keep nothing (for benchmarks)
}

func newMemStore(seed ...event.Event) *memStore {
	m := &memStore{keys: map[[2]int64]bool{}}
	for i := range seed {
		seed[i].Seal()
	}
	if err := m.Append(context.Background(), seed); err != nil {
		panic(err)
	}
	m.appends = 0
	return m
}

var errInjected = errors.New("injected store failure")

func (m *memStore) Append(ctx context.Context, batch []event.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.appends++
	if m.failAt == m.appends {
		return errInjected
	}
	if m.discard {
		return nil
	}
	for i := range batch {
		if err := batch[i].Validate(); err != nil {
			return err
		}
	}
	for _, e := range batch {
		k := [2]int64{e.Time, int64(e.ID)}
		if m.keys[k] {
			continue
		}
		m.keys[k] = true
		m.events = append(m.events, e)
	}
	return nil
}

func (m *memStore) Scan(ctx context.Context, q store.Query, fn func(*event.Event) error) error {
	m.mu.Lock()
	evs := slices.Clone(m.events)
	m.mu.Unlock()
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Time < evs[j].Time })
	for i := range evs {
		e := &evs[i]
		if !q.Window.Contains(e.Time) {
			continue
		}
		if len(q.Kinds) > 0 && !slices.Contains(q.Kinds, e.Kind) {
			continue
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

func (m *memStore) StateAt(ctx context.Context, at int64, namespace string) ([]event.Event, error) {
	return nil, nil
}
func (m *memStore) Prune(ctx context.Context, before int64) (int64, error) { return 0, nil }
func (m *memStore) Version(ctx context.Context) (int, error)               { return 1, nil }
func (m *memStore) Describe() string                                       { return "memory" }
func (m *memStore) Close() error                                           { return nil }

// failures returns the stored client failures.
func (m *memStore) failures() []event.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []event.Event
	for _, e := range m.events {
		if e.Kind == event.ClientFailure {
			out = append(out, e)
		}
	}
	return out
}
