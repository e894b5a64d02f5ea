package ingest

import (
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/drainscope/drainscope/event"
)

// Attributes of the load balancers' logs.
const (
	AttrErrorReason   = "error_reason"   // ALB's error_reason
	AttrTargetStatus  = "target_status"  // ALB's target_status_code ("-": the target sent no response)
	AttrStatusDetails = "status_details" // Google Cloud's statusDetails
	AttrTargetGroup   = "target_group"   // ALB's target group ARN
	AttrOriginStatus  = "origin_status"  // Traefik's OriginStatus (0: the backend sent no response)
)

// traefikEntry holds the fields of Traefik's JSON access log drainscope uses.
type traefikEntry struct {
	StartUTC         *string         `json:"StartUTC"`
	Duration         json.RawMessage `json:"Duration"`
	DownstreamStatus *int            `json:"DownstreamStatus"`
	OriginStatus     *int            `json:"OriginStatus"`
	ServiceAddr      string          `json:"ServiceAddr"`
	ServiceName      string          `json:"ServiceName"`
	ClientAddr       string          `json:"ClientAddr"`
	RequestMethod    string          `json:"RequestMethod"`
	RequestHost      string          `json:"RequestHost"`
	RequestPath      string          `json:"RequestPath"`
}

// ParseTraefik reads Traefik's JSON access log (accessLog.format=json): the
// failure's time is StartUTC plus Duration (nanoseconds), its status
// DownstreamStatus (what the client got), its backend ServiceAddr (the
// pod's ip:port) and its Service ServiceName (the Kubernetes Ingress
// provider's namespace-service-port@kubernetes, resolved as ingress-nginx's
// upstream names are). An OriginStatus of 0 says the backend sent no
// response: Traefik's log does not say whether it refused, reset or closed.
func ParseTraefik(r io.Reader, opts Options, emit Emit) error {
	var v traefikEntry
	return scanLines(r, emit, func(line []byte, rec *Record) *LineError {
		v = traefikEntry{}
		if err := json.Unmarshal(line, &v); err != nil {
			return jsonError(line, err)
		}
		for _, f := range [...]struct {
			name string
			s    string
		}{{"ServiceAddr", v.ServiceAddr}, {"ServiceName", v.ServiceName}, {"ClientAddr", v.ClientAddr},
			{"RequestMethod", v.RequestMethod}, {"RequestHost", v.RequestHost}, {"RequestPath", v.RequestPath}} {
			if err := checkJSONString(f.s); err != nil {
				return lineErr(0, f.name, "%v", err)
			}
		}
		switch {
		case v.StartUTC == nil:
			return lineErr(0, "StartUTC", "missing")
		case v.DownstreamStatus == nil:
			return lineErr(0, "DownstreamStatus", "missing")
		}
		start, err := parseRFC3339(*v.StartUTC)
		if err != nil {
			return lineErr(0, "StartUTC", "%v", err)
		}
		var d int64
		if ds, err := jsonScalar(v.Duration); err != nil {
			return lineErr(0, "Duration", "%v", err)
		} else if ds != "" {
			if d, err = strconv.ParseInt(ds, 10, 64); err != nil || d < 0 {
				return lineErr(0, "Duration", "%q is not a count of nanoseconds", truncate(ds, 30))
			}
		}
		end, lerr := endTime(start, d, "Duration")
		if lerr != nil {
			return lerr
		}
		code := *v.DownstreamStatus
		if code < 0 || code > 999 {
			return lineErr(0, "DownstreamStatus", "%d is not an HTTP status", code)
		}
		rec.Time, rec.Status, rec.Duration = end, code, time.Duration(d)
		rec.Failed = code == 0 || opts.failStatus(code)
		if !rec.Failed {
			return nil
		}
		rec.Reason = event.FailStatus
		if code == 0 {
			rec.Reason = event.FailOther
		}
		rec.attr(event.AttrVia, event.ProxyTraefik)
		if v.OriginStatus != nil {
			rec.attr(AttrOriginStatus, strconv.Itoa(*v.OriginStatus))
		}
		if ap, ok := parseAddr(v.ServiceAddr); ok && ap.Addr().IsValid() {
			rec.Backend = ap.String()
		}
		rec.attr(AttrUpstreamName, v.ServiceName)
		if a, ok := parseAddr(v.ClientAddr); ok {
			rec.Client = a
		}
		rec.attr(AttrMethod, v.RequestMethod)
		rec.Target = v.RequestHost + v.RequestPath
		return nil
	})
}

// albFieldNames name an ALB access log entry's fields, in order.
var albFieldNames = []string{"type", "time", "elb", "client:port", "target:port", "request_processing_time",
	"target_processing_time", "response_processing_time", "elb_status_code", "target_status_code",
	"received_bytes", "sent_bytes", "request", "user_agent", "ssl_cipher", "ssl_protocol", "target_group_arn",
	"trace_id", "domain_name", "chosen_cert_arn", "matched_rule_priority", "request_creation_time",
	"actions_executed", "redirect_url", "error_reason", "target:port_list", "target_status_code_list",
	"classification", "classification_reason", "conn_trace_id"}

// ParseALB reads AWS Application Load Balancer access logs (one entry per
// line, space-separated, as ALB writes them to S3; gunzipped or not). The
// failure's time is `time` (when the load balancer answered), its start
// request_creation_time; its status elb_status_code; its backend
// target:port, the pod in IP target mode. A 504 whose target_status_code
// is "-" is a timeout (the target never answered); a 502 with "-" is the
// target closing, resetting or refusing the connection, which ALB's log does
// not tell apart: it stays a gateway error, with error_reason when ALB gave
// one. Network Load Balancers log only TLS listeners' connections, with no
// target and no status: there is nothing to import from them.
func ParseALB(r io.Reader, opts Options, emit Emit) error {
	var toks []string
	return scanLines(r, emit, func(line []byte, rec *Record) *LineError {
		var lerr *LineError
		toks, lerr = envoyTokens(line, toks[:0])
		if lerr != nil {
			lerr.Field = FieldLine
			return lerr
		}
		if len(toks) < 13 {
			return lineErr(0, albFieldNames[len(toks)], "missing: the entry has %d fields, ALB writes at least 13", len(toks))
		}
		at := func(i int) string {
			if i >= len(toks) {
				return ""
			}
			return strings.Trim(toks[i], `"`)
		}
		switch at(0) {
		case "http", "https", "h2", "grpcs", "ws", "wss":
		default:
			return lineErr(0, "type", "%q is not an ALB request type (http, https, h2, grpcs, ws, wss)", truncate(at(0), 20))
		}
		end, err := parseRFC3339(at(1))
		if err != nil {
			return lineErr(0, "time", "%v", err)
		}
		code, err := strconv.Atoi(at(8))
		if err != nil || code < 0 || code > 999 {
			if at(8) != "-" {
				return lineErr(0, "elb_status_code", "%q is not an HTTP status", truncate(at(8), 20))
			}
			code = 0
		}
		rec.Time, rec.Status = end, code
		if s := at(21); s != "" && s != "-" {
			start, err := parseRFC3339(s)
			if err != nil {
				return lineErr(0, "request_creation_time", "%v", err)
			}
			if start <= end {
				rec.Duration = time.Duration(end - start)
			}
		}
		rec.Failed = code == 0 || opts.failStatus(code)
		if !rec.Failed {
			return nil
		}
		ts := at(9)
		rec.Reason = event.FailStatus
		if code == 504 && ts == "-" {
			rec.Reason = event.FailTimeout
		}
		rec.attr(event.AttrVia, event.ProxyALB)
		rec.attr(AttrTargetStatus, ts)
		if a, ok := parseAddr(at(3)); ok {
			rec.Client = a
		}
		if ap, ok := parseAddr(at(4)); ok && ap.Addr().IsValid() {
			rec.Backend = ap.String()
		}
		if m, u, ok := strings.Cut(at(12), " "); ok {
			rec.attr(AttrMethod, m)
			if i := strings.LastIndexByte(u, ' '); i >= 0 {
				u = u[:i]
			}
			rec.Target = u
		}
		if tg := at(16); tg != "-" {
			rec.attr(AttrTargetGroup, tg)
		}
		if er := at(24); er != "-" {
			rec.attr(AttrErrorReason, er)
		}
		return nil
	})
}

// gcpEntry is the part of a Google Cloud HTTP(S) load balancer LogEntry
// drainscope uses.
type gcpEntry struct {
	Timestamp   *string `json:"timestamp"`
	HTTPRequest *struct {
		Status        *int   `json:"status"`
		Latency       string `json:"latency"`
		ServerIP      string `json:"serverIp"`
		RemoteIP      string `json:"remoteIp"`
		RequestMethod string `json:"requestMethod"`
		RequestURL    string `json:"requestUrl"`
	} `json:"httpRequest"`
	JSONPayload struct {
		StatusDetails string `json:"statusDetails"`
	} `json:"jsonPayload"`
	Resource struct {
		Labels struct {
			BackendServiceName string `json:"backend_service_name"`
		} `json:"labels"`
	} `json:"resource"`
}

// gcpStatusDetails maps Google Cloud's statusDetails to the class of
// failure the client saw.
var gcpStatusDetails = map[string]string{
	"failed_to_connect_to_backend":                          event.FailRefused, // a new connection no backend accepted (refused, or its connect timed out)
	"backend_connection_closed_before_data_sent_to_client":  event.FailEOF,
	"backend_connection_closed_after_partial_response_sent": event.FailEOF,
	"backend_timeout": event.FailTimeout,
	"backend_early_response_with_non_error_status": event.FailStatus,
	"failed_to_pick_backend":                       event.FailStatus, // no healthy backend
	"response_sent_by_backend":                     event.FailStatus,
}

// ParseGCPLB reads Google Cloud HTTP(S) load balancer request logs as
// exported from Cloud Logging, one LogEntry JSON per line (`gcloud logging
// read … --format=json` piped through `jq -c '.[]'`, or a sink's files).
// timestamp is when the load balancer received the request: the failure's
// time is it plus httpRequest.latency. httpRequest.serverIp is the backend,
// the pod with container-native load balancing (NEGs); statusDetails gives
// the mechanism (failed_to_connect_to_backend is refused,
// backend_connection_closed_* eof, backend_timeout a timeout).
func ParseGCPLB(r io.Reader, opts Options, emit Emit) error {
	var v gcpEntry
	return scanLines(r, emit, func(line []byte, rec *Record) *LineError {
		v = gcpEntry{}
		if err := json.Unmarshal(line, &v); err != nil {
			return jsonError(line, err)
		}
		if v.Timestamp == nil {
			return lineErr(0, "timestamp", "missing")
		}
		if v.HTTPRequest == nil || v.HTTPRequest.Status == nil {
			return lineErr(0, "httpRequest.status", "missing: not an HTTP(S) load balancer request log")
		}
		h := v.HTTPRequest
		for _, f := range [...]struct{ name, s string }{{"httpRequest.serverIp", h.ServerIP}, {"httpRequest.remoteIp", h.RemoteIP},
			{"httpRequest.requestMethod", h.RequestMethod}, {"httpRequest.requestUrl", h.RequestURL},
			{"jsonPayload.statusDetails", v.JSONPayload.StatusDetails}, {"resource.labels.backend_service_name", v.Resource.Labels.BackendServiceName}} {
			if err := checkJSONString(f.s); err != nil {
				return lineErr(0, f.name, "%v", err)
			}
		}
		start, err := parseRFC3339(*v.Timestamp)
		if err != nil {
			return lineErr(0, "timestamp", "%v", err)
		}
		var d time.Duration
		if h.Latency != "" {
			v, err := parseDecimal(strings.TrimSuffix(h.Latency, "s"), 9)
			if err != nil || !strings.HasSuffix(h.Latency, "s") {
				return lineErr(0, "httpRequest.latency", "%q is not a duration like 0.012s", truncate(h.Latency, 30))
			}
			d = time.Duration(v)
		}
		end, lerr := endTime(start, int64(d), "httpRequest.latency")
		if lerr != nil {
			return lerr
		}
		code := *h.Status
		if code < 0 || code > 999 {
			return lineErr(0, "httpRequest.status", "%d is not an HTTP status", code)
		}
		rec.Time, rec.Status, rec.Duration = end, code, d
		rec.Failed = code == 0 || opts.failStatus(code)
		if !rec.Failed {
			return nil
		}
		sd := v.JSONPayload.StatusDetails
		rec.Reason = event.FailStatus
		if c, ok := gcpStatusDetails[sd]; ok {
			rec.Reason = c
		} else if code == 0 {
			rec.Reason = event.FailOther
		}
		rec.attr(event.AttrVia, event.ProxyGCPLB)
		rec.attr(AttrStatusDetails, sd)
		rec.attr(AttrUpstreamClstr, v.Resource.Labels.BackendServiceName)
		if a, ok := parseAddr(h.ServerIP); ok && a.Addr().IsValid() {
			rec.Backend = a.Addr().String()
		}
		if a, ok := parseAddr(h.RemoteIP); ok {
			rec.Client = a
		}
		rec.attr(AttrMethod, h.RequestMethod)
		rec.Target = h.RequestURL
		return nil
	})
}
