package ebpf

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"time"
	"unsafe"

	"github.com/drainscope/drainscope/event"
)

var nativeEndian = binary.NativeEndian

// Values shared with bpf/drainscope.c, from the enums bpf2go generated.
const (
	kindSignal      = uint8(probesKindKIND_SIGNAL)
	kindExit        = uint8(probesKindKIND_EXIT)
	kindListenClose = uint8(probesKindKIND_LISTEN_CLOSE)
	kindConnClose   = uint8(probesKindKIND_CONN_CLOSE)
	kindRSTSent     = uint8(probesKindKIND_RST_SENT)
	kindRSTRecv     = uint8(probesKindKIND_RST_RECV)
	kindRefused     = uint8(probesKindKIND_REFUSED)
	kindMax         = uint8(probesKindKIND_MAX)

	flagAtExit     = uint32(probesFlagFLAG_AT_EXIT)
	flagPeer       = uint32(probesFlagFLAG_PEER)
	flagNoSocket   = uint32(probesFlagFLAG_NO_SOCKET)
	flagHaveReason = uint32(probesFlagFLAG_HAVE_REASON)
	flagOwner      = uint32(probesFlagFLAG_OWNER)
	flagGroup      = uint32(probesFlagFLAG_GROUP)
	flagTimewait   = uint32(probesFlagFLAG_TIMEWAIT)
	flagSignaled   = uint32(probesFlagFLAG_SIGNALED)
	flagCore       = uint32(probesFlagFLAG_CORE)
	flagMain       = uint32(probesFlagFLAG_MAIN)
)

const (
	afInet  = 2
	afInet6 = 10

	// enum sk_rst_reason values whose meaning the analysis relies on; the
	// names of all of them come from the kernel's BTF.
	rstReasonNoSocket     = 1
	rstReasonAbortOnClose = 11
)

var kinds = [kindMax]event.Kind{
	kindSignal:      event.Signal,
	kindExit:        event.ProcessExit,
	kindListenClose: event.ListenerClosed,
	kindConnClose:   event.ConnClosed,
	kindRSTSent:     event.RSTSent,
	kindRSTRecv:     event.RSTReceived,
	kindRefused:     event.ConnRefused,
}

// Reasons of signal events: the kernel's delivery result (enum trace_signal_result).
var signalResults = []string{"delivered", "ignored", "already_pending", "overflow_fail", "lose_info"}

// Reasons of conn_closed events: who closed first.
const (
	ReasonLocal = "local"
	ReasonPeer  = "peer"
	// ReasonNoSocket is the reason of a reset sent for a segment that found
	// no socket, on kernels that do not name reset reasons.
	ReasonNoSocket = "no_socket"
	// ReasonCoreDumped is the reason of a process_exit whose terminating
	// signal dumped core.
	ReasonCoreDumped = "core_dumped"
)

const eventSize = int(unsafe.Sizeof(probesEvent{}))

var errShortRecord = errors.New("ring buffer record shorter than struct event")

// decodeRaw copies a ring buffer record into the generated struct.
func decodeRaw(b []byte, r *probesEvent) error {
	if len(b) < eventSize {
		return fmt.Errorf("%w: %d < %d bytes", errShortRecord, len(b), eventSize)
	}
	r.TsNs = nativeEndian.Uint64(b[0:])
	r.CgroupId = nativeEndian.Uint64(b[8:])
	r.Netns = nativeEndian.Uint64(b[16:])
	r.Pid = nativeEndian.Uint32(b[24:])
	r.Tid = nativeEndian.Uint32(b[28:])
	r.PeerPid = nativeEndian.Uint32(b[32:])
	r.Signal = int32(nativeEndian.Uint32(b[36:]))
	r.Code = int32(nativeEndian.Uint32(b[40:]))
	r.Flags = nativeEndian.Uint32(b[44:])
	r.Reason = nativeEndian.Uint16(b[48:])
	r.Kind = b[50]
	r.Family = b[51]
	r.Lport = nativeEndian.Uint16(b[52:])
	r.Rport = nativeEndian.Uint16(b[54:])
	copy(r.Laddr[:], b[56:72])
	copy(r.Raddr[:], b[72:88])
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&r.Comm[0])), len(r.Comm)), b[88:104])
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&r.PeerComm[0])), len(r.PeerComm)), b[104:120])
	r.OldState = b[120]
	r.NewState = b[121]
	r.IdleUs = nativeEndian.Uint32(b[124:])
	return nil
}

// decoder turns raw records into events. Not safe for concurrent use.
type decoder struct {
	node       string
	rstReasons []string // enum sk_rst_reason value -> lower-case name without prefix
	comms      commCache
}

// fill converts r into e (which it resets first). wall converts the
// monotonic timestamp; attrs is the shared, read-only Attrs map. It does not
// allocate once the command names have been seen.
func (d *decoder) fill(e *event.Event, r *probesEvent, wall int64, attrs map[string]string) error {
	if int(r.Kind) >= len(kinds) || kinds[r.Kind] == "" {
		return fmt.Errorf("unknown event kind %d", r.Kind)
	}
	*e = event.Event{
		Time:   wall,
		Kind:   kinds[r.Kind],
		Node:   d.node,
		Source: event.SourceKernel,
		Attrs:  attrs,
	}
	if r.Kind != kindRefused && (r.Kind <= kindExit || r.Flags&flagOwner != 0) {
		e.PID = int32(r.Pid)
		e.Comm = d.comm(e, &r.Comm, event.AttrCommRaw)
	}
	if r.Flags&flagAtExit != 0 {
		e.Flags |= event.FlagAtExit
	}
	if r.Flags&flagMain != 0 {
		e.Flags |= event.FlagMain
	}
	switch r.Kind {
	case kindSignal:
		e.Signal = r.Signal
		e.PeerPID = int32(r.PeerPid)
		e.PeerComm = d.comm(e, &r.PeerComm, event.AttrPeerCommRaw)
		if r.Code >= 0 && int(r.Code) < len(signalResults) {
			e.Reason = signalResults[r.Code]
		}
		return nil
	case kindExit:
		if r.Flags&flagSignaled != 0 {
			e.Signal = r.Signal
			if r.Flags&flagCore != 0 {
				e.Reason = ReasonCoreDumped
			}
		} else {
			e.Code = r.Code
		}
		return nil
	}

	e.NetNS = r.Netns
	e.Local, e.Remote = addrPorts(r)
	switch r.Kind {
	case kindListenClose:
		e.Remote = netip.AddrPort{} // a listener has no peer
	case kindConnClose:
		e.Reason = ReasonLocal
		if r.Flags&flagPeer != 0 {
			e.Reason = ReasonPeer
		}
		if r.IdleUs > 0 {
			e.Duration = int64(r.IdleUs-1) * int64(time.Microsecond)
			if e.Duration == 0 {
				e.Duration = 1 // idle for less than a microsecond: known, not zero
			}
		}
	case kindRSTSent, kindRefused:
		switch {
		case r.Flags&flagHaveReason != 0:
			if int(r.Reason) < len(d.rstReasons) {
				e.Reason = d.rstReasons[r.Reason]
			}
			if r.Reason == rstReasonAbortOnClose {
				e.Flags |= event.FlagUnreadData
			}
		case r.Flags&flagNoSocket != 0:
			e.Reason = ReasonNoSocket
		}
	}
	return nil
}

func addrPorts(r *probesEvent) (local, remote netip.AddrPort) {
	var l, rm netip.Addr
	switch r.Family {
	case afInet:
		l = netip.AddrFrom4([4]byte(r.Laddr[:4]))
		rm = netip.AddrFrom4([4]byte(r.Raddr[:4]))
	case afInet6:
		// IPv4 peers of dual-stack sockets appear as ::ffff:a.b.c.d.
		l = netip.AddrFrom16(r.Laddr).Unmap()
		rm = netip.AddrFrom16(r.Raddr).Unmap()
	default:
		return
	}
	return netip.AddrPortFrom(l, r.Lport), netip.AddrPortFrom(rm, r.Rport)
}

// commCache interns command names so that converting the kernel's
// fixed-size array to a string allocates once per distinct name.
type commCache map[[16]int8]commName

// commName is a command name as stored, and the hex of the kernel's bytes
// when they were not valid UTF-8: the kernel cuts names at 15 bytes, which
// can split a multi-byte character, and a store refuses such text. The
// name then has U+FFFD where the invalid bytes were.
type commName struct{ name, raw string }

func (c *commCache) get(b *[16]int8) commName {
	if s, ok := (*c)[*b]; ok {
		return s
	}
	if *c == nil || len(*c) >= 4096 {
		*c = make(commCache)
	}
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	s := string(unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), n))
	name := commName{name: s}
	if clean, ok := event.CleanString(s); !ok {
		name = commName{name: clean, raw: hex.EncodeToString([]byte(s))}
	}
	(*c)[*b] = name
	return name
}

// comm returns the command name in b. One that was not valid UTF-8 keeps
// its raw bytes in e's attribute key, set on a copy: e.Attrs is the map
// every event shares.
func (d *decoder) comm(e *event.Event, b *[16]int8, key string) string {
	n := d.comms.get(b)
	if n.raw != "" {
		attrs := make(map[string]string, len(e.Attrs)+2)
		maps.Copy(attrs, e.Attrs)
		attrs[key] = n.raw
		e.Attrs = attrs
	}
	return n.name
}
