package analysis

import (
	"context"
	"fmt"
	"sort"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// Analyze reads the events of q's window from st (with Options.Lead of
// history before it and the lookahead after it) and analyses them with the
// default options. q's Namespace and Workload narrow the results, and
// Namespace the read too (see AnalyzeWith); Workload narrows no read:
// client failures carry no workload until they are aligned.
func Analyze(ctx context.Context, st store.Store, q store.Query) (*Result, error) {
	return AnalyzeWith(ctx, st, q, Options{})
}

// scanEvents reads the window for Analyze: decoding the store's rows on
// one core while the aligner runs on another (BenchmarkAnalyzeStore
// measures it against a plain Scan).
var scanEvents = store.ScanAhead

// AnalyzeWith is Analyze with options.
//
// A query for one namespace reads the state at the read's start of that
// namespace's entities alone, and leaves out the re-observed states
// (event.FlagObserved) of the other namespaces: what grows with the
// cluster's size and age, not with its changes (a 5,000-node report: 1.63
// against 7.52 s; docs/scale.md). Every transition of every namespace,
// every event that names none, and every client failure are still read, so
// a pod of another namespace that a failure could have gone to is known
// from its first change in the read on. Only the results of the other
// namespaces, which the query leaves out, differ (their counts in
// Result.Stats are of what was read). A pod of another namespace that took
// an address before the read began and has changed nothing since is
// unknown: a failure to that address then has no pod, and the report
// leaves it out, since a pod of the namespace that ended keeps no address
// from its re-observations but ready ones (see learnIPs;
// TestEndedPodKeepsNoReusedAddress).
func AnalyzeWith(ctx context.Context, st store.Store, q store.Query, opts Options) (*Result, error) {
	o := opts.WithDefaults()
	c := newCollector(o, q)
	al := NewAligner(o, c.failure, c.pod)
	al.WantPods(c.inScope)
	scan := store.Query{Window: event.Window{From: q.Window.From - int64(o.Lead)}, ObservedOnlyIn: q.Namespace}
	if scan.Window.From < 0 {
		scan.Window.From = 0
	}
	// The recorders' spans first: a failure is decided a Lookahead after
	// it, before the span that vouches for its time is read.
	to := int64(0)
	if q.Window.To != 0 {
		to = q.Window.To + int64(o.Lookahead)
	}
	cover, err := ReadCoverage(ctx, st, scan.Window.From, to)
	if err != nil {
		return nil, err
	}
	c.cover = cover
	al.SetCoverage(cover)
	// The state at the read's start, however old: a pod ready for a week,
	// an endpoint, the workload's last change.
	if scan.Window.From > 0 {
		seed, err := st.StateAt(ctx, scan.Window.From-1, q.Namespace)
		if err != nil {
			return nil, fmt.Errorf("reading the state at the window's start from %s: %w", st.Describe(), err)
		}
		for i := range seed {
			c.see(&seed[i])
			if err := al.Add(&seed[i]); err != nil {
				return nil, err
			}
		}
	}
	if q.Window.To != 0 {
		scan.Window.To = q.Window.To + int64(o.Lookahead) + 1
	}
	n := 0
	err = scanEvents(ctx, st, scan, func(e *event.Event) error {
		n++
		if n%65536 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		c.see(e)
		return al.Add(e)
	})
	if err != nil {
		return nil, fmt.Errorf("reading events from %s: %w", st.Describe(), err)
	}
	al.Flush()
	c.lags = al.DataplaneLags(q.Window)
	return c.result(al.Stats()), nil
}

// AnalyzeEvents analyses events held in memory (in any order; the slice is
// not modified), limited to q's window, namespace and workload.
func AnalyzeEvents(events []event.Event, q store.Query, opts Options) (*Result, error) {
	o := opts.WithDefaults()
	idx := make([]int32, len(events))
	for i := range idx {
		idx[i] = int32(i)
	}
	sort.SliceStable(idx, func(i, j int) bool { return events[idx[i]].Time < events[idx[j]].Time })
	c := newCollector(o, q)
	al := NewAligner(o, c.failure, c.pod)
	al.WantPods(c.inScope)
	c.cover = NewCoverage()
	for i := range events {
		c.cover.Add(&events[i])
	}
	al.SetCoverage(c.cover)
	for _, i := range idx {
		c.see(&events[i])
		if err := al.Add(&events[i]); err != nil {
			return nil, err
		}
	}
	al.Flush()
	c.lags = al.DataplaneLags(q.Window)
	return c.result(al.Stats()), nil
}
