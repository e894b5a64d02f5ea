package cilium

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Writer creates and writes service maps laid out and pinned as a Cilium
// agent (v1.15–v1.20) does: hash maps with BPF_F_NO_PREALLOC pinned by
// name in a bpffs directory, a Service written backends first, then its
// backend slots, then the frontend's slot 0 with the count, and the slots
// past the count deleted last. Cilium cannot run on the machines that
// test drainscope; the tests (and the agent's) read what this writes.
type Writer struct {
	Dir                  string
	svc4, be4, svc6, be6 *ebpf.Map
	nextID               uint32
	ids                  map[netip.AddrPort]uint32
	counts               map[Frontend]int
}

// NewWriter creates the four maps pinned in dir, which must be on a bpffs.
func NewWriter(dir string) (*Writer, error) {
	w := &Writer{Dir: dir, nextID: 1, ids: map[netip.AddrPort]uint32{}, counts: map[Frontend]int{}}
	mk := func(name string, key, value uint32) (*ebpf.Map, error) {
		m, err := ebpf.NewMapWithOptions(&ebpf.MapSpec{
			Name: name, Type: ebpf.Hash, KeySize: key, ValueSize: value, MaxEntries: 65536,
			Flags: unix.BPF_F_NO_PREALLOC, Pinning: ebpf.PinByName,
		}, ebpf.MapOptions{PinPath: dir})
		if err != nil {
			return nil, fmt.Errorf("creating %s in %s: %w", name, dir, err)
		}
		return m, nil
	}
	var err error
	for _, s := range []struct {
		m          **ebpf.Map
		name       string
		key, value uint32
	}{{&w.svc4, Services4Map, 12, 12}, {&w.be4, Backends4Map, 4, 12}, {&w.svc6, Services6Map, 24, 12}, {&w.be6, Backends6Map, 4, 24}} {
		if *s.m, err = mk(s.name, s.key, s.value); err != nil {
			w.Close()
			return nil, err
		}
	}
	return w, nil
}

// Close closes the maps and unpins them.
func (w *Writer) Close() error {
	var errs []error
	for _, m := range []*ebpf.Map{w.svc4, w.be4, w.svc6, w.be6} {
		if m != nil {
			errs = append(errs, m.Unpin(), m.Close())
		}
	}
	return errors.Join(errs...)
}

// SetService makes frontend fe (proto an IPPROTO_ number) send to
// backends, in that slot order; nil deletes the frontend. Backends keep
// their IDs and entries (Cilium keeps a terminating backend's entry while
// its connections drain).
func (w *Writer) SetService(fe netip.AddrPort, proto uint8, backends []netip.AddrPort) error {
	for _, b := range backends {
		if _, ok := w.ids[b]; ok {
			continue
		}
		id := w.nextID
		w.nextID++
		w.ids[b] = id
		var err error
		if b.Addr().Is4() {
			err = w.be4.Put(id, Backend4Value{Address: b.Addr().As4(), Port: NetPort(b.Port()), Proto: proto})
		} else {
			err = w.be6.Put(id, Backend6Value{Address: b.Addr().As16(), Port: NetPort(b.Port()), Proto: proto})
		}
		if err != nil {
			return err
		}
	}
	put := func(slot uint16, v ServiceValue) error {
		if fe.Addr().Is4() {
			return w.svc4.Put(Service4Key{Address: fe.Addr().As4(), Port: NetPort(fe.Port()), BackendSlot: slot, Proto: proto}, v)
		}
		return w.svc6.Put(Service6Key{Address: fe.Addr().As16(), Port: NetPort(fe.Port()), BackendSlot: slot, Proto: proto}, v)
	}
	del := func(slot uint16) error {
		var err error
		if fe.Addr().Is4() {
			err = w.svc4.Delete(Service4Key{Address: fe.Addr().As4(), Port: NetPort(fe.Port()), BackendSlot: slot, Proto: proto})
		} else {
			err = w.svc6.Delete(Service6Key{Address: fe.Addr().As16(), Port: NetPort(fe.Port()), BackendSlot: slot, Proto: proto})
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		return err
	}
	key := Frontend{fe, protoName(proto)}
	old := w.counts[key]
	for i, b := range backends {
		if err := put(uint16(i+1), ServiceValue{BackendID: w.ids[b], RevNat: 1}); err != nil {
			return err
		}
	}
	if backends == nil {
		for s := 0; s <= old; s++ {
			if err := del(uint16(s)); err != nil {
				return err
			}
		}
		delete(w.counts, key)
		return nil
	}
	if err := put(0, ServiceValue{Count: uint16(len(backends)), RevNat: 1}); err != nil {
		return err
	}
	for s := len(backends) + 1; s <= old; s++ {
		if err := del(uint16(s)); err != nil {
			return err
		}
	}
	w.counts[key] = len(backends)
	return nil
}

// PutSlot writes one backend slot by hand (a quarantined slot past the
// count, or a slot written ahead of its frontend's count).
func (w *Writer) PutSlot(fe netip.AddrPort, proto uint8, slot uint16, backend netip.AddrPort) error {
	if !fe.Addr().Is4() {
		return errors.New("PutSlot: IPv4 frontends only")
	}
	return w.svc4.Put(Service4Key{Address: fe.Addr().As4(), Port: NetPort(fe.Port()), BackendSlot: slot, Proto: proto}, ServiceValue{BackendID: w.ids[backend]})
}
