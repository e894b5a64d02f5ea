package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/export"
	"github.com/drainscope/drainscope/export/otlp"
	"github.com/drainscope/drainscope/ingest"
	"github.com/drainscope/drainscope/internal/httpauth"
	"github.com/drainscope/drainscope/metrics"
	"github.com/drainscope/drainscope/relay"
	"github.com/drainscope/drainscope/store"
	"github.com/drainscope/drainscope/web"
)

const serveUsage = `usage: drainscope serve [--listen ADDR] [--auth-token TOKEN | --insecure] [--store DSN]
                       [--metrics-listen ADDR] ...

Serves the web UI (rollouts, per-rollout timeline, alignment of failures to
SIGTERM and exit) and the JSON API under /api/v1 (see web/API.md), and takes
client failures at POST /api/v1/client-failures.

It listens on 127.0.0.1 unless told otherwise. Any other address needs
--auth-token (every request must then carry it, as a bearer token or the
cookie the login page sets), or --insecure, which serves without one and
says so in the log. Ingest needs --ingest-token, a token of its own:
without it ingest is off. Each token is at least 32 characters (openssl
rand -hex 32); wrong tokens are limited per client address (429).
Ingest takes client-failure formats only (--ingest-formats); a proxy's
routing snapshots (envoy-clusters) feed the measured lag and "out of
rotation", and are taken only when --ingest-formats names them and only
with --ingest-dataplane-token, a third token of their own.

--agent-service-account NAMESPACE/NAME takes agents' events at POST
/api/v1/agent/events (drainscope agent --server): each agent sends its
pod's projected service account token, which the server checks with a
TokenReview (it needs create on tokenreviews), and may store only the
events of the node its pod is bound to (docs/agent-server.md).
--agent-listen ADDR also takes them, and nothing else, over TLS with
--agent-tls-cert and --agent-tls-key (read again when the files change),
for agents started with --server https://… and --server-ca.

--retention (default 14 days) deletes older events at start and then every
hour (Postgres: whole day partitions, and the older rows of the day the cut
falls in), beside the writers; 0 keeps everything.

--metrics-listen serves /metrics apart from the UI: the server's own
health and the rollout signals (drainscope_rollout_*), which the server
computes from every node's events as the agents store them. --pprof adds
Go's runtime profiles there (/debug/pprof/heap, profile, goroutine).

--events puts a Kubernetes Event (Warning, reason DroppedRequests) on the
workload of each disruption that dropped requests once it has been quiet
for --export-quiet, with the failures by cause, the fix and, with
--public-url, a link to its timeline; Events are rate-limited, and named
after the disruption, so a restarted or second server makes none twice.
--otlp-endpoint sends each explained failure and each finished
disruption's summary as OTLP logs, and the rollout signals as OTLP
metrics, to an OpenTelemetry collector.

Flags:
`

func runServe(ctx context.Context, fs *flag.FlagSet, args []string) error {
	f := defineServeFlags(fs)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	c, err := f.check()
	if err != nil {
		return err
	}

	opened, err := store.Open(ctx, *f.dsn)
	if err != nil {
		return err
	}
	defer opened.Close()
	m := metrics.New("serve", version)
	st := m.WrapStore(opened) // ingest writes are counted and timed
	// The server prunes: one per cluster, where the agents are many.
	defer startRetention(ctx, opened, m, f.retention.keep, nil)() // stops before the store closes
	otlpExp, err := f.exp.newOTLP(ctx)
	if err != nil {
		return err
	}
	var extraSinks []export.Sink
	if otlpExp != nil {
		// Last to stop: what the feed and the signals hand it is flushed.
		defer flushOTLP(ctx, otlpExp)
		extraSinks = append(extraSinks, otlpExp.Sink())
	}
	stopExport, err := f.exp.start(ctx, opened, m, extraSinks...)
	if err != nil {
		return err
	}
	defer stopExport() // stops before the store closes
	if *f.metricsListen != "" {
		stopMetrics, err := serveMetrics(*f.metricsListen, m, *f.pprof)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	if *f.metricsListen != "" || otlpExp != nil {
		defer startRolloutSignals(ctx, opened, m, otlpExp, f)()
		if *f.checkEvery > 0 {
			cctx, ccancel := context.WithCancel(ctx)
			cdone := make(chan struct{})
			go func() {
				defer close(cdone)
				m.RunChecks(cctx, opened, metrics.CheckOptions{Every: *f.checkEvery, Window: *f.checkWindow, Log: slog.Default()})
			}()
			defer func() { ccancel(); <-cdone }()
		}
		rctx, rcancel := context.WithCancel(ctx)
		rdone := make(chan struct{})
		go func() {
			defer close(rdone)
			m.RunRecorders(rctx, opened, 30*time.Second, slog.Default())
		}()
		defer func() { rcancel(); <-rdone }()
	}

	opts, err := f.webOptions(ctx, st, c, m.ObserveAgentStage)
	if err != nil {
		return err
	}
	h := web.New(opts)
	defer h.Close() // stops background reads before the store closes
	ih := m.InstrumentHTTP("web", h)
	if c.agentTLS != nil {
		stopAgents, err := serveAgents(ctx, *f.agentListen, c.agentTLS, ih)
		if err != nil {
			return err
		}
		defer stopAgents()
	}
	return serveUI(ctx, *f.listen, ih, st, *f.token != "", *f.ingestToken != "")
}

// serveFlags are drainscope serve's flags.
type serveFlags struct {
	listen, token              *string
	insecure                   *bool
	ingestToken, ingestFormats *string
	dataplaneToken             *string
	metricsListen, dsn         *string
	pprof                      *bool
	retention                  *retentionFlag
	signalsAfter, signalsDelay *time.Duration
	checkEvery, checkWindow    *time.Duration
	window                     *windowFlags
	ingestMax                  *int64
	ingestConc                 *int
	agentSA, agentAud          *string
	agentConc, agentEvents     *int
	agentPods                  *bool
	agentQPS                   *float64
	agentListen                *string
	agentCert, agentKey        *string
	exp                        *exportFlags
}

// defineServeFlags defines drainscope serve's flags and usage on fs.
func defineServeFlags(fs *flag.FlagSet) *serveFlags {
	f := &serveFlags{}
	f.listen = fs.String("listen", "127.0.0.1:8080", "address to listen on, host:port")
	f.token = fs.String("auth-token", os.Getenv("DRAINSCOPE_AUTH_TOKEN"), "token every request must carry, at least 32 characters (env DRAINSCOPE_AUTH_TOKEN); required unless listening on loopback")
	f.insecure = fs.Bool("insecure", false, "allow a non-loopback address without --auth-token (anyone who can reach it can read the store)")
	f.ingestToken = fs.String("ingest-token", os.Getenv("DRAINSCOPE_INGEST_TOKEN"), "bearer token for POST /api/v1/client-failures, at least 32 characters and not --auth-token (env DRAINSCOPE_INGEST_TOKEN; without it ingest is off)")
	f.ingestFormats = fs.String("ingest-formats", strings.Join(ingest.ClientFailureFormats(), ","), "formats POST /api/v1/client-failures takes (?format=), comma-separated; envoy-clusters (a proxy's routing) only when named here, and then only with --ingest-dataplane-token")
	f.dataplaneToken = fs.String("ingest-dataplane-token", os.Getenv("DRAINSCOPE_INGEST_DATAPLANE_TOKEN"), "bearer token for posting dataplane formats (envoy-clusters), at least 32 characters, neither --auth-token nor --ingest-token (env DRAINSCOPE_INGEST_DATAPLANE_TOKEN)")
	f.metricsListen = fs.String("metrics-listen", "", "address for /metrics, host:port, apart from the token-guarded UI (default: none)")
	f.pprof = fs.Bool("pprof", false, "also serve Go's runtime profiles at /debug/pprof/ on --metrics-listen (heap, CPU, goroutines; not the command line)")
	f.dsn = fs.String("store", os.Getenv("DRAINSCOPE_STORE"), "store DSN: postgres://… or a SQLite file path (default: "+store.DefaultPath()+"; env DRAINSCOPE_STORE)")
	f.retention = registerRetention(fs, "delete events older than `AGE`, at start and then hourly: a duration or days (336h, 14d); 0 keeps everything")
	f.signalsAfter = fs.Duration("signals-after", 30*time.Second, "report a terminated pod's rollout signals (drainscope_rollout_* on --metrics-listen) once it has been quiet this long")
	f.checkEvery = fs.Duration("check-every", 10*time.Minute, "how often every workload's termination budget is checked against the cluster's measured lags (drainscope check) for drainscope_workload_rollout_risk; 0 turns it off")
	f.checkWindow = fs.Duration("check-window", 6*time.Hour, "the history each check measures the lags and drains over")
	f.signalsDelay = fs.Duration("signals-delay", 10*time.Second, "how long after an event happened the rollout signals wait for the agents to store it; events stored later are counted in drainscope_rollout_late_events_total")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), serveUsage)
		fs.PrintDefaults()
	}
	f.window = registerWindow(fs)
	f.ingestMax = fs.Int64("ingest-max-bytes", ingest.DefaultMaxBytes, "largest body POST /api/v1/client-failures takes, before and after gzip decompression")
	f.ingestConc = fs.Int("ingest-concurrency", ingest.DefaultMaxConcurrent, "client-failure posts served at once; more are answered 503 with Retry-After")
	f.agentSA = fs.String("agent-service-account", os.Getenv("DRAINSCOPE_AGENT_SERVICE_ACCOUNT"), "NAMESPACE/NAME of the agents' service account: take their events at POST "+relay.EventsPath+", each agent's own node's only, authenticated by TokenReview with --kubeconfig/--context or the pod's service account (env DRAINSCOPE_AGENT_SERVICE_ACCOUNT; empty: off)")
	f.agentAud = fs.String("agent-audiences", "", "comma-separated audiences the agents' tokens must carry (default: the API server's own, as the default projected token has)")
	f.agentConc = fs.Int("agent-concurrency", relay.DefaultMaxConcurrent, "agent batches taken at once; more wait up to 2 s for a slot, then are answered 429 with Retry-After and the agents retry")
	f.agentEvents = fs.Int("agent-events-in-flight", relay.DefaultMaxEventsInFlight, "events of the agent batches taken at once (a batch takes the count it announces, a JSON one 20,000): what bounds the server's memory for them, about 450 bytes an event")
	f.agentPods = fs.Bool("agent-check-pods", true, "refuse an agent's kernel event about a pod on another node, knowing where pods are from one watch of every pod (needs list and watch on pods); false: check the events' node only")
	f.agentQPS = fs.Float64("agent-review-qps", 100, "TokenReviews per second the server may send (burst twice that): each agent's token is reviewed once a minute, so 5,000 agents need 84/s, and all at once after a restart")
	f.agentListen = fs.String("agent-listen", "", "also take the agents' events (and nothing else) over TLS on this address, host:port, with --agent-tls-cert and --agent-tls-key (default: none; they are taken on --listen as well)")
	f.agentCert = fs.String("agent-tls-cert", "", "PEM certificate (chain) of --agent-listen, read again when the file changes")
	f.agentKey = fs.String("agent-tls-key", "", "PEM private key of --agent-tls-cert")
	f.exp = registerExport(fs)
	return f
}

// serveChecked is what checking drainscope serve's flags found.
type serveChecked struct {
	host               string
	loopback           bool
	formats            []string
	agentNS, agentName string
	agentTLS           *keyPair // --agent-listen's certificate, when set
}

// check checks the flags, and warns of a non-loopback address served
// without a token.
func (f *serveFlags) check() (serveChecked, error) {
	var c serveChecked
	host, _, err := net.SplitHostPort(*f.listen)
	if err != nil {
		return c, fmt.Errorf("%w: --listen %q: want host:port, e.g. 127.0.0.1:8080", errUsage, *f.listen)
	}
	c.host = host
	c.loopback = isLoopback(host)
	if !c.loopback && *f.token == "" && !*f.insecure {
		return c, fmt.Errorf("%w: --listen %s is not a loopback address: set --auth-token (or pass --insecure to serve without one)", errUsage, *f.listen)
	}
	if !c.loopback && *f.token == "" {
		slog.Warn("serving without a token on a non-loopback address: anyone who can reach it can read every event in the store", "listen", *f.listen)
	}
	if err := checkServeTokens(*f.token, *f.ingestToken); err != nil {
		return c, err
	}
	c.formats, err = checkIngestFormats(*f.ingestFormats, *f.token, *f.ingestToken, *f.dataplaneToken)
	if err != nil {
		return c, err
	}
	if err := f.exp.check(); err != nil {
		return c, err
	}
	c.agentNS, c.agentName, err = parseServiceAccount(*f.agentSA)
	if err != nil {
		return c, err
	}
	if *f.agentConc < 1 || *f.agentEvents < 1 {
		return c, fmt.Errorf("%w: --agent-concurrency and --agent-events-in-flight must be positive", errUsage)
	}
	if *f.agentListen != "" || *f.agentCert != "" || *f.agentKey != "" {
		switch {
		case *f.agentListen == "" || *f.agentCert == "" || *f.agentKey == "":
			return c, fmt.Errorf("%w: --agent-listen, --agent-tls-cert and --agent-tls-key go together", errUsage)
		case *f.agentSA == "":
			return c, fmt.Errorf("%w: --agent-listen takes agents' events: it needs --agent-service-account", errUsage)
		}
		if _, _, err := net.SplitHostPort(*f.agentListen); err != nil {
			return c, fmt.Errorf("%w: --agent-listen %q: want host:port, e.g. :8443", errUsage, *f.agentListen)
		}
		if c.agentTLS, err = loadKeyPair(*f.agentCert, *f.agentKey); err != nil {
			return c, fmt.Errorf("%w: %w", errUsage, err)
		}
	}
	if *f.agentQPS <= 0 {
		return c, fmt.Errorf("%w: --agent-review-qps must be positive", errUsage)
	}
	if *f.pprof && *f.metricsListen == "" {
		return c, errProfilesWithoutListener
	}
	return c, nil
}

// flushOTLP shuts the OTLP exporter down, flushing what it holds.
func flushOTLP(ctx context.Context, otlpExp *otlp.Exporter) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := otlpExp.Shutdown(sctx); err != nil {
		slog.Warn("otlp: flushing at shutdown", "err", err)
	}
}

// serveMetrics serves /metrics on addr, and with profiles the runtime
// profiles, until stop is called.
func serveMetrics(addr string, m *metrics.Metrics, profiles bool) (stop func(), err error) {
	mln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen %s: %w", addr, err)
	}
	msrv := &http.Server{Handler: metricsHandler(m.Handler(), profiles), ReadHeaderTimeout: 5 * time.Second}
	go msrv.Serve(mln)
	slog.Info("metrics", "url", "http://"+mln.Addr().String()+"/metrics")
	return func() { msrv.Close() }, nil
}

// startRolloutSignals computes the rollout signals from the store's events
// until the returned stop is called.
func startRolloutSignals(ctx context.Context, opened store.Store, m *metrics.Metrics, otlpExp *otlp.Exporter, f *serveFlags) (stop func()) {
	// The rollout signals are computed here, from every node's events
	// in the store: in leader mode only one agent records the endpoint
	// transitions, and only here do they meet the kernel events of the
	// node each pod ran on.
	ro := metrics.RolloutOptions{Delay: *f.signalsDelay, Analysis: analysis.Options{Retain: *f.signalsAfter}}
	if otlpExp != nil {
		ro.Observer = otlpExp.RolloutObserver()
	}
	r := m.NewRollouts(ro)
	tctx, tcancel := context.WithCancel(ctx)
	tdone := make(chan struct{})
	go func() { defer close(tdone); r.Tail(tctx, opened, metrics.TailOptions{Logger: slog.Default()}) }()
	return func() { tcancel(); <-tdone }
}

// webOptions are the web UI's options: its store, tokens, ingest and the
// agents' events.
func (f *serveFlags) webOptions(ctx context.Context, st store.Store, c serveChecked, stages func(string, time.Duration)) (web.Options, error) {
	opts := web.Options{
		Store:     st,
		AuthToken: *f.token,
		Ingest: &ingest.Handler{Store: st, Token: *f.ingestToken, Formats: c.formats, DataplaneToken: *f.dataplaneToken, Log: slog.Default(),
			MaxBytes: *f.ingestMax, MaxConcurrent: *f.ingestConc, Window: f.window.window()},
		Log:     slog.Default(),
		Context: ctx,
	}
	if c.agentName != "" {
		// Not client-go's default of 5 requests/s: 500 agents would wait
		// 100 s for their first reviews and never catch up with one a
		// minute each (docs/scale.md).
		cfg, err := f.exp.client.RESTConfig()
		if err != nil {
			return opts, fmt.Errorf("--agent-service-account: %w", err)
		}
		cfg.QPS, cfg.Burst = float32(*f.agentQPS), int(2**f.agentQPS)
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return opts, fmt.Errorf("--agent-service-account: creating Kubernetes client: %w", err)
		}
		h := &relay.Handler{Store: st, Log: slog.Default(), MaxConcurrent: *f.agentConc, MaxEventsInFlight: *f.agentEvents, Stages: stages,
			Auth: &relay.TokenReviewer{Client: cs.AuthenticationV1(), Namespace: c.agentNS, ServiceAccount: c.agentName, Audiences: splitList(*f.agentAud)}}
		if *f.agentPods {
			// Until it has listed the pods, batches are answered 503 and
			// the agents retry.
			pods := &relay.PodIndex{Client: cs, Log: slog.Default()}
			h.Pods = pods
			opts.Ready = pods.Ready // /readyz
			go func() {
				if err := pods.Run(ctx); err != nil {
					slog.Warn("agent events: the pod index stopped", "err", err)
				}
			}()
		}
		opts.AgentEvents = h
		slog.Info("taking agents' events", "path", relay.EventsPath, "service_account", c.agentNS+"/"+c.agentName)
	}
	if c.loopback && *f.token == "" {
		// Without a token the Host header is the only thing keeping a web
		// page elsewhere from reaching this listener by DNS rebinding.
		opts.AllowedHosts = []string{"localhost", "127.0.0.1", "::1", c.host}
	}
	return opts, nil
}

// serveUI serves h on listen until ctx is done, then shuts the server down.
func serveUI(ctx context.Context, listen string, h http.Handler, st store.Store, auth, ingesting bool) error {
	srv := web.NewServer(listen, h)
	srv.BaseContext = func(net.Listener) context.Context { return ctx }
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", listen, err)
	}
	slog.Info("serving", "url", "http://"+ln.Addr().String()+"/", "store", st.Describe(), "auth", auth, "ingest", ingesting)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutting down: %w", err)
	}
	return nil
}

// checkServeTokens refuses a token shorter than httpauth.MinTokenLength,
// and one ingest token equal to the UI's: the ingest token is handed to
// load generators and CI jobs, and must not open the UI (nor the UI's the
// ingest). An empty ingest token turns ingest off; it never falls back to
// the UI's.
func checkServeTokens(token, ingestToken string) error {
	if err := httpauth.CheckToken("--auth-token (env DRAINSCOPE_AUTH_TOKEN)", token); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if err := httpauth.CheckToken("--ingest-token (env DRAINSCOPE_INGEST_TOKEN)", ingestToken); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if token != "" && ingestToken == token {
		return fmt.Errorf("%w: --ingest-token (env DRAINSCOPE_INGEST_TOKEN) equals --auth-token: give ingest a token of its own", errUsage)
	}
	return nil
}

// checkIngestFormats reads --ingest-formats and checks the dataplane
// token: a dataplane format needs one, of at least 32 characters, equal to
// neither other token.
func checkIngestFormats(list, token, ingestToken, dataplaneToken string) ([]string, error) {
	var out []string
	dataplane := false
	for _, name := range strings.Split(list, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		f, err := ingest.LookupFormat(name)
		if err != nil {
			return nil, fmt.Errorf("%w: --ingest-formats: %w", errUsage, err)
		}
		if f.PodLog() {
			return nil, fmt.Errorf("%w: --ingest-formats: %s is a pod's own log, speaking for the pod it is told of: import it with drainscope import --pod", errUsage, name)
		}
		dataplane = dataplane || f.Dataplane()
		out = append(out, name)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: --ingest-formats is empty (want some of %s)", errUsage, strings.Join(ingest.FormatNames(), ", "))
	}
	if err := httpauth.CheckToken("--ingest-dataplane-token (env DRAINSCOPE_INGEST_DATAPLANE_TOKEN)", dataplaneToken); err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	switch {
	case dataplane && dataplaneToken == "":
		return nil, fmt.Errorf("%w: --ingest-formats names a dataplane format: set --ingest-dataplane-token, a token of its own", errUsage)
	case dataplaneToken != "" && (dataplaneToken == token || dataplaneToken == ingestToken):
		return nil, fmt.Errorf("%w: --ingest-dataplane-token equals another token: give it one of its own", errUsage)
	}
	return out, nil
}

// parseServiceAccount reads --agent-service-account: empty, or
// NAMESPACE/NAME.
func parseServiceAccount(v string) (ns, name string, err error) {
	if v == "" {
		return "", "", nil
	}
	ns, name, ok := strings.Cut(v, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("%w: --agent-service-account %q: want NAMESPACE/NAME, e.g. drainscope/drainscope-agent", errUsage, v)
	}
	return ns, name, nil
}

// splitList splits a comma-separated flag, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// isLoopback reports whether host names only this machine: a loopback IP
// or "localhost". An empty host means every interface.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
