package fleet

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// runningPod is the steady pod in slot of node: the pods the background's
// resets and refusals come from (traffic.background), each in a Deployment
// and Service of its own among the 10,000.
func runningPod(node, slot, perNode int) pod {
	i := node*perNode + slot
	svc := fmt.Sprintf("svc-%04d", i%10000)
	return pod{
		ref: event.PodRef{Namespace: "apps", Name: fmt.Sprintf("run-%05d-%02d", node, slot),
			UID: fmt.Sprintf("%08x-0000-4000-8000-%012d", node, slot), Container: "app"},
		wl:   event.Workload{Kind: "Deployment", Name: svc},
		addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 100 + byte(node>>16), byte(node >> 8), byte(node)}), 8080),
		svc:  svc,
		node: node,
	}
}

// writeHistory stores what a cluster that has run a while holds of its
// running pods before the run (Model.History): each one's creation,
// container start and readiness on its node, and its ready endpoint by the
// leader, at at and one second after, written straight into the store as
// an earlier server would have. The state read before any window of the
// run then returns four entities a pod, as on a real cluster, not only the
// run's own.
func writeHistory(ctx context.Context, dsn string, nodes int, m Model, at time.Time, logf func(string, ...any)) (int64, error) {
	st, err := store.OpenPostgres(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	var n int64
	batch := make([]event.Event, 0, 5000)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := st.Append(ctx, batch); err != nil {
			return fmt.Errorf("writing the cluster's history: %w", err)
		}
		n += int64(len(batch))
		if n%100000 < int64(len(batch)) {
			logf("  history: %d events", n)
		}
		batch = batch[:0]
		return nil
	}
	for node := range nodes {
		for slot := range m.PodsPerNode {
			p := runningPod(node, slot, m.PodsPerNode)
			t := at.Add(time.Duration(node*m.PodsPerNode+slot) * time.Microsecond)
			add := func(k event.Kind, dt time.Duration, on int, f func(*event.Event)) {
				e := event.Event{Kind: k, Source: event.SourceWatcher, Pod: p.ref, Workload: p.wl, Node: nodeName(on), Time: t.Add(dt).UnixNano()}
				if f != nil {
					f(&e)
				}
				e.Seal()
				batch = append(batch, e)
			}
			add(event.PodCreated, 0, p.node, func(e *event.Event) {
				e.Attrs = map[string]string{event.AttrCreationTimestamp: t.UTC().Truncate(time.Second).Format(time.RFC3339)}
			})
			add(event.ContainerStarted, 200*time.Millisecond, p.node, nil)
			add(event.PodReady, time.Second, p.node, func(e *event.Event) { e.Local = netip.AddrPortFrom(p.addr.Addr(), 0) })
			add(event.EndpointReady, time.Second+100*time.Millisecond, 0, func(e *event.Event) {
				e.Local, e.Service, e.Slice = p.addr, p.svc, p.svc+"-x7k2p"
				e.Attrs = map[string]string{event.AttrConditions: "ready,serving"}
			})
			if len(batch) >= cap(batch)-4 {
				if err := flush(); err != nil {
					return n, err
				}
			}
		}
	}
	return n, flush()
}
