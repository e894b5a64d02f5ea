package ebpf

import (
	"log/slog"
	"net/netip"
	"reflect"
	"testing"

	"github.com/drainscope/drainscope/event"
)

type netnsPods struct {
	*fakePods
	byNetNS map[uint64]*testPod
}

func (n netnsPods) PodByNetNS(ino uint64) (event.PodRef, event.Workload, bool) {
	if p, ok := n.byNetNS[ino]; ok {
		return p.Ref(), event.Workload{Kind: "StatefulSet", Name: "db"}, true
	}
	return event.PodRef{}, event.Workload{}, false
}

func TestResolveOrder(t *testing.T) {
	a := &testPod{UID: newUID(), ContainerID: randHex(64), IP: netip.MustParseAddr("10.1.0.2")}
	b := &testPod{UID: newUID(), IP: netip.MustParseAddr("10.1.0.3")}
	other := &testPod{UID: newUID()}
	pods := &fakePods{}
	pods.add(a)
	pods.add(b)
	const hostNet = 1
	r := newResolver(pods, nil, hostNet, slog.Default())
	r.byCgroup[100] = CgroupPod{PodUID: a.UID, ContainerID: a.ContainerID}
	r.byCgroup[200] = CgroupPod{PodUID: other.UID} // not known to the lookup
	r.byCgroup[300] = CgroupPod{}                  // not a pod's cgroup

	at := func(ip string) event.Event {
		return event.Event{Local: netip.AddrPortFrom(netip.MustParseAddr(ip), 80)}
	}

	// By cgroup: UID and container from the path, the rest from PodByUID;
	// the namespace is learned.
	e := at("127.0.0.1")
	r.Resolve(&e, 100, 7)
	if e.Pod.UID != a.UID || e.Pod.Container != a.ContainerID || e.Pod.Name != a.Ref().Name || e.Workload.Name != "web" {
		t.Errorf("by cgroup: %+v %+v", e.Pod, e.Workload)
	}
	// The container instance is named in Attrs, over the shared attributes,
	// which stay untouched; the map is reused while they are the same.
	shared := map[string]string{event.AttrClockUncertainty: "40"}
	e = at("127.0.0.1")
	e.Attrs = shared
	r.Resolve(&e, 100, 7)
	if e.Attrs[event.AttrContainerID] != a.ContainerID || e.Attrs[event.AttrClockUncertainty] != "40" || len(shared) != 1 {
		t.Errorf("container attrs %v, shared %v", e.Attrs, shared)
	}
	e2 := at("127.0.0.1")
	e2.Attrs = shared
	if r.Resolve(&e2, 100, 7); reflect.ValueOf(e2.Attrs).UnsafePointer() != reflect.ValueOf(e.Attrs).UnsafePointer() {
		t.Error("container attrs built again for the same container and shared attributes")
	}
	resampled := map[string]string{event.AttrClockUncertainty: "55"}
	e2.Attrs = resampled
	if r.Resolve(&e2, 100, 7); e2.Attrs[event.AttrClockUncertainty] != "55" || e2.Attrs[event.AttrContainerID] != a.ContainerID {
		t.Errorf("after the clock's attributes changed: %v", e2.Attrs)
	}
	// By the learned namespace: no cgroup (a reset no socket owns).
	e = at("127.0.0.1")
	r.Resolve(&e, 0, 7)
	if e.Pod.UID != a.UID || e.Pod.Container != "" {
		t.Errorf("by learned netns: %+v", e.Pod)
	}
	// A pod the lookup does not know keeps its UID from the path.
	e = at("10.9.9.9")
	r.Resolve(&e, 200, 0)
	if e.Pod.UID != other.UID || e.Pod.Name != "" {
		t.Errorf("unknown pod: %+v", e.Pod)
	}
	// No pod cgroup, unknown namespace: the local address decides.
	e = at("10.1.0.3")
	r.Resolve(&e, 300, 8)
	if e.Pod.UID != b.UID {
		t.Errorf("by IP: %+v", e.Pod)
	}
	// Loopback and the host's namespace never resolve by IP or namespace.
	r.learnNetNS(hostNet, a.UID)
	e = at("127.0.0.1")
	r.Resolve(&e, 0, hostNet)
	if !e.Pod.IsZero() {
		t.Errorf("host netns resolved to %+v", e.Pod)
	}
	// Processes of two pods in one namespace (host network): ambiguous.
	r.learnNetNS(9, a.UID)
	r.learnNetNS(9, b.UID)
	e = at("127.0.0.1")
	r.Resolve(&e, 0, 9)
	if !e.Pod.IsZero() {
		t.Errorf("shared netns resolved to %+v", e.Pod)
	}
	// A lookup that knows namespaces answers for unseen ones.
	r2 := newResolver(netnsPods{pods, map[uint64]*testPod{11: b}}, nil, hostNet, slog.Default())
	e = at("127.0.0.1")
	r2.Resolve(&e, 0, 11)
	if e.Pod.UID != b.UID || e.Workload.Name != "db" {
		t.Errorf("by NetNSLookup: %+v %+v", e.Pod, e.Workload)
	}
	// Without a lookup, cgroup paths still give UID and container.
	r3 := newResolver(nil, nil, hostNet, slog.Default())
	r3.byCgroup[100] = CgroupPod{PodUID: a.UID, ContainerID: a.ContainerID}
	e = at("10.1.0.2")
	r3.Resolve(&e, 100, 0)
	if e.Pod.UID != a.UID || e.Pod.Container != a.ContainerID {
		t.Errorf("no lookup: %+v", e.Pod)
	}
	if n := testing.AllocsPerRun(100, func() { e := at("10.1.0.2"); r.Resolve(&e, 100, 7) }); n != 0 {
		t.Errorf("cached resolution allocates %v times", n)
	}
}
