package store

import (
	"fmt"
	"net/netip"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/drainscope/drainscope/event"
)

// appendRow appends e's column values, in the order of writeColumns, to vals:
// absent addresses and empty attributes are NULL.
func appendRow(vals []any, e *event.Event) []any {
	var attrs any
	if len(e.Attrs) > 0 {
		attrs = e.Attrs
	}
	return append(vals,
		e.Time, int64(e.ID), string(e.Kind), e.Node, string(e.Source),
		e.Pod.Namespace, e.Pod.Name, e.Pod.UID, e.Pod.Container, e.Workload.Kind, e.Workload.Name,
		e.PID, e.Comm, e.PeerPID, e.PeerComm,
		e.Signal, e.Code, e.Duration,
		addrOrNil(e.Local.Addr()), int32(e.Local.Port()), addrOrNil(e.Remote.Addr()), int32(e.Remote.Port()), int64(e.NetNS),
		e.Service, e.Slice, e.Reason, int32(e.Flags), attrs, entityOrNil(e),
	)
}

func addrOrNil(a netip.Addr) any {
	if !a.IsValid() {
		return nil
	}
	return a
}

// checkBatch validates every event before anything is written, so a bad
// event fails the whole batch with a message that names it, and that
// RowLevel knows for one.
func checkBatch(batch []event.Event) error {
	for i := range batch {
		if err := batch[i].Validate(); err != nil {
			return fmt.Errorf("batch event %d (kind %q, time %d): %w: %w", i, batch[i].Kind, batch[i].Time, errInvalidEvent, err)
		}
	}
	return nil
}

// scanTarget holds the destinations for one Postgres row; reused across
// rows. The text columns are read as the driver's bytes, valid until the
// next row, and made strings through the interner.
type scanTarget struct {
	id, netns           int64
	lport, rport, flags int32
	laddr, raddr        netip.Addr
	text                [textColumns]pgtype.DriverBytes
	attrs               pgtype.DriverBytes
	in                  interner
	e                   event.Event
	dest                []any
}

// The text columns, in the order of scanTarget.text.
const (
	colKind = iota
	colNode
	colSource
	colNamespace
	colPod
	colUID
	colContainer
	colWorkloadKind
	colWorkload
	colComm
	colPeerComm
	colService
	colSlice
	colReason
	textColumns
)

func newScanTarget() *scanTarget {
	t := &scanTarget{}
	e, x := &t.e, &t.text
	t.dest = []any{
		&e.Time, &t.id, &x[colKind], &x[colNode], &x[colSource],
		&x[colNamespace], &x[colPod], &x[colUID], &x[colContainer], &x[colWorkloadKind], &x[colWorkload],
		&e.PID, &x[colComm], &e.PeerPID, &x[colPeerComm],
		&e.Signal, &e.Code, &e.Duration,
		&t.laddr, &t.lport, &t.raddr, &t.rport, &t.netns,
		&x[colService], &x[colSlice], &x[colReason], &t.flags, &t.attrs,
	}
	return t
}

// finish completes the event after a row was scanned into dest.
func (t *scanTarget) finish() (*event.Event, error) {
	e, str := &t.e, func(c int) string { return t.in.str(t.text[c]) }
	e.ID = event.ID(t.id)
	e.Kind = event.Kind(str(colKind))
	e.Node = str(colNode)
	e.Source = event.Source(str(colSource))
	e.Pod = event.PodRef{Namespace: str(colNamespace), Name: str(colPod), UID: str(colUID), Container: str(colContainer)}
	e.Workload = event.Workload{Kind: str(colWorkloadKind), Name: str(colWorkload)}
	e.Comm, e.PeerComm = str(colComm), str(colPeerComm)
	e.Service, e.Slice, e.Reason = str(colService), str(colSlice), str(colReason)
	e.NetNS = uint64(t.netns)
	e.Flags = event.Flags(t.flags)
	e.Local, e.Remote = netip.AddrPort{}, netip.AddrPort{}
	if t.laddr.IsValid() {
		e.Local = netip.AddrPortFrom(t.laddr, uint16(t.lport))
	}
	if t.raddr.IsValid() {
		e.Remote = netip.AddrPortFrom(t.raddr, uint16(t.rport))
	}
	e.Attrs = nil
	if len(t.attrs) > 0 {
		var err error
		if e.Attrs, err = decodeAttrs(t.attrs, &t.in); err != nil {
			return nil, fmt.Errorf("event %s: decoding attrs: %w", e.ID, err)
		}
	}
	return e, nil
}

// scanRows is what pgx.Rows and *sql.Rows have in common.
type scanRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}
