package fleet

import (
	"fmt"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

// Over one interval, wherever it is cut, every running pod is observed
// once by its node (readiness and container) and once by the leader (its
// endpoint), on its own node's tick.
func TestObserveRoundsOnePerInterval(t *testing.T) {
	m := DefaultModel()
	m.PodsPerNode, m.ObserveEvery = 3, 10*time.Minute
	const nodes = 7
	origin := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for _, from := range []time.Time{origin, origin.Add(-25 * time.Minute), origin.Add(3*time.Minute + 7*time.Second)} {
		// Cut into pieces as the run's 50 ms ticks cut it.
		seen := map[string]int{}
		step := 50 * time.Millisecond
		for at := from; at.Before(from.Add(m.ObserveEvery)); at = at.Add(step) {
			observeRounds(m, nodes, origin, at, at.Add(step), func(node int, when time.Time, e event.Event) {
				if !e.Flags.Has(event.FlagObserved) {
					t.Errorf("%s not flagged observed", e.Kind)
				}
				if e.Kind != event.EndpointReady && node != runningPodNode(e) {
					t.Errorf("%s of %s recorded by node %d", e.Kind, e.Pod.Name, node)
				}
				if when.Before(at) || !when.Before(at.Add(step)) {
					t.Errorf("%s at %v, outside [%v, %v)", e.Kind, when, at, at.Add(step))
				}
				seen[string(e.Kind)+" "+e.Pod.UID]++
			})
		}
		if want := nodes * m.PodsPerNode * 3; len(seen) != want {
			t.Errorf("from %v: %d (kind, pod) observed, want %d", from, len(seen), want)
		}
		for k, n := range seen {
			if n != 1 {
				t.Errorf("from %v: %s observed %d times in one interval", from, k, n)
			}
		}
	}
}

// runningPodNode is the node a running pod's name places it on.
func runningPodNode(e event.Event) int {
	var node, slot int
	if _, err := fmt.Sscanf(e.Pod.Name, "run-%05d-%02d", &node, &slot); err != nil {
		return -1
	}
	return node
}
