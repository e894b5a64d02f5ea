// Package cilium records when Cilium stopped sending a Service's new
// connections to each backend. Cilium here is its eBPF service load balancer:
// its kube-proxy replacement, GKE Dataplane V2, AKS with Azure CNI powered by
// Cilium. It reads the maps the Cilium agent pins, cilium_lb4_services_v2 and
// cilium_lb4_backends_v3 (and the lb6 ones), read-only, by polling: the kernel
// announces no change to a BPF map. A backend that leaves a frontend's slots
// is a dataplane_endpoint_removed, one that enters them a
// dataplane_endpoint_added, with Attrs[proxy] = cilium: the same events
// package dataplane records for kube-proxy's nftables rules.
//
// A frontend is an address and port (a ClusterIP, and also each NodePort,
// LoadBalancer and external address of the Service); Options.Services
// names the Kubernetes Service that holds a frontend's address as its
// ClusterIP (ServiceIndex learns that from the watcher's service_changed
// events). Frontends it does not name are not reported when it is set:
// the ClusterIP's slots stand for the Service.
package cilium

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/drainscope/drainscope/event"
)

// ServiceLookup names the Service whose ClusterIP is addr, and the port's
// name ("" for an unnamed port, or when unknown).
type ServiceLookup func(addr netip.Addr, port uint16, proto string) (namespace, name, portName string, ok bool)

// Options configure a Reader.
type Options struct {
	Node string // required: every event names it
	Emit func(event.Event)
	// Dir holds the pinned maps; default DefaultDir.
	Dir string
	// Interval between reads of the maps; default 250 ms. It is the
	// resolution of the events' times.
	Interval time.Duration
	// Services names a frontend's Service; nil reports every frontend with
	// no Service name, Attrs[frontend] only.
	Services ServiceLookup
	Logger   *slog.Logger
}

// Frontend is one frontend of Cilium's service maps.
type Frontend struct {
	Addr  netip.AddrPort
	Proto string // tcp, udp, sctp, or "" (any)
}

// Change is a backend that entered or left a frontend's slots.
type Change struct {
	Frontend Frontend
	Backend  netip.AddrPort
	Added    bool
}

// Stats counts what a Reader has seen.
type Stats struct {
	Polls      uint64
	Added      uint64
	Removed    uint64
	Unresolved uint64 // changes of frontends Options.Services did not name
	Retries    uint64 // reads repeated because the agent was writing meanwhile
}

// Reader polls Cilium's service maps.
type Reader struct {
	o     Options
	log   *slog.Logger
	maps  []*familyMaps
	last  State
	fp    uint64 // fingerprint of the maps' bytes when last was read
	stats struct{ polls, added, removed, unresolved, retries atomic.Uint64 }
}

type familyMaps struct {
	v6                 bool
	services, backends *ebpf.Map
}

// State is what every frontend's slots send to.
type State map[Frontend]map[netip.AddrPort]bool

// New checks o; Open opens the maps.
func New(o Options) (*Reader, error) {
	if o.Node == "" {
		return nil, errors.New("cilium: node name is required")
	}
	if o.Emit == nil {
		return nil, errors.New("cilium: no event sink")
	}
	if o.Dir == "" {
		o.Dir = DefaultDir
	}
	if o.Interval <= 0 {
		o.Interval = 250 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Reader{o: o, log: o.Logger.With("component", "dataplane", "proxy", event.ProxyCilium)}, nil
}

// Present reports whether dir holds Cilium's IPv4 service maps.
func Present(dir string) bool {
	if dir == "" {
		dir = DefaultDir
	}
	_, err := os.Stat(filepath.Join(dir, Services4Map))
	return err == nil
}

// Open opens the pinned maps read-only. The IPv4 maps are required; the
// IPv6 ones are read when pinned (Cilium with enable-ipv6).
func (r *Reader) Open() error {
	r.Close()
	for _, f := range []struct {
		v6                 bool
		services, backends string
		key, value         int // expected sizes
	}{
		{false, Services4Map, Backends4Map, 12, 12},
		{true, Services6Map, Backends6Map, 24, 24},
	} {
		svc, err := loadPinned(filepath.Join(r.o.Dir, f.services), uint32(f.key), 12)
		if err != nil {
			if f.v6 && errors.Is(err, os.ErrNotExist) {
				continue
			}
			r.Close()
			return err
		}
		be, err := loadPinned(filepath.Join(r.o.Dir, f.backends), 4, uint32(f.value))
		if err != nil {
			svc.Close()
			r.Close()
			return err
		}
		r.maps = append(r.maps, &familyMaps{v6: f.v6, services: svc, backends: be})
	}
	return nil
}

func loadPinned(path string, key, value uint32) (*ebpf.Map, error) {
	m, err := ebpf.LoadPinnedMap(path, &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("cilium: opening %s: %w", path, err)
	}
	if m.Type() != ebpf.Hash || m.KeySize() != key || m.ValueSize() != value {
		m.Close()
		return nil, fmt.Errorf("cilium: %s is a %s map with %d-byte keys and %d-byte values, want a hash map with %d and %d (a Cilium release whose layout this reader does not know)",
			path, m.Type(), m.KeySize(), m.ValueSize(), key, value)
	}
	return m, nil
}

// Close closes the maps.
func (r *Reader) Close() {
	for _, f := range r.maps {
		f.services.Close()
		f.backends.Close()
	}
	r.maps = nil
}

// Stats returns the counters.
func (r *Reader) Stats() Stats {
	return Stats{Polls: r.stats.polls.Load(), Added: r.stats.added.Load(), Removed: r.stats.removed.Load(),
		Unresolved: r.stats.unresolved.Load(), Retries: r.stats.retries.Load()}
}

type slotKey struct {
	fe    Frontend
	scope uint8
}

// Read reads every frontend's backends once.
func (r *Reader) Read() (State, error) {
	st := State{}
	for _, f := range r.maps {
		if err := f.read(st); err != nil {
			return nil, err
		}
	}
	return st, nil
}

func (f *familyMaps) read(st State) error {
	backends := map[uint32]netip.AddrPort{}
	if f.v6 {
		if err := readAll(f.backends, func(id *uint32, v *Backend6Value) { backends[*id] = v.addr() }); err != nil {
			return fmt.Errorf("cilium: reading %s: %w", Backends6Map, err)
		}
	} else {
		if err := readAll(f.backends, func(id *uint32, v *Backend4Value) { backends[*id] = v.addr() }); err != nil {
			return fmt.Errorf("cilium: reading %s: %w", Backends4Map, err)
		}
	}
	counts := map[slotKey]uint16{}
	type slot struct {
		k    slotKey
		n    uint16
		back uint32
	}
	var slots []slot
	add := func(fe Frontend, scope uint8, n uint16, v ServiceValue) {
		k := slotKey{fe, scope}
		if n == 0 {
			counts[k] = v.Count
			return
		}
		slots = append(slots, slot{k, n, v.BackendID})
	}
	if f.v6 {
		err := readAll(f.services, func(k *Service6Key, v *ServiceValue) {
			add(Frontend{k.frontend(), protoName(k.Proto)}, k.Scope, k.BackendSlot, *v)
		})
		if err != nil {
			return fmt.Errorf("cilium: reading %s: %w", Services6Map, err)
		}
	} else {
		err := readAll(f.services, func(k *Service4Key, v *ServiceValue) {
			add(Frontend{k.frontend(), protoName(k.Proto)}, k.Scope, k.BackendSlot, *v)
		})
		if err != nil {
			return fmt.Errorf("cilium: reading %s: %w", Services4Map, err)
		}
	}
	for k := range counts {
		if st[k.fe] == nil {
			st[k.fe] = map[netip.AddrPort]bool{}
		}
	}
	// Only slots 1..Count take new connections: slots past it are
	// quarantined backends, or left over while the agent rewrites the
	// frontend. A slot whose backend is not in the backends map routes
	// nowhere.
	for _, s := range slots {
		n, ok := counts[s.k]
		if !ok || s.n > n {
			continue
		}
		if a, ok := backends[s.back]; ok {
			st[s.k.fe][a] = true
		}
	}
	return nil
}

// batchSize is how many entries one BPF_MAP_LOOKUP_BATCH call reads.
const batchSize = 4096

// readAll reads every entry of a hash map: by batches of batchSize (Linux
// 5.6+), two system calls per entry through the iterator otherwise. The
// batches cost about a twentieth of the iterator per entry.
func readAll[K, V any](m *ebpf.Map, fn func(*K, *V)) error {
	keys, vals := make([]K, batchSize), make([]V, batchSize)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := 0; i < n; i++ {
			fn(&keys[i], &vals[i])
		}
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			return nil
		case errors.Is(err, ebpf.ErrNotSupported):
			var k K
			var v V
			it := m.Iterate()
			for it.Next(&k, &v) {
				fn(&k, &v)
			}
			return it.Err()
		case err != nil:
			return err
		}
	}
}

// Diff lists the backends that entered or left each frontend from was to
// now, in a stable order.
func Diff(was, now State) []Change {
	var out []Change
	for fe, bs := range now {
		for b := range bs {
			if !was[fe][b] {
				out = append(out, Change{Frontend: fe, Backend: b, Added: true})
			}
		}
	}
	for fe, bs := range was {
		for b := range bs {
			if !now[fe][b] {
				out = append(out, Change{Frontend: fe, Backend: b})
			}
		}
	}
	slices.SortFunc(out, func(a, b Change) int {
		if c := a.Frontend.Addr.Compare(b.Frontend.Addr); c != 0 {
			return c
		}
		if a.Frontend.Proto != b.Frontend.Proto {
			if a.Frontend.Proto < b.Frontend.Proto {
				return -1
			}
			return 1
		}
		return a.Backend.Compare(b.Backend)
	})
	return out
}

// stableRead reads until two reads in a row agree (at most four reads): the
// agent writes a frontend's slots and its count one map update at a time,
// and a read between them sees a state that never routed.
func (r *Reader) stableRead(prev State) (State, error) {
	st, err := r.Read()
	if err != nil {
		return nil, err
	}
	if len(Diff(prev, st)) == 0 {
		return st, nil
	}
	for i := 0; i < 3; i++ {
		again, err := r.Read()
		if err != nil {
			return nil, err
		}
		if len(Diff(st, again)) == 0 {
			return again, nil
		}
		r.stats.retries.Add(1)
		st = again
	}
	return st, nil
}

// fingerprint hashes the maps' raw bytes: when it has not moved, nothing
// changed, and the poll costs the reads alone (no decoding, no state).
func (r *Reader) fingerprint() (uint64, error) {
	h := uint64(14695981039346656037)
	for _, f := range r.maps {
		var err error
		if f.v6 {
			err = errors.Join(hashAll[[24]byte, [12]byte](f.services, &h), hashAll[[4]byte, [24]byte](f.backends, &h))
		} else {
			err = errors.Join(hashAll[[12]byte, [12]byte](f.services, &h), hashAll[[4]byte, [12]byte](f.backends, &h))
		}
		if err != nil {
			return 0, err
		}
	}
	return h, nil
}

// hashAll folds every entry's bytes into h (FNV-1a; the entries come in
// the kernel's bucket order, which stays put while the map does).
func hashAll[K, V any](m *ebpf.Map, h *uint64) error {
	return readAll(m, func(k *K, v *V) {
		x := *h
		kb := unsafe.Slice((*byte)(unsafe.Pointer(k)), unsafe.Sizeof(*k))
		vb := unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
		for _, b := range [][]byte{kb, vb} {
			for _, c := range b {
				x = (x ^ uint64(c)) * 1099511628211
			}
		}
		*h = x
	})
}

// Poll reads the maps and emits what changed since the last Poll, stamped
// at the time of the read. The first Poll after Open only takes the
// baseline.
func (r *Reader) Poll() ([]Change, error) {
	first := r.last == nil
	fp, err := r.fingerprint()
	if err != nil {
		return nil, err
	}
	if !first && fp == r.fp {
		r.stats.polls.Add(1)
		return nil, nil
	}
	r.fp = fp
	st, err := r.stableRead(r.last)
	if err != nil {
		return nil, err
	}
	at := time.Now()
	r.stats.polls.Add(1)
	if first {
		r.last = st
		return nil, nil
	}
	cs := Diff(r.last, st)
	r.last = st
	for _, c := range cs {
		r.emit(at, c)
	}
	return cs, nil
}

func (r *Reader) emit(at time.Time, c Change) {
	var ns, name, portName string
	if r.o.Services != nil {
		var ok bool
		ns, name, portName, ok = r.o.Services(c.Frontend.Addr.Addr(), c.Frontend.Addr.Port(), c.Frontend.Proto)
		if !ok {
			r.stats.unresolved.Add(1)
			return
		}
	}
	k := event.DataplaneEndpointRemoved
	if c.Added {
		k = event.DataplaneEndpointAdded
		r.stats.added.Add(1)
	} else {
		r.stats.removed.Add(1)
	}
	e := event.Event{
		Time:    at.UnixNano(),
		Kind:    k,
		Node:    r.o.Node,
		Source:  event.SourceDataplane,
		Pod:     event.PodRef{Namespace: ns},
		Service: name,
		Local:   c.Backend,
		Attrs: map[string]string{
			event.AttrProxy:    event.ProxyCilium,
			event.AttrFrontend: c.Frontend.Addr.String(),
		},
	}
	if c.Frontend.Proto != "" {
		e.Attrs[event.AttrProtocol] = c.Frontend.Proto
	}
	if portName != "" {
		e.Attrs[event.AttrServicePort] = portName
	}
	e.Seal()
	r.o.Emit(e)
}

// Run opens the maps and polls them every Interval until ctx ends. Like
// package dataplane's watcher it fails soft: without the maps (no Cilium
// on this node, or no access to its bpffs) it logs why once and keeps
// trying every ten intervals, so a Cilium agent that starts later is
// found.
func (r *Reader) Run(ctx context.Context) error {
	defer r.Close()
	tick := time.NewTicker(r.o.Interval)
	defer tick.Stop()
	warned := false
	wait := 0
	for {
		if r.maps == nil && wait == 0 {
			if err := r.Open(); err != nil {
				if !warned {
					r.log.Warn("Cilium's service maps not recorded (yet): cannot open them; trying again", "dir", r.o.Dir, "err", err)
					warned = true
				}
				wait = 10
			} else {
				r.last = nil
				r.log.Info("following Cilium's service maps", "dir", r.o.Dir, "families", len(r.maps), "interval", r.o.Interval)
			}
		}
		if r.maps != nil {
			if _, err := r.Poll(); err != nil {
				r.log.Warn("reading Cilium's service maps failed; opening them again", "err", err)
				r.Close()
			}
		} else if wait > 0 {
			wait--
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// String renders a frontend as Cilium's CLI does: 10.96.0.10:80/TCP.
func (f Frontend) String() string {
	if f.Proto == "" {
		return f.Addr.String()
	}
	return f.Addr.String() + "/" + f.Proto
}
