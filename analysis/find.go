package analysis

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// lifecycleKinds are what a pod's end is read from: its lifecycle, its
// endpoints (its removal ends it) and its processes' signals, exits and
// listener. Its connections are not: they tell what failed, not what
// ended.
var lifecycleKinds = []event.Kind{
	event.PodCreated, event.PodDeletion, event.PodReady, event.PodNotReady, event.PodFinished,
	event.ContainerStarted, event.ContainerTerminated,
	event.EndpointAdded, event.EndpointReady, event.EndpointNotReady, event.EndpointServing,
	event.EndpointNotServing, event.EndpointTerminating, event.EndpointRemoved,
	event.Signal, event.ProcessExit, event.ListenerClosed,
}

// FindDisruptions lists the disruptions that overlap q's window, in order
// of their start, as the account groups them: the same disruptions, with
// the same IDs, triggers and pods, as the analysis of a window holding
// them reports (Result.Disruptions). q's Namespace and Workload narrow
// them. It reads, with Options.Lead of history before the window, the
// lifecycle events of the pods the store says may have ended
// (Store.EndingPods), the workload changes and the nodes' capabilities:
// not the connections, nor the pods that only ran. The disruptions are
// not analysed (AnalyzeDisruption fills one in).
func FindDisruptions(ctx context.Context, st store.Store, q store.Query, opts Options) ([]*Disruption, error) {
	o := opts.WithDefaults()
	read := event.Window{From: max(q.Window.From-int64(o.Lead), 0), To: q.Window.To}
	if q.Window.From == 0 {
		read.From = 0
	}
	uids, err := st.EndingPods(ctx, store.Query{Window: read, Namespace: q.Namespace, Workload: q.Workload})
	if err != nil {
		return nil, fmt.Errorf("finding the pods that ended: %w", err)
	}
	var evs []event.Event
	keep := func(e *event.Event) error {
		evs = append(evs, e.Clone())
		return nil
	}
	// The workload changes, and the capabilities that say which nodes
	// mark main processes (an exit elsewhere may be a probe's).
	if err := st.Scan(ctx, store.Query{Window: read, Kinds: []event.Kind{event.WorkloadChanged}, Namespace: q.Namespace, Workload: q.Workload}, keep); err != nil {
		return nil, fmt.Errorf("reading workload changes: %w", err)
	}
	if err := st.Scan(ctx, store.Query{Window: read, Kinds: []event.Kind{event.KernelCapabilities}}, keep); err != nil {
		return nil, fmt.Errorf("reading the nodes' capabilities: %w", err)
	}
	// The pods in chunks: a SQL statement takes a bounded number of
	// parameters.
	const chunk = 500
	for i := 0; i < len(uids); i += chunk {
		pq := store.Query{Window: read, Kinds: lifecycleKinds, PodUIDs: uids[i:min(i+chunk, len(uids))]}
		if err := st.Scan(ctx, pq, keep); err != nil {
			return nil, fmt.Errorf("reading the lifecycle of the pods that ended: %w", err)
		}
	}
	slices.SortStableFunc(evs, func(a, b event.Event) int { return cmp.Compare(a.Time, b.Time) })

	var acct account
	scope := func(ns string, wl event.Workload) bool {
		if q.Namespace != "" && ns != q.Namespace {
			return false
		}
		return q.Workload.IsZero() || wl == q.Workload
	}
	al := NewAligner(o, nil, func(tl *PodTimeline) {
		if !tl.Ended() || !scope(tl.Pod.Namespace, event.Workload{Kind: tl.Kind, Name: tl.Name}) {
			return
		}
		e := *tl
		e.nEvents, e.events, e.Events = len(tl.events), nil, nil
		acct.end(&e)
	})
	al.WantPods(scope)
	for i := range evs {
		e := &evs[i]
		if e.Kind == event.WorkloadChanged && scope(e.Pod.Namespace, e.Workload) {
			acct.change(e)
		}
		if err := al.Add(e); err != nil {
			return nil, err
		}
	}
	al.Flush()
	var out []*Disruption
	for _, g := range acct.disruptions() {
		d := g.d
		if q.Window.To != 0 && d.From >= q.Window.To || d.Until < q.Window.From {
			continue
		}
		d.next = g.next
		d.FailureCounts = newFailureCounts()
		d.NewPods, d.Causes, d.Explained = []NewPod{}, []DisruptionCause{}, []AlignedFailure{}
		out = append(out, d)
	}
	return out, nil
}
