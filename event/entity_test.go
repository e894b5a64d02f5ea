package event

import (
	"net/netip"
	"testing"
)

func TestEntity(t *testing.T) {
	ep := func(k Kind, svc, addr string) *Event {
		return &Event{Kind: k, Pod: PodRef{Namespace: "a", UID: "u1"}, Service: svc, Slice: svc + "-x",
			Local: netip.MustParseAddrPort(addr)}
	}
	pod := func(k Kind, uid, container string) *Event {
		return &Event{Kind: k, Pod: PodRef{Namespace: "a", UID: uid, Container: container}}
	}
	same := [][2]*Event{
		// One endpoint across its kinds and ports, and whichever pod.
		{ep(EndpointReady, "web", "10.0.0.1:80"), ep(EndpointRemoved, "web", "10.0.0.1:8080")},
		{pod(PodReady, "u1", ""), pod(PodNotReady, "u1", "")},
		{pod(PodCreated, "u1", ""), pod(PodDeletion, "u1", "")},
		{pod(PodCreated, "u1", ""), pod(PodFinished, "u1", "")},
		{pod(ContainerStarted, "u1", "app"), pod(ContainerTerminated, "u1", "app")},
	}
	for _, p := range same {
		if a, b := p[0].Entity(), p[1].Entity(); a == "" || a != b {
			t.Errorf("%s and %s: entities %q and %q, want one", p[0].Kind, p[1].Kind, a, b)
		}
	}
	differ := []*Event{
		ep(EndpointReady, "web", "10.0.0.1:80"), ep(EndpointReady, "api", "10.0.0.1:80"), ep(EndpointReady, "web", "10.0.0.2:80"),
		pod(PodReady, "u1", ""), pod(PodCreated, "u1", ""), pod(PodReady, "u2", ""),
		pod(ContainerStarted, "u1", "app"), pod(ContainerStarted, "u1", "sidecar"),
		{Kind: ServiceChanged, Pod: PodRef{Namespace: "a"}, Service: "web"},
		{Kind: ServiceChanged, Pod: PodRef{Namespace: "b"}, Service: "web"},
		{Kind: WorkloadChanged, Pod: PodRef{Namespace: "a"}, Workload: Workload{Kind: "Deployment", Name: "web"}},
		{Kind: DataplaneEndpointAdded, Node: "n1", Pod: PodRef{Namespace: "a"}, Service: "a/web", Local: netip.MustParseAddrPort("10.0.0.1:80"), Attrs: map[string]string{AttrProxy: ProxyNFTables}},
		{Kind: DataplaneEndpointAdded, Node: "n2", Pod: PodRef{Namespace: "a"}, Service: "a/web", Local: netip.MustParseAddrPort("10.0.0.1:80"), Attrs: map[string]string{AttrProxy: ProxyNFTables}},
	}
	seen := map[string]Kind{}
	for _, e := range differ {
		k := e.Entity()
		if k == "" || !e.Kind.IsState() {
			t.Errorf("%s: no entity", e.Kind)
		}
		if was, dup := seen[k]; dup {
			t.Errorf("%s and %s share entity %q", was, e.Kind, k)
		}
		seen[k] = e.Kind
	}
	for _, k := range []Kind{ProcessExit, Signal, ClientFailure, RSTSent, KernelCapabilities} {
		e := pod(k, "u1", "app")
		if e.Entity() != "" || k.IsState() {
			t.Errorf("%s records no state, yet has entity %q", k, e.Entity())
		}
	}
}
