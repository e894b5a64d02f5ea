package cilium

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
)

// newCiliumMaps mounts a bpffs of the test's own and creates Cilium's
// maps there, as its agent does (see Writer).
func newCiliumMaps(t *testing.T) *Writer {
	t.Helper()
	testenv.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, ""); err != nil {
		testenv.Unavailable(t, "mounting a bpffs: "+err.Error())
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	w, err := NewWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func set(t *testing.T, w *Writer, fe netip.AddrPort, backends ...netip.AddrPort) {
	t.Helper()
	if err := w.SetService(fe, 6, backends); err != nil {
		t.Fatal(err)
	}
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func TestReaderOnCiliumLayoutMaps(t *testing.T) {
	m := newCiliumMaps(t)
	cluster4, cluster6 := ap("10.96.0.10:80"), ap("[fd00:96::a]:80")
	nodePort := ap("192.0.2.1:30080") // a NodePort frontend: no ClusterIP
	a, b, c := ap("10.244.0.5:8080"), ap("10.244.0.6:8080"), ap("10.244.0.7:8080")
	a6, b6 := ap("[fd00:244::5]:8080"), ap("[fd00:244::6]:8080")
	set(t, m, cluster4, a, b, c)
	set(t, m, nodePort, a, b, c)
	set(t, m, cluster6, a6, b6)

	idx := NewServiceIndex()
	svc := event.Event{Kind: event.ServiceChanged, Pod: event.PodRef{Namespace: "shop"}, Service: "web", Reason: event.ChangeObserved,
		Attrs: map[string]string{event.AttrClusterIPs: "10.96.0.10,fd00:96::a"}}
	idx.Observe(&svc)

	var got []event.Event
	r, err := New(Options{Node: "node-1", Dir: m.Dir, Services: idx.Lookup, Emit: func(e event.Event) { got = append(got, e) }})
	if err != nil {
		t.Fatal(err)
	}
	if !Present(m.Dir) {
		t.Fatal("Present: the maps are pinned there")
	}
	if err := r.Open(); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if len(r.maps) != 2 {
		t.Fatalf("%d families opened, want IPv4 and IPv6", len(r.maps))
	}
	// Read-only: the reader cannot change Cilium's maps.
	if err := r.maps[0].services.Put(Service4Key{}, ServiceValue{}); err == nil || !errors.Is(err, os.ErrPermission) {
		t.Errorf("writing through the reader's map: %v, want a permission error", err)
	}
	st, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	if fe := (Frontend{cluster4, "tcp"}); len(st[fe]) != 3 || !st[fe][a] || !st[fe][c] {
		t.Fatalf("state of %s: %v", fe, st[fe])
	}
	if cs, err := r.Poll(); err != nil || len(cs) != 0 || len(got) != 0 {
		t.Fatalf("baseline poll: %v %v, events %v", cs, err, got)
	}

	// b leaves the Service (its pod terminating): Cilium rewrites the
	// slots without it; the backend entry stays while connections drain.
	set(t, m, cluster4, a, c)
	set(t, m, nodePort, a, c)
	set(t, m, cluster6, a6)
	cs, err := r.Poll()
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 3 {
		t.Errorf("changes %+v, want b leaving two IPv4 frontends and b6 the IPv6 one", cs)
	}
	if len(got) != 2 {
		t.Fatalf("events %+v, want two removals (the NodePort frontend names no ClusterIP)", got)
	}
	for i, want := range []netip.AddrPort{b, b6} {
		e := got[i]
		if e.Kind != event.DataplaneEndpointRemoved || e.Local != want || e.Pod.Namespace != "shop" || e.Service != "web" ||
			e.Node != "node-1" || e.Source != event.SourceDataplane || e.Attrs[event.AttrProxy] != event.ProxyCilium ||
			e.Attrs[event.AttrProtocol] != "tcp" || e.Attrs[event.AttrFrontend] == "" {
			t.Errorf("removal %d: %+v", i, e)
		}
	}
	if e := got[0]; e.Attrs[event.AttrFrontend] != cluster4.String() {
		t.Errorf("frontend %q, want %s", e.Attrs[event.AttrFrontend], cluster4)
	}
	if s := r.Stats(); s.Removed != 2 || s.Unresolved != 1 {
		t.Errorf("stats %+v", s)
	}

	// A new pod d appears: added.
	d := ap("10.244.0.8:8080")
	got = nil
	set(t, m, cluster4, a, c, d)
	if _, err := r.Poll(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Kind != event.DataplaneEndpointAdded || got[0].Local != d {
		t.Errorf("events %+v, want d added", got)
	}
	// A slot past the count (left while the agent rewrites, or
	// quarantined) takes no new connection: not in the state.
	got = nil
	if err := m.PutSlot(cluster4, 6, 4, b); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Poll(); err != nil || len(got) != 0 {
		t.Errorf("a slot past the count: %v, events %+v", err, got)
	}
	// The Service is deleted: every backend of its frontend leaves.
	if err := m.SetService(cluster4, 6, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Poll(); err != nil {
		t.Fatal(err)
	}
	var left []netip.AddrPort
	for _, e := range got {
		if e.Kind == event.DataplaneEndpointRemoved {
			left = append(left, e.Local)
		}
	}
	slices.SortFunc(left, netip.AddrPort.Compare)
	if !slices.Equal(left, []netip.AddrPort{a, c, d}) {
		t.Errorf("removed on deletion %v, want a c d", left)
	}
}

// TestReaderRefusesOtherLayouts: a pinned map of another size (a Cilium
// release whose layout this reader does not know) is refused with the
// sizes named, not misread.
func TestReaderRefusesOtherLayouts(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, ""); err != nil {
		testenv.Unavailable(t, "mounting a bpffs: "+err.Error())
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	mp, err := ebpf.NewMapWithOptions(&ebpf.MapSpec{Name: Services4Map, Type: ebpf.Hash, KeySize: 16, ValueSize: 12, MaxEntries: 16, Pinning: ebpf.PinByName},
		ebpf.MapOptions{PinPath: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Close()
	r, _ := New(Options{Node: "n", Dir: dir, Emit: func(event.Event) {}})
	err = r.Open()
	if err == nil || !strings.Contains(err.Error(), "16-byte keys") {
		t.Errorf("Open: %v, want the layout refused", err)
	}
	if _, err := os.Stat(filepath.Join(dir, Backends4Map)); err == nil {
		t.Error("the reader created a map")
	}
}
