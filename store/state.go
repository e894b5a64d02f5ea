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
	sortByTimeThenID(out)
	return out
}

// sortByTimeThenID sorts evs by time, then ID, as indexes first, then
// moving each event once along the permutation's cycles: sorting the
// 352-byte events themselves would move each about log n times.
func sortByTimeThenID(evs []event.Event) {
	idx := make([]int32, len(evs))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(a, b int32) int { return byTimeThenID(&evs[a], &evs[b]) })
	// evs[j] is to hold the event now at idx[j]: follow each cycle from
	// its start, and mark each place filled (-1).
	for start := range idx {
		if idx[start] < 0 || int(idx[start]) == start {
			continue
		}
		tmp := evs[start]
		j := start
		for {
			from := int(idx[j])
			idx[j] = -1
			if from == start {
				evs[j] = tmp
				break
			}
			evs[j] = evs[from]
			j = from
		}
	}
}

func byTimeThenID(a, b *event.Event) int {
	if c := cmp.Compare(a.Time, b.Time); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}
