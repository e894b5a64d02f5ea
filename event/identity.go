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

// Identity hashes every field of e except ID. It does not allocate.
func Identity(e *Event) ID {
	var d xxhash.Digest
	d.Reset()
	var n [8]byte
	num := func(v uint64) {
		binary.LittleEndian.PutUint64(n[:], v)
		d.Write(n[:])
	}
	str := func(s string) {
		num(uint64(len(s))) // length prefix keeps "ab"+"c" apart from "a"+"bc"
		d.WriteString(s)
	}
	addr := func(a netip.AddrPort) {
		b := a.Addr().As16()
		d.Write(b[:])
		num(uint64(a.Port()))
		if !a.Addr().Is4() {
			num(1) // keep ::ffff:a.b.c.d apart from a.b.c.d
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
	num(uint64(uint32(e.PID)))
	str(e.Comm)
	num(uint64(uint32(e.PeerPID)))
	str(e.PeerComm)
	num(uint64(uint32(e.Signal)))
	num(uint64(uint32(e.Code)))
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
		var p xxhash.Digest
		p.Reset()
		binary.LittleEndian.PutUint64(n[:], uint64(len(k)))
		p.Write(n[:])
		p.WriteString(k)
		p.WriteString(v)
		attrs += p.Sum64()
	}
	num(attrs)
	return ID(d.Sum64())
}
