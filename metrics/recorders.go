package metrics

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// recorderMetrics follow the agents' recorder_coverage spans in the
// store (docs/reliability.md): a node whose agent has stopped writing
// them, without saying it stopped, has a gap growing in its record, and
// the failures there will be unexplained.
type recorderMetrics struct {
	mu     sync.Mutex
	last   map[string]recorderLast // node → its newest span
	polled time.Time

	age *prometheus.Desc
}

type recorderLast struct {
	at       int64         // the span's end
	interval time.Duration // the agent's --coverage-interval
	stopped  bool          // the span said the agent stopped
}

// recorderForget is how long a node that went silent stays listed: a
// node removed from the cluster without its agent's stop leaves then.
const recorderForget = time.Hour

func (m *Metrics) registerRecorders() {
	c := &m.recorders
	c.age = m.desc("recorder_span_age_intervals", "On the server: how many of its agent's coverage intervals ago a node's newest stored recorder_coverage span ended, for nodes whose agent has not said it stopped (silent ones listed up to an hour). Above 2 or 3, the node's record has a gap: its agent is not running or cannot reach the store, and failures there are unexplained.",
		"node")
	m.reg.MustRegister(&funcCollector{descs: []*prometheus.Desc{c.age}, collect: c.collect})
}

func (c *recorderMetrics) collect(ch chan<- prometheus.Metric) {
	now := time.Now().UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	for node, l := range c.last {
		age := now - l.at
		if l.stopped || age > int64(recorderForget) || l.interval <= 0 {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, float64(max(age, 0))/float64(l.interval), node)
	}
}

// keepNewest keeps e in newest if it is its node's newest span.
func keepNewest(newest map[string]recorderLast, e *event.Event) {
	if e.Kind != event.RecorderCoverage || e.Node == "" {
		return
	}
	if l, ok := newest[e.Node]; ok && l.at >= e.Time {
		return
	}
	iv, _ := time.ParseDuration(e.Attrs[event.AttrInterval])
	newest[e.Node] = recorderLast{at: e.Time, interval: iv, stopped: e.Reason == event.CoverStopped}
}

// RunRecorders reads the spans stored since its last read every `every`
// until ctx ends (the first read: the last recorderForget), for
// drainscope_recorder_span_age_intervals. A read that fails is logged
// and tried again at the next.
func (m *Metrics) RunRecorders(ctx context.Context, st store.Store, every time.Duration, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &m.recorders
	read := func() {
		now := time.Now()
		c.mu.Lock()
		from := c.polled
		c.mu.Unlock()
		if from.IsZero() {
			from = now.Add(-recorderForget)
		}
		// A span's time is its end, written up to a flush after it; an
		// agent that could not reach the store writes older ones late,
		// which only matter if they are its newest.
		q := store.Query{Kinds: []event.Kind{event.RecorderCoverage}, Window: event.Window{From: from.Add(-2 * every).UnixNano()}}
		newest := map[string]recorderLast{} // one entry a node, however many spans
		err := st.Scan(ctx, q, func(e *event.Event) error {
			keepNewest(newest, e)
			return nil
		})
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("reading the recorders' coverage spans", "err", err)
			}
			return
		}
		c.mu.Lock()
		if c.last == nil {
			c.last = make(map[string]recorderLast, len(newest))
		}
		for node, l := range newest {
			if cur, ok := c.last[node]; !ok || l.at > cur.at {
				c.last[node] = l
			}
		}
		c.polled = now
		c.mu.Unlock()
	}
	repeat(ctx, every, read)
}
