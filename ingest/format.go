package ingest

import (
	"fmt"
	"io"
	"strings"

	"github.com/drainscope/drainscope/event"
)

// Format is one input format the importer and the HTTP handler accept,
// with what it can do: every ability is a field here, read where it
// matters, never a comparison of names.
type Format struct {
	Name    string
	Summary string
	// Records is what its records are, and so who may send them.
	Records Records
	// LogFormat: it takes a custom nginx log_format (--nginx-format);
	// ErrorLog: nginx's error log joins it (--error-log); ProxyPerFile:
	// each file is one proxy's, named after the file unless --proxy-name
	// names it.
	LogFormat, ErrorLog, ProxyPerFile bool
	parse                             func(io.Reader, Options, Emit) error
}

// Records is what a format's records are.
type Records uint8

const (
	// ClientFailures: a client's or a proxy's account of failed requests,
	// which the ingest API takes with the client-failure token.
	ClientFailures Records = iota
	// Routing: a proxy's routing, its endpoints added and removed
	// (dataplane_endpoint_*): they feed the measured propagation lag and
	// "out of rotation", so the ingest API takes them only when told to
	// and only with the dataplane token.
	Routing
	// PodLog: one pod's proxy log, its drain and exit (proxy_state), its
	// records the pod's own (Options.Pod names it): the operator's import
	// takes them, the ingest API never, since a client's token would let
	// it speak for any pod.
	PodLog
)

var formats = []Format{
	{Name: "vegeta-json", Summary: "vegeta encode --to json output", parse: ParseVegetaJSON},
	{Name: "vegeta-csv", Summary: "vegeta encode --to csv output", parse: ParseVegetaCSV},
	{Name: "nginx", Summary: "nginx access log: combined + $upstream_addr $upstream_status $request_time, or --nginx-format",
		LogFormat: true, ErrorLog: true, parse: ParseNginx},
	{Name: "ingress-nginx", Summary: "ingress-nginx access log, upstreaminfo format ([$proxy_upstream_name] gives the Service), or --nginx-format",
		LogFormat: true, ErrorLog: true, parse: ParseIngressNginx},
	{Name: "nginx-error", Summary: "nginx error log alone: each upstream attempt that failed (refused, timed out, reset, closed, no live upstreams)", parse: ParseNginxError},
	{Name: "haproxy", Summary: "HAProxy HTTP log (option httplog), with %si:%sp after the request for the pod", parse: ParseHAProxy},
	{Name: "traefik", Summary: "Traefik JSON access log (StartUTC, Duration, ServiceAddr, ServiceName)", parse: ParseTraefik},
	{Name: "alb", Summary: "AWS Application Load Balancer access log", parse: ParseALB},
	{Name: "gcp-lb", Summary: "Google Cloud HTTP(S) load balancer request log, one LogEntry JSON per line", parse: ParseGCPLB},
	{Name: "target-health", Summary: "timestamped aws elbv2 describe-target-health or gcloud get-health JSON: the load balancer's endpoint changes",
		Records: Routing, ProxyPerFile: true, parse: ParseTargetHealth},
	{Name: "envoy", Summary: "envoy access log, default text format (or Istio's)", parse: ParseEnvoy},
	{Name: "envoy-json", Summary: "envoy access log, json_format with Istio's keys", parse: ParseEnvoyJSON},
	{Name: "envoy-clusters", Summary: "timestamped snapshots of envoy's admin /clusters: endpoint membership changes",
		Records: Routing, ProxyPerFile: true, parse: ParseEnvoyClusters},
	{Name: "istio-proxy", Summary: "an istio-proxy container's log (kubectl logs POD -c istio-proxy): the proxy's drain and exit, with --pod",
		Records: PodLog, parse: ParseIstioProxy},
	{Name: "linkerd-proxy", Summary: "a linkerd-proxy container's log (kubectl logs --timestamps POD -c linkerd-proxy): its shutdown, with --pod",
		Records: PodLog, parse: ParseLinkerdProxy},
	{Name: "jsonl", Summary: "generic JSON lines: time, target, error, status …", parse: ParseJSONLines},
	{Name: "csv", Summary: "generic CSV with a header: time, target, error, status …", parse: ParseCSV},
}

// Dataplane reports whether f's records are a proxy's endpoint changes
// rather than client failures.
func (f Format) Dataplane() bool { return f.Records == Routing }

// PodLog reports whether f reads one pod's container log, its records the
// pod's own (Options.Pod names it).
func (f Format) PodLog() bool { return f.Records == PodLog }

// ClientFailureFormats names the formats whose records are client
// failures: what the ingest API takes unless told otherwise.
func ClientFailureFormats() []string {
	var out []string
	for _, f := range formats {
		if !f.Dataplane() && !f.PodLog() {
			out = append(out, f.Name)
		}
	}
	return out
}

// Formats lists the formats, in a stable order.
func Formats() []Format { return append([]Format(nil), formats...) }

// FormatNames lists the formats' names.
func FormatNames() []string {
	out := make([]string, len(formats))
	for i, f := range formats {
		out[i] = f.Name
	}
	return out
}

// formatsWith names the formats ok takes, "a, b and c".
func formatsWith(ok func(Format) bool) string {
	var names []string
	for _, f := range formats {
		if ok(f) {
			names = append(names, f.Name)
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// FormatsWith is formatsWith for the importer's messages.
func FormatsWith(ok func(Format) bool) string { return formatsWith(ok) }

// LookupFormat returns the format called name.
func LookupFormat(name string) (Format, error) {
	for _, f := range formats {
		if f.Name == name {
			return f, nil
		}
	}
	return Format{}, fmt.Errorf("unknown format %q (want one of %s)", name, strings.Join(FormatNames(), ", "))
}

// Parser binds the format to opts, checking them first (a log_format that
// does not compile, a log_format given to a format that has none).
func (f Format) Parser(opts Options) (Parser, error) {
	if opts.LogFormat != "" {
		if !f.LogFormat {
			return nil, fmt.Errorf("a log format applies to %s only, not %s", formatsWith(func(f Format) bool { return f.LogFormat }), f.Name)
		}
		if _, err := CompileNginx(opts.LogFormat); err != nil {
			return nil, err
		}
	}
	if f.PodLog() {
		if _, _, err := podOf(opts); err != nil {
			return nil, fmt.Errorf("the %s format: %w", f.Name, err)
		}
	} else if opts.Pod != "" || opts.Container != "" {
		return nil, fmt.Errorf("a pod (--pod, --container) applies to a proxy's own log only (istio-proxy, linkerd-proxy), not %s", f.Name)
	}
	if opts.ErrorLog != nil && !f.ErrorLog {
		return nil, fmt.Errorf("an error log joins %s only, not %s", formatsWith(func(f Format) bool { return f.ErrorLog }), f.Name)
	}
	return withClientTimeout(func(r io.Reader, emit Emit) error { return f.parse(r, opts, emit) }, opts), nil
}

// withClientTimeout gives a timeout logged with no duration the client's
// timeout as its duration: the line's own (timeout_ms), else
// opts.ClientTimeout. A timeout is logged at its end; with its duration
// the analysis aligns it at its start, when the request went out.
func withClientTimeout(p Parser, opts Options) Parser {
	return func(r io.Reader, emit Emit) error {
		return p(r, func(rec *Record) error {
			if rec.Err == nil && rec.Failed && rec.Kind == "" && rec.Reason == event.FailTimeout && rec.Duration == 0 {
				d := rec.Timeout
				if d == 0 {
					d = opts.ClientTimeout
				}
				if d > 0 {
					rec.Duration = d
					rec.attr(AttrDurationFrom, DurationFromClientTimeout)
				}
			}
			return emit(rec)
		})
	}
}
