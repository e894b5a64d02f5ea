package fleet

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// The model's address ranges hold at most so many pods: the running
// pods' 10.100.0.0/14 (runningPod), the rollout's 10.201.0.0/16
// (rolloutPod).
const (
	MaxRunningPods = 4 << 16
	MaxRollout     = 1 << 16
)

// runningPod is the steady pod in slot of node: the pods the background's
// resets and refusals come from (traffic.background), each in a Deployment
// and Service of its own among the 10,000, each with an address of its own
// in 10.100.0.0/14 (the clients' are in 10.200.0.0/16).
func runningPod(node, slot, perNode int) pod {
	i := node*perNode + slot
	svc := fmt.Sprintf("svc-%04d", i%10000)
	return pod{
		ref: event.PodRef{Namespace: "apps", Name: fmt.Sprintf("run-%05d-%02d", node, slot),
			UID: fmt.Sprintf("%08x-0000-4000-8000-%012d", node, slot), Container: "app"},
		wl:   event.Workload{Kind: "Deployment", Name: svc},
		addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 100 + byte(i>>16), byte(i >> 8), byte(i)}), 8080),
		svc:  svc,
		node: node,
	}
}

// rolloutPod is pod i of the rollout's n (Model.Rollout), on node
// i×nodes/n: in the Deployment shop/checkout, running since the history
// (Model.History) when there is one, until the rollout ends it; its
// address in 10.201.0.0/16.
func rolloutPod(i, n, nodes int) pod {
	return pod{
		ref: event.PodRef{Namespace: "shop", Name: fmt.Sprintf("checkout-5c9d8f7b6-%05d", i),
			UID: fmt.Sprintf("%08x-1111-4000-8000-%012d", i, i), Container: "app"},
		wl:   event.Workload{Kind: "Deployment", Name: "checkout"},
		addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 201, byte(i >> 8), byte(i)}), 8080),
		svc:  "checkout",
		node: i * nodes / max(n, 1),
	}
}

// observationSpan is how much of the history before the run holds the
// watcher's observations: the analysis's read begins 15 minutes before
// its window (analysis.Options.Lead), and one interval more covers the
// round before that.
const observationSpan = 15*time.Minute + 10*time.Minute

// writeHistory stores what a cluster that has run a while holds of its
// running pods before the run (Model.History): each one's creation,
// container start and readiness on its node, and its ready endpoint by the
// leader, at at, then the watcher's observations of them over the last
// observationSpan before start (Model.ObserveEvery), written straight into
// the store as an earlier server would have. The state read before any
// window of the run then returns four entities a pod, as on a real
// cluster, not only the run's own; and the read's lead holds the
// observations a real one does.
func writeHistory(ctx context.Context, dsn string, nodes int, m Model, at, start time.Time, logf func(string, ...any)) (int64, error) {
	st, err := store.OpenPostgres(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	var n int64
	batch := make([]event.Event, 0, 5000)
	var werr error
	emit := func(node int, t time.Time, e event.Event) {
		if werr != nil {
			return
		}
		e.Node, e.Time = nodeName(node), t.UnixNano()
		e.Seal()
		batch = append(batch, e)
		if len(batch) < cap(batch) {
			return
		}
		if werr = st.Append(ctx, batch); werr != nil {
			werr = fmt.Errorf("writing the cluster's history: %w", werr)
			return
		}
		n += int64(len(batch))
		if n%100000 < int64(len(batch)) {
			logf("  history: %d events", n)
		}
		batch = batch[:0]
	}
	record := func(p pod, t time.Time) {
		created := event.Event{Kind: event.PodCreated, Source: event.SourceWatcher, Pod: p.ref, Workload: p.wl,
			Attrs: map[string]string{event.AttrCreationTimestamp: t.UTC().Truncate(time.Second).Format(time.RFC3339)}}
		emit(p.node, t, created)
		emit(p.node, t.Add(200*time.Millisecond), p.containerStarted(0))
		emit(p.node, t.Add(time.Second), p.ready(0))
		emit(0, t.Add(time.Second+100*time.Millisecond), p.endpointReady(0))
	}
	for node := range nodes {
		for slot := range m.PodsPerNode {
			record(runningPod(node, slot, m.PodsPerNode), at.Add(time.Duration(node*m.PodsPerNode+slot)*time.Microsecond))
		}
	}
	for i := range m.Rollout {
		record(rolloutPod(i, m.Rollout, nodes), at.Add(time.Duration(nodes*m.PodsPerNode+i)*time.Microsecond))
	}
	from := start.Add(-observationSpan)
	if first := at.Add(2 * time.Second); from.Before(first) {
		from = first // after the pods' first records
	}
	observeRounds(m, nodes, start, from, start, start, emit)
	if werr != nil {
		return n, werr
	}
	if len(batch) > 0 {
		if err := st.Append(ctx, batch); err != nil {
			return n, fmt.Errorf("writing the cluster's history: %w", err)
		}
		n += int64(len(batch))
	}
	return n, nil
}

// The running pod's state as the watcher records it, with flags: its
// container running, its readiness (with its address) on its node, and
// its endpoint, ready, by the leader.
func (p pod) containerStarted(flags event.Flags) event.Event {
	return event.Event{Kind: event.ContainerStarted, Source: event.SourceWatcher, Pod: p.ref, Workload: p.wl, Flags: flags,
		Attrs: map[string]string{event.AttrContainerID: "c0" + p.ref.UID[:8]}}
}

func (p pod) ready(flags event.Flags) event.Event {
	return event.Event{Kind: event.PodReady, Source: event.SourceWatcher, Pod: p.ref, Workload: p.wl, Flags: flags,
		Local: netip.AddrPortFrom(p.addr.Addr(), 0)}
}

func (p pod) endpointReady(flags event.Flags) event.Event {
	return event.Event{Kind: event.EndpointReady, Source: event.SourceWatcher, Pod: p.ref, Flags: flags,
		Local: p.addr, Service: p.svc, Slice: p.svc + "-x7k2p", Attrs: map[string]string{event.AttrConditions: "ready,serving"}}
}

// leaderPhase places the endpoint watcher's leader's observation within
// each interval: half way.
const leaderPhase = 0.5

// observeRounds emits the watcher's observations of the running pods at
// the times in [from, to) they fall on (Model.ObserveEvery): each node's
// agent records its pods' readiness and running container at its own
// tick, origin + ObserveEvery × node/nodes + k × ObserveEvery (agents
// start at different times, so their ticks spread over the interval); the
// leader records every running pod's endpoint at once, at origin +
// ObserveEvery × leaderPhase + k × ObserveEvery. The rollout's pods are
// observed so before rolloutAt only. Services, recorded by the leader
// too, are left out: 10,000 an interval.
func observeRounds(m Model, nodes int, origin, from, to, rolloutAt time.Time, emit func(node int, at time.Time, e event.Event)) {
	every := m.ObserveEvery
	if every <= 0 || !from.Before(to) {
		return
	}
	// The rollout's pods by node, while they run.
	var rollout [][]pod
	if from.Before(rolloutAt) && m.Rollout > 0 {
		rollout = make([][]pod, nodes)
		for i := range m.Rollout {
			p := rolloutPod(i, m.Rollout, nodes)
			rollout[p.node] = append(rollout[p.node], p)
		}
	}
	pods := func(node int, at time.Time, yield func(pod)) {
		for slot := range m.PodsPerNode {
			yield(runningPod(node, slot, m.PodsPerNode))
		}
		if rollout != nil && at.Before(rolloutAt) {
			for _, p := range rollout[node] {
				yield(p)
			}
		}
	}
	// The start of the interval that holds from (k rounded down, not
	// toward zero, for a from before origin).
	k := from.Sub(origin) / every
	if from.Before(origin.Add(k * every)) {
		k--
	}
	for base := origin.Add(k * every); base.Before(to); base = base.Add(every) {
		for node := range nodes {
			t := base.Add(time.Duration(float64(every) * float64(node) / float64(nodes)))
			if t.Before(from) || !t.Before(to) {
				continue
			}
			pods(node, t, func(p pod) {
				emit(node, t, p.ready(event.FlagObserved))
				emit(node, t, p.containerStarted(event.FlagObserved))
			})
		}
		if t := base.Add(time.Duration(float64(every) * leaderPhase)); !t.Before(from) && t.Before(to) {
			for node := range nodes {
				pods(node, t, func(p pod) { emit(0, t, p.endpointReady(event.FlagObserved)) })
			}
		}
	}
}
