package metrics

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
)

// RolloutOptions tune a Rollouts.
type RolloutOptions struct {
	// Delay is how long events wait to be put in time order before they
	// are analysed: the kernel capture emits its events up to ~150 ms late
	// and the watcher at once, and the agents store them in batches (Tail
	// reads them from the store). Default 3 s; drainscope serve uses 10 s.
	// Events later than that are left out of the signals and counted
	// (drainscope_rollout_late_events_total).
	Delay time.Duration
	// Tick is how often held events are analysed. Default 500 ms.
	Tick time.Duration
	// Analysis configures the aligner. Retain defaults to 30 s here: a
	// pod's signals are reported that long after its last event.
	Analysis analysis.Options
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Observer, when set, is told each signal as it is counted, beside
	// the Prometheus series (the OTLP exporter sends them on).
	Observer RolloutObserver
}

// GapBuckets are the bucket bounds, in seconds, of SIGTERM minus the
// endpoint's removal (drainscope_rollout_sigterm_minus_endpoint_removal_seconds).
var GapBuckets = []float64{-30, -10, -5, -2, -1, -0.5, -0.25, -0.1, 0, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30}

// RolloutObserver takes the rollout signals as Rollouts counts them, per
// namespace and workload (Kind/Name).
type RolloutObserver interface {
	Termination(ns, workload string)
	SigtermAfterRotation(ns, workload string, seconds float64)
	CutAtExit(ns, workload string, connections int)
	SIGKILLAfterGrace(ns, workload string)
	InferredFailure(ns, workload, cause, evidence string)
}

// Rollouts turns a stream of every node's events (Tail reads it from the
// store) into the per-workload rollout signals. It runs the analysis's streaming aligner on the events in time
// order: each terminated pod's timeline (reported once the pod has been
// quiet for Analysis.Retain) gives the SIGTERM-versus-endpoint-removal gap,
// the connections cut at exit and a SIGKILL after deletion; each failure
// the aligner infers from kernel events is counted by cause.
type Rollouts struct {
	m    *Metrics
	opts RolloutOptions

	mu   sync.Mutex
	held []event.Event
	// mark is the time up to which events have been analysed; the aligner
	// refuses anything older.
	mark int64

	runMu sync.Mutex // serialises analysis: the ticker and Flush
	al    *analysis.Aligner
	// known are the workloads whose series exist (under runMu).
	known map[[2]string]bool
}

// NewRollouts returns a Rollouts reporting to m. Call Run to analyse
// periodically, or Flush.
func (m *Metrics) NewRollouts(o RolloutOptions) *Rollouts {
	if o.Delay <= 0 {
		o.Delay = 3 * time.Second
	}
	if o.Tick <= 0 {
		o.Tick = 500 * time.Millisecond
	}
	if o.Analysis.Retain == 0 {
		o.Analysis.Retain = 30 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	r := &Rollouts{m: m, opts: o, known: map[[2]string]bool{}}
	r.al = analysis.NewAligner(o.Analysis, r.onFailure, r.onPod)
	return r
}

// Add queues an event; safe from any goroutine. The event is copied; its
// Attrs map is shared and must not be modified afterwards.
func (r *Rollouts) Add(e *event.Event) {
	r.mu.Lock()
	if e.Time <= r.mark {
		r.mu.Unlock()
		r.m.lateEvents.Inc()
		return
	}
	r.held = append(r.held, *e)
	r.mu.Unlock()
}

// Run analyses the held events every Tick until ctx ends, then flushes.
func (r *Rollouts) Run(ctx context.Context) {
	t := time.NewTicker(r.opts.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			r.Flush()
			return
		case <-t.C:
			r.advance(r.opts.Now().Add(-r.opts.Delay).UnixNano())
		}
	}
}

// Flush analyses every held event and reports every pod still known, as at
// the end of the stream. Later events still count, from a clean state.
func (r *Rollouts) Flush() {
	r.runMu.Lock()
	defer r.runMu.Unlock()
	r.mu.Lock()
	batch := r.held
	r.held = nil
	if n := len(batch); n > 0 {
		slices.SortStableFunc(batch, func(a, b event.Event) int { return cmp.Compare(a.Time, b.Time) })
		r.mark = max(r.mark, batch[n-1].Time)
	}
	r.mu.Unlock()
	for i := range batch {
		r.add(&batch[i])
	}
	r.al.Flush()
	r.al = analysis.NewAligner(r.opts.Analysis, r.onFailure, r.onPod)
}

// advance analyses the held events up to the time until, in time order,
// and moves the aligner's clock there so that failures get decided and
// quiet pods reported even when no event comes.
func (r *Rollouts) advance(until int64) {
	r.runMu.Lock()
	defer r.runMu.Unlock()
	r.mu.Lock()
	if until <= r.mark {
		r.mu.Unlock()
		return
	}
	// Take the held events and sort them outside the lock Add takes for
	// every event; what arrives meanwhile is newer than the new mark.
	held := r.held
	r.held = nil
	r.mark = until
	r.mu.Unlock()
	slices.SortStableFunc(held, func(a, b event.Event) int { return cmp.Compare(a.Time, b.Time) })
	n := 0
	for n < len(held) && held[n].Time <= until {
		n++
	}
	batch := held[:n]
	if n < len(held) {
		r.mu.Lock()
		r.held = append(r.held, held[n:]...)
		r.mu.Unlock()
	}
	for i := range batch {
		r.add(&batch[i])
	}
	// A clock tick: an event of no pod, service or connection moves the
	// aligner's time without adding evidence.
	tick := event.Event{Time: until, Kind: event.PodCreated}
	r.add(&tick)
}

func (r *Rollouts) add(e *event.Event) {
	if e.Kind == event.PodDeletion || e.Kind == event.Signal {
		r.initSeries(e.Pod.Namespace, e.Workload.String())
	}
	if err := r.al.Add(e); err != nil {
		r.m.lateEvents.Inc()
	}
}

// inferredCauses are the causes a pod's kernel events alone can prove or
// make likely.
var inferredCauses = []analysis.Cause{analysis.CauseEndpointRace, analysis.CauseKeepAliveAtExit, analysis.CauseInFlight, analysis.CauseSIGKILL}

// initSeries creates a workload's signal series at zero when one of its
// pods begins to end, well before its signals are reported (Retain after
// the pod's last event): Prometheus's increase() sees no increase in a
// series whose first sample is already 1, so an alert on the first race
// of a workload, or the first after a restart, would never fire.
func (r *Rollouts) initSeries(ns, wl string) {
	k := [2]string{ns, wl}
	if ns == "" || r.known[k] {
		return
	}
	r.known[k] = true
	r.m.terminations.WithLabelValues(ns, wl)
	r.m.gap.WithLabelValues(ns, wl)
	r.m.cutAtExit.WithLabelValues(ns, wl)
	r.m.sigkills.WithLabelValues(ns, wl)
	for _, c := range inferredCauses {
		for _, ev := range []string{"proven", "likely"} {
			r.m.inferred.WithLabelValues(ns, wl, string(c), ev)
		}
	}
}

func (r *Rollouts) onFailure(d *analysis.Decision) {
	if !d.Inferred {
		return
	}
	ns, wl := d.Pod.Namespace, d.Workload.String()
	if ns == "" {
		ns = d.Failure.Pod.Namespace
	}
	evidence := "proven"
	if analysis.LikelyProof(d.Proof) {
		evidence = "likely"
	}
	r.m.inferred.WithLabelValues(ns, wl, string(d.Cause()), evidence).Inc()
	if o := r.opts.Observer; o != nil {
		o.InferredFailure(ns, wl, string(d.Cause()), evidence)
	}
}

func (r *Rollouts) onPod(t *analysis.PodTimeline) {
	if !t.Ended() {
		return
	}
	ns, wl := t.Pod.Namespace, t.Workload
	o := r.opts.Observer
	r.m.terminations.WithLabelValues(ns, wl).Inc()
	if o != nil {
		o.Termination(ns, wl)
	}
	if g := t.Gaps.SigtermAfterRotation; g != nil {
		r.m.gap.WithLabelValues(ns, wl).Observe(time.Duration(*g).Seconds())
		if o != nil {
			o.SigtermAfterRotation(ns, wl, time.Duration(*g).Seconds())
		}
	}
	if c := t.Connections; c != nil && c.ByExit > 0 {
		r.m.cutAtExit.WithLabelValues(ns, wl).Add(float64(c.ByExit))
		if o != nil {
			o.CutAtExit(ns, wl, c.ByExit)
		}
	}
	if t.Deletion != 0 && killed(t) {
		r.m.sigkills.WithLabelValues(ns, wl).Inc()
		if o != nil {
			o.SIGKILLAfterGrace(ns, wl)
		}
	}
}

// killed reports whether the pod was SIGKILLed when its grace period ran
// out: the kernel saw the signal, the process exited by it, or the
// container status says so (exit code 137), at the end of the grace period
// (which counts from the deletion, before preStop) or later. A SIGKILL
// well inside the grace period is something else (an OOM kill, a runtime
// cleaning up) and is not counted.
func killed(t *analysis.PodTimeline) bool {
	due := t.Deletion
	if t.GracePeriod > 0 {
		due += t.GracePeriod - max(int64(time.Second), t.GracePeriod/10)
	}
	switch {
	case t.Kill != nil && t.Kill.Time >= due:
		return true
	case t.Exit != nil && t.Exit.Signal == "SIGKILL" && t.Exit.Time >= due:
		return true
	case t.Terminated != nil && (t.Terminated.Signal == "SIGKILL" || t.Terminated.Code == 137) && t.Terminated.Time >= due:
		return true
	}
	return false
}
