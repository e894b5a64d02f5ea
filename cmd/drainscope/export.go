package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/export"
	"github.com/drainscope/drainscope/export/k8sevents"
	"github.com/drainscope/drainscope/export/otlp"
	"github.com/drainscope/drainscope/metrics"
	"github.com/drainscope/drainscope/store"
	"github.com/drainscope/drainscope/watcher"
)

// exportFlags are drainscope serve's flags for the feed of finished
// disruptions and its sinks.
type exportFlags struct {
	events      bool
	client      watcher.ClientFlags
	eventsEvery time.Duration
	eventsBurst int
	quiet       time.Duration
	poll        time.Duration
	backfill    time.Duration
	publicURL   string

	otlpEndpoint string
	otlpInterval time.Duration
}

func registerExport(fs *flag.FlagSet) *exportFlags {
	f := &exportFlags{}
	fs.BoolVar(&f.events, "events", false, "put a Kubernetes Event (reason DroppedRequests) on the workload of each disruption that dropped requests; needs create on events (--kubeconfig, --context, else the pod's service account)")
	f.client.Register(fs)
	fs.DurationVar(&f.eventsEvery, "events-every", 6*time.Second, "with --events: create one Event per this long on average, over all workloads (and at most one per workload a minute)")
	fs.IntVar(&f.eventsBurst, "events-burst", 10, "with --events: Events created at once before --events-every applies")
	fs.DurationVar(&f.quiet, "export-quiet", analysis.RolloutGap, "a disruption is finished, and exported, once no pod of it has ended for this long")
	fs.DurationVar(&f.poll, "export-poll", 15*time.Second, "how often the store is read for finished disruptions")
	fs.DurationVar(&f.backfill, "export-backfill", 30*time.Minute, "at start, also export (as Events, which dedupe) the disruptions that finished this long before; an undelivered one is retried as long")
	fs.StringVar(&f.publicURL, "public-url", os.Getenv("DRAINSCOPE_PUBLIC_URL"), "where users reach this server's UI, e.g. https://drainscope.example.com: exports link each disruption's timeline there (env DRAINSCOPE_PUBLIC_URL)")
	fs.StringVar(&f.otlpEndpoint, "otlp-endpoint", os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "OTLP/HTTP collector base URL, e.g. http://otel-collector:4318: each explained failure and disruption summary as logs (/v1/logs), the rollout signals as metrics (/v1/metrics); OTEL_EXPORTER_OTLP_HEADERS adds headers (env OTEL_EXPORTER_OTLP_ENDPOINT)")
	fs.DurationVar(&f.otlpInterval, "otlp-interval", 30*time.Second, "with --otlp-endpoint: how often the rollout signals are exported")
	return f
}

// newOTLP starts the OTLP exporter when --otlp-endpoint is set (nil
// otherwise).
func (f *exportFlags) newOTLP(ctx context.Context) (*otlp.Exporter, error) {
	if f.otlpEndpoint == "" {
		return nil, nil
	}
	// The SDK reports failed exports (a collector away) to its global
	// handler, which would print them with the standard logger.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		slog.Warn("otlp: exporting failed", "endpoint", f.otlpEndpoint, "err", err)
	}))
	e, err := otlp.New(ctx, otlp.Options{Endpoint: f.otlpEndpoint, Interval: f.otlpInterval, Version: version})
	if err != nil {
		return nil, fmt.Errorf("--otlp-endpoint: %w", err)
	}
	slog.Info("exporting to OpenTelemetry", "endpoint", f.otlpEndpoint, "metrics_interval", f.otlpInterval)
	return e, nil
}

func (f *exportFlags) check() error {
	if f.otlpEndpoint != "" {
		if _, _, _, err := otlp.ParseEndpoint(f.otlpEndpoint); err != nil {
			return fmt.Errorf("%w: --otlp-endpoint %v", errUsage, err)
		}
		if f.otlpInterval <= 0 {
			return fmt.Errorf("%w: --otlp-interval must be positive", errUsage)
		}
	}
	if f.publicURL != "" {
		u, err := url.Parse(f.publicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%w: --public-url %q: want http(s)://host[/path]", errUsage, f.publicURL)
		}
	}
	if f.quiet < 0 || f.backfill < 0 || f.poll <= 0 || f.eventsEvery <= 0 || f.eventsBurst < 1 {
		return fmt.Errorf("%w: --export-quiet and --export-backfill must not be negative; --export-poll, --events-every and --events-burst must be positive", errUsage)
	}
	return nil
}

// start runs the feed with the sinks asked for, until the returned stop.
// extra are sinks built elsewhere (OTLP).
func (f *exportFlags) start(ctx context.Context, st store.Store, m *metrics.Metrics, extra ...export.Sink) (stop func(), err error) {
	var sinks []export.Sink
	if f.events {
		cs, err := f.client.Clientset()
		if err != nil {
			return nil, fmt.Errorf("--events: %w", err)
		}
		host, _ := os.Hostname()
		sinks = append(sinks, k8sevents.New(k8sevents.Options{Client: cs, Every: f.eventsEvery, Burst: f.eventsBurst, Host: host, Log: slog.Default()}))
	}
	sinks = append(sinks, extra...)
	if len(sinks) == 0 {
		return func() {}, nil
	}
	feed := export.New(st, sinks, export.Options{Quiet: f.quiet, Poll: f.poll, Backfill: f.backfill, BaseURL: f.publicURL,
		Log: slog.Default(), Observe: m.ExportObserver()})
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); feed.Run(fctx) }()
	names := []string{}
	for _, s := range sinks {
		names = append(names, s.Name())
	}
	slog.Info("exporting finished disruptions", "sinks", names, "quiet", f.quiet, "public_url", f.publicURL)
	return func() { cancel(); <-done }, nil
}
