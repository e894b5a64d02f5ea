package ingest

import (
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/drainscope/drainscope/event"
)

// IngressNginxFormat is ingress-nginx's default log format, upstreaminfo,
// as the controller's configmap defines it (log-format-upstream).
const IngressNginxFormat = `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_length $request_time [$proxy_upstream_name] [$proxy_alternative_upstream_name] $upstream_addr $upstream_response_length $upstream_response_time $upstream_status $req_id`

// AttrTimeResolution marks a failure whose time is coarser than the
// analysis would like: "1s" for nginx's $time_local.
const AttrTimeResolution = "time_resolution"

// ingressPlaceholder is the address of the placeholder server in
// ingress-nginx's upstream_balancer block: a request whose balancer found
// no endpoint is logged with it, and it is no pod.
var ingressPlaceholder = netip.MustParseAddr("0.0.0.1")

// ParseIngressNginx reads ingress-nginx's access log in its default
// upstreaminfo format (or opts.LogFormat, a custom log-format-upstream).
// Beyond what the nginx format reads, each failure keeps
// $proxy_upstream_name (namespace-service-port), which the importer
// resolves to the Service, and a request that no endpoint served (a 503
// whose upstream is "-" or the balancer's placeholder 0.0.0.1) names no
// backend. $time_local is whole seconds: the failure's time is the second
// nginx wrote, marked coarse (time_resolution 1s), with $request_time as
// its duration.
func ParseIngressNginx(r io.Reader, opts Options, emit Emit) error {
	src := opts.LogFormat
	if src == "" {
		src = IngressNginxFormat
	}
	f, err := CompileNginx(src)
	if err != nil {
		return err
	}
	f.ingress = true
	return f.Parse(r, opts, emit)
}

// ingressNginxFailure adds ingress-nginx's extras to a failed record.
func ingressNginxFailure(f *NginxFormat, l *nginxLine, rec *Record) {
	if v, ok := l.get(f, "proxy_upstream_name"); ok && v != "" && v != "-" {
		rec.attr(AttrUpstreamName, v)
	}
	rec.attr(event.AttrVia, event.ProxyNginx)
	if f.timeVar == "time_local" {
		rec.attr(AttrTimeResolution, "1s")
	}
	if ap, ok := parseAddr(rec.Backend); ok && ap.Addr() == ingressPlaceholder {
		rec.Backend = ""
	}
}

// rawZoneOffset is the zone offset, in seconds, of a logged time: the one it
// carries ($time_local, $time_iso8601), or Options.TimeZone's for $msec.
func rawZoneOffset(timeVar string, raw []byte, ns int64, opts *Options) int64 {
	switch timeVar {
	case "time_local":
		if len(raw) == timeLocalLen {
			zh, ok1 := digits(raw[22:24])
			zm, ok2 := digits(raw[24:26])
			if ok1 && ok2 {
				off := int64((zh*60 + zm) * 60)
				if raw[21] == '-' {
					off = -off
				}
				return off
			}
		}
	case "time_iso8601":
		if t, err := time.Parse(time.RFC3339Nano, string(raw)); err == nil {
			_, off := t.Zone()
			return int64(off)
		}
	default:
		if opts.TimeZone != nil {
			_, off := time.Unix(0, ns).In(opts.TimeZone).Zone()
			return int64(off)
		}
	}
	return 0
}

// UpstreamService resolves a proxy's upstream name of the form
// namespace-service-port (ingress-nginx's $proxy_upstream_name, Traefik's
// Kubernetes Ingress service names without their @provider) to the
// Service, as namespace/name. Namespaces and names may hold dashes, so the
// name alone is ambiguous when more than one dash precedes the port:
// known (namespace/name → true) decides among the splits, and the one
// split it holds is the answer. With no known Service matching, the name
// is resolved only when it can be split one way (one dash before the
// port); otherwise "" (the failure keeps the name, and no Service).
func UpstreamService(upstream string, known func(key string) bool) string {
	if i := strings.LastIndexByte(upstream, '@'); i >= 0 {
		upstream = upstream[:i]
	}
	if upstream == "upstream-default-backend" || upstream == "default-backend" {
		return "" // ingress-nginx's own default backend: no Service of the user's
	}
	dash := strings.LastIndexByte(upstream, '-')
	if dash <= 0 || dash == len(upstream)-1 {
		return ""
	}
	rest := upstream[:dash] // namespace-service
	var found string
	n := 0
	splits := 0
	for i := 0; i < len(rest); i++ {
		if rest[i] != '-' || i == 0 || i == len(rest)-1 {
			continue
		}
		splits++
		key := rest[:i] + "/" + rest[i+1:]
		if known != nil && known(key) {
			found = key
			n++
		}
	}
	switch {
	case n == 1:
		return found
	case n == 0 && splits == 1:
		i := strings.IndexByte(rest, '-')
		return rest[:i] + "/" + rest[i+1:]
	}
	return ""
}
