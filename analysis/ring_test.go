package analysis

import (
	"math/rand/v2"
	"testing"
)

// The ring holds what a slice of the pushed elements would, from head to
// tail, through a window that grows, slides and shrinks across many
// blocks; an element stays where at first found it until it is dropped;
// and a window that slides at a steady length reuses its blocks.
func TestRing(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	type elem struct{ seq int64 }
	var g ring[elem]
	var head int64
	var held []int64 // the model: the numbers pushed, from head
	where := map[int64]*elem{}
	check := func(step int) {
		if g.len() != len(held) || g.head != head {
			t.Fatalf("step %d: len %d head %d, want %d %d", step, g.len(), g.head, len(held), head)
		}
		for range 20 {
			s := head - 2 + r.Int64N(int64(len(held))+4)
			p := g.at(s)
			if (p != nil) != (s >= head && s < head+int64(len(held))) {
				t.Fatalf("step %d: at(%d) = %v, held [%d, %d)", step, s, p, head, head+int64(len(held)))
			}
			if w, ok := where[s]; p != nil && (p.seq != s || ok && p != w) {
				t.Fatalf("step %d: at(%d) holds %d at %p, pushed at %p", step, s, p.seq, p, where[s])
			}
		}
		if len(held) > 0 {
			k := held[r.IntN(len(held))]
			if got := g.search(func(e *elem) bool { return e.seq >= k }); got != k {
				t.Fatalf("step %d: search for %d = %d", step, k, got)
			}
		}
	}
	push := func() {
		s := g.push(elem{seq: g.tail})
		held = append(held, s)
		where[s] = g.at(s)
	}
	drop := func() {
		g.drop()
		delete(where, head)
		held, head = held[1:], head+1
	}
	target := 0
	for step := range 100_000 {
		if step%5000 == 0 {
			target = r.IntN(3000) // the window's length, for a while
		}
		if len(held) < target || (len(held) == target && r.IntN(2) == 0) {
			push()
		} else if len(held) > 0 {
			if g.front().seq != head {
				t.Fatalf("step %d: front holds %d, want %d", step, g.front().seq, head)
			}
			drop()
		}
		if step%97 == 0 {
			check(step)
		}
	}
	// A steady window of 1,000 elements sliding over 100,000 more.
	for len(held) > 1000 {
		drop()
	}
	for len(held) < 1000 {
		push()
	}
	allocs := testing.AllocsPerRun(1, func() {
		for range 100_000 {
			g.push(elem{seq: g.tail})
			g.drop()
		}
	})
	head = g.head // AllocsPerRun calls it twice
	for i := range held {
		held[i] = head + int64(i)
	}
	clear(where) // the pointers are checked above
	if blocks := 100_000 / ringBlock; allocs > float64(blocks)/10 {
		t.Errorf("a steady window sliding over %d blocks of elements allocated %.0f times", blocks, allocs)
	}
	check(-1)
}
