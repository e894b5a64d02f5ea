// Package otlp sends what drainscope finds to an OpenTelemetry collector. It
// speaks OTLP/HTTP with the OpenTelemetry Go SDK: each explained failure and
// each finished disruption's summary goes as a log record (a sink of the
// export feed), and the rollout signals (metrics.Rollouts) as metrics.
package otlp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/metric"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/export"
	"github.com/drainscope/drainscope/metrics"
)

// Options configure an Exporter.
type Options struct {
	// Endpoint is the collector's OTLP/HTTP base URL, as
	// OTEL_EXPORTER_OTLP_ENDPOINT gives it: http://collector:4318 (logs
	// go to /v1/logs and metrics to /v1/metrics under it); https uses TLS.
	Endpoint string
	// Headers are sent with every export (an API key).
	Headers map[string]string
	// Interval is how often the metrics are exported. Default 30 s.
	Interval time.Duration
	// Version is the service.version of the resource.
	Version string
	Now     func() time.Time
}

// Exporter holds the SDK's logger and meter providers.
type Exporter struct {
	lp     *sdklog.LoggerProvider
	mp     *sdkmetric.MeterProvider
	logger log.Logger
	now    func() time.Time

	terms, cut, kills, inferred metric.Int64Counter
	gap                         metric.Float64Histogram
}

// maxQueue holds the records of the largest disruption the analysis lists
// (10,000 failures, analysis.Options.MaxFailures) and a few summaries, so
// that one big rollout's records are not dropped from the queue before
// the batch processor sends them.
const maxQueue = 12000

// ParseEndpoint checks an OTLP/HTTP base URL and returns its host, base
// path and whether it is plain HTTP.
func ParseEndpoint(raw string) (host, path string, insecure bool, err error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", "", false, fmt.Errorf("%q: want http(s)://host:port[/path], e.g. http://otel-collector:4318", raw)
	}
	return u.Host, strings.TrimRight(u.Path, "/"), u.Scheme == "http", nil
}

// New starts the providers; Shutdown flushes and stops them.
func New(ctx context.Context, o Options) (*Exporter, error) {
	host, path, insecure, err := ParseEndpoint(o.Endpoint)
	if err != nil {
		return nil, err
	}
	if o.Interval <= 0 {
		o.Interval = 30 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	logOpts := []otlploghttp.Option{otlploghttp.WithEndpoint(host), otlploghttp.WithURLPath(path + "/v1/logs")}
	metricOpts := []otlpmetrichttp.Option{otlpmetrichttp.WithEndpoint(host), otlpmetrichttp.WithURLPath(path + "/v1/metrics")}
	if insecure {
		logOpts = append(logOpts, otlploghttp.WithInsecure())
		metricOpts = append(metricOpts, otlpmetrichttp.WithInsecure())
	}
	if len(o.Headers) > 0 {
		logOpts = append(logOpts, otlploghttp.WithHeaders(o.Headers))
		metricOpts = append(metricOpts, otlpmetrichttp.WithHeaders(o.Headers))
	}
	le, err := otlploghttp.New(ctx, logOpts...)
	if err != nil {
		return nil, fmt.Errorf("otlp log exporter: %w", err)
	}
	me, err := otlpmetrichttp.New(ctx, metricOpts...)
	if err != nil {
		return nil, fmt.Errorf("otlp metric exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", "drainscope"), attribute.String("service.version", o.Version)))
	if err != nil {
		return nil, fmt.Errorf("otlp resource: %w", err)
	}
	e := &Exporter{now: o.Now,
		lp: sdklog.NewLoggerProvider(sdklog.WithResource(res), sdklog.WithProcessor(sdklog.NewBatchProcessor(le, sdklog.WithMaxQueueSize(maxQueue)))),
		mp: sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(sdkmetric.NewPeriodicReader(me, sdkmetric.WithInterval(o.Interval)))),
	}
	e.logger = e.lp.Logger("github.com/drainscope/drainscope/export/otlp")
	m := e.mp.Meter("github.com/drainscope/drainscope/metrics")
	var errs []error
	add := func(c metric.Int64Counter, err error) metric.Int64Counter { errs = append(errs, err); return c }
	e.terms = add(m.Int64Counter("drainscope.rollout.pod_terminations", metric.WithUnit("{pod}"),
		metric.WithDescription("Pod terminations seen to the end (deleted, signalled or exited), per workload.")))
	e.cut = add(m.Int64Counter("drainscope.rollout.connections_cut_at_exit", metric.WithUnit("{connection}"),
		metric.WithDescription("Connections open at SIGTERM that the process's exit closed.")))
	e.kills = add(m.Int64Counter("drainscope.rollout.sigkills_after_grace", metric.WithUnit("{pod}"),
		metric.WithDescription("Pods killed by SIGKILL after their grace period ran out.")))
	e.inferred = add(m.Int64Counter("drainscope.rollout.inferred_failures", metric.WithUnit("{failure}"),
		metric.WithDescription("Client failures inferred from the pods' kernel events alone, by cause and evidence (proven, likely).")))
	e.gap, err = m.Float64Histogram("drainscope.rollout.sigterm_minus_endpoint_removal", metric.WithUnit("s"),
		metric.WithDescription("Per terminated pod: SIGTERM minus the time its endpoint left rotation on the last node; negative is the endpoint-removal race."),
		metric.WithExplicitBucketBoundaries(metrics.GapBuckets...))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("otlp instruments: %w", err)
	}
	return e, nil
}

// Shutdown flushes what is queued and stops the providers.
func (e *Exporter) Shutdown(ctx context.Context) error {
	return errors.Join(e.lp.Shutdown(ctx), e.mp.Shutdown(ctx))
}

// Flush exports what is queued now.
func (e *Exporter) Flush(ctx context.Context) error {
	return errors.Join(e.lp.ForceFlush(ctx), e.mp.ForceFlush(ctx))
}

// Sink is the export feed's sink of log records.
func (e *Exporter) Sink() export.Sink { return logSink{e} }

type logSink struct{ e *Exporter }

func (logSink) Name() string { return "otlp" }

// Idempotent: a collector does not recognise a record sent twice, so only
// the disruptions that finish while the server runs are sent.
func (logSink) Idempotent() bool { return false }

// Attribute keys beside OpenTelemetry's semantic conventions (k8s.*).
const (
	AttrWorkload     = "drainscope.workload" // Kind/Name
	AttrDisruption   = "drainscope.disruption.id"
	AttrTrigger      = "drainscope.disruption.trigger"
	AttrStart        = "drainscope.disruption.start"
	AttrEnd          = "drainscope.disruption.end"
	AttrCause        = "drainscope.cause"
	AttrCauseTitle   = "drainscope.cause.title"
	AttrFix          = "drainscope.fix"
	AttrInferred     = "drainscope.inferred"
	AttrProof        = "drainscope.proof"
	AttrClass        = "drainscope.failure.class"
	AttrVia          = "drainscope.failure.via"
	AttrTimeline     = "drainscope.timeline.url"
	AttrFailures     = "drainscope.failures"
	AttrInferredN    = "drainscope.inferred_failures"
	AttrLikely       = "drainscope.likely_failures"
	AttrUnattributed = "drainscope.unattributed_failures"
	AttrReplaced     = "drainscope.pods_replaced"
	AttrByCause      = "drainscope.failures_by_cause"
	AttrInfByCause   = "drainscope.inferred_by_cause"
	AttrFixes        = "drainscope.fixes"
)

// Event names of the records.
const (
	EventFailure    = "drainscope.failure"
	EventDisruption = "drainscope.disruption"
)

// workloadAttrs are the semantic conventions' k8s.namespace.name and
// k8s.deployment.name (statefulset, daemonset, replicaset, job).
func workloadAttrs(d *analysis.Disruption) []attribute.KeyValue {
	kv := []attribute.KeyValue{shown("k8s.namespace.name", d.Namespace), shown(AttrWorkload, d.Workload()),
		shown(AttrDisruption, d.ID)}
	if d.Kind != "" {
		kv = append(kv, shown("k8s."+strings.ToLower(d.Kind)+".name", d.Name))
	}
	if d.UID != "" && d.Kind != "" {
		kv = append(kv, shown("k8s."+strings.ToLower(d.Kind)+".uid", d.UID))
	}
	if d.Link != "" {
		kv = append(kv, shown(AttrTimeline, d.Link))
	}
	return kv
}

// Deliver emits a record per explained failure and one for the
// disruption; the batch processor sends them.
func (s logSink) Deliver(ctx context.Context, d *analysis.Disruption) error {
	now := s.e.now()
	base := workloadAttrs(d)
	fixes := map[analysis.Cause]string{}
	for _, c := range d.Causes {
		fixes[c.Cause] = c.Fix
	}
	for i := range d.Explained {
		af := &d.Explained[i]
		var r log.Record
		r.SetEventName(EventFailure)
		r.SetTimestamp(time.Unix(0, af.Failure.Time))
		r.SetObservedTimestamp(now)
		r.SetSeverity(log.SeverityWarn)
		r.SetSeverityText("WARN")
		r.SetBody(attribute.StringValue(event.DisplayText(af.Title+": "+af.Explanation, event.MaxDisplayLine)))
		r.AddAttributes(base...)
		r.AddAttributes(
			shown(AttrCause, string(af.Cause)), shown(AttrCauseTitle, af.Title),
			attribute.Bool(AttrInferred, af.Inferred), shown(AttrTrigger, string(d.Trigger)),
		)
		if f := fixes[af.Cause]; f != "" {
			r.AddAttributes(shown(AttrFix, f))
		}
		if af.Pod != nil {
			r.AddAttributes(shown("k8s.pod.name", af.Pod.Name), shown("k8s.pod.uid", af.Pod.UID))
		}
		if af.Proof != "" {
			r.AddAttributes(shown(AttrProof, af.Proof))
		}
		if af.Failure.Reason != "" {
			r.AddAttributes(shown(AttrClass, af.Failure.Reason))
		}
		if af.Via != "" {
			r.AddAttributes(shown(AttrVia, af.Via))
		}
		s.e.logger.Emit(ctx, r)
	}
	var r log.Record
	r.SetEventName(EventDisruption)
	r.SetTimestamp(time.Unix(0, d.Until))
	r.SetObservedTimestamp(now)
	sev, text := log.SeverityInfo, "INFO"
	if d.HasFailures() {
		sev, text = log.SeverityWarn, "WARN"
	}
	r.SetSeverity(sev)
	r.SetSeverityText(text)
	r.SetBody(attribute.StringValue(event.DisplayText(summary(d), event.MaxDisplayLine)))
	r.AddAttributes(base...)
	var byCause, infByCause, fixKV []attribute.KeyValue
	for _, c := range d.Causes {
		if c.Failures > 0 {
			byCause = append(byCause, attribute.Int(string(c.Cause), c.Failures))
		}
		if c.Inferred > 0 {
			infByCause = append(infByCause, attribute.Int(string(c.Cause), c.Inferred))
		}
		if c.Fix != "" {
			fixKV = append(fixKV, shown(string(c.Cause), c.Fix))
		}
	}
	r.AddAttributes(
		shown(AttrTrigger, string(d.Trigger)),
		shown(AttrStart, time.Unix(0, d.From).UTC().Format(time.RFC3339Nano)),
		shown(AttrEnd, time.Unix(0, d.Until).UTC().Format(time.RFC3339Nano)),
		attribute.Int(AttrFailures, d.Failures), attribute.Int(AttrInferredN, d.Inferred), attribute.Int(AttrLikely, d.Likely),
		attribute.Int(AttrUnattributed, d.Unattributed), attribute.Int(AttrReplaced, len(d.Replaced)),
		attribute.Map(AttrByCause, byCause...), attribute.Map(AttrInfByCause, infByCause...), attribute.Map(AttrFixes, fixKV...),
	)
	s.e.logger.Emit(ctx, r)
	return nil
}

func summary(d *analysis.Disruption) string {
	what := d.Trigger
	if what == "" {
		what = "disruption"
	}
	s := fmt.Sprintf("%s of %s/%s: %d pods replaced, %d client failures", what, d.Namespace, d.Workload(), len(d.Replaced), d.Failures)
	if t := d.CountsByCause(false); t != "" {
		s += " (" + t + ")"
	}
	s += fmt.Sprintf(", %d inferred from kernel evidence", d.Inferred)
	if t := d.CountsByCause(true); t != "" {
		s += " (" + t + ")"
	}
	return s
}

// RolloutObserver records the rollout signals as metrics.
func (e *Exporter) RolloutObserver() metrics.RolloutObserver { return observer{e} }

type observer struct{ e *Exporter }

func wlAttrs(ns, wl string, extra ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributes(append([]attribute.KeyValue{shown("k8s.namespace.name", ns), shown(AttrWorkload, wl)}, extra...)...)
}

func (o observer) Termination(ns, wl string) {
	o.e.terms.Add(context.Background(), 1, wlAttrs(ns, wl))
}

func (o observer) SigtermAfterRotation(ns, wl string, seconds float64) {
	o.e.gap.Record(context.Background(), seconds, wlAttrs(ns, wl))
}

func (o observer) CutAtExit(ns, wl string, n int) {
	o.e.cut.Add(context.Background(), int64(n), wlAttrs(ns, wl))
}

func (o observer) SIGKILLAfterGrace(ns, wl string) {
	o.e.kills.Add(context.Background(), 1, wlAttrs(ns, wl))
}

func (o observer) InferredFailure(ns, wl, cause, evidence string) {
	o.e.inferred.Add(context.Background(), 1, wlAttrs(ns, wl, shown(AttrCause, cause), shown("drainscope.evidence", evidence)))
}

// shown is attribute.String with v as a person may read it: every name and
// text in a record came from the cluster or a client's log, and a collector
// shows them in terminals and pages (event.Display: control characters
// escaped, length bounded).
func shown(k, v string) attribute.KeyValue {
	return attribute.String(k, event.Display(v, event.MaxDisplayLine))
}
