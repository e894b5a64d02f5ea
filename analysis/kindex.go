package analysis

// kernelIndex maps a client address to the sequence number, in the
// aligner's kbuf, of its latest pod-side connection event. It is looked up
// for every connection event and every failure, at random among some ten
// thousand live addresses, so each lookup is a cache miss or two; it is
// shaped to make that one:
//
//   - IPv4 keys (addrKey.v4) live in an open-addressed table of its own:
//     linear probing over 16-byte slots holding the key beside its value,
//     so a lookup reads one cache line where the runtime's map reads a
//     control word, then a slot; and swap reads the previous value and
//     writes the new one in a single probe, where a map needs two lookups.
//   - Other keys (IPv6) go to a plain map: rare in a cluster.
//   - A bit per hash of each IPv4 key (maybe, a keyFilter) answers most
//     lookups of an absent key without reading the table: a failure whose
//     client the pods never recorded, a refused or unanswered connect, is
//     common.
//
// Entries are never deleted one by one: an entry whose event has left the
// kernel window is stale, and kbuf.at says so (it returns nil). Once
// half the slots are used, the table is rebuilt with only the live
// entries, at four times their number, so stale entries cost one scan per
// many inserts and probe runs stay short.
type kernelIndex struct {
	slots []kslot // len a power of two; a zero key is an empty slot
	used  int     // slots holding a key, live or stale
	v6    map[addrKey]int64
	// spare is the table before the last rebuild, reused by the next one
	// when the size holds, as it does in a steady stream: a rebuild then
	// allocates nothing for the collector to reclaim.
	spare []kslot
	// maybe holds the IPv4 keys in slots, stale ones included until a
	// rebuild: a probe of the table, 1 MiB in a busy window, misses cache.
	maybe keyFilter
}

// keyFilter has a bit per hash of each packed IPv4 key (addrKey.v4) added
// since it was last cleared: a clear bit says the key was not added. Its
// 8 KiB stay in cache, so it answers most lookups of an absent key where a
// table or map of thousands of keys would miss.
type keyFilter [1024]uint64

func filterBit(key uint64) (word int, bit uint64) {
	h := key * 0x9E3779B97F4A7C15 >> 48
	return int(h >> 6), 1 << (h & 63)
}

func (f *keyFilter) add(key uint64) {
	w, b := filterBit(key)
	f[w] |= b
}

// mayHold reports whether key may have been added: false is certain.
func (f *keyFilter) mayHold(key uint64) bool {
	w, b := filterBit(key)
	return f[w]&b != 0
}

type kslot struct {
	key uint64 // addrKey.v4 with kslotUsed set
	seq int64
}

// kslotUsed marks a slot in use: a v4 key has 48 bits, so an empty slot's
// zero is never a key.
const kslotUsed = 1 << 63

func newKernelIndex(size int) kernelIndex {
	n := 1024
	for n < 4*size {
		n *= 2
	}
	return kernelIndex{slots: make([]kslot, n), v6: map[addrKey]int64{}}
}

// home is where key's probe run starts. The four ports of an address
// that differ only in their two low bits start in one 64-byte line (four
// slots; the table, 16 KiB or more, starts on a line boundary):
// a client's connections, and so a pod's connection events and the
// failures they cause, come in runs of nearby ports (a connection pool
// opened at once, a burst of closes at a pod's exit), and a run then
// reads a quarter of the lines. The groups are spread by Fibonacci
// hashing: the product's bits from 32 up mix every bit of the address and
// of the port but its two low ones.
func (x *kernelIndex) home(key uint64) int {
	g := (key >> 2) * 0x9E3779B97F4A7C15 >> 32
	return int((g<<2 | key&3) & uint64(len(x.slots)-1))
}

// find returns the slot holding key, or the empty slot that ends its run.
func (x *kernelIndex) find(key uint64) *kslot {
	mask := len(x.slots) - 1
	for i := x.home(key); ; i = (i + 1) & mask {
		if s := &x.slots[i]; s.key == key || s.key == 0 {
			return s
		}
	}
}

// get returns the sequence number last set for k.
func (x *kernelIndex) get(k addrKey) (int64, bool) {
	v4, ok := k.v4()
	if !ok {
		seq, ok := x.v6[k]
		return seq, ok
	}
	key := v4 | kslotUsed
	if !x.maybe.mayHold(key) {
		return 0, false
	}
	s := x.find(key)
	return s.seq, s.key != 0
}

// swap sets k's sequence number to seq and returns the previous one.
// head is kbuf's: entries before it are stale, dropped at a rebuild.
func (x *kernelIndex) swap(k addrKey, seq, head int64) (prev int64, ok bool) {
	v4, is4 := k.v4()
	if !is4 {
		prev, ok = x.v6[k]
		x.v6[k] = seq
		return prev, ok
	}
	key := v4 | kslotUsed
	s := x.find(key)
	if s.key != 0 {
		prev, s.seq = s.seq, seq
		return prev, true
	}
	s.key, s.seq = key, seq
	x.maybe.add(key)
	if x.used++; 2*x.used >= len(x.slots) {
		x.rebuild(head)
	}
	return 0, false
}

// rebuild moves the live entries (seq at or after head) to a new table of
// four times their number, at least 1024 slots.
func (x *kernelIndex) rebuild(head int64) {
	live := 0
	for i := range x.slots {
		if x.slots[i].key != 0 && x.slots[i].seq >= head {
			live++
		}
	}
	old := x.slots
	n := 1024
	for n < 4*live {
		n *= 2
	}
	if len(x.spare) == n {
		clear(x.spare)
		x.slots = x.spare
	} else {
		x.slots = make([]kslot, n)
	}
	x.spare, x.used = old, live
	clear(x.maybe[:])
	for _, s := range old {
		if s.key != 0 && s.seq >= head {
			*x.find(s.key) = s
			x.maybe.add(s.key)
		}
	}
}

// trim drops the stale IPv6 entries once they may be as many as the live
// ones (live: kbuf's length), moving the live ones to a new map: a map
// that keys come and go from fills with deleted slots that every lookup
// must step over. The IPv4 table trims itself (see rebuild).
func (x *kernelIndex) trim(head int64, live int) {
	if len(x.v6) < 2*live+1024 {
		return
	}
	m := make(map[addrKey]int64, live)
	for k, seq := range x.v6 {
		if seq >= head {
			m[k] = seq
		}
	}
	x.v6 = m
}
