package ingest

import (
	"fmt"
	"io"
	"maps"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/drainscope/drainscope/event"
)

// Record is one line of a client or proxy log as a parser read it. Parsers
// reuse the Record they pass to Emit: copy what must outlive the call.
type Record struct {
	Line int        // 1-based line (for CSV: the line the record starts on)
	Err  *LineError // non-nil when the line was rejected; then only Line is set

	Failed   bool
	Time     int64         // UTC ns when the client saw the outcome (request end)
	Status   int           // HTTP status; 0 when no response arrived
	Reason   string        // failure class (event.Fail*), when Failed
	Error    string        // the tool's own error text, when it gave one
	Duration time.Duration // request duration, 0 when unknown
	Timeout  time.Duration // the client's timeout for this request (timeout_ms), 0 when not given
	Client   netip.AddrPort
	Remote   netip.AddrPort // address the client dialled
	Target   string         // URL or host+path the client asked for
	Backend  string         // upstream address that answered or failed, as logged
	Service  string
	Attrs    map[string]string // format-specific extras, only on failures

	// Kind, when set, makes the record a proxy's endpoint change
	// (event.DataplaneEndpointAdded/Removed) rather than a client failure:
	// Node is the proxy, Remote the endpoint, Service and Namespace the
	// Service it serves. Failed is set too, so it is stored like one.
	Kind      event.Kind
	Node      string
	Namespace string
	// Pod and Container, with Namespace, name the pod (and container) a
	// record is about where its log does (a mesh proxy's own log: Kind
	// event.ProxyState, or a failure of its connection to the app).
	Pod, Container string
}

// reset clears r for the next line, keeping its Attrs map for reuse.
func (r *Record) reset(line int) {
	a := r.Attrs
	clear(a)
	*r = Record{Line: line, Attrs: a}
}

// attr sets an extra attribute on a failure.
func (r *Record) attr(k, v string) {
	if v == "" {
		return
	}
	if r.Attrs == nil {
		r.Attrs = make(map[string]string, 4)
	}
	r.Attrs[k] = v
}

// Emit receives each line a parser reads, in order. Returning an error stops
// the parser, which returns that error.
type Emit func(*Record) error

// Parser reads one format from r, calling emit for every record. It returns
// an error only when reading r fails or emit returns one; bad lines are
// reported through emit, and parsing goes on after them.
type Parser func(r io.Reader, emit Emit) error

// Extra attribute keys ingest sets on client_failure events, beside
// event.AttrBackend and event.AttrTarget.
const (
	AttrError          = "error"           // the client's error text
	AttrMethod         = "method"          // HTTP method
	AttrUpstreams      = "upstreams"       // nginx: every upstream tried, as logged
	AttrUpstreamStatus = "upstream_status" // nginx: their statuses
	AttrResponseFlags  = "response_flags"  // envoy
	AttrDetails        = "details"         // envoy: response code details, transport failure reason
	AttrUpstreamClstr  = "upstream_cluster"
	AttrOccurrence     = "occurrence" // n for the nth identical failure in one input, from 2
	// AttrDurationFrom says where a failure's duration came from when the
	// log did not give it: DurationFromClientTimeout.
	AttrDurationFrom = "duration_from"
)

// DurationFromClientTimeout (Attrs[duration_from]): the duration of a
// timeout logged without one is the client's timeout (timeout_ms or
// --client-timeout).
const DurationFromClientTimeout = "client_timeout"

// LineError says why a line was rejected, naming where and which field.
type LineError struct {
	File  string // set by the importer; empty for an HTTP body
	Line  int
	Field string // the field at fault, or "(line)" for the whole line
	Msg   string
	// Unterminated marks the last line of an input that did not end with a
	// newline: a likely sign of a truncated file.
	Unterminated bool
	// final marks a rejection after which nothing more of the input is
	// read (a binary input, a CSV header that names no time column).
	final bool
}

// FieldLine is the Field of a LineError about the line as a whole.
const FieldLine = "(line)"

func (e *LineError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
	} else {
		b.WriteString("line ")
	}
	b.WriteString(strconv.Itoa(e.Line))
	b.WriteString(": field ")
	b.WriteString(e.Field)
	b.WriteString(": ")
	b.WriteString(e.Msg)
	if e.Unterminated {
		b.WriteString(" (last line has no newline: truncated file?)")
	}
	return b.String()
}

func lineErr(line int, field, format string, args ...any) *LineError {
	return &LineError{Line: line, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Options tune the parsers. The zero value is ready to use.
type Options struct {
	// LogFormat is the nginx log_format string; empty means DefaultNginxFormat.
	LogFormat string
	// FailStatus is the set of HTTP statuses counted as failures; the zero
	// set means 500–599.
	FailStatus CodeSet
	// ProxyName is the Node of the envoy-clusters format's events (the
	// envoy instance); empty means "envoy".
	ProxyName string
	// BaselineOnly makes envoy-clusters' first snapshot only the baseline
	// the next are diffed against; by default its healthy hosts are also
	// emitted as added at its time, as the agent records kube-proxy's rules
	// when it starts: the analysis reads events in time order, so a proxy's
	// view of an endpoint begins with its first event, and a removal alone
	// cannot speak for the time before it.
	BaselineOnly bool
	// TimeZone is the zone of times a log writes without one (nginx's
	// error log, HAProxy's %tr); nil means UTC.
	TimeZone *time.Location
	// ErrorLog, for the nginx and ingress-nginx formats, is the proxy's
	// error log: each failed line that an entry of it explains takes that
	// entry's mechanism (refused, timeout, reset, eof).
	ErrorLog *NginxErrorLog
	// Service is the Kubernetes Service (namespace/name) that the
	// target-health formats' target group or backend service serves; empty
	// means the one the snapshot's timestamp line names, else ProxyName.
	Service string
	// Pod is the pod (namespace/name) whose proxy's log the istio-proxy
	// and linkerd-proxy formats read, Container its container (default
	// istio-proxy, linkerd-proxy): such a log names neither.
	Pod, Container string
	// ClientTimeout is the clients' request timeout: a timeout logged with
	// no duration (and no timeout_ms of its own) is taken to have lasted
	// this long, so that it is aligned at its start. 0: left unknown.
	ClientTimeout time.Duration
}

func (o *Options) failStatus(code int) bool {
	if o.FailStatus.IsZero() {
		return code >= 500 && code <= 599
	}
	return o.FailStatus.Has(code)
}

// CodeSet is a set of HTTP status codes (100–999).
type CodeSet struct{ bits [16]uint64 }

// IsZero reports whether the set is empty.
func (s CodeSet) IsZero() bool { return s == CodeSet{} }

// Has reports whether code is in the set.
func (s CodeSet) Has(code int) bool {
	if code < 0 || code >= 1000 {
		return false
	}
	return s.bits[code>>6]&(1<<(code&63)) != 0
}

func (s *CodeSet) add(code int) { s.bits[code>>6] |= 1 << (code & 63) }

// ParseCodeSet parses a list like "500-599,429".
func ParseCodeSet(spec string) (CodeSet, error) {
	var s CodeSet
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(strings.TrimSpace(lo))
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(strings.TrimSpace(hi))
		}
		if err1 != nil || err2 != nil || a < 100 || b > 999 || a > b {
			return CodeSet{}, fmt.Errorf("status set %q: %q is not a code or range within 100-999", spec, part)
		}
		for c := a; c <= b; c++ {
			s.add(c)
		}
	}
	if s.IsZero() {
		return CodeSet{}, fmt.Errorf("status set %q: empty", spec)
	}
	return s, nil
}

// Classify maps a client's error text to a failure class. It knows the
// wording of Go's net/http, Python's requests/urllib3, curl, Java and
// envoy's details. A connect that found no route to its address (the
// host's address lookup failed: a pod whose network is gone) is a
// connection no one answered, a timeout, as in nginx's error log.
func Classify(msg string) string {
	if msg == "" {
		return event.FailOther
	}
	l := strings.ToLower(msg)
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(l, s) {
				return true
			}
		}
		return false
	}
	switch {
	case has("refused", "econnrefused"):
		return event.FailRefused
	case has("reset", "broken pipe", "epipe"):
		return event.FailReset
	case has("timeout", "timed out", "deadline exceeded", "no route to host", "host is unreachable", "host unreachable",
		"network is unreachable", "ehostunreach", "enetunreach"):
		return event.FailTimeout
	case hasWord(l, "eof") || has("remotedisconnected", "remote end closed", "server closed idle connection",
		"closed connection", "connection closed", "prematurely closed", "empty reply", "connection_termination"):
		return event.FailEOF
	}
	return event.FailOther
}

// hasWord reports whether w occurs in s not surrounded by letters.
func hasWord(s, w string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], w)
		if j < 0 {
			return false
		}
		j += i
		before := j == 0 || !isLetter(s[j-1])
		after := j+len(w) == len(s) || !isLetter(s[j+len(w)])
		if before && after {
			return true
		}
		i = j + 1
	}
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// validReason reports whether s is one of the failure classes.
func validReason(s string) bool {
	switch s {
	case event.FailEOF, event.FailRefused, event.FailReset, event.FailTimeout, event.FailStatus, event.FailOther:
		return true
	}
	return false
}

// Event turns a failed record into an unsealed client_failure event. Pod
// resolution and sealing are the caller's.
func (r *Record) Event() event.Event {
	var pod event.PodRef
	if r.Pod != "" {
		pod = event.PodRef{Namespace: r.Namespace, Name: r.Pod, Container: r.Container}
	}
	if r.Kind == event.ProxyState {
		return event.Event{Time: r.Time, Kind: r.Kind, Source: event.SourceClient, Pod: pod, Reason: r.Reason, Attrs: maps.Clone(r.Attrs)}
	}
	if r.Kind != "" {
		return event.Event{Time: r.Time, Kind: r.Kind, Node: r.Node, Source: event.SourceDataplane,
			Pod: event.PodRef{Namespace: r.Namespace}, Service: r.Service, Local: r.Remote, Attrs: maps.Clone(r.Attrs)}
	}
	e := event.Event{
		Time:     r.Time,
		Kind:     event.ClientFailure,
		Source:   event.SourceClient,
		Code:     int32(r.Status),
		Duration: int64(r.Duration),
		Local:    r.Client,
		Remote:   r.Remote,
		Service:  r.Service,
		Reason:   r.Reason,
		Pod:      pod,
	}
	n := len(r.Attrs) + 3
	attrs := make(map[string]string, n)
	for k, v := range r.Attrs {
		attrs[k] = v
	}
	if r.Backend != "" {
		attrs[event.AttrBackend] = r.Backend
	}
	if r.Target != "" {
		attrs[event.AttrTarget] = r.Target
	}
	if r.Error != "" {
		attrs[AttrError] = r.Error
	}
	if len(attrs) > 0 {
		e.Attrs = attrs
	}
	return e
}

// parseAddr reads "ip", "ip:port" or "[v6]:port"; "-" and "" are the zero
// address. ok is false for anything else (a host name, a unix socket).
func parseAddr(s string) (netip.AddrPort, bool) {
	if s == "" || s == "-" {
		return netip.AddrPort{}, true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(a.Unmap(), 0), true
	}
	return netip.AddrPort{}, false
}

// backendAddr is the IP of a logged upstream address, if it has one.
func backendAddr(s string) (netip.Addr, bool) {
	ap, ok := parseAddr(s)
	if !ok || !ap.Addr().IsValid() {
		return netip.Addr{}, false
	}
	return ap.Addr(), true
}
