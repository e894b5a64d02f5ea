// Package agent assembles what drainscope runs on each node. It holds the
// watcher's Pod and EndpointSlice watches (pods of this node only;
// EndpointSlices on every node or on the elected leader), the eBPF capture of
// the node's pod cgroups and network namespaces with the watcher's pod cache
// as its resolver, a bounded store writer that rides out a database outage,
// the Prometheus metrics of the pipeline's health, and the health and
// readiness endpoints. The rollout signals are not computed here: in leader
// mode one agent records the endpoints of every node's pods, so the server
// (drainscope serve) computes them from the store, where every node's events
// meet. `drainscope agent` runs it as a DaemonSet pod; the lab runs the same
// Agent in-process.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/drainscope/drainscope/dataplane"
	"github.com/drainscope/drainscope/dataplane/cilium"
	"github.com/drainscope/drainscope/ebpf"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/flight"
	"github.com/drainscope/drainscope/metrics"
	"github.com/drainscope/drainscope/store"
	"github.com/drainscope/drainscope/watcher"
)

// Config configures an Agent.
type Config struct {
	// Node is this node's name; every event carries it and the pod watch
	// is limited to it unless Watch.PodNode is set otherwise.
	Node   string
	Client kubernetes.Interface
	// Watch configures the watches. Node, Sink and Logger are filled in;
	// an empty PodNode becomes Node (set AllPods to watch every node's).
	Watch   watcher.Options
	AllPods bool

	// Store receives the events through a store.Writer configured by
	// Writer. The agent does not close it.
	Store  store.Store
	Writer store.WriterOptions

	Kernel KernelConfig

	// Dataplane configures the recording of this node's proxy rules.
	Dataplane DataplaneConfig
	// Cilium configures the reading of Cilium's service maps.
	Cilium CiliumConfig
	// Flight configures the flight recorder in front of the store.
	Flight FlightConfig

	// Metrics receives the agent's metrics; nil makes a registry of its own
	// (see Agent.Metrics).
	Metrics *metrics.Metrics

	// ShutdownTimeout bounds the final flush to the store. Default 20 s.
	ShutdownTimeout time.Duration
	// CoverageInterval is how often the agent writes the span it recorded
	// over (recorder_coverage). Default DefaultCoverageInterval, at most
	// MaxCoverageInterval.
	CoverageInterval time.Duration
	// Sink, when set, also receives every event the agent records.
	Sink func(event.Event)

	Logger  *slog.Logger
	Version string
}

// KernelConfig configures the eBPF capture.
type KernelConfig struct {
	// Disabled records only what the watches see.
	Disabled bool
	// CgroupRoots are the cgroup directories whose processes (and
	// descendants, 8 levels down) are recorded: the kubelet's parents of
	// all pods. Empty: found under the capture's cgroup mount by
	// FindPodCgroupRoots (kubepods.slice, kubepods, …).
	CgroupRoots []string
	// NetNSDir holds the pods' network namespaces as bind mounts (the
	// runtime's /run/netns); every one whose name matches NetNSGlob is
	// tracked, so that resets no process owns (a SYN refused by a closed
	// port) are recorded. Default /run/netns; "-" turns it off.
	NetNSDir  string
	NetNSGlob string
	// Rescan is how often NetNSDir (and, until found, the cgroup roots)
	// are looked at again. Default 2 s.
	Rescan time.Duration
	// Collector configures the capture; Node and Logger are filled in, and
	// Pods, when nil, is the watcher's pod cache (the lab passes its node,
	// which also knows each pod's network namespace).
	Collector ebpf.Config
}

// FlightConfig configures the flight recorder (package flight): each
// pod's ordinary connection closes are held in memory and stored only
// around the pod's disruptions. Disabled stores every event.
type FlightConfig struct {
	Disabled bool
	// Lead and Calm: see flight.Config (defaults 10 s and 2 min).
	Lead, Calm time.Duration
}

// DataplaneConfig configures the recording of the node's proxy rules
// (package dataplane): when kube-proxy's nftables rules stopped sending to
// each endpoint. It needs the host's network namespace and CAP_NET_ADMIN;
// without them, or without kube-proxy's table, it logs why once and the
// agent records the rest.
type DataplaneConfig struct {
	Disabled bool
	// OwnPodsOnly stores the rule changes of this node's own pods'
	// endpoints only (those the pod cache resolves), not of every
	// endpoint of the cluster: a node outside the sample
	// (watcher.SampledNode) sets it, so that what a node stores about
	// proxy rules grows with its own pods, not with the cluster's
	// Services. Every removal still feeds the lag histogram
	// (drainscope_dataplane_lag_seconds). docs/dataplane.md, "Volume".
	OwnPodsOnly bool
	// KubeProxyMetrics is kube-proxy's metrics address on this node
	// (dataplane.DefaultKubeProxyMetrics when empty).
	KubeProxyMetrics string
}

// Agent is one node's recorder. Create it with New, start it with Run.
type Agent struct {
	cfg    Config
	log    *slog.Logger
	m      *metrics.Metrics
	w      *watcher.Watcher
	writer *store.Writer
	dp     *dataplane.Watcher
	lag    *dataplane.LagMeter
	// ownPods are this node's pods (the watcher's cache): whose
	// endpoints' rule changes a node outside the sample stores.
	ownPods watcher.PodLookup
	// dpSeen and dpStored count the dataplane changes read and stored.
	dpSeen, dpStored atomic.Uint64
	// proxyMode is the node's proxy mode as last detected.
	proxyMode atomic.Pointer[dataplane.Mode]
	// capsMu orders the kernel_capabilities events; capsProxy is the proxy
	// mode the last one carried ("" before the first).
	capsMu    sync.Mutex
	capsProxy string

	cilium         *cilium.Reader
	ciliumServices *cilium.ServiceIndex

	flight *flight.Recorder // nil when disabled
	cover  *coverage

	kernelMu sync.Mutex
	kernel   *ebpf.Collector
	netns    *netnsTracker
	roots    []string

	synced     atomic.Bool
	probes     atomic.Bool
	stopping   atomic.Bool
	fatal      atomic.Pointer[error]
	running    atomic.Bool
	lastDrop   atomic.Int64
	dropWarned atomic.Int64
}

// New checks cfg and builds the agent; nothing runs until Run.
func New(cfg Config) (*Agent, error) {
	if cfg.Node == "" {
		return nil, errors.New("agent: node name is required (--node or $NODE_NAME)")
	}
	if cfg.Client == nil {
		return nil, errors.New("agent: no Kubernetes client")
	}
	if cfg.Store == nil {
		return nil, errors.New("agent: no store")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 20 * time.Second
	}
	if cfg.Writer.Limit <= 0 {
		cfg.Writer.Limit = 1_000_000
	}
	if cfg.CoverageInterval <= 0 {
		cfg.CoverageInterval = DefaultCoverageInterval
	}
	if cfg.CoverageInterval > MaxCoverageInterval {
		return nil, fmt.Errorf("agent: coverage interval %v is longer than %v", cfg.CoverageInterval, MaxCoverageInterval)
	}
	if cfg.Writer.Logger == nil {
		cfg.Writer.Logger = cfg.Logger
	}
	if cfg.Kernel.NetNSDir == "" {
		cfg.Kernel.NetNSDir = "/run/netns"
	}
	if cfg.Kernel.NetNSGlob == "" {
		cfg.Kernel.NetNSGlob = "*"
	}
	if cfg.Kernel.Rescan <= 0 {
		cfg.Kernel.Rescan = 2 * time.Second
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New("agent", cfg.Version)
	}
	a := &Agent{cfg: cfg, log: cfg.Logger, m: cfg.Metrics}
	if !cfg.Flight.Disabled {
		a.flight = flight.New(flight.Config{Lead: cfg.Flight.Lead, Calm: cfg.Flight.Calm}, a.persist)
	}

	wo := cfg.Watch
	wo.Node = cfg.Node
	if wo.PodNode == "" && !cfg.AllPods {
		wo.PodNode = cfg.Node
	}
	if wo.Mode == "" {
		wo.Mode = watcher.EveryNode
	}
	wo.Sink = a.record
	if tap := wo.Tap; tap != nil {
		wo.Tap = func(e *event.Event) { a.tap(e); tap(e) }
	} else {
		wo.Tap = a.tap
	}
	if wo.Logger == nil {
		wo.Logger = cfg.Logger
	}
	w, err := watcher.New(cfg.Client, wo)
	if err != nil {
		return nil, err
	}
	a.w, a.ownPods = w, w.Pods()
	a.cfg.Watch = wo
	if !cfg.Dataplane.Disabled {
		dp, err := dataplane.New(dataplane.Options{Node: cfg.Node, Emit: a.recordDataplane, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		a.dp, a.lag = dp, dataplane.NewLagMeter()
	}
	if err := a.newCilium(); err != nil {
		return nil, err
	}
	return a, nil
}

// Metrics is the registry the agent reports to.
func (a *Agent) Metrics() *metrics.Metrics { return a.m }

// Watcher is the agent's watcher (its pod cache is Watcher().Pods()).
func (a *Agent) Watcher() *watcher.Watcher { return a.w }

// record takes every event: counted, then through the flight recorder
// (which holds ordinary connection closes until their pod's disruption)
// to persist.
func (a *Agent) record(e event.Event) {
	a.m.Observe(&e)
	if a.flight != nil {
		a.flight.Add(e)
		return
	}
	a.persist(e)
}

// persist queues e for the store (and Config.Sink), sealing it: the
// kernel capture leaves that to here, since most of its events are
// connection closes the flight recorder never stores.
func (a *Agent) persist(e event.Event) {
	if e.ID == 0 {
		e.Seal()
	}
	if n := a.writer.Add(e); n > 0 {
		a.warnDrops()
	}
	if a.cfg.Sink != nil {
		a.cfg.Sink(e)
	}
}

// warnDrops logs at most one warning per 10 s while the writer drops.
func (a *Agent) warnDrops() {
	now := time.Now().UnixNano()
	last := a.dropWarned.Load()
	if now-last < int64(10*time.Second) || !a.dropWarned.CompareAndSwap(last, now) {
		return
	}
	s := a.writer.Stats()
	a.log.Warn("store buffer full: dropping events (counted in drainscope_events_dropped_total{reason=\"buffer_full\"})",
		"dropped", s.Dropped, "pending", s.Pending, "limit", a.cfg.Writer.Limit, "last_err", s.LastErr)
}

// Run records until ctx ends, then stops the watches and the capture and
// flushes what the writer holds, within ShutdownTimeout. It returns an
// error when a component failed or events could not be written.
func (a *Agent) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("agent: Run called twice")
	}
	a.writer = store.NewWriter(a.m.WrapStore(a.cfg.Store), a.cfg.Writer)
	a.cover = newCoverage(a, a.cfg.CoverageInterval)
	a.m.WatchWriter(a.cfg.Writer.Limit, a.writer.Stats)
	a.m.WatchWatches(a.watchStats)
	a.m.WatchReady(func() bool { return a.Ready() == nil })
	if a.flight != nil {
		a.m.WatchFlight(func() metrics.FlightStats {
			c := a.flight.Counts()
			return metrics.FlightStats{Held: c.Held, Persisted: c.Persisted, Discarded: c.Discarded, Passed: c.Passed}
		})
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 4)

	if a.cfg.Kernel.Disabled {
		a.probes.Store(true)
	} else {
		if err := a.startKernel(runCtx, &wg, errc); err != nil {
			a.shutdownWriter()
			return err
		}
		a.m.WatchKernel(a.kernelStats)
	}

	if a.dp != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = a.dp.Run(runCtx) // fails soft: logs why and returns
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.followProxyMode(runCtx, &wg)
		}()
	}
	a.startCilium(runCtx, &wg)
	if a.flight != nil {
		// Ages out what calm pods hold while no event arrives to do it.
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(5 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-runCtx.Done():
					return
				case <-t.C:
					a.flight.Sweep()
				}
			}
		}()
	}

	wg.Add(1)
	go func() {
		defer wg.Done()
		a.cover.run(runCtx)
	}()

	wctx, wcancel := context.WithCancel(runCtx)
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		if err := a.w.Run(wctx); err != nil && wctx.Err() == nil {
			errc <- fmt.Errorf("watcher: %w", err)
		}
	}()

	go func() {
		if a.w.WaitForSync(runCtx) == nil {
			a.synced.Store(true)
			a.kernelMu.Lock()
			roots := a.roots
			a.kernelMu.Unlock()
			a.log.Info("watches synced", "node", a.cfg.Node, "endpointslices", a.cfg.Watch.Mode,
				"kernel", !a.cfg.Kernel.Disabled, "cgroup_roots", roots, "store", a.cfg.Store.Describe())
		}
	}()

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-errc:
		runErr = err
		a.fatal.Store(&err)
		a.log.Error("agent component failed; shutting down", "err", err)
	}

	// Shutdown: not ready at once, then stop the producers, write the
	// last span of coverage (to now), then flush.
	stopAt := time.Now()
	a.stopping.Store(true)
	wcancel()
	<-wdone
	a.kernelMu.Lock()
	k := a.kernel
	a.kernelMu.Unlock()
	if k != nil {
		k.Close() // Run returns after emitting what it held
	}
	cancel()
	wg.Wait()
	a.cover.stop(stopAt)
	return errors.Join(runErr, a.shutdownWriter())
}

// shutdownWriter flushes the writer within ShutdownTimeout.
func (a *Agent) shutdownWriter() error {
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout)
	defer cancel()
	err := a.writer.Close(ctx)
	s := a.writer.Stats()
	a.log.Info("agent stopped", "received", s.Received, "written", s.Written,
		"dropped", s.Dropped, "rejected", s.Rejected, "pending", s.Pending, "write_failures", s.Failures)
	if err != nil {
		return fmt.Errorf("flushing the store at shutdown: %w", err)
	}
	return nil
}

// Stats is a snapshot of the agent's counters.
type Stats struct {
	Writer store.WriterStats
	Watch  watcher.Stats
	Kernel *ebpf.Stats // nil without kernel capture
	// DataplaneSeen are the proxy rule changes read, DataplaneStored
	// those recorded (all of them unless DataplaneConfig.OwnPodsOnly).
	DataplaneSeen, DataplaneStored uint64
}

// Stats returns the counters; valid once Run has started.
func (a *Agent) Stats() Stats {
	s := Stats{Watch: a.w.Stats(), DataplaneSeen: a.dpSeen.Load(), DataplaneStored: a.dpStored.Load()}
	if a.writer != nil {
		s.Writer = a.writer.Stats()
	}
	a.kernelMu.Lock()
	k := a.kernel
	a.kernelMu.Unlock()
	if k != nil {
		if ks, err := k.Stats(); err == nil {
			s.Kernel = &ks
		}
	}
	return s
}

// Ready returns nil once the watch caches are synced and the kernel
// programs are loaded and tracking the pod cgroups, and until shutdown
// begins; otherwise what is missing.
func (a *Agent) Ready() error {
	switch {
	case a.fatal.Load() != nil:
		return fmt.Errorf("failed: %v", *a.fatal.Load())
	case a.stopping.Load():
		return errors.New("shutting down")
	case !a.running.Load():
		return errors.New("not started")
	case !a.probes.Load():
		return errors.New("kernel programs not loaded or no pod cgroups tracked yet")
	case !a.synced.Load():
		return errors.New("waiting for the Pod and EndpointSlice caches to sync")
	}
	return nil
}

// Handler serves /healthz (the process works: no component failed),
// /readyz (Ready), /metrics and /debug/flight (the flight recorder's
// counts, in all and per pod, as JSON).
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if p := a.fatal.Load(); p != nil {
			http.Error(w, "failed: "+(*p).Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := a.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("GET /metrics", a.m.Handler())
	mux.HandleFunc("GET /debug/flight", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if a.flight == nil {
			fmt.Fprintln(w, `{"enabled":false}`)
			return
		}
		json.NewEncoder(w).Encode(struct {
			Enabled bool               `json:"enabled"`
			Total   flight.Counts      `json:"total"`
			Pods    []flight.PodCounts `json:"pods"`
		}{true, a.flight.Counts(), a.flight.Pods()})
	})
	return mux
}

func (a *Agent) watchStats() metrics.WatchStats {
	s := a.w.Stats()
	return metrics.WatchStats{
		Restarts: s.WatchErrors, Relists: s.Relists, RelistEvents: s.RelistEvent,
		Pods: s.Pods, Endpoints: s.Endpoints, SliceRecorder: s.Leader, Synced: a.synced.Load(),
	}
}

func (a *Agent) kernelStats() (metrics.KernelStats, bool) {
	a.kernelMu.Lock()
	k, nt := a.kernel, a.netns
	a.kernelMu.Unlock()
	if k == nil {
		return metrics.KernelStats{}, false
	}
	s, err := k.Stats()
	if err != nil {
		return metrics.KernelStats{}, false
	}
	out := metrics.KernelStats{
		Produced: map[event.Kind]uint64{}, Dropped: map[event.Kind]uint64{},
		DecodeErrors: s.DecodeErrors, UnresolvedCgroups: s.UnresolvedCgroups,
		ClockUncertainty: s.ClockUncertainty,
	}
	for kind, ks := range s.ByKind {
		out.Produced[kind] = ks.Produced
		out.Dropped[kind] = ks.Dropped
	}
	for _, p := range s.Programs {
		if p.Loaded {
			out.ProgramsLoaded++
		}
	}
	if nt != nil {
		out.TrackedNetNS = nt.count()
	}
	return out, true
}
