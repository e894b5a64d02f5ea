package metrics

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// checkMetrics export drainscope check's verdicts (analysis.Check), made
// every CheckOptions.Every over the last CheckOptions.Window of the store:
// which workloads' next rollout will drop requests, and by how much their
// preStop falls short.
type checkMetrics struct {
	mu     sync.Mutex
	checks []analysis.WorkloadCheck
	last   time.Time

	risk, margin, lastRun *prometheus.Desc
}

func (m *Metrics) registerChecks() {
	c := &m.checks
	c.risk = m.desc("workload_rollout_risk", "1 for each reason a workload's next rollout will drop requests (drainscope check): endpoint_race (its preStop waits less than endpoints took to leave rotation), prestop_failed (its preStop failed at its last stop), sigkill (its grace period is shorter than its preStop and drain); 0 for a workload checked and found safe (reason \"\").",
		"namespace", "workload", "reason")
	c.margin = m.desc("workload_prestop_margin_seconds", "A workload's preStop wait minus the p99 time endpoints took to leave rotation after a deletion (drainscope check); negative: its next rollout races the endpoints' removal.",
		"namespace", "workload")
	c.lastRun = m.desc("workload_check_last_run_timestamp_seconds", "Unix time of the last check of the workloads' termination budgets; 0 before the first.")
	m.reg.MustRegister(&funcCollector{descs: []*prometheus.Desc{c.risk, c.margin, c.lastRun}, collect: c.collect})
}

func (c *checkMetrics) collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	checks, last := c.checks, c.last
	c.mu.Unlock()
	ts := 0.0
	if !last.IsZero() {
		ts = float64(last.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(c.lastRun, prometheus.GaugeValue, ts)
	for _, w := range checks {
		wl := event.Workload{Kind: w.Kind, Name: w.Name}.String()
		if len(w.Reasons) == 0 {
			ch <- prometheus.MustNewConstMetric(c.risk, prometheus.GaugeValue, 0, w.Namespace, wl, "")
		}
		for _, r := range w.Reasons {
			ch <- prometheus.MustNewConstMetric(c.risk, prometheus.GaugeValue, 1, w.Namespace, wl, r)
		}
		if w.Wait != nil && w.Lag >= 0 {
			ch <- prometheus.MustNewConstMetric(c.margin, prometheus.GaugeValue, float64(*w.Wait)-float64(w.Lag)/1e9, w.Namespace, wl)
		}
	}
}

// CheckOptions tune RunChecks.
type CheckOptions struct {
	Every  time.Duration // default 10 minutes
	Window time.Duration // the history measured over; default 6 hours
	Log    *slog.Logger
}

// RunChecks checks every workload's termination budget against the last
// Window of st every Every until ctx ends, for the drainscope_workload_*
// series. A check that fails keeps the last verdicts and is logged.
func (m *Metrics) RunChecks(ctx context.Context, st store.Store, o CheckOptions) {
	if o.Every <= 0 {
		o.Every = 10 * time.Minute
	}
	if o.Window <= 0 {
		o.Window = 6 * time.Hour
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	run := func() {
		now := time.Now()
		q := store.Query{Window: event.Window{From: now.Add(-o.Window).UnixNano(), To: now.UnixNano()}}
		checks, _, err := analysis.Check(ctx, st, q, analysis.Options{NoEventViews: true})
		if err != nil {
			if ctx.Err() == nil {
				o.Log.Warn("checking the workloads' termination budgets", "err", err)
			}
			return
		}
		m.checks.mu.Lock()
		m.checks.checks, m.checks.last = checks, now
		m.checks.mu.Unlock()
	}
	repeat(ctx, o.Every, run)
}

// repeat calls fn now and every d until ctx ends.
func repeat(ctx context.Context, d time.Duration, fn func()) {
	fn()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
