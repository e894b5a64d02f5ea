package analysis

import (
	"context"
	"fmt"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// FindDisruptions lists the disruptions that overlap q's window, in order
// of their start, as the account groups them: the same disruptions, with
// the same IDs, triggers and pods, as the analysis of a window holding
// them reports (Result.Disruptions). q's Namespace and Workload narrow
// them. It reads, with Options.Lead of history before the window, the
// window's lifecycle (store.Query.Lifecycle: the pods' transitions, their
// main processes' signals and exits, the workload changes, the nodes'
// capabilities), in time order from one index of those rows alone: not
// the connections, nor the re-observed states, nor exec probes' exits.
// The disruptions are not analysed (AnalyzeDisruption fills one in).
func FindDisruptions(ctx context.Context, st store.Store, q store.Query, opts Options) ([]*Disruption, error) {
	o := opts.WithDefaults()
	read := event.Window{From: max(q.Window.From-int64(o.Lead), 0), To: q.Window.To}
	if q.Window.From == 0 {
		read.From = 0
	}
	scope := func(ns string, wl event.Workload) bool {
		if q.Namespace != "" && ns != q.Namespace {
			return false
		}
		return q.Workload.IsZero() || wl == q.Workload
	}
	var acct account
	al := NewAligner(o, nil, func(tl *PodTimeline) {
		if !tl.Ended() || !scope(tl.Pod.Namespace, event.Workload{Kind: tl.Kind, Name: tl.Name}) {
			return
		}
		e := *tl
		e.nEvents, e.events, e.Events = len(tl.events), nil, nil
		acct.end(&e)
	})
	al.WantPods(scope)
	add := func(e *event.Event) error {
		if e.Kind == event.WorkloadChanged && scope(e.Pod.Namespace, e.Workload) {
			acct.change(e)
		}
		return al.Add(e)
	}
	lq := store.Query{Window: read, Lifecycle: true, Namespace: q.Namespace, Workload: q.Workload}
	if q.Namespace == "" {
		if err := st.Scan(ctx, lq, add); err != nil {
			return nil, fmt.Errorf("reading the lifecycle: %w", err)
		}
	} else {
		// The nodes' capabilities name no namespace: which nodes mark
		// main processes (an exit elsewhere may be a probe's).
		var caps []event.Event
		cq := store.Query{Window: read, Lifecycle: true, Kinds: []event.Kind{event.KernelCapabilities}}
		if err := st.Scan(ctx, cq, func(e *event.Event) error {
			caps = append(caps, e.Clone())
			return nil
		}); err != nil {
			return nil, fmt.Errorf("reading the nodes' capabilities: %w", err)
		}
		err := st.Scan(ctx, lq, func(e *event.Event) error {
			for len(caps) > 0 && caps[0].Time <= e.Time {
				if err := add(&caps[0]); err != nil {
					return err
				}
				caps = caps[1:]
			}
			return add(e)
		})
		if err != nil {
			return nil, fmt.Errorf("reading the lifecycle: %w", err)
		}
		for i := range caps {
			if err := add(&caps[i]); err != nil {
				return nil, err
			}
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
