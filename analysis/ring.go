package analysis

// ring is a FIFO addressed by sequence numbers that only grow: push returns
// an element's number, at finds it while it is still held, drop forgets the
// oldest. A pointer from at stays valid until its element is dropped.
//
// The elements live in blocks of ringBlock elements. Growing adds a
// block: nothing held is copied, and no doubled array is left behind. A
// block the oldest element has left is kept for the next one needed, so
// a window that slides along a long stream (the kernel events of the
// last seconds) touches memory for what it holds at most, not for what
// went through it.
type ring[T any] struct {
	blocks     []*[ringBlock]T // blocks[0][0] is sequence number first
	spare      []*[ringBlock]T // emptied blocks, all zero
	first      int64
	head, tail int64 // sequence numbers of the oldest element and of the next
}

// ringBlock is how many elements a block holds: 48 KiB of the kernel
// window's entries, which hold an event each.
const ringBlock = 128

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
	i := uint64(r.tail - r.first)
	if i/ringBlock == uint64(len(r.blocks)) {
		var b *[ringBlock]T
		if n := len(r.spare); n > 0 {
			b, r.spare = r.spare[n-1], r.spare[:n-1]
		} else {
			b = new([ringBlock]T)
		}
		r.blocks = append(r.blocks, b)
	}
	r.tail++
	return r.tail - 1, &r.blocks[i/ringBlock][i%ringBlock]
}

// at returns element s, or nil when it was dropped or never pushed.
func (r *ring[T]) at(s int64) *T {
	if s < r.head || s >= r.tail {
		return nil
	}
	i := uint64(s - r.first) // first ≤ head ≤ s
	return &r.blocks[i/ringBlock][i%ringBlock]
}

func (r *ring[T]) front() *T { return r.at(r.head) }

// drop forgets the oldest element, clearing it for the collector; the
// block it empties goes to the spares.
func (r *ring[T]) drop() {
	var zero T
	*r.at(r.head) = zero
	r.head++
	if r.head-r.first == ringBlock {
		r.spare = append(r.spare, r.blocks[0])
		n := copy(r.blocks, r.blocks[1:]) // in place: the list keeps its array
		r.blocks[n] = nil
		r.blocks = r.blocks[:n]
		r.first = r.head
	}
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
