package event

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
)

// The wire form is how an agent sends its events to the server (package
// relay): every field of Event in a fixed order, lengths before strings.
// It carries the same events as encoding/json's form of Event, at a
// fraction of the cost of decoding JSON, which was what a batch spent
// most of its time on at the server.
//
// A body is WireMagic, the number of events as 4 big-endian bytes, then
// one record per event, each a 4-byte big-endian length and that many
// bytes:
//
//	varint Time, uvarint ID,
//	string Kind, Node, Source,
//	string Pod.Namespace, Pod.Name, Pod.UID, Pod.Container,
//	string Workload.Kind, Workload.Name,
//	varint PID, PeerPID, string Comm, PeerComm,
//	varint Signal, Code, Duration,
//	addr Local, Remote, uvarint NetNS,
//	string Service, Slice, Reason, uvarint Flags,
//	uvarint len(Attrs), then each key and value as strings, keys sorted.
//
// A string is its length as a uvarint and its bytes, as they are: the
// server seals every event it takes (Event.Seal), which makes its strings
// valid UTF-8 and keeps a command name's original bytes. An addr
// is 0 (none), or 4 or 16 and the address's bytes, then the port as two
// big-endian bytes. The length before each record lets a reader refuse an
// event past its bound before reading it; the count lets it size what it
// keeps once, and tell a body cut short between two records.
const WireType = "application/vnd.drainscope.events.v1"

// WireMagic opens every body of the wire form.
const WireMagic = "DSEV\x01"

// ErrWireTooLarge is returned by WireReader.Next for a record longer
// than the reader's bound.
var ErrWireTooLarge = errors.New("event past the bound of one event")

// AppendWireHeader appends the header of a body of n events to b: then
// AppendWire, as many times as it takes, for n events in all.
func AppendWireHeader(b []byte, n int) []byte {
	return binary.BigEndian.AppendUint32(append(b, WireMagic...), uint32(n))
}

// AppendWire appends evs' records to b, after a header (AppendWireHeader).
func AppendWire(b []byte, evs []Event) []byte {
	for i := range evs {
		start := len(b)
		b = append(b, 0, 0, 0, 0)
		b = appendRecord(b, &evs[i])
		binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	}
	return b
}

func appendRecord(b []byte, e *Event) []byte {
	b = binary.AppendVarint(b, e.Time)
	b = binary.AppendUvarint(b, uint64(e.ID))
	for _, s := range [...]string{string(e.Kind), e.Node, string(e.Source),
		e.Pod.Namespace, e.Pod.Name, e.Pod.UID, e.Pod.Container, e.Workload.Kind, e.Workload.Name} {
		b = AppendString(b, s)
	}
	b = binary.AppendVarint(b, int64(e.PID))
	b = binary.AppendVarint(b, int64(e.PeerPID))
	b = AppendString(b, e.Comm)
	b = AppendString(b, e.PeerComm)
	b = binary.AppendVarint(b, int64(e.Signal))
	b = binary.AppendVarint(b, int64(e.Code))
	b = binary.AppendVarint(b, e.Duration)
	b = AppendAddrPort(b, e.Local)
	b = AppendAddrPort(b, e.Remote)
	b = binary.AppendUvarint(b, e.NetNS)
	for _, s := range [...]string{e.Service, e.Slice, e.Reason} {
		b = AppendString(b, s)
	}
	b = binary.AppendUvarint(b, uint64(e.Flags))
	b = binary.AppendUvarint(b, uint64(len(e.Attrs)))
	if len(e.Attrs) > 0 {
		for _, k := range slices.Sorted(maps.Keys(e.Attrs)) {
			b = AppendString(AppendString(b, k), e.Attrs[k])
		}
	}
	return b
}

// AppendString appends s as the wire form writes a string: its length as
// a uvarint, then its bytes. The SQLite store packs its detail column the
// same way.
func AppendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// AppendAddrPort appends ap as the wire form writes an address: 0 for
// none, or 4 or 16 and the address's bytes, then the port as two
// big-endian bytes. The SQLite store packs its detail column the same way.
func AppendAddrPort(b []byte, ap netip.AddrPort) []byte {
	a := ap.Addr()
	switch {
	case !a.IsValid():
		return append(b, 0)
	case a.Is4():
		v := a.As4()
		b = append(append(b, 4), v[:]...)
	default:
		v := a.As16()
		b = append(append(b, 16), v[:]...)
	}
	return binary.BigEndian.AppendUint16(b, ap.Port())
}

// WireReader reads a body of the wire form one event at a time, holding
// one record at most: a body claiming millions of events, or one event
// of gigabytes, costs no more than its first record past the bound.
type WireReader struct {
	r           *bufio.Reader
	max         int
	count, read int     // events the header announced, and read so far
	n           [4]byte // a record's length
	rec         []byte
}

// NewWireReader reads a body's header from r (ReadWireHeader) and returns
// a reader of the records after it (NewWireRecords).
func NewWireReader(r io.Reader, maxEvent int) (*WireReader, error) {
	count, err := ReadWireHeader(r)
	if err != nil {
		return nil, err
	}
	return NewWireRecords(r, count, maxEvent), nil
}

// ReadWireHeader reads a body's header from r, and no byte past it: the
// number of events the body announces.
func ReadWireHeader(r io.Reader) (count int, err error) {
	var hdr [len(WireMagic) + 4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, fmt.Errorf("reading the wire form's header: %w", err)
	}
	if string(hdr[:len(WireMagic)]) != WireMagic {
		return 0, fmt.Errorf("the body does not start with the wire form's header %q (version 1)", WireMagic)
	}
	return int(min(binary.BigEndian.Uint32(hdr[len(WireMagic):]), 1<<31-1)), nil
}

// NewWireRecords reads the records that follow a header announcing count
// events from r, each at most maxEvent bytes.
func NewWireRecords(r io.Reader, count, maxEvent int) *WireReader {
	return &WireReader{r: bufio.NewReaderSize(r, 64<<10), max: maxEvent, count: count}
}

// Count is how many events the header announced. Next holds the body to
// it; a reader sizing what it keeps by it should still not trust it past
// what it would take anyway.
func (d *WireReader) Count() int { return d.count }

// Next decodes the next event into e, overwriting it, and returns io.EOF
// after the last. A record past the bound is ErrWireTooLarge, unread; a
// record that does not decode names the field where it went wrong.
func (d *WireReader) Next(e *Event) error {
	if _, err := io.ReadFull(d.r, d.n[:]); err != nil {
		switch {
		case err == io.ErrUnexpectedEOF:
			return fmt.Errorf("the body ends inside a record's length")
		case err == io.EOF && d.read < d.count:
			return fmt.Errorf("the body ends after %d of the %d events its header announced", d.read, d.count)
		}
		return err // io.EOF: the body ended after its last record
	}
	if d.read == d.count {
		return fmt.Errorf("more events than the %d the header announced", d.count)
	}
	d.read++
	size := int(binary.BigEndian.Uint32(d.n[:]))
	if size > d.max {
		return fmt.Errorf("%w: %d bytes, past the bound of %d", ErrWireTooLarge, size, d.max)
	}
	if cap(d.rec) < size {
		d.rec = make([]byte, size)
	}
	rec := d.rec[:size]
	if _, err := io.ReadFull(d.r, rec); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return fmt.Errorf("the body ends inside a record of %d bytes", size)
		}
		return err
	}
	return decodeRecord(rec, e)
}

// wireFields name the fields of a record in its order, for errors.
var wireFields = [...]string{"time", "id", "kind", "node", "source",
	"pod.namespace", "pod.name", "pod.uid", "pod.container", "workload.kind", "workload.name",
	"pid", "peer_pid", "comm", "peer_comm", "signal", "code", "duration",
	"local", "remote", "netns", "service", "slice", "reason", "flags", "attrs"}

// decodeRecord decodes rec into e. Its strings share one allocation, the
// record's copy: an event costs two allocations (three with attributes),
// not one per field.
func decodeRecord(rec []byte, e *Event) error {
	*e = Event{}
	r := recordReader{s: string(rec)}
	e.Time = r.varint()
	e.ID = ID(r.uvarint())
	kind, node, source := r.str(), r.str(), r.str()
	e.Kind, e.Node, e.Source = Kind(kind), node, Source(source)
	e.Pod = PodRef{Namespace: r.str(), Name: r.str(), UID: r.str(), Container: r.str()}
	e.Workload = Workload{Kind: r.str(), Name: r.str()}
	e.PID, e.PeerPID = r.int32(), r.int32()
	e.Comm, e.PeerComm = r.str(), r.str()
	e.Signal, e.Code = r.int32(), r.int32()
	e.Duration = r.varint()
	e.Local, e.Remote = r.addr(), r.addr()
	e.NetNS = r.uvarint()
	e.Service, e.Slice, e.Reason = r.str(), r.str(), r.str()
	flags := r.uvarint()
	if flags > 1<<32-1 && r.err == nil {
		r.err = errors.New("past 32 bits")
	}
	e.Flags = Flags(flags)
	if n := r.uvarint(); n > 0 && r.err == nil {
		// Each attribute takes two bytes at least: the count cannot
		// claim more than the record holds.
		if n > uint64(len(r.s)-r.off)/2 {
			r.err = fmt.Errorf("%d attributes in %d bytes", n, len(r.s)-r.off)
		} else {
			e.Attrs = make(map[string]string, n)
			for range n {
				k, v := r.str(), r.str()
				if _, dup := e.Attrs[k]; dup && r.err == nil {
					r.err = fmt.Errorf("key %q twice", k)
				}
				e.Attrs[k] = v
			}
		}
	}
	if r.err != nil {
		return fmt.Errorf("field %s: %w", wireFields[min(r.field, len(wireFields))-1], r.err)
	}
	if r.off != len(r.s) {
		return fmt.Errorf("%d bytes after the last field", len(r.s)-r.off)
	}
	return nil
}

// recordReader reads one record's fields in order, keeping the first
// error and the index of the field it was reading.
type recordReader struct {
	s     string
	off   int
	field int
	err   error
}

func (r *recordReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// next moves to the next field (r.field counts the fields begun); a read
// after an error reads zero.
func (r *recordReader) next() bool {
	if r.err != nil {
		return false
	}
	r.field++
	return true
}

func (r *recordReader) uvarint() uint64 {
	if !r.next() {
		return 0
	}
	if r.off < len(r.s) && r.s[r.off] < 0x80 { // most numbers and lengths
		r.off++
		return uint64(r.s[r.off-1])
	}
	v, n := uvarintString(r.s[r.off:])
	if n <= 0 {
		r.fail(errors.New("truncated or overlong number"))
		return 0
	}
	r.off += n
	return v
}

func (r *recordReader) varint() int64 {
	u := r.uvarint()
	v := int64(u >> 1) // binary.AppendVarint's zig-zag form
	if u&1 != 0 {
		v = ^v
	}
	return v
}

func (r *recordReader) int32() int32 {
	v := r.varint()
	if v != int64(int32(v)) {
		r.fail(fmt.Errorf("%d is past 32 bits", v))
		return 0
	}
	return int32(v)
}

func (r *recordReader) str() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.s)-r.off) {
		r.fail(fmt.Errorf("a string of %d bytes with %d left in the record", n, len(r.s)-r.off))
		return ""
	}
	s := r.s[r.off : r.off+int(n)]
	r.off += int(n)
	return s
}

func (r *recordReader) addr() netip.AddrPort {
	if !r.next() {
		return netip.AddrPort{}
	}
	if r.off >= len(r.s) {
		r.fail(errors.New("truncated address"))
		return netip.AddrPort{}
	}
	size := int(r.s[r.off])
	r.off++
	if size == 0 {
		return netip.AddrPort{}
	}
	if (size != 4 && size != 16) || len(r.s)-r.off < size+2 {
		r.fail(fmt.Errorf("an address of %d bytes", size))
		return netip.AddrPort{}
	}
	b := r.s[r.off : r.off+size]
	r.off += size
	var v [16]byte
	copy(v[:], b)
	a := netip.AddrFrom16(v)
	if size == 4 {
		a = netip.AddrFrom4([4]byte(v[:4]))
	}
	port := uint16(r.s[r.off])<<8 | uint16(r.s[r.off+1])
	r.off += 2
	return netip.AddrPortFrom(a, port)
}

// uvarintString is binary.Uvarint over a string, without a copy.
func uvarintString(s string) (uint64, int) {
	var x uint64
	var shift uint
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		b := s[i]
		if b < 0x80 {
			if i == binary.MaxVarintLen64-1 && b > 1 {
				return 0, -(i + 1)
			}
			return x | uint64(b)<<shift, i + 1
		}
		x |= uint64(b&0x7f) << shift
		shift += 7
	}
	return 0, 0
}
