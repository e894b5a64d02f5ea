package watcher

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drainscope/drainscope/event"
)

// ep builds an endpoint of pod name (UID "uid-"+name) at addr.
func ep(name, addr string, ready, serving, terminating bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses: []string{addr},
		Conditions: discoveryv1.EndpointConditions{
			Ready: ptr.To(ready), Serving: ptr.To(serving), Terminating: ptr.To(terminating),
		},
		NodeName:  ptr.To("node-a"),
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
	}
}

func slice(name, svc, rv string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ns", ResourceVersion: rv,
			Labels:      map[string]string{discoveryv1.LabelServiceName: svc},
			Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: "2026-11-29T15:00:00Z"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
}

type rec struct {
	kind  event.Kind
	pod   string
	addr  string
	flags event.Flags
}

func (r rec) String() string {
	s := string(r.kind) + " " + r.pod + " " + r.addr
	if r.flags.Has(event.FlagRelist) {
		s += " relist"
	}
	return s
}

func newTestSliceTracker() (*sliceTracker, *[]rec) {
	var got []rec
	t := newSliceTracker(func(_ time.Time, k event.Kind, key epKey, st epState, flags event.Flags) {
		got = append(got, rec{k, st.podName, fmt.Sprintf("%s:%d", key.addr, st.port), flags})
	})
	return t, &got
}

func recs(rs []rec) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.String())
		b.WriteByte('\n')
	}
	return b.String()
}

func TestSliceTrackerPodDeletion(t *testing.T) {
	tr, got := newTestSliceTracker()
	tr.replaceAll([]*discoveryv1.EndpointSlice{slice("web-1", "web", "1", ep("a", "10.244.0.2", true, true, false))}, event.FlagRelist, true)
	if len(*got) != 0 {
		t.Fatalf("initial list reported events:\n%s", recs(*got))
	}
	tr.apply(slice("web-1", "web", "2", ep("a", "10.244.0.2", true, true, false), ep("b", "10.244.0.3", false, false, false)), 0, false)
	tr.apply(slice("web-1", "web", "3", ep("a", "10.244.0.2", true, true, false), ep("b", "10.244.0.3", true, true, false)), 0, false)
	// A resync or replay of the same version reports nothing.
	tr.apply(slice("web-1", "web", "3", ep("a", "10.244.0.2", true, true, false), ep("b", "10.244.0.3", true, true, false)), 0, false)
	tr.apply(slice("web-1", "web", "4", ep("a", "10.244.0.2", false, true, true), ep("b", "10.244.0.3", true, true, false)), 0, false)
	tr.apply(slice("web-1", "web", "5", ep("a", "10.244.0.2", false, false, true), ep("b", "10.244.0.3", true, true, false)), 0, false)
	tr.apply(slice("web-1", "web", "6", ep("b", "10.244.0.3", true, true, false)), 0, false)
	want := `endpoint_added b 10.244.0.3:8080
endpoint_ready b 10.244.0.3:8080
endpoint_serving b 10.244.0.3:8080
endpoint_not_ready a 10.244.0.2:8080
endpoint_terminating a 10.244.0.2:8080
endpoint_not_serving a 10.244.0.2:8080
endpoint_removed a 10.244.0.2:8080
`
	if s := recs(*got); s != want {
		t.Errorf("events:\n%s\nwant:\n%s", s, want)
	}
}

func TestSliceTrackerMoveBetweenSlices(t *testing.T) {
	tr, got := newTestSliceTracker()
	tr.apply(slice("web-1", "web", "1", ep("a", "10.244.0.2", true, true, false)), 0, true)
	// The controller adds the endpoint to another slice of the same
	// Service, then drops it from the first: one endpoint throughout.
	tr.apply(slice("web-2", "web", "2", ep("a", "10.244.0.2", true, true, false)), 0, false)
	tr.apply(slice("web-1", "web", "3"), 0, false)
	tr.remove("ns/web-1", 0, false)
	if len(*got) != 0 {
		t.Fatalf("a move between slices reported events:\n%s", recs(*got))
	}
	// The same address in another Service is another endpoint.
	tr.apply(slice("api-1", "api", "4", ep("a", "10.244.0.2", true, true, false)), 0, false)
	tr.remove("ns/web-2", 0, false)
	want := "endpoint_added a 10.244.0.2:8080\nendpoint_removed a 10.244.0.2:8080\n"
	if s := recs(*got); s != want {
		t.Errorf("events:\n%s\nwant:\n%s", s, want)
	}
}

func TestSliceTrackerRelist(t *testing.T) {
	tr, got := newTestSliceTracker()
	tr.replaceAll([]*discoveryv1.EndpointSlice{
		slice("web-1", "web", "1", ep("a", "10.244.0.2", true, true, false), ep("b", "10.244.0.3", true, true, false)),
		slice("old-1", "old", "1", ep("o", "10.244.0.9", true, true, false)),
	}, event.FlagRelist, true)
	// While the watch was down: a became terminating, b moved to a new
	// slice, c was added, and the old Service's slice was deleted.
	tr.replaceAll([]*discoveryv1.EndpointSlice{
		slice("web-1", "web", "7", ep("a", "10.244.0.2", false, true, true)),
		slice("web-2", "web", "8", ep("b", "10.244.0.3", true, true, false), ep("c", "10.244.0.4", true, true, false)),
	}, event.FlagRelist, false)
	want := `endpoint_not_ready a 10.244.0.2:8080 relist
endpoint_terminating a 10.244.0.2:8080 relist
endpoint_added c 10.244.0.4:8080 relist
endpoint_removed o 10.244.0.9:8080 relist
`
	if s := recs(*got); s != want {
		t.Errorf("events:\n%s\nwant:\n%s", s, want)
	}
	// Relisting the same state again reports nothing.
	*got = nil
	tr.replaceAll([]*discoveryv1.EndpointSlice{
		slice("web-1", "web", "7", ep("a", "10.244.0.2", false, true, true)),
		slice("web-2", "web", "8", ep("b", "10.244.0.3", true, true, false), ep("c", "10.244.0.4", true, true, false)),
	}, event.FlagRelist, false)
	if len(*got) != 0 {
		t.Errorf("unchanged relist reported:\n%s", recs(*got))
	}
	if n, s := tr.size(); n != 3 || s != 2 {
		t.Errorf("size = %d endpoints, %d slices; want 3, 2", n, s)
	}
}

func TestEndpointConditionsDefaults(t *testing.T) {
	s := slice("web-1", "web", "1", discoveryv1.Endpoint{Addresses: []string{"10.244.0.2", "not-an-ip"}})
	s.Ports = append(s.Ports, discoveryv1.EndpointPort{Port: ptr.To(int32(9090))})
	keys, states := endpoints(s)
	if len(keys) != 1 {
		t.Fatalf("got %d endpoints, want 1 (the unparsable address skipped)", len(keys))
	}
	st := states[0]
	if !st.ready || !st.serving || st.terminating {
		t.Errorf("nil conditions read as %s; want ready, serving, not terminating", st.conditions())
	}
	if st.port != 0 || st.ports != "http/TCP/8080,/TCP/9090" {
		t.Errorf("port %d ports %q; want 0 and both ports listed", st.port, st.ports)
	}
	if keys[0].group != "web" || keys[0].podUID != "" {
		t.Errorf("key %+v", keys[0])
	}
}

// TestSliceTrackerObserve: a re-observation reports every endpoint's
// state as the kind naming it, flagged observed, however long it has held.
func TestSliceTrackerObserve(t *testing.T) {
	tr, got := newTestSliceTracker()
	tr.replaceAll([]*discoveryv1.EndpointSlice{
		slice("web-1", "web", "1", ep("a", "10.244.0.2", true, true, false), ep("b", "10.244.0.3", false, true, true),
			ep("c", "10.244.0.4", false, false, false)),
	}, event.FlagRelist, true)
	for round := 0; round < 2; round++ {
		*got = nil
		tr.observe(time.Unix(1_800_000_000, 0))
		var lines []string
		for _, r := range *got {
			if r.flags != event.FlagObserved {
				t.Errorf("%s: flags %b, want observed", r, r.flags)
			}
			lines = append(lines, r.String())
		}
		sort.Strings(lines)
		want := "endpoint_not_ready c 10.244.0.4:8080\nendpoint_ready a 10.244.0.2:8080\nendpoint_terminating b 10.244.0.3:8080"
		if s := strings.Join(lines, "\n"); s != want {
			t.Errorf("round %d observed:\n%s\nwant:\n%s", round, s, want)
		}
	}
	// A removed endpoint is no longer observed.
	tr.apply(slice("web-1", "web", "2", ep("a", "10.244.0.2", true, true, false)), 0, false)
	*got = nil
	tr.observe(time.Unix(1_800_000_000, 0))
	if len(*got) != 1 || (*got)[0].pod != "a" {
		t.Errorf("after removals observed:\n%s", recs(*got))
	}
}
