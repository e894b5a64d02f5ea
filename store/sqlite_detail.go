package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/drainscope/drainscope/event"
)

// sqliteColumns are the SQLite table's columns: those queries filter on,
// then detail, which packs the rest of the event.
var sqliteColumns = []string{
	"ts", "id", "kind", "node", "source",
	"namespace", "pod", "pod_uid", "container", "workload_kind", "workload",
	"signal", "detail",
}

// sqliteWriteColumns are those an insert writes: sqliteColumns and the
// entity key (see state.go), which reads never need.
var sqliteWriteColumns = append(slices.Clip(sqliteColumns), "entity")

// detailVersion leads every packed detail, so the layout can change later.
const detailVersion = 1

// appendSQLiteRow appends e's SQLite column values to vals; detail is
// packed into buf, which the caller reuses once the row is written.
func appendSQLiteRow(vals []any, buf []byte, e *event.Event) ([]any, []byte) {
	start := len(buf)
	buf = append(buf, detailVersion)
	for _, v := range []int64{int64(e.PID), int64(e.PeerPID), int64(e.Code), e.Duration, int64(e.NetNS), int64(e.Flags)} {
		buf = binary.AppendVarint(buf, v)
	}
	for _, s := range []string{e.Comm, e.PeerComm, e.Service, e.Slice, e.Reason} {
		buf = event.AppendString(buf, s)
	}
	buf = event.AppendAddrPort(buf, e.Local)
	buf = event.AppendAddrPort(buf, e.Remote)
	buf = binary.AppendUvarint(buf, uint64(len(e.Attrs)))
	for k, v := range e.Attrs {
		buf = event.AppendString(event.AppendString(buf, k), v)
	}
	return append(vals,
		e.Time, int64(e.ID), string(e.Kind), e.Node, string(e.Source),
		e.Pod.Namespace, e.Pod.Name, e.Pod.UID, e.Pod.Container, e.Workload.Kind, e.Workload.Name,
		int64(e.Signal), buf[start:len(buf):len(buf)], entityOrNil(e),
	), buf
}

var errDetail = errors.New("truncated or corrupt detail")

// unpackDetail fills the fields appendSQLiteRow packed into d.
func unpackDetail(d []byte, e *event.Event) error {
	if len(d) == 0 || d[0] != detailVersion {
		return fmt.Errorf("%w: unknown detail version", errDetail)
	}
	d = d[1:]
	var ints [6]int64
	for i := range ints {
		v, n := binary.Varint(d)
		if n <= 0 {
			return errDetail
		}
		ints[i], d = v, d[n:]
	}
	e.PID, e.PeerPID, e.Code, e.Duration = int32(ints[0]), int32(ints[1]), int32(ints[2]), ints[3]
	e.NetNS, e.Flags = uint64(ints[4]), event.Flags(ints[5])
	var err error
	for _, p := range []*string{&e.Comm, &e.PeerComm, &e.Service, &e.Slice, &e.Reason} {
		if *p, d, err = readString(d); err != nil {
			return err
		}
	}
	if e.Local, d, err = readAddrPort(d); err != nil {
		return err
	}
	if e.Remote, d, err = readAddrPort(d); err != nil {
		return err
	}
	n, k := binary.Uvarint(d)
	if k <= 0 || n > uint64(len(d)) {
		return errDetail
	}
	d = d[k:]
	e.Attrs = nil
	if n > 0 {
		e.Attrs = make(map[string]string, n)
	}
	for i := uint64(0); i < n; i++ {
		var key, val string
		if key, d, err = readString(d); err != nil {
			return err
		}
		if val, d, err = readString(d); err != nil {
			return err
		}
		e.Attrs[key] = val
	}
	return nil
}

func readString(d []byte) (string, []byte, error) {
	n, k := binary.Uvarint(d)
	if k <= 0 || uint64(len(d)-k) < n {
		return "", nil, errDetail
	}
	return string(d[k : k+int(n)]), d[k+int(n):], nil
}

func readAddrPort(d []byte) (netip.AddrPort, []byte, error) {
	if len(d) == 0 {
		return netip.AddrPort{}, nil, errDetail
	}
	n := int(d[0])
	d = d[1:]
	if n == 0 {
		return netip.AddrPort{}, d, nil
	}
	if (n != 4 && n != 16) || len(d) < n+2 {
		return netip.AddrPort{}, nil, errDetail
	}
	a, _ := netip.AddrFromSlice(d[:n])
	return netip.AddrPortFrom(a, binary.BigEndian.Uint16(d[n:])), d[n+2:], nil
}
