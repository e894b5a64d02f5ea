// Package metrics is drainscope's Prometheus instrumentation, shared by the
// agent and the server. It measures what was recorded, dropped and stored, how
// the store and the watches behave, and the rollout health signals SREs alert
// on (per workload: SIGTERM versus endpoint removal, connections cut at exit,
// SIGKILLs after the grace period, failures inferred from the kernel). New
// builds one registry; Handler serves it; the agent feeds events to Observe
// and registers scrape-time readers of its components' counters with the
// Watch* methods; the server computes the rollout signals with a Rollouts
// tailing the store (Rollouts.Tail), where every node's events meet. Catalog
// lists every metric name, which the alert rules in deploy/ are checked
// against.
package metrics

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// Namespace prefixes every metric name.
const Namespace = "drainscope"

// Metrics holds one registry and drainscope's collectors on it. Its
// methods are safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	observed      *prometheus.CounterVec
	stored        *prometheus.CounterVec
	writeDuration *prometheus.HistogramVec

	gap          *prometheus.HistogramVec
	cutAtExit    *prometheus.CounterVec
	sigkills     *prometheus.CounterVec
	inferred     *prometheus.CounterVec
	terminations *prometheus.CounterVec
	lateEvents   prometheus.Counter
	dataplaneLag *prometheus.HistogramVec

	httpRequests *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec
	agentStages  *prometheus.HistogramVec

	// observedFast caches the counter of each (source, kind), so Observe
	// does no label hashing on the hot path.
	mu           sync.RWMutex
	observedFast map[[2]string]prometheus.Counter

	// Scrape-time sources, set by the Watch methods.
	sd          scrapeDescs
	writerStats func() store.WriterStats
	writerLimit int
	kernelStats func() (KernelStats, bool)
	evidence    map[string]bool // kernel evidence this node can (true) or cannot see
	watchStats  func() WatchStats
	flight      func() FlightStats
	ready       func() bool
	retention   retentionMetrics
	checks      checkMetrics
	recorders   recorderMetrics

	names []string
}

// New returns Metrics on a new registry holding the Go runtime and process
// collectors and drainscope_build_info{component, version}.
func New(component, version string) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{reg: reg, observedFast: map[[2]string]prometheus.Counter{}}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "build_info",
		Help:        "Always 1; the labels name the drainscope component and version.",
		ConstLabels: prometheus.Labels{"component": component, "version": version},
	})
	info.Set(1)
	reg.MustRegister(info)

	m.names = append(m.names, Namespace+"_build_info")
	f := factory{m}
	m.observed = f.counterVec("events_observed_total",
		"Events observed, by source (watcher, kernel, client, lab) and kind; on an agent, before its flight recorder holds ordinary connection closes (drainscope_flight_events_total), so more than reach the store writer.",
		"source", "kind")
	m.stored = f.counterVec("events_stored_total",
		"Events the store accepted, by kind.", "kind")
	m.writeDuration = f.histogramVec("store_write_duration_seconds",
		"Duration of one batched write to the store, by outcome (ok, error).",
		[]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}, "outcome")

	m.gap = f.histogramVec("rollout_sigterm_minus_endpoint_removal_seconds",
		"Per terminated pod: SIGTERM time minus the time its endpoint left rotation (not ready, terminating or removed) on the last node that observed it. Negative: SIGTERM came while the endpoint was still routed to, the endpoint-removal race.",
		GapBuckets, "namespace", "workload")
	m.cutAtExit = f.counterVec("rollout_connections_cut_at_exit_total",
		"Connections open at SIGTERM that the process's exit closed (keep-alive connections a client may still have used), per workload.",
		"namespace", "workload")
	m.sigkills = f.counterVec("rollout_sigkills_after_grace_total",
		"Pods killed by SIGKILL after their deletion: the grace period ran out before the process exited.",
		"namespace", "workload")
	m.inferred = f.counterVec("rollout_inferred_failures_total",
		"Client failures inferred from the pods' kernel events alone, by the cause the analysis named; evidence is proven (refused SYNs while in rotation, resets on closed connections, resets with unread data) or likely (keep-alive connections in use that the exit closed, refused SYNs within the proxy lag).",
		"namespace", "workload", "cause", "evidence")
	m.terminations = f.counterVec("rollout_pod_terminations_total",
		"Pod terminations seen to the end (deleted, signalled or exited), per workload: the denominator of the signals above.",
		"namespace", "workload")
	m.lateEvents = f.counter("rollout_late_events_total",
		"Events that reached the rollout signal computation later than its reordering delay and were left out of the signals (they are still stored).")

	m.dataplaneLag = f.histogramVec("dataplane_lag_seconds",
		"Per endpoint leaving rotation: the time from the watch seeing it leave (not ready, terminating or removed) to this node's proxy rules dropping it (kube-proxy nftables mode), by node: what a preStop sleep must exceed.",
		[]float64{.005, .01, .025, .05, .1, .15, .2, .3, .5, .75, 1, 1.25, 1.5, 2, 3, 5, 10, 30}, "node")

	m.httpRequests = f.counterVec("http_requests_total",
		"HTTP requests served, by handler name, method and status code.", "handler", "method", "code")
	m.httpDuration = f.histogramVec("http_request_duration_seconds",
		"Duration of HTTP requests, by handler name.", prometheus.DefBuckets, "handler")
	m.agentStages = f.histogramVec("agent_batch_stage_seconds",
		"On the server: how long each stage of an agent's batch took, by stage: review (its token's TokenReview, or the cache), slot (waiting for one of the slots, 2 s at most, then 429), body (receiving and decoding), check (the node check, placing the pods), queue (waiting for a merged store write to take it), write (that write). What holds the slots when agents are answered 429.",
		[]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}, "stage")
	m.registerScrape()
	m.registerRetention()
	m.registerChecks()
	m.registerRecorders()
	return m
}

// ObserveAgentStage records one stage of an agent's batch (relay.Handler's
// Stages).
func (m *Metrics) ObserveAgentStage(stage string, d time.Duration) {
	m.agentStages.WithLabelValues(stage).Observe(d.Seconds())
}

// Registry is the registry, for registering more collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats. Mount
// it at /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		Registry:          m.reg, // promhttp's own error counters
		EnableOpenMetrics: true,
		Timeout:           10 * time.Second,
	})
}

// ObserveDataplaneLag records one endpoint's watch → dataplane lag on node.
func (m *Metrics) ObserveDataplaneLag(node string, lag time.Duration) {
	m.dataplaneLag.WithLabelValues(node).Observe(lag.Seconds())
}

// Observe counts one event handed to the store.
func (m *Metrics) Observe(e *event.Event) {
	key := [2]string{string(e.Source), string(e.Kind)}
	m.mu.RLock()
	c, ok := m.observedFast[key]
	m.mu.RUnlock()
	if !ok {
		c = m.observed.WithLabelValues(key[0], key[1])
		m.mu.Lock()
		m.observedFast[key] = c
		m.mu.Unlock()
	}
	c.Inc()
}

// InstrumentHTTP counts and times the requests h serves under name.
func (m *Metrics) InstrumentHTTP(name string, h http.Handler) http.Handler {
	dur := m.httpDuration.MustCurryWith(prometheus.Labels{"handler": name})
	cnt := m.httpRequests.MustCurryWith(prometheus.Labels{"handler": name})
	return promhttp.InstrumentHandlerDuration(dur, promhttp.InstrumentHandlerCounter(cnt, h))
}

// WrapStore returns st with its Append calls timed and the events they
// stored counted by kind. Everything else passes through, the rollout
// digests (store.Digests) too when st keeps them: without them the web
// server behind drainscope serve analysed every rollout again in each
// fresh process.
func (m *Metrics) WrapStore(st store.Store) store.Store {
	is := &instrumentedStore{Store: st, m: m}
	if d, ok := st.(store.Digests); ok {
		return &instrumentedDigestStore{instrumentedStore: is, Digests: d}
	}
	return is
}

type instrumentedDigestStore struct {
	*instrumentedStore
	store.Digests
}

type instrumentedStore struct {
	store.Store
	m *Metrics
}

func (s *instrumentedStore) Append(ctx context.Context, batch []event.Event) error {
	start := time.Now()
	err := s.Store.Append(ctx, batch)
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	s.m.writeDuration.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
	if err == nil {
		// Count runs of one kind at a time: batches are mostly a few kinds.
		for i := 0; i < len(batch); {
			j := i + 1
			for j < len(batch) && batch[j].Kind == batch[i].Kind {
				j++
			}
			s.m.stored.WithLabelValues(string(batch[i].Kind)).Add(float64(j - i))
			i = j
		}
	}
	return err
}

// WatchWriter reports a store.Writer's counters at every scrape:
// drainscope_store_backlog_events, drainscope_store_buffer_limit_events,
// drainscope_store_write_failures_total, drainscope_store_events_written_total
// and drainscope_events_dropped_total{reason="buffer_full"} and
// {reason="rejected_row"}.
func (m *Metrics) WatchWriter(limit int, stats func() store.WriterStats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writerLimit, m.writerStats = limit, stats
}

// Reasons of drainscope_events_dropped_total.
const (
	DropBufferFull  = "buffer_full"  // the store writer's buffer was at its bound
	DropRejectedRow = "rejected_row" // the store refused the event itself (see store.RowLevel)
	DropRingBuffer  = "ring_buffer"  // the kernel found the BPF ring buffer full
	DropDecodeError = "decode_error"
)

// KernelStats are the kernel capture's counters, as the agent reads them.
type KernelStats struct {
	Produced, Dropped map[event.Kind]uint64 // per kind, since load
	DecodeErrors      uint64
	UnresolvedCgroups uint64
	ClockUncertainty  time.Duration
	ProgramsLoaded    int
	TrackedNetNS      int
}

// WatchKernel reports the kernel capture's counters at every scrape; stats
// returns false while there is nothing to report.
func (m *Metrics) WatchKernel(stats func() (KernelStats, bool)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kernelStats = stats
}

// SetKernelEvidence reports drainscope_kernel_evidence_available: for each
// kind of kernel evidence, whether this node's kernel lets the capture see
// it (probed once, when the programs load).
func (m *Metrics) SetKernelEvidence(available map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.evidence = available
}

// WatchStats are the Kubernetes watches' counters, as the agent reads them.
type WatchStats struct {
	Restarts      uint64 // broken watches, resumed
	Relists       uint64 // complete lists after the first
	RelistEvents  uint64 // transitions recovered by diffing a relist
	Pods          int
	Endpoints     int
	SliceRecorder bool // this process records EndpointSlice transitions
	Synced        bool
}

// WatchWatches reports the watches' counters at every scrape.
func (m *Metrics) WatchWatches(stats func() WatchStats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.watchStats = stats
}

// FlightStats are the flight recorder's counts of connection events (see
// package flight): held in its ring, persisted from it at a disruption,
// discarded from it unread, passed at once during a disruption.
type FlightStats struct {
	Held, Persisted, Discarded, Passed uint64
}

// Outcomes of drainscope_flight_events_total.
const (
	FlightHeld      = "held"
	FlightPersisted = "persisted"
	FlightDiscarded = "discarded"
	FlightPassed    = "passed"
)

// WatchFlight reports the flight recorder's counts at every scrape as
// drainscope_flight_events_total{outcome}.
func (m *Metrics) WatchFlight(stats func() FlightStats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.flight = stats
}

// WatchReady reports drainscope_ready: 1 while ready() holds.
func (m *Metrics) WatchReady(ready func() bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ready = ready
}

// scrapeDescs are the metrics read from the components at scrape time.
type scrapeDescs struct {
	dropped                                                  *prometheus.Desc
	backlog, limit, failures, written                        *prometheus.Desc
	produced, kdropped, unresolved, clock, programs, netns   *prometheus.Desc
	restarts, relists, relistEv, pods, eps, recorder, synced *prometheus.Desc
	ready                                                    *prometheus.Desc
	evidence                                                 *prometheus.Desc
	flight                                                   *prometheus.Desc
}

func (m *Metrics) registerScrape() {
	d := &m.sd
	d.dropped = m.desc("events_dropped_total",
		"Events lost, by reason: buffer_full (the store writer's bound was reached during a store outage), rejected_row (the store refused the event itself, e.g. invalid text; logged), ring_buffer (the BPF ring buffer was full), decode_error.",
		"reason")
	d.backlog = m.desc("store_backlog_events", "Events held in memory by the store writer, not yet written (they survive a database outage up to the buffer limit).")
	d.limit = m.desc("store_buffer_limit_events", "The store writer's buffer bound; events past it are dropped and counted.")
	d.failures = m.desc("store_write_failures_total", "Failed batched writes to the store (each is retried; nothing is lost within the buffer bound).")
	d.written = m.desc("store_events_written_total", "Events the store writer has written.")
	d.produced = m.desc("kernel_records_produced_total", "Records the kernel programs produced (passed the in-kernel filter), by kind.", "kind")
	d.kdropped = m.desc("kernel_records_dropped_total", "Records lost because the BPF ring buffer was full, by kind.", "kind")
	d.unresolved = m.desc("kernel_unresolved_cgroups_total", "Cgroup ids whose path could not be found, so their events carry no pod.")
	d.clock = m.desc("kernel_clock_uncertainty_seconds", "Half-width of the window in which the monotonic-to-wall clock offset was sampled.")
	d.programs = m.desc("kernel_programs_loaded", "Kernel programs loaded and attached.")
	d.netns = m.desc("kernel_tracked_netns", "Pod network namespaces the kernel filter reports resets for.")
	d.restarts = m.desc("watch_restarts_total", "Kubernetes watches that broke and were resumed.")
	d.relists = m.desc("watch_relists_total", "Complete relists after the initial one (a watch too old to resume).")
	d.relistEv = m.desc("watch_relist_events_total", "Pod and endpoint transitions recovered by diffing a relist (their time is when they were noticed).")
	d.pods = m.desc("watch_pods", "Pods in the watch cache.")
	d.eps = m.desc("watch_endpoints", "Endpoints tracked across the watched EndpointSlices.")
	d.recorder = m.desc("endpointslice_recorder", "1 when this process records EndpointSlice transitions (always in all-nodes mode; the elected leader in leader mode).")
	d.synced = m.desc("watch_synced", "1 once the initial lists are in the cache.")
	d.evidence = m.desc("kernel_evidence_available", "1 when this node's kernel lets the capture see this kind of evidence, 0 when it cannot (e.g. refused_connections before Linux 6.10): its absence from a report then proves nothing.", "evidence")
	d.flight = m.desc("flight_events_total", "The flight recorder's connection closes (on a pod, not at its process's exit), by outcome: held (entered the in-memory ring of a calm pod), persisted (handed to the store at the pod's disruption: the ring's lead), discarded (aged out of the ring or past its bound, never stored), passed (stored at once: the pod was disrupted). Held − persisted − discarded are in the ring now.", "outcome")
	d.ready = m.desc("ready", "1 while the process is ready (caches synced, kernel programs loaded, not shutting down).")
	m.reg.MustRegister(&funcCollector{
		descs: []*prometheus.Desc{d.dropped, d.backlog, d.limit, d.failures, d.written,
			d.produced, d.kdropped, d.unresolved, d.clock, d.programs, d.netns,
			d.restarts, d.relists, d.relistEv, d.pods, d.eps, d.recorder, d.synced, d.ready, d.evidence, d.flight},
		collect: m.collectScrape,
	})
}

func (m *Metrics) collectScrape(ch chan<- prometheus.Metric) {
	m.mu.RLock()
	writer, limit, kernel, watches, ready, flight := m.writerStats, m.writerLimit, m.kernelStats, m.watchStats, m.ready, m.flight
	evidence := m.evidence
	m.mu.RUnlock()
	d := &m.sd
	c := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, v, labels...)
	}
	g := func(desc *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v)
	}
	if writer != nil {
		s := writer()
		g(d.backlog, float64(s.Pending))
		g(d.limit, float64(limit))
		c(d.failures, float64(s.Failures))
		c(d.written, float64(s.Written))
		c(d.dropped, float64(s.Dropped), DropBufferFull)
		c(d.dropped, float64(s.Rejected), DropRejectedRow)
	}
	if kernel != nil {
		if s, ok := kernel(); ok {
			var drops uint64
			for k, v := range s.Produced {
				c(d.produced, float64(v), string(k))
			}
			for k, v := range s.Dropped {
				drops += v
				c(d.kdropped, float64(v), string(k))
			}
			c(d.dropped, float64(drops), DropRingBuffer)
			c(d.dropped, float64(s.DecodeErrors), DropDecodeError)
			c(d.unresolved, float64(s.UnresolvedCgroups))
			g(d.clock, s.ClockUncertainty.Seconds())
			g(d.programs, float64(s.ProgramsLoaded))
			g(d.netns, float64(s.TrackedNetNS))
		}
	}
	if watches != nil {
		s := watches()
		c(d.restarts, float64(s.Restarts))
		c(d.relists, float64(s.Relists))
		c(d.relistEv, float64(s.RelistEvents))
		g(d.pods, float64(s.Pods))
		g(d.eps, float64(s.Endpoints))
		g(d.recorder, b2f(s.SliceRecorder))
		g(d.synced, b2f(s.Synced))
	}
	if ready != nil {
		g(d.ready, b2f(ready()))
	}
	if flight != nil {
		s := flight()
		c(d.flight, float64(s.Held), FlightHeld)
		c(d.flight, float64(s.Persisted), FlightPersisted)
		c(d.flight, float64(s.Discarded), FlightDiscarded)
		c(d.flight, float64(s.Passed), FlightPassed)
	}
	for name, ok := range evidence {
		ch <- prometheus.MustNewConstMetric(d.evidence, prometheus.GaugeValue, b2f(ok), name)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (m *Metrics) desc(name, help string, labels ...string) *prometheus.Desc {
	m.names = append(m.names, Namespace+"_"+name)
	return prometheus.NewDesc(Namespace+"_"+name, help, labels, nil)
}

// Catalog lists the names of every drainscope_* metric a Metrics can
// expose (histograms by their base name), sorted.
func (m *Metrics) Catalog() []string {
	out := slices.Clone(m.names)
	slices.Sort(out)
	return out
}

// funcCollector reports values read from elsewhere at scrape time.
type funcCollector struct {
	descs   []*prometheus.Desc
	collect func(chan<- prometheus.Metric)
}

func (c *funcCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *funcCollector) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

type factory struct{ m *Metrics }

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help})
	f.m.reg.MustRegister(c)
	f.m.names = append(f.m.names, Namespace+"_"+name)
	return c
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
	f.m.reg.MustRegister(c)
	f.m.names = append(f.m.names, Namespace+"_"+name)
	return c
}

func (f factory) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}, labels)
	f.m.reg.MustRegister(h)
	f.m.names = append(f.m.names, Namespace+"_"+name)
	return h
}
