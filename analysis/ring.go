package analysis

// ring is a FIFO addressed by sequence numbers that only grow: push returns
// an element's number, at finds it while it is still held, drop forgets the
// oldest. Pointers from at stay valid until the next push.
type ring[T any] struct {
	buf        []T
	head, tail int64 // sequence numbers of the oldest element and of the next
}

func (r *ring[T]) len() int { return int(r.tail - r.head) }

func (r *ring[T]) push(v T) int64 {
	s, p := r.add()
	*p = v
	return s
}

// add appends a zero element and returns its number and where it is, to
// be filled in place: an element the size of an event is then written
// once, not copied in.
func (r *ring[T]) add() (int64, *T) {
	if r.len() == len(r.buf) {
		n := max(64, 2*len(r.buf))
		buf := make([]T, n)
		for s := r.head; s < r.tail; s++ {
			buf[s&int64(n-1)] = r.buf[s&int64(len(r.buf)-1)]
		}
		r.buf = buf
	}
	p := &r.buf[r.tail&int64(len(r.buf)-1)] // zero: drop clears what it forgets
	r.tail++
	return r.tail - 1, p
}

// at returns element s, or nil when it was dropped or never pushed.
func (r *ring[T]) at(s int64) *T {
	if s < r.head || s >= r.tail {
		return nil
	}
	return &r.buf[s&int64(len(r.buf)-1)]
}

func (r *ring[T]) front() *T { return r.at(r.head) }

// drop forgets the oldest element, clearing it for the collector.
func (r *ring[T]) drop() {
	var zero T
	r.buf[r.head&int64(len(r.buf)-1)] = zero
	r.head++
}

// search returns the first sequence number in [head, tail) for which f
// holds, f being false then true along the ring; tail when none.
func (r *ring[T]) search(f func(*T) bool) int64 {
	lo, hi := r.head, r.tail
	for lo < hi {
		m := lo + (hi-lo)/2
		if f(r.at(m)) {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}
