package web

import (
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
)

// A Go process dying by SIGTERM raises it again to itself twice: its lane
// shows one SIGTERM, as the analysis's timeline does, and a second kill
// later still shows.
func TestLaneKeepsOneSignalPerDelivery(t *testing.T) {
	pod := event.PodRef{Namespace: "shop", Name: "web-1", UID: "uid-1"}
	wl := event.Workload{Kind: "Deployment", Name: "web"}
	t0 := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC).UnixNano()
	r := &analysis.Disruption{Namespace: "shop", Kind: wl.Kind, Name: wl.Name, From: t0, To: t0 + int64(time.Minute)}
	c := newCapture(r, event.Window{From: t0 - int64(time.Minute), To: t0 + int64(time.Minute)}, 100*time.Millisecond)
	sig := func(off time.Duration, peer int32) *event.Event {
		return &event.Event{Time: t0 + int64(off), Kind: event.Signal, Pod: pod, Workload: wl, PID: 42, Signal: 15, PeerPID: peer}
	}
	c.add(&event.Event{Time: t0, Kind: event.PodDeletion, Pod: pod, Workload: wl})
	c.add(sig(time.Millisecond, 1))
	c.add(sig(time.Millisecond+300*time.Microsecond, 42))
	c.add(sig(time.Millisecond+400*time.Microsecond, 42))
	c.add(sig(2*time.Second, 1))
	l := c.find(pod)
	if l == nil {
		t.Fatal("no lane for the pod")
	}
	n := 0
	for _, m := range l.marks {
		if m.kind == event.Signal {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d SIGTERM marks, want 2 (the kubelet's two kills, not the process's own repeats)", n)
	}
}

// A container's main process sends itself SIGKILL as it starts, and the
// kernel ignores it (PID 1 of its namespace): on the lab node every pod
// does, within a second of its start. Its lane shows no SIGKILL, as the
// analysis counts none; a SIGKILL the kernel delivered still shows.
func TestLaneLeavesOutAnIgnoredSignal(t *testing.T) {
	pod := event.PodRef{Namespace: "shop", Name: "web-1", UID: "uid-1"}
	wl := event.Workload{Kind: "Deployment", Name: "web"}
	t0 := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC).UnixNano()
	r := &analysis.Disruption{Namespace: "shop", Kind: wl.Kind, Name: wl.Name, From: t0, To: t0 + int64(time.Minute)}
	c := newCapture(r, event.Window{From: t0 - int64(time.Minute), To: t0 + int64(time.Minute)}, 100*time.Millisecond)
	kill := func(off time.Duration, result string) *event.Event {
		return &event.Event{Time: t0 + int64(off), Kind: event.Signal, Pod: pod, Workload: wl, PID: 42, PeerPID: 42, Signal: 9, Reason: result}
	}
	c.add(&event.Event{Time: t0, Kind: event.PodCreated, Pod: pod, Workload: wl})
	c.add(kill(20*time.Millisecond, "ignored"))
	c.add(kill(30*time.Second, "delivered"))
	l := c.find(pod)
	if l == nil {
		t.Fatal("no lane for the pod")
	}
	var kills []int64
	for _, m := range l.marks {
		if m.kind == event.Signal {
			kills = append(kills, m.t-t0)
		}
	}
	if len(kills) != 1 || kills[0] != int64(30*time.Second) {
		t.Errorf("SIGKILL marks at %v, want only the delivered one at +30 s", kills)
	}
}

// TestCauseColorsAreTheRules: every cause's colour on the timeline and
// in the stylesheet is its rule's, and a cause no rule names gets a grey
// that is no cause's own (it once fell back to the OOM kill's blue).
func TestCauseColorsAreTheRules(t *testing.T) {
	css := string(causesCSS(analysis.Rules))
	for _, r := range analysis.Rules {
		if got := causeColor(r.Cause); got != r.Color {
			t.Errorf("%s: timeline colour %s, rule's %s", r.Cause, got, r.Color)
		}
		for _, want := range []string{"--c-" + string(r.Cause) + ": " + r.Color + ";", ".cause-" + string(r.Cause) + " { background: var(--c-" + string(r.Cause) + "); }"} {
			if !strings.Contains(css, want) {
				t.Errorf("causes.css lacks %q", want)
			}
		}
		if r.Color == causeColor("no-such-cause") {
			t.Errorf("an unknown cause takes %s's colour %s", r.Cause, r.Color)
		}
	}
}
