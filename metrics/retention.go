package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/drainscope/drainscope/store"
)

// retentionMetrics reads a store.Retention's counters at scrape time.
type retentionMetrics struct {
	mu    sync.Mutex
	stats func() store.RetentionStats

	keep, last, runs, failures, events, partitions *prometheus.Desc
}

func (m *Metrics) registerRetention() {
	r := &m.retention
	r.keep = m.desc("store_retention_seconds", "Age past which this process prunes events from the store (absent where it does not prune).")
	r.last = m.desc("store_prune_last_success_timestamp_seconds", "Unix time at which this process last pruned the store successfully (or found another process pruning it); 0 before the first pass.")
	r.runs = m.desc("store_prune_runs_total", "Pruning passes that succeeded.")
	r.failures = m.desc("store_prune_failures_total", "Pruning passes that failed; each is retried at the next pass.")
	r.events = m.desc("store_pruned_events_total", "Events removed from the store by retention.")
	r.partitions = m.desc("store_pruned_partitions_total", "Postgres day partitions dropped by retention.")
	m.reg.MustRegister(&funcCollector{
		descs:   []*prometheus.Desc{r.keep, r.last, r.runs, r.failures, r.events, r.partitions},
		collect: r.collect,
	})
}

// WatchRetention reports a store.Retention's counters at every scrape:
// drainscope_store_retention_seconds, drainscope_store_prune_*.
func (m *Metrics) WatchRetention(stats func() store.RetentionStats) {
	m.retention.mu.Lock()
	defer m.retention.mu.Unlock()
	m.retention.stats = stats
}

func (r *retentionMetrics) collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	stats := r.stats
	r.mu.Unlock()
	if stats == nil {
		return
	}
	s := stats()
	if s.Keep <= 0 {
		return
	}
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	c := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	g(r.keep, s.Keep.Seconds())
	last := 0.0
	if !s.LastSuccess.IsZero() {
		last = float64(s.LastSuccess.UnixNano()) / 1e9
	}
	g(r.last, last)
	c(r.runs, float64(s.Runs))
	c(r.failures, float64(s.Failures))
	c(r.events, float64(s.Events))
	c(r.partitions, float64(s.Partitions))
}
