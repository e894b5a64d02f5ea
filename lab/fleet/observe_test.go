package fleet

import (
	"fmt"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

// Over one interval, wherever it is cut, every running pod is observed
// once by its node (readiness and container) and once by the leader (its
// endpoint), on its own node's tick; the rollout's pods too while the
// rollout is not due, and never after.
func TestObserveRoundsOnePerInterval(t *testing.T) {
	m := DefaultModel()
	m.PodsPerNode, m.ObserveEvery, m.Rollout = 3, 10*time.Minute, 5
	const nodes = 7
	origin := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for _, from := range []time.Time{origin, origin.Add(-25 * time.Minute), origin.Add(3*time.Minute + 7*time.Second)} {
		for _, rolloutAt := range []time.Time{from.Add(time.Hour), from} {
			observeInterval(t, m, nodes, origin, from, rolloutAt)
		}
	}
}

func observeInterval(t *testing.T, m Model, nodes int, origin, from, rolloutAt time.Time) {
	t.Helper()
	// Cut into pieces as the run's 50 ms ticks cut it.
	seen := map[string]int{}
	step := 50 * time.Millisecond
	for at := from; at.Before(from.Add(m.ObserveEvery)); at = at.Add(step) {
		observeRounds(m, nodes, origin, at, at.Add(step), rolloutAt, func(node int, when time.Time, e event.Event) {
			if !e.Flags.Has(event.FlagObserved) {
				t.Errorf("%s not flagged observed", e.Kind)
			}
			if e.Kind != event.EndpointReady && node != podNode(e, m.Rollout, nodes) {
				t.Errorf("%s of %s recorded by node %d", e.Kind, e.Pod.Name, node)
			}
			if when.Before(at) || !when.Before(at.Add(step)) {
				t.Errorf("%s at %v, outside [%v, %v)", e.Kind, when, at, at.Add(step))
			}
			if e.Pod.Namespace == "shop" && !when.Before(rolloutAt) {
				t.Errorf("%s of the rollout's %s at %v, once the rollout was due at %v", e.Kind, e.Pod.Name, when, rolloutAt)
			}
			seen[string(e.Kind)+" "+e.Pod.UID]++
		})
	}
	want := nodes * m.PodsPerNode * 3
	if rolloutAt.After(from.Add(m.ObserveEvery)) {
		want += m.Rollout * 3
	}
	if len(seen) != want {
		t.Errorf("from %v, rollout at %v: %d (kind, pod) observed, want %d", from, rolloutAt, len(seen), want)
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("from %v: %s observed %d times in one interval", from, k, n)
		}
	}
}

// podNode is the node a running pod's or a rollout pod's name places it
// on.
func podNode(e event.Event, rollout, nodes int) int {
	var node, slot int
	if _, err := fmt.Sscanf(e.Pod.Name, "run-%05d-%02d", &node, &slot); err == nil {
		return node
	}
	if _, err := fmt.Sscanf(e.Pod.Name, "checkout-5c9d8f7b6-%05d", &slot); err == nil {
		return rolloutPod(slot, rollout, nodes).node
	}
	return -1
}
