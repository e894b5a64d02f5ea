package flight_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/flight"
)

// t0 is an arbitrary wall-clock origin; the tests only use offsets from it.
const t0 = int64(1_795_960_000_000_000_000)

var (
	web   = event.PodRef{Namespace: "shop", Name: "web-1", UID: "u1"}
	other = event.PodRef{Namespace: "shop", Name: "web-2", UID: "u2"}
)

// step advances the fake clock by after, then adds ev (stamped at the new
// clock time unless ev.Time is set) — or, with sweep, calls Sweep.
type step struct {
	after time.Duration
	ev    event.Event
	sweep bool
}

// conn is an ordinary close on pod's connection from the client's port.
func conn(label string, pod event.PodRef, port uint16) event.Event {
	return event.Event{Kind: event.ConnClosed, Pod: pod, Comm: label, Reason: "local", Source: event.SourceKernel,
		Local:  netip.MustParseAddrPort("10.244.0.5:8080"),
		Remote: netip.AddrPortFrom(netip.MustParseAddr("10.244.0.1"), port)}
}

func ev(label string, k event.Kind, pod event.PodRef) event.Event {
	return event.Event{Kind: k, Pod: pod, Comm: label}
}

func with(e event.Event, f func(*event.Event)) event.Event { f(&e); return e }

func TestRecorder(t *testing.T) {
	sigterm := with(ev("sigterm", event.Signal, web), func(e *event.Event) { e.Signal = 15 })
	cases := []struct {
		name  string
		cfg   flight.Config
		steps []step
		want  []string // the labels the sink got, in order
		total flight.Counts
	}{
		{
			name: "calm pod: closes held and discarded as they age",
			steps: []step{
				{0, conn("c1", web, 1), false},
				{time.Second, conn("c2", web, 2), false},
				{20 * time.Second, event.Event{}, true},
			},
			want:  nil,
			total: flight.Counts{Held: 2, Discarded: 2},
		},
		{
			name: "a trigger hands on the lead before it, oldest first, then itself",
			steps: []step{
				{0, conn("old", web, 1), false},
				{5 * time.Second, conn("c2", web, 2), false},
				{time.Second, conn("c3", web, 3), false},
				{6 * time.Second, sigterm, false},
			},
			// old is 12 s before SIGTERM, past the 10 s lead.
			want:  []string{"c2", "c3", "sigterm"},
			total: flight.Counts{Held: 3, Persisted: 2, Discarded: 1},
		},
		{
			name: "held events are handed on in time order",
			steps: []step{
				{time.Second, with(conn("late", web, 1), func(e *event.Event) { e.Time = t0 + int64(900*time.Millisecond) }), false},
				{0, with(conn("early", web, 2), func(e *event.Event) { e.Time = t0 + int64(500*time.Millisecond) }), false},
				{time.Second, ev("deleted", event.PodDeletion, web), false},
			},
			want:  []string{"early", "late", "deleted"},
			total: flight.Counts{Held: 2, Persisted: 2},
		},
		{
			name: "disrupted pod: closes pass through, held again once ready and calm",
			steps: []step{
				{0, ev("notready", event.PodNotReady, web), false},
				{time.Second, conn("c1", web, 1), false},
				{time.Minute, ev("ready", event.PodReady, web), false},
				{30 * time.Second, conn("c2", web, 2), false}, // 91 s after the trigger
				{30 * time.Second, conn("c3", web, 3), false}, // 121 s: calm
				{time.Second, event.Event{}, true},
			},
			want:  []string{"notready", "c1", "ready", "c2"},
			total: flight.Counts{Passed: 2, Held: 1},
		},
		{
			name: "a pod not ready again stays disrupted past the calm",
			steps: []step{
				{0, ev("notready", event.PodNotReady, web), false},
				{3 * time.Minute, conn("c1", web, 1), false},
			},
			want:  []string{"notready", "c1"},
			total: flight.Counts{Passed: 1},
		},
		{
			name: "a deleted pod stays disrupted until it is gone",
			steps: []step{
				{0, ev("deleted", event.PodDeletion, web), false},
				{125 * time.Second, conn("c1", web, 1), false}, // past the calm
				{3 * time.Minute, event.Event{}, true},         // forgotten: nothing seen for lead + calm
				{0, conn("c2", web, 2), false},
			},
			want:  []string{"deleted", "c1"},
			total: flight.Counts{Passed: 1, Held: 1},
		},
		{
			name: "triggers: endpoint leaving, SIGKILL, container end, main exit, exit by signal, listener close",
			steps: []step{
				{0, conn("a", web, 1), false},
				{0, ev("ep", event.EndpointTerminating, web), false},
				{0, conn("b", other, 2), false},
				{0, with(ev("kill", event.Signal, other), func(e *event.Event) { e.Signal = 9 }), false},
			},
			want:  []string{"a", "ep", "b", "kill"},
			total: flight.Counts{Held: 2, Persisted: 2},
		},
		{
			// The kubelet's eviction keeps the pod object: no deletion.
			name: "a pod finished without a deletion is a trigger",
			steps: []step{
				{0, conn("a", web, 1), false},
				{time.Second, ev("evicted", event.PodFinished, web), false},
			},
			want:  []string{"a", "evicted"},
			total: flight.Counts{Held: 1, Persisted: 1},
		},
		{
			name: "no triggers: an exec probe's exit, SIGCHLD, an endpoint becoming ready, a re-observed ready pod",
			steps: []step{
				{0, conn("a", web, 1), false},
				{0, with(ev("probe-exit", event.ProcessExit, web), func(e *event.Event) { e.Code = 0 }), false},
				{0, with(ev("sigchld", event.Signal, web), func(e *event.Event) { e.Signal = 17 }), false},
				{0, ev("ep-ready", event.EndpointReady, web), false},
				{0, with(ev("ready", event.PodReady, web), func(e *event.Event) { e.Flags = event.FlagObserved }), false},
			},
			want:  []string{"probe-exit", "sigchld", "ep-ready", "ready"},
			total: flight.Counts{Held: 1},
		},
		{
			name: "the main process's exit and an exit by a signal are triggers",
			steps: []step{
				{0, conn("a", web, 1), false},
				{0, with(ev("main-exit", event.ProcessExit, web), func(e *event.Event) { e.Flags = event.FlagMain }), false},
				{0, conn("b", other, 1), false},
				{0, with(ev("killed", event.ProcessExit, other), func(e *event.Event) { e.Signal = 9 }), false},
			},
			want:  []string{"a", "main-exit", "b", "killed"},
			total: flight.Counts{Held: 2, Persisted: 2},
		},
		{
			name: "never held: closes at exit, by unknown pods, resets, refusals, every other kind",
			steps: []step{
				{0, with(conn("at-exit", web, 1), func(e *event.Event) { e.Flags = event.FlagAtExit }), false},
				{0, conn("no-pod", event.PodRef{}, 2), false},
				{0, ev("rst-sent", event.RSTSent, web), false},
				{0, ev("refused", event.ConnRefused, web), false},
				{0, ev("caps", event.KernelCapabilities, event.PodRef{}), false},
				{0, ev("dp", event.DataplaneEndpointRemoved, web), false},
				{0, ev("client", event.ClientFailure, web), false},
				{0, ev("started", event.ContainerStarted, web), false},
			},
			want: []string{"at-exit", "no-pod", "rst-sent", "refused", "caps", "dp", "client", "started"},
		},
		{
			name: "a reset hands on the earlier close of its own connection only",
			steps: []step{
				{0, conn("c1", web, 1), false},
				{0, conn("c2", web, 2), false},
				{100 * time.Millisecond, with(conn("rst", web, 1), func(e *event.Event) { e.Kind = event.RSTSent }), false},
				{20 * time.Second, event.Event{}, true},
			},
			want:  []string{"c1", "rst"},
			total: flight.Counts{Held: 2, Persisted: 1, Discarded: 1},
		},
		{
			name: "an endpoint known by name only reaches the pod its UID named",
			steps: []step{
				{0, conn("c1", web, 1), false},
				{0, ev("ep", event.EndpointRemoved, event.PodRef{Namespace: "shop", Name: "web-1"}), false},
			},
			want:  []string{"c1", "ep"},
			total: flight.Counts{Held: 1, Persisted: 1},
		},
		{
			name: "per-pod bound: the oldest make room",
			cfg:  flight.Config{PerPod: 2},
			steps: []step{
				{0, conn("c1", web, 1), false},
				{0, conn("c2", web, 2), false},
				{0, conn("c3", web, 3), false},
				{0, sigterm, false},
			},
			want:  []string{"c2", "c3", "sigterm"},
			total: flight.Counts{Held: 3, Persisted: 2, Discarded: 1},
		},
		{
			name: "total bound: a pod with nothing held cannot take another's slots",
			cfg:  flight.Config{PerPod: 2, Total: 2},
			steps: []step{
				{0, conn("c1", web, 1), false},
				{0, conn("c2", web, 2), false},
				{0, conn("o1", other, 1), false},
				{0, sigterm, false},
			},
			want:  []string{"c1", "c2", "sigterm"},
			total: flight.Counts{Held: 3, Persisted: 2, Discarded: 1},
		},
		{
			name: "a longer lead reaches further back",
			cfg:  flight.Config{Lead: 30 * time.Second},
			steps: []step{
				{0, conn("old", web, 1), false},
				{20 * time.Second, sigterm, false},
			},
			want:  []string{"old", "sigterm"},
			total: flight.Counts{Held: 1, Persisted: 1},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := t0
			cfg := tc.cfg
			cfg.Now = func() int64 { return now }
			var got []string
			r := flight.New(cfg, func(e event.Event) { got = append(got, e.Comm) })
			for _, s := range tc.steps {
				now += int64(s.after)
				if s.sweep {
					r.Sweep()
					continue
				}
				e := s.ev
				if e.Time == 0 {
					e.Time = now
				}
				r.Add(e)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("sink got %v, want %v", got, tc.want)
			}
			if c := r.Counts(); c != tc.total {
				t.Errorf("counts %+v, want %+v", c, tc.total)
			}
		})
	}
}

// TestRecorderPods checks the per-pod counts and that the pods' counts sum
// to the totals.
func TestRecorderPods(t *testing.T) {
	now := t0
	r := flight.New(flight.Config{Now: func() int64 { return now }}, func(event.Event) {})
	for i := range 5 {
		e := conn("c", web, uint16(i))
		e.Time = now
		r.Add(e)
		e = conn("o", other, uint16(i))
		e.Time = now
		r.Add(e)
	}
	e := ev("sigterm", event.Signal, other)
	e.Signal, e.Time = 15, now
	r.Add(e)
	pods := r.Pods()
	if len(pods) != 2 {
		t.Fatalf("pods %+v, want two", pods)
	}
	w, o := pods[0], pods[1]
	if w.Key != "u1" || w.Name != "shop/web-1" || w.Disrupted || w.InRing != 5 || w.Held != 5 || w.Persisted != 0 {
		t.Errorf("web-1: %+v", w)
	}
	if o.Key != "u2" || !o.Disrupted || o.InRing != 0 || o.Held != 5 || o.Persisted != 5 {
		t.Errorf("web-2: %+v", o)
	}
	var sum flight.Counts
	for _, p := range pods {
		sum.Held += p.Held
		sum.Persisted += p.Persisted
	}
	if c := r.Counts(); c.Held != sum.Held || c.Persisted != sum.Persisted {
		t.Errorf("totals %+v, pods sum %+v", c, sum)
	}
}

// TestRecorderRingWraps holds more than the ring's first size, wrapping
// it, and checks that a trigger hands on exactly the newest PerPod in
// order.
func TestRecorderRingWraps(t *testing.T) {
	now := t0
	var got []string
	r := flight.New(flight.Config{PerPod: 40, Now: func() int64 { return now }}, func(e event.Event) { got = append(got, e.Comm) })
	var want []string
	for i := range 100 {
		now += int64(time.Millisecond)
		label := strings.Repeat("x", i%3) + string(rune('A'+i%26))
		e := conn(label, web, uint16(i))
		e.Time = now
		r.Add(e)
		if i >= 60 {
			want = append(want, label)
		}
	}
	e := ev("sigterm", event.Signal, web)
	e.Signal, e.Time = 15, now
	r.Add(e)
	want = append(want, "sigterm")
	if !slices.Equal(got, want) {
		t.Errorf("sink got %v, want %v", got, want)
	}
	if c := r.Counts(); c.Held != 100 || c.Persisted != 40 || c.Discarded != 60 {
		t.Errorf("counts %+v", c)
	}
}
