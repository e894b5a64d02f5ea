package ingest

import (
	"fmt"
	"io"
	"strings"

	"github.com/drainscope/drainscope/event"
)

// Format is one input format the importer and the HTTP handler accept.
type Format struct {
	Name    string
	Summary string
	parse   func(io.Reader, Options, Emit) error
}

var formats = []Format{
	{"vegeta-json", "vegeta encode --to json output", ParseVegetaJSON},
	{"vegeta-csv", "vegeta encode --to csv output", ParseVegetaCSV},
	{"nginx", "nginx access log: combined + $upstream_addr $upstream_status $request_time, or --nginx-format", ParseNginx},
	{"ingress-nginx", "ingress-nginx access log, upstreaminfo format ([$proxy_upstream_name] gives the Service), or --nginx-format", ParseIngressNginx},
	{"nginx-error", "nginx error log alone: each upstream attempt that failed (refused, timed out, reset, closed, no live upstreams)", ParseNginxError},
	{"haproxy", "HAProxy HTTP log (option httplog), with %si:%sp after the request for the pod", ParseHAProxy},
	{"traefik", "Traefik JSON access log (StartUTC, Duration, ServiceAddr, ServiceName)", ParseTraefik},
	{"alb", "AWS Application Load Balancer access log", ParseALB},
	{"gcp-lb", "Google Cloud HTTP(S) load balancer request log, one LogEntry JSON per line", ParseGCPLB},
	{"target-health", "timestamped aws elbv2 describe-target-health or gcloud get-health JSON: the load balancer's endpoint changes", ParseTargetHealth},
	{"envoy", "envoy access log, default text format (or Istio's)", ParseEnvoy},
	{"envoy-json", "envoy access log, json_format with Istio's keys", ParseEnvoyJSON},
	{"envoy-clusters", "timestamped snapshots of envoy's admin /clusters: endpoint membership changes", ParseEnvoyClusters},
	{"istio-proxy", "an istio-proxy container's log (kubectl logs POD -c istio-proxy): the proxy's drain and exit, with --pod", ParseIstioProxy},
	{"linkerd-proxy", "a linkerd-proxy container's log (kubectl logs --timestamps POD -c linkerd-proxy): its shutdown, with --pod", ParseLinkerdProxy},
	{"jsonl", "generic JSON lines: time, target, error, status …", ParseJSONLines},
	{"csv", "generic CSV with a header: time, target, error, status …", ParseCSV},
}

// dataplaneFormats are the formats whose records are a proxy's routing
// (endpoint added or removed), not client failures: they feed the measured
// propagation lag and "out of rotation", so the ingest API takes them only
// when told to and only with a token of their own.
var dataplaneFormats = map[string]bool{"envoy-clusters": true}

// Dataplane reports whether f's records are a proxy's endpoint changes
// rather than client failures.
func (f Format) Dataplane() bool { return dataplaneFormats[f.Name] }

// podFormats are the formats whose records speak for the pod Options.Pod
// names (its proxy's drain and exit): the operator's import takes them,
// the ingest API never, since a client's token would let it speak for any
// pod.
var podFormats = map[string]bool{"istio-proxy": true, "linkerd-proxy": true}

// PodLog reports whether f reads one pod's container log, its records the
// pod's own (Options.Pod names it).
func (f Format) PodLog() bool { return podFormats[f.Name] }

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
		if f.Name == "ingress-nginx" {
			if _, err := CompileNginx(opts.LogFormat); err != nil {
				return nil, err
			}
			return func(r io.Reader, emit Emit) error { return f.parse(r, opts, emit) }, nil
		}
		if f.Name != "nginx" {
			return nil, fmt.Errorf("a log format applies to the nginx format only (and ingress-nginx), not %s", f.Name)
		}
		nf, err := CompileNginx(opts.LogFormat)
		if err != nil {
			return nil, err
		}
		return withClientTimeout(func(r io.Reader, emit Emit) error { return nf.Parse(r, opts, emit) }, opts), nil
	}
	if f.PodLog() {
		if _, _, err := podOf(opts); err != nil {
			return nil, fmt.Errorf("the %s format: %w", f.Name, err)
		}
	} else if opts.Pod != "" || opts.Container != "" {
		return nil, fmt.Errorf("a pod (--pod, --container) applies to a proxy's own log only (istio-proxy, linkerd-proxy), not %s", f.Name)
	}
	if opts.ErrorLog != nil && f.Name != "nginx" && f.Name != "ingress-nginx" {
		return nil, fmt.Errorf("an error log joins the nginx and ingress-nginx formats only, not %s", f.Name)
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
