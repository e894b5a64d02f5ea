package analysis

import (
	"testing"

	"github.com/drainscope/drainscope/event"
)

// A reference without a UID finds, by name, the newest of the pods that
// carried the name, whether it comes before the name index exists or
// after: a StatefulSet's pod web-0 replaced by another web-0.
func TestPodByNameAfterUIDs(t *testing.T) {
	al := NewAligner(Options{}, nil, nil)
	add := func(at int64, uid string) {
		t.Helper()
		e := event.Event{Time: t0 + at*ms, Kind: event.PodReady, Source: event.SourceWatcher, Node: "node-a",
			Pod: event.PodRef{Namespace: "default", Name: "web-0", UID: uid}}
		if err := al.Add(&e); err != nil {
			t.Fatal(err)
		}
	}
	byName := func() string {
		p := al.pod(&event.PodRef{Namespace: "default", Name: "web-0"}, false)
		if p == nil {
			return "none"
		}
		return p.ref.UID
	}
	add(0, "uid-a")
	add(10, "uid-b")
	if al.byName != nil {
		t.Fatal("the name index was built before any reference without a UID")
	}
	if got := byName(); got != "uid-b" {
		t.Errorf("by name before the index: %s, want uid-b (the newer)", got)
	}
	add(20, "uid-a") // a late event of the first pod: the name stays with the newer
	if got := byName(); got != "uid-b" {
		t.Errorf("by name once indexed: %s, want uid-b", got)
	}
	add(30, "uid-c")
	if got := byName(); got != "uid-c" {
		t.Errorf("a new pod after the index: %s, want uid-c", got)
	}
	if p := al.pod(&event.PodRef{Namespace: "default", Name: "web-1"}, false); p != nil {
		t.Errorf("web-1, never seen, found %s", p.ref.UID)
	}
}
