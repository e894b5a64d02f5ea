package event

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// ID is an event's stable identity: a 64-bit hash of everything the event
// says. The same observation recorded twice (a retried batch, a replayed
// import) has the same ID, and the stores keep it once. Stores key events by
// (Time, ID), so two events would have to collide in both to be confused.
type ID uint64

// String renders the ID as 16 hex digits.
func (id ID) String() string {
	var b [16]byte
	s := strconv.AppendUint(b[:0], uint64(id), 16)
	return fmt.Sprintf("%016s", s)
}

// ParseID parses the form String produces.
func ParseID(s string) (ID, error) {
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("parsing event id %q: %w", s, err)
	}
	return ID(v), nil
}

// Identity hashes every field of e except ID. It lays the fields out in one
// stack buffer and hashes that once: many small hash writes cost twice as
// much. It does not allocate unless the event's strings exceed the buffer.
func Identity(e *Event) ID {
	var buf [512]byte
	b := buf[:0]
	num := func(v uint64) { b = binary.LittleEndian.AppendUint64(b, v) }
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s))) // "ab"+"c" is not "a"+"bc"
		b = append(b, s...)
	}
	addr := func(a netip.AddrPort) {
		v := a.Addr().As16()
		b = append(b, v[:]...)
		b = binary.LittleEndian.AppendUint16(b, a.Port())
		if a.Addr().Is4() {
			b = append(b, 4) // keep a.b.c.d apart from ::ffff:a.b.c.d
		} else {
			b = append(b, 6)
		}
	}
	num(uint64(e.Time))
	str(string(e.Kind))
	str(e.Node)
	str(string(e.Source))
	str(e.Pod.Namespace)
	str(e.Pod.Name)
	str(e.Pod.UID)
	str(e.Pod.Container)
	str(e.Workload.Kind)
	str(e.Workload.Name)
	num(uint64(uint32(e.PID))<<32 | uint64(uint32(e.PeerPID)))
	str(e.Comm)
	str(e.PeerComm)
	num(uint64(uint32(e.Signal))<<32 | uint64(uint32(e.Code)))
	num(uint64(e.Duration))
	addr(e.Local)
	addr(e.Remote)
	num(e.NetNS)
	str(e.Service)
	str(e.Slice)
	str(e.Reason)
	num(uint64(e.Flags))
	// Map order is random: combine per-pair hashes with an order-free sum.
	var attrs uint64
	for k, v := range e.Attrs {
		var d xxhash.Digest
		d.Reset()
		var n [binary.MaxVarintLen64]byte
		d.Write(binary.AppendUvarint(n[:0], uint64(len(k))))
		d.WriteString(k)
		d.WriteString(v)
		attrs += d.Sum64()
	}
	num(attrs)
	return ID(xxhash.Sum64(b))
}
