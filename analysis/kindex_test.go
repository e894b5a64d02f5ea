package analysis

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// The kernel index answers as a map of each address's latest sequence
// number would, for every entry still in the window (at or after head);
// an entry before it may be forgotten, never changed.
func TestKernelIndex(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	addrs := []netip.Addr{
		netip.MustParseAddr("10.0.0.1"),
		netip.MustParseAddr("10.0.0.2"),
		netip.MustParseAddr("::ffff:10.0.0.3"),
		netip.MustParseAddr("fd00::1"),
		netip.MustParseAddr("fd00::2"),
	}
	key := func() addrKey {
		ip := addrs[r.IntN(len(addrs))]
		if r.IntN(4) == 0 {
			ip = netip.AddrFrom4([4]byte{10, 1, byte(r.IntN(256)), byte(r.IntN(256))})
		}
		return keyOf(netip.AddrPortFrom(ip, uint16(30000+r.IntN(64))))
	}
	x := newKernelIndex(0)
	want := map[addrKey]int64{}
	var head int64
	for seq := int64(0); seq < 200_000; seq++ {
		head = max(head, seq-int64(r.IntN(5000))) // a window that breathes
		k := key()
		prev, ok := x.swap(k, seq, head)
		w, wok := want[k]
		switch {
		case wok && w >= head && (!ok || prev != w):
			t.Fatalf("seq %d: swap returned %d %v, want %d", seq, prev, ok, w)
		case ok && (!wok || prev != w):
			t.Fatalf("seq %d: swap returned %d %v, never set (want %d %v)", seq, prev, ok, w, wok)
		}
		want[k] = seq
		if seq%1000 == 0 {
			x.trim(head, int(seq-head))
			for k, w := range want {
				got, ok := x.get(k)
				if w >= head && (!ok || got != w) || ok && got != w {
					t.Fatalf("seq %d: get %v = %d %v, want %d", seq, k, got, ok, w)
				}
			}
			// Never set: absent, whatever the filter in front says.
			k := keyOf(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 2, byte(r.IntN(256)), byte(r.IntN(256))}), 30000))
			if got, ok := x.get(k); ok {
				t.Fatalf("seq %d: get %v = %d, never set", seq, k, got)
			}
		}
	}
	if len(x.slots) > 1<<16 {
		t.Errorf("%d slots for a window of at most 5000 entries", len(x.slots))
	}
}

// An IPv4 address and its IPv4-mapped IPv6 spelling are one key.
func TestAddrKeyV4(t *testing.T) {
	a := keyOf(netip.MustParseAddrPort("10.1.2.3:8080"))
	b := keyOf(netip.MustParseAddrPort("[::ffff:10.1.2.3]:8080"))
	va, oka := a.v4()
	vb, okb := b.v4()
	if !oka || !okb || va != vb {
		t.Fatalf("v4 keys %x %v, %x %v", va, oka, vb, okb)
	}
	if unpack4(va) != a {
		t.Errorf("unpack4(%x) = %v, want %v", va, unpack4(va), a)
	}
	if _, ok := keyOf(netip.MustParseAddrPort("[fd00::1]:80")).v4(); ok {
		t.Error("an IPv6 address made a v4 key")
	}
}

// An addrMap answers as a plain map would through sets, deletes and each
// (which may delete or change what it visits): the filter in front of it
// never hides a key that is there.
func TestAddrMap(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	key := func() addrKey {
		if r.IntN(8) == 0 {
			return keyOf(netip.AddrPortFrom(netip.MustParseAddr("fd00::1"), uint16(r.IntN(64))))
		}
		return keyOf(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(r.IntN(4)), byte(r.IntN(256))}), uint16(30000+r.IntN(64))))
	}
	m := newAddrMap[int]()
	want := map[addrKey]int{}
	check := func(i int) {
		for range 200 {
			k := key()
			got, ok := m.get(k)
			w, wok := want[k]
			if ok != wok || got != w {
				t.Fatalf("step %d: get %v = %d %v, want %d %v", i, k, got, ok, w, wok)
			}
		}
		if m.len() != len(want) {
			t.Fatalf("step %d: len %d, want %d", i, m.len(), len(want))
		}
	}
	for i := range 20_000 {
		switch k := key(); r.IntN(3) {
		case 0, 1:
			m.set(k, i)
			want[k] = i
		case 2:
			m.del(k)
			delete(want, k)
		}
		if i%2000 == 1999 {
			// A sweep: forget the older half, renumber some of the rest.
			m.each(func(k addrKey, v int) {
				switch {
				case v < i-10_000:
					m.del(k)
					delete(want, k)
				case v%3 == 0:
					m.set(k, v+1)
					want[k] = v + 1
				}
			})
		}
		if i%500 == 0 {
			check(i)
		}
	}
	check(-1)
}
