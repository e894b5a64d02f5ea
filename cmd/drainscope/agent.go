package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/drainscope/drainscope/agent"
	"github.com/drainscope/drainscope/dataplane"
	"github.com/drainscope/drainscope/dataplane/cilium"
	"github.com/drainscope/drainscope/ebpf"
	"github.com/drainscope/drainscope/relay"
	"github.com/drainscope/drainscope/store"
	"github.com/drainscope/drainscope/watcher"
)

const agentUsage = `usage: drainscope agent [--store DSN | --server URL] [--node NAME] [--endpoints-mode auto|all-nodes|leader]
                       [--kubeconfig FILE] [--context NAME] [--metrics-listen ADDR] [--no-kernel] ...

Records, on this node, the transitions of the node's pods and of the
EndpointSlices (from the API server), and what the kernel does to the pods'
processes and sockets (SIGTERM, exit, listener close, connections closed or
reset at exit, refused connections), and writes them in batches to the
store. Run it as a DaemonSet (deploy/): in a pod it uses its service
account; elsewhere --kubeconfig or ~/.kube/config.

Events wait in a bounded buffer (--buffer-events) while the store is
unreachable and are written when it is back; past the bound they are
dropped and counted (drainscope_events_dropped_total{reason="buffer_full"}).
SIGTERM stops the watches and the capture and flushes the buffer within
--shutdown-timeout.

--server URL writes through drainscope serve (its --agent-service-account)
instead of to the store: the agent sends its pod's projected service
account token (--token-file), and the server stores only this node's
events; the server holds the only database pool (docs/agent-server.md).

Pruning old events is drainscope serve's job (--retention there); an agent
prunes only when given --retention, on a SQLite store, or in leader mode
while it holds the lease.

--metrics-listen serves /healthz, /readyz (ready once the caches are synced
and the kernel programs loaded) and /metrics; --pprof adds Go's runtime
profiles there (/debug/pprof/heap, profile, goroutine).

Flags:
`

func runAgent(ctx context.Context, fs *flag.FlagSet, args []string) error {
	var wf watcher.Flags
	wf.Register(fs)
	dsn := fs.String("store", os.Getenv("DRAINSCOPE_STORE"), "store DSN: postgres://… (in a cluster) or a SQLite file path (default: "+store.DefaultPath()+"; env DRAINSCOPE_STORE)")
	server := fs.String("server", os.Getenv("DRAINSCOPE_SERVER"), "write through drainscope serve at this URL, http(s)://host:port, instead of --store (env DRAINSCOPE_SERVER)")
	tokenFile := fs.String("token-file", relay.DefaultTokenFile, "with --server: the pod's projected service account token, read at each batch (kubelet rotates it)")
	serverCA := fs.String("server-ca", "", "with --server https://…: PEM file of the CA that signed the server's certificate (default: the system's)")
	listen := fs.String("metrics-listen", ":9090", "address for /healthz, /readyz and /metrics; empty turns it off")
	profiles := fs.Bool("pprof", false, "also serve Go's runtime profiles at /debug/pprof/ on --metrics-listen (heap, CPU, goroutines; not the command line)")
	bufferEvents := fs.Int("buffer-events", 1_000_000, "events held in memory while the store is slow or down; past this they are dropped and counted")
	batch := fs.Int("batch-size", 5000, "most events one store write carries")
	flushEvery := fs.Duration("flush-interval", 200*time.Millisecond, "longest an event waits before it is written")
	shutdown := fs.Duration("shutdown-timeout", 20*time.Second, "time allowed to flush the buffer at shutdown (keep it below the pod's terminationGracePeriodSeconds)")
	coverEvery := fs.Duration("coverage-interval", agent.DefaultCoverageInterval, "how often the agent records the span it covered (recorder_coverage), at most "+agent.MaxCoverageInterval.String()+": after a SIGKILL the analysis counts up to this much of the node's record before it as a gap (docs/reliability.md)")
	noKernel := fs.Bool("no-kernel", false, "do not load the eBPF programs; record only pod and endpoint transitions")
	dp := fs.String("dataplane", "auto", `record when this node's proxy rules stop sending to each endpoint: "auto" (kube-proxy's nftables mode and iptables mode on either backend, whichever the node runs; needs the host network namespace and CAP_NET_ADMIN, and for the legacy backend iptables-legacy-save, else logs why once; "nftables" is a synonym) or "off"`)
	kpMetrics := fs.String("kube-proxy-metrics", dataplane.DefaultKubeProxyMetrics, "kube-proxy's metrics address on this node: its /proxyMode tells the proxy mode, its sync metric paces the legacy iptables backend's reads")
	ciliumMaps := fs.String("cilium-maps", "auto", `read Cilium's service maps (its eBPF load balancer, instead of kube-proxy) and record when each backend leaves a Service: "auto" (when `+cilium.DefaultDir+` holds them at start), "off", or the bpffs directory holding them; needs the host's /sys/fs/bpf and CAP_BPF`)
	ciliumInterval := fs.Duration("cilium-interval", 250*time.Millisecond, "how often Cilium's service maps are read (the events' time resolution)")
	cgroupRoots := fs.String("cgroup-root", "", "comma-separated cgroup directories holding the pods (default: kubepods.slice or kubepods under the cgroup mount, found at start)")
	cgroups := fs.String("cgroups", "", `cgroup hierarchy identifying tasks: "" (v2 when mounted, else v1 pids), "v2", or "v1:<controller>"`)
	netnsDir := fs.String("netns-dir", "/run/netns", `directory of the pods' network namespaces (the runtime's /run/netns); "-" turns tracking them off`)
	netnsGlob := fs.String("netns-glob", "*", "track only the namespaces in --netns-dir whose names match this pattern")
	without := fs.String("kernel-without", "", "comma-separated kernel features to act as if missing (e.g. no_socket_resets: refused connections through the fallback of kernels before 6.10; see docs/kernels.md)")
	ringBuffer := fs.Int("ring-buffer-bytes", 0, "BPF ring buffer size, a power of two (default 8 MiB)")
	sampleNodes := fs.Int("sample-nodes", defaultSampleNodes, "about this many nodes, drawn by a hash of their names, store the proxy rule changes of every endpoint (the others store only their own pods', and all report the lag histogram) and, in all-nodes mode, the state of every endpoint and Service every --observe-interval (docs/dataplane.md, Volume)")
	flightOn := fs.Bool("flight-recorder", true, "hold each pod's ordinary connection closes in memory and store them only around the pod's disruptions (deletion, SIGTERM, not ready, endpoint change, exit): the store grows with disruptions, not traffic; false stores every one (see docs/flight-recorder.md)")
	flightLead := fs.Duration("flight-lead", 10*time.Second, "with --flight-recorder: how far before a pod's disruption its held connection closes are stored")
	flightCalm := fs.Duration("flight-calm", 2*time.Minute, "with --flight-recorder: how long a disrupted pod must be ready with no new trigger before its connection closes are held again")
	retention := registerRetention(fs, "delete events older than `AGE` (336h, 14d; 0: never). Unset, the agent prunes only as the lease holder in leader mode or on a SQLite store; drainscope serve prunes otherwise")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), agentUsage)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	wopts, err := wf.Options()
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *dp != "auto" && *dp != "nftables" && *dp != "off" {
		return fmt.Errorf("%w: --dataplane %q: want auto or off (IPVS mode is not recorded)", errUsage, *dp)
	}
	withoutFeats, err := kernelFeatures(*without)
	if err != nil {
		return err
	}
	if *flightLead <= 0 || *flightCalm <= 0 {
		return fmt.Errorf("%w: --flight-lead and --flight-calm must be positive", errUsage)
	}
	if *coverEvery <= 0 || *coverEvery > agent.MaxCoverageInterval {
		return fmt.Errorf("%w: --coverage-interval %v: want more than 0 and at most %v", errUsage, *coverEvery, agent.MaxCoverageInterval)
	}
	if *bufferEvents < 1 || *batch < 1 {
		return fmt.Errorf("%w: --buffer-events and --batch-size must be positive", errUsage)
	}
	if *listen != "" {
		if _, _, err := net.SplitHostPort(*listen); err != nil {
			return fmt.Errorf("%w: --metrics-listen %q: want host:port, e.g. :9090", errUsage, *listen)
		}
	} else if *profiles {
		return errProfilesWithoutListener
	}
	if err := checkAgentWrite(*dsn, *server, retention); err != nil {
		return err
	}
	if *server != "" && wf.AllPods {
		// The server places the pod of every event an agent sends and
		// refuses those of pods on other nodes (docs/agent-server.md).
		return fmt.Errorf("%w: --all-pods with --server: the server takes only this node's pods' events", errUsage)
	}
	if *sampleNodes < 1 {
		return fmt.Errorf("%w: --sample-nodes %d: want 1 or more", errUsage, *sampleNodes)
	}
	cs, err := wf.Client.Clientset()
	if err != nil {
		return err
	}
	scope := chooseScope(watcher.ChooseMode(ctx, cs, wopts.Mode, wf.LeaderAbove), wopts.Node, *sampleNodes)
	wopts.Mode, wopts.NoSharedObserve = scope.mode.Mode, scope.noSharedObserve
	if !scope.candidate {
		wopts.Lease.Standby = farStandbyPeriod
	}
	slog.Info("endpoint recording", "endpoints_mode", scope.mode.Mode, "why", scope.mode.Reason, "nodes", scope.mode.Nodes,
		"sample_nodes", *sampleNodes, "in_sample", scope.sampled, "dataplane", scope.dataplane(),
		"lease_candidate", scope.candidate)

	st, err := openAgentStore(ctx, *dsn, *server, *tokenFile, *serverCA, retention)
	if err != nil {
		return err
	}
	defer st.Close()

	cfg := agent.Config{
		Node:    wopts.Node,
		Client:  cs,
		Watch:   wopts,
		AllPods: wf.AllPods,
		Store:   st,
		Writer: store.WriterOptions{
			Batch: *batch, Interval: *flushEvery, Limit: *bufferEvents,
		},
		Kernel: agent.KernelConfig{
			Disabled:  *noKernel,
			NetNSDir:  *netnsDir,
			NetNSGlob: *netnsGlob,
		},
		Dataplane:        agent.DataplaneConfig{Disabled: *dp == "off", KubeProxyMetrics: *kpMetrics, OwnPodsOnly: !scope.sampled},
		Cilium:           agent.CiliumConfig{Dir: ciliumDir(*ciliumMaps), Interval: *ciliumInterval},
		Flight:           agent.FlightConfig{Disabled: !*flightOn, Lead: *flightLead, Calm: *flightCalm},
		ShutdownTimeout:  *shutdown,
		CoverageInterval: *coverEvery,
		Logger:           slog.Default(),
		Version:          version,
	}
	if *server != "" {
		// The server refuses older events one by one; the agent drops
		// what it held longer than that through an outage at once.
		cfg.Writer.MaxAge = relay.DefaultMaxAge
	}
	cfg.Kernel.Collector.Cgroups = *cgroups
	cfg.Kernel.Collector.RingBufferSize = *ringBuffer
	cfg.Kernel.Collector.WithoutFeatures = withoutFeats
	for _, r := range strings.Split(*cgroupRoots, ",") {
		if r = strings.TrimSpace(r); r != "" {
			cfg.Kernel.CgroupRoots = append(cfg.Kernel.CgroupRoots, r)
		}
	}
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}

	if *listen != "" {
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", *listen, err)
		}
		srv := &http.Server{
			Handler:           metricsHandler(a.Handler(), *profiles),
			ReadHeaderTimeout: 5 * time.Second,
			IdleTimeout:       time.Minute,
		}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				slog.Error("metrics listener", "err", err)
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			srv.Shutdown(sctx)
		}()
		slog.Info("serving /healthz, /readyz and /metrics", "addr", ln.Addr().String())
	}
	slog.Info("agent starting", "node", wopts.Node, "endpointslices", wopts.Mode, "store", st.Describe(),
		"kernel", !*noKernel, "buffer_events", *bufferEvents, "flight_recorder", *flightOn)
	if _, remote := st.(*relay.Client); remote {
		slog.Info("retention left to drainscope serve: this agent writes through it")
	} else if active, ok := agentPrunes(retention, wopts.Mode, st, func() bool { return a.Watcher().Stats().Leader }); ok {
		defer startRetention(ctx, st, a.Metrics(), retention.keep, active)() // stops before the store closes
	} else {
		slog.Info("retention left to drainscope serve; set --retention to prune from this agent")
	}
	return a.Run(ctx)
}

// defaultSampleNodes is --sample-nodes' default: enough that a cluster
// has a node of the sample with probability 1 - e^-5 (99.3 %), few enough
// that their rule changes stay a small share of the store.
const defaultSampleNodes = 5

// leaseCandidates is how many nodes, on average, campaign for the leader
// mode's Lease every RetryPeriod (2 s); none with probability e^-10. The
// others are far standbys: they read the Lease every farStandbyPeriod and
// campaign only while nobody holds it (watcher.LeaseOptions.Standby). At
// 5,000 nodes that is about 5 + 83 reads of the Lease a second, where
// every node a candidate made 2,500.
const (
	leaseCandidates  = 10
	farStandbyPeriod = time.Minute
)

// agentScope is what this node records of the cluster-wide state.
type agentScope struct {
	mode    watcher.ModeChoice
	sampled bool // in the sample: every endpoint's rule changes, the observed state
	// candidate: in leader mode, campaigns for the Lease every
	// RetryPeriod; false makes it a far standby. Every node is a
	// candidate when the nodes could not be counted.
	candidate bool
	// noSharedObserve: all-nodes mode outside the sample records the
	// endpoints' and Services' transitions but not their state every
	// interval.
	noSharedObserve bool
}

// chooseScope decides, from the mode chosen and the cluster's size, what
// this node records. When the nodes could not be counted (Nodes 0), a
// leader-mode agent draws the sample as in a 5,000-node cluster, the
// largest Kubernetes supports, so that the volume stays bounded; an
// all-nodes agent is in the sample, as every node was before it existed.
func chooseScope(m watcher.ModeChoice, node string, k int) agentScope {
	nodes := m.Nodes
	if nodes == 0 && m.Mode == watcher.Leader {
		nodes = 5000
	}
	sc := agentScope{mode: m, sampled: watcher.SampledNode(node, nodes, k),
		candidate: m.Mode != watcher.Leader || watcher.SampledNode(node, m.Nodes, leaseCandidates)}
	sc.noSharedObserve = m.Mode == watcher.EveryNode && !sc.sampled
	return sc
}

func (s agentScope) dataplane() string {
	if s.sampled {
		return "every endpoint's rule changes"
	}
	return "this node's pods' rule changes; the lag histogram of every endpoint"
}

// openAgentStore opens --store, or with --server the server's endpoint.
func openAgentStore(ctx context.Context, dsn, server, tokenFile, serverCA string, retention *retentionFlag) (store.Store, error) {
	if err := checkAgentWrite(dsn, server, retention); err != nil {
		return nil, err
	}
	if server == "" {
		return store.Open(ctx, dsn)
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	if serverCA != "" {
		pem, err := os.ReadFile(serverCA)
		if err != nil {
			return nil, fmt.Errorf("--server-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--server-ca %s: no PEM certificate in it", serverCA)
		}
		hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	c, err := relay.NewClient(server, tokenFile, hc)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(tokenFile); err != nil {
		return nil, fmt.Errorf("--token-file: %w", err)
	}
	return c, nil
}

// checkAgentWrite refuses --server with --store or --retention, and a
// --server that is no http(s) URL.
func checkAgentWrite(dsn, server string, retention *retentionFlag) error {
	switch {
	case server == "":
		return nil
	case dsn != "":
		return fmt.Errorf("%w: --server and --store (or DRAINSCOPE_STORE) both set: choose one", errUsage)
	case retention.set:
		return fmt.Errorf("%w: --retention with --server: drainscope serve prunes the store", errUsage)
	}
	if _, err := relay.NewClient(server, "", nil); err != nil {
		return fmt.Errorf("%w: --server: %w", errUsage, err)
	}
	return nil
}

// agentPrunes tells whether an agent prunes the store, and when: always
// with --retention given (0 turns it off) or on a SQLite store, which it
// may be alone with; in leader mode while it holds the lease, so that one
// agent of the DaemonSet prunes; otherwise not, since drainscope serve
// prunes by default and one process per cluster is enough.
func agentPrunes(f *retentionFlag, mode watcher.Mode, st store.Store, leading func() bool) (active func() bool, ok bool) {
	_, sqlite := st.(*store.SQLite)
	switch {
	case f.set || sqlite:
		return nil, true
	case mode == watcher.Leader:
		return leading, true
	}
	return nil, false
}

// ciliumDir turns --cilium-maps into the reader's directory ("" off).
func ciliumDir(flag string) string {
	switch flag {
	case "off", "":
		return ""
	case "auto":
		if cilium.Present(cilium.DefaultDir) {
			return cilium.DefaultDir
		}
		return ""
	}
	return flag
}

// kernelFeatures parses --kernel-without.
func kernelFeatures(list string) ([]ebpf.Feature, error) {
	var out []ebpf.Feature
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !slices.Contains(ebpf.Features, ebpf.Feature(f)) {
			return nil, fmt.Errorf("%w: --kernel-without %q: unknown feature; known: %v", errUsage, f, ebpf.Features)
		}
		out = append(out, ebpf.Feature(f))
	}
	return out, nil
}
