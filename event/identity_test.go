package event

import (
	"net/netip"
	"testing"
)

func sample() Event {
	return Event{
		Time: 1795960000123456789, Kind: ConnClosed, Node: "node-a", Source: SourceKernel,
		Pod:      PodRef{Namespace: "shop", Name: "checkout-7d4b9c-x2v9q", UID: "4f1c2d3e-0000-4000-8000-000000000001", Container: "app"},
		Workload: Workload{Kind: "Deployment", Name: "checkout"},
		PID:      4242, Comm: "server",
		Local:  netip.MustParseAddrPort("10.244.0.7:8080"),
		Remote: netip.MustParseAddrPort("10.244.0.200:41234"),
		NetNS:  4026532001, Reason: "local", Flags: FlagAtExit,
	}
}

func TestIdentityCoversEveryField(t *testing.T) {
	base := sample()
	id := Identity(&base)
	mutations := map[string]func(e *Event){
		"Time":      func(e *Event) { e.Time++ },
		"Kind":      func(e *Event) { e.Kind = RSTSent },
		"Node":      func(e *Event) { e.Node = "node-b" },
		"Source":    func(e *Event) { e.Source = SourceLab },
		"Namespace": func(e *Event) { e.Pod.Namespace = "x" },
		"Name":      func(e *Event) { e.Pod.Name = "x" },
		"UID":       func(e *Event) { e.Pod.UID = "x" },
		"Container": func(e *Event) { e.Pod.Container = "x" },
		"Workload":  func(e *Event) { e.Workload.Name = "x" },
		"WlKind":    func(e *Event) { e.Workload.Kind = "StatefulSet" },
		"PID":       func(e *Event) { e.PID++ },
		"Comm":      func(e *Event) { e.Comm = "x" },
		"PeerPID":   func(e *Event) { e.PeerPID = 1 },
		"PeerComm":  func(e *Event) { e.PeerComm = "x" },
		"Signal":    func(e *Event) { e.Signal = 15 },
		"Code":      func(e *Event) { e.Code = 3 },
		"Duration":  func(e *Event) { e.Duration = 1 },
		"Local":     func(e *Event) { e.Local = netip.MustParseAddrPort("10.244.0.7:8081") },
		"Remote":    func(e *Event) { e.Remote = netip.MustParseAddrPort("10.244.0.201:41234") },
		"Mapped":    func(e *Event) { e.Local = netip.MustParseAddrPort("[::ffff:10.244.0.7]:8080") },
		"NetNS":     func(e *Event) { e.NetNS++ },
		"Service":   func(e *Event) { e.Service = "x" },
		"Slice":     func(e *Event) { e.Slice = "x" },
		"Reason":    func(e *Event) { e.Reason = "peer" },
		"Flags":     func(e *Event) { e.Flags = 0 },
		"Attrs":     func(e *Event) { e.Attrs = map[string]string{"k": "v"} },
		"Shift":     func(e *Event) { e.Pod.Namespace, e.Pod.Name = "shopc", "heckout-7d4b9c-x2v9q" },
	}
	for name, mutate := range mutations {
		e := sample()
		mutate(&e)
		if Identity(&e) == id {
			t.Errorf("changing %s does not change the identity", name)
		}
	}
	a, b := sample(), sample()
	a.Attrs = map[string]string{"x": "1", "y": "2"}
	b.Attrs = map[string]string{"y": "2", "x": "1"}
	if Identity(&a) != Identity(&b) {
		t.Error("identity depends on map order")
	}
	b.Attrs = map[string]string{"x": "2", "y": "1"}
	if Identity(&a) == Identity(&b) {
		t.Error("swapping attribute values keeps the identity")
	}
}

func TestIDStringRoundTrip(t *testing.T) {
	for _, id := range []ID{0, 1, 0xdeadbeef, 1<<64 - 1} {
		s := id.String()
		if len(s) != 16 {
			t.Errorf("%d renders as %q", id, s)
		}
		back, err := ParseID(s)
		if err != nil || back != id {
			t.Errorf("ParseID(%q) = %v, %v", s, back, err)
		}
	}
}

func BenchmarkIdentity(b *testing.B) {
	e := sample()
	b.ReportAllocs()
	for b.Loop() {
		Identity(&e)
	}
}
