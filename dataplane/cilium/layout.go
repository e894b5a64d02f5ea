package cilium

import (
	"encoding/binary"
	"net/netip"
	"strconv"
)

// Map names Cilium pins under its bpffs directory (/sys/fs/bpf/tc/globals).
const (
	Services4Map = "cilium_lb4_services_v2"
	Backends4Map = "cilium_lb4_backends_v3"
	Services6Map = "cilium_lb6_services_v2"
	Backends6Map = "cilium_lb6_backends_v3"
)

// DefaultDir is where a Cilium agent pins its maps.
const DefaultDir = "/sys/fs/bpf/tc/globals"

// The layouts below are Cilium's, as its agent writes them and its
// datapath (bpf/lib/lb.h: struct lb4_key, lb4_service, lb4_backend and
// the lb6_ ones) reads them. Read from Cilium v1.15.19
// (pkg/maps/lbmap/ipv4.go, ipv6.go) and v1.20.2
// (pkg/loadbalancer/maps/types.go, where lbmap moved): both have the same
// sizes and offsets; 1.20 names two of 1.15's padding bytes (QCount in
// the service value, Zone in the backend value). layout_test.go checks
// sizes and offsets against copies of those types in testdata/, and,
// where the module cache holds Cilium's source, the copies against it.
//
// Addresses and ports are in network byte order, the rest in the host's.

// Service4Key is a key of cilium_lb4_services_v2 (lb4_key): one slot of a
// frontend. Slot 0 is the frontend itself (its value's Count says how many
// backend slots follow); slots 1..Count each name one backend.
type Service4Key struct {
	Address     [4]byte
	Port        uint16 // network order
	BackendSlot uint16
	Proto       uint8 // IPPROTO_*, or 0 (any) before Cilium 1.16 wrote it
	Scope       uint8 // 0 external, 1 internal (externalTrafficPolicy=Local)
	Pad         [2]uint8
}

// Service6Key is a key of cilium_lb6_services_v2 (lb6_key).
type Service6Key struct {
	Address     [16]byte
	Port        uint16
	BackendSlot uint16
	Proto       uint8
	Scope       uint8
	Pad         [2]uint8
}

// ServiceValue is a value of either services map (lb4_service,
// lb6_service). In a backend slot BackendID names the backend; in slot 0
// the same word holds the affinity timeout or the L7 proxy port.
type ServiceValue struct {
	BackendID uint32
	Count     uint16 // slot 0: backend slots
	RevNat    uint16
	Flags     uint8
	Flags2    uint8
	QCount    uint16 // slot 0: quarantined slots after Count (1.15: padding, 0)
}

// Backend4Value is a value of cilium_lb4_backends_v3 (lb4_backend); its key
// is the backend ID, a uint32.
type Backend4Value struct {
	Address   [4]byte
	Port      uint16 // network order
	Proto     uint8
	Flags     uint8 // backend state: 0 active, 1 terminating, 2 quarantined, 3 maintenance
	ClusterID uint16
	Zone      uint8 // 1.15: padding
	Pad       uint8
}

// Backend6Value is a value of cilium_lb6_backends_v3 (lb6_backend).
type Backend6Value struct {
	Address   [16]byte
	Port      uint16
	Proto     uint8
	Flags     uint8
	ClusterID uint16
	Zone      uint8
	Pad       uint8
}

func netPort(p uint16) uint16 {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], p)
	return binary.BigEndian.Uint16(b[:])
}

// NetPort converts a port to the network byte order the maps hold (and
// back: the conversion is its own inverse).
func NetPort(p uint16) uint16 { return netPort(p) }

func (k Service4Key) frontend() netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4(k.Address), netPort(k.Port))
}

func (k Service6Key) frontend() netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom16(k.Address).Unmap(), netPort(k.Port))
}

func (v Backend4Value) addr() netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4(v.Address), netPort(v.Port))
}

func (v Backend6Value) addr() netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom16(v.Address).Unmap(), netPort(v.Port))
}

// protoName spells an IP protocol as kube-proxy's chains do.
func protoName(p uint8) string {
	switch p {
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 132:
		return "sctp"
	case 0:
		return "" // any: Cilium before 1.16 did not key on the protocol
	}
	return "proto-" + strconv.Itoa(int(p))
}
