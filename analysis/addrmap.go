package analysis

import (
	"encoding/binary"
	"net/netip"
)

// addrMap is a map keyed by an address and port (addrKey), split in two:
// IPv4 keys, nearly all of them in a cluster, go to a map keyed by one
// uint64, which the runtime hashes and compares in its fast 64-bit path;
// the rest go to a map keyed by the whole addrKey, whose 18 bytes take the
// runtime's generic path (memhash of any length, a memory compare). The
// aligner looks up client addresses for every connection event and every
// failure, so the difference shows. Both halves' keys are pointer-free,
// like addrKey.
//
// Most of those lookups are of an absent key (few client addresses have an
// inferred failure), so a keyFilter of the IPv4 keys answers them first.
// Every key in v4 has its bit set; a deleted key's bit stays set until the
// next each, which sets the bits anew.
type addrMap[V any] struct {
	v4    map[uint64]V
	v6    map[addrKey]V
	maybe keyFilter
}

// v4InV6 is the prefix of an IPv4-mapped IPv6 address, as addrKey holds
// IPv4 (netip.Addr.As16).
var v4InV6 = [12]byte{10: 0xff, 11: 0xff}

// v4 packs an IPv4 key into 48 bits: the address, then the port.
func (k addrKey) v4() (uint64, bool) {
	if [12]byte(k.ip[:12]) != v4InV6 {
		return 0, false
	}
	ip := uint64(k.ip[12])<<24 | uint64(k.ip[13])<<16 | uint64(k.ip[14])<<8 | uint64(k.ip[15])
	return ip<<16 | uint64(k.port), true
}

// unpack4 is the inverse of v4.
func unpack4(x uint64) addrKey {
	k := addrKey{port: uint16(x)}
	copy(k.ip[:], v4InV6[:])
	k.ip[12], k.ip[13], k.ip[14], k.ip[15] = byte(x>>40), byte(x>>32), byte(x>>24), byte(x>>16)
	return k
}

func newAddrMap[V any]() addrMap[V] {
	return addrMap[V]{v4: map[uint64]V{}, v6: map[addrKey]V{}}
}

func (m *addrMap[V]) get(k addrKey) (V, bool) {
	if x, ok := k.v4(); ok {
		if !m.maybe.mayHold(x) {
			var zero V
			return zero, false
		}
		v, ok := m.v4[x]
		return v, ok
	}
	v, ok := m.v6[k]
	return v, ok
}

func (m *addrMap[V]) set(k addrKey, v V) {
	if x, ok := k.v4(); ok {
		m.v4[x] = v
		m.maybe.add(x)
		return
	}
	m.v6[k] = v
}

func (m *addrMap[V]) del(k addrKey) {
	if x, ok := k.v4(); ok {
		delete(m.v4, x)
		return
	}
	delete(m.v6, k)
}

func (m *addrMap[V]) len() int { return len(m.v4) + len(m.v6) }

// each calls fn for every entry, in no order; fn may delete the entry it is
// given or set its value. It then sets the filter's bits anew, for the keys
// left.
func (m *addrMap[V]) each(fn func(addrKey, V)) {
	for x, v := range m.v4 {
		fn(unpack4(x), v)
	}
	clear(m.maybe[:])
	for x := range m.v4 {
		m.maybe.add(x)
	}
	for k, v := range m.v6 {
		fn(k, v)
	}
}

// ipIndex holds the pods' address leases by address. Like addrMap it keeps
// IPv4 addresses, the common case, in a map of the runtime's fast path (a
// uint32 key), where a netip.Addr key, 24 bytes with a pointer, takes the
// generic one; other addresses keep their netip.Addr key, zone included.
type ipIndex struct {
	v4    map[uint32][]*ipLease
	other map[netip.Addr][]*ipLease
}

func newIPIndex() ipIndex {
	return ipIndex{v4: map[uint32][]*ipLease{}, other: map[netip.Addr][]*ipLease{}}
}

func (x *ipIndex) get(ip netip.Addr) []*ipLease {
	if ip.Is4() {
		return x.v4[ip4(ip)]
	}
	return x.other[ip]
}

// set stores ls as ip's leases, deleting the entry when ls is empty.
func (x *ipIndex) set(ip netip.Addr, ls []*ipLease) {
	switch {
	case ip.Is4() && len(ls) == 0:
		delete(x.v4, ip4(ip))
	case ip.Is4():
		x.v4[ip4(ip)] = ls
	case len(ls) == 0:
		delete(x.other, ip)
	default:
		x.other[ip] = ls
	}
}

func ip4(ip netip.Addr) uint32 {
	b := ip.As4()
	return binary.BigEndian.Uint32(b[:])
}
