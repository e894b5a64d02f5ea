package store

import (
	"cmp"
	"slices"

	"github.com/drainscope/drainscope/event"
)

// The state of every entity at an instant (Store.StateAt).
//
// Design: each event that records an entity's state carries the entity's
// key (event.Event.Entity) in a column of its own, indexed with its time,
// so "the newest event of this entity at or before t" is one index probe
// however long the history. A small table, entities, lists each key once
// with its namespace and the first and last times stored, kept at Append;
// StateAt walks it and probes the index once per entity. The alternative,
// a table holding each entity's newest event, answers only "now", not an
// instant in the past, and a walk of the distinct keys of the events
// index itself (a loose index scan) costs a probe of every day partition
// per step in Postgres, so grows with the days stored. The entities table
// grows with the entities ever seen (each pod is a new one), not with how
// often their state was recorded; Prune removes the keys whose last event
// it deleted.

// entitySpan is what one batch says of one entity.
type entitySpan struct {
	key, namespace string
	first, last    int64
}

// batchEntities collects the entities the batch's events record, in key
// order (the same lock order for every writer), with their first and last
// times in the batch.
func batchEntities(batch []event.Event) []entitySpan {
	var out []entitySpan
	idx := map[string]int{}
	for i := range batch {
		e := &batch[i]
		k := e.Entity()
		if k == "" {
			continue
		}
		if j, ok := idx[k]; ok {
			out[j].first = min(out[j].first, e.Time)
			out[j].last = max(out[j].last, e.Time)
			continue
		}
		idx[k] = len(out)
		out = append(out, entitySpan{key: k, namespace: e.Pod.Namespace, first: e.Time, last: e.Time})
	}
	slices.SortFunc(out, func(a, b entitySpan) int { return cmp.Compare(a.key, b.key) })
	return out
}

// entityOrNil is the value of the events' entity column: NULL for events
// that record no entity's state, which keeps them out of the partial index.
func entityOrNil(e *event.Event) any {
	if k := e.Entity(); k != "" {
		return k
	}
	return nil
}

// newestPerEntity keeps one event per entity, the newest (by time, then
// ID): a backend's query may return two of an entity stored at the same
// nanosecond. The result is in time order.
func newestPerEntity(evs []event.Event) []event.Event {
	best := map[string]int{}
	out := evs[:0]
	for _, e := range evs {
		k := e.Entity()
		if j, ok := best[k]; ok {
			if e.Time > out[j].Time || e.Time == out[j].Time && e.ID > out[j].ID {
				out[j] = e
			}
			continue
		}
		best[k] = len(out)
		out = append(out, e)
	}
	slices.SortFunc(out, byTimeThenID)
	return out
}

// stateBlock is how many events a block of stateRows holds (1.4 MB).
const stateBlock = 4096

// stateRows gathers the rows of a state read in blocks and hands them over
// in time order, in one slice of the exact size. One slice grown by append
// would be copied at every growth, by a quarter at a time past 256
// elements: for a 5,000-node cluster's 166,897 entities, 304 MB allocated
// for 59 MB kept, each allocation fresh memory. The order is sorted as
// indexes, not by moving the 352-byte events.
type stateRows struct {
	blocks [][]event.Event
	n      int
}

func (r *stateRows) add(e *event.Event) {
	if r.n%stateBlock == 0 {
		r.blocks = append(r.blocks, make([]event.Event, 0, stateBlock))
	}
	b := &r.blocks[len(r.blocks)-1]
	*b = append(*b, *e)
	r.n++
}

func (r *stateRows) at(i int32) *event.Event { return &r.blocks[i/stateBlock][i%stateBlock] }

// sorted returns the events by time, then ID.
func (r *stateRows) sorted() []event.Event {
	idx := make([]int32, r.n)
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(a, b int32) int {
		x, y := r.at(a), r.at(b)
		if c := cmp.Compare(x.Time, y.Time); c != 0 {
			return c
		}
		return cmp.Compare(x.ID, y.ID)
	})
	out := make([]event.Event, r.n)
	for j, i := range idx {
		out[j] = *r.at(i)
	}
	return out
}

func byTimeThenID(a, b event.Event) int {
	if c := cmp.Compare(a.Time, b.Time); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}
