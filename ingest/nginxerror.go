package ingest

import (
	"bytes"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/drainscope/drainscope/event"
)

// Attributes the nginx error log adds to a failure.
const (
	AttrMechanism    = "mechanism"      // the proxy's own words for why its upstream failed (see nginxMechanisms)
	AttrErrorLogLine = "error_log_line" // file:line of the proxy's error log entry that gave the mechanism
	AttrUpstreamName = "upstream_name"  // a proxy's name for the upstream (ingress-nginx's $proxy_upstream_name …)
	AttrLogSource    = "log_source"     // error_log: the failure was read from the proxy's error log alone
)

// Mechanisms of an upstream failure, as nginx's error log words them.
const (
	MechRefused         = "connect_refused"          // connect() failed (111: Connection refused)
	MechConnectTimeout  = "connect_timeout"          // upstream timed out … while connecting to upstream
	MechTimeout         = "read_timeout"             // upstream timed out … while reading/sending
	MechReset           = "reset"                    // recv()/send()/writev() failed (104: Connection reset by peer; 32: Broken pipe)
	MechPremature       = "prematurely_closed"       // upstream prematurely closed connection
	MechNoLiveUpstreams = "no_live_upstreams"        // no live upstreams: no server to try
	MechUnreachable     = "unreachable"              // connect() failed (113: No route to host; 101: Network is unreachable)
	MechConnectOther    = "connect_failed"           // connect() failed for another reason
	MechOther           = "upstream_error"           // another error about the upstream
	mechNone            = ""                         // not an upstream failure
	nginxErrTimeLen     = len("2006/01/02 15:04:05") // the error log's time
)

// nginxMechanisms maps the error log's wording to a mechanism and the
// failure class (event.Fail*) a client of the proxy saw through it. Order
// matters: the first match decides.
var nginxMechanisms = []struct {
	words, mech, class string
}{
	{"no live upstreams", MechNoLiveUpstreams, event.FailStatus},
	{"(111: Connection refused)", MechRefused, event.FailRefused},
	{"upstream timed out", "", event.FailTimeout}, // connect or read: decided below
	{"(110: Connection timed out) while connecting", MechConnectTimeout, event.FailTimeout},
	{"(113: No route to host)", MechUnreachable, event.FailTimeout},
	{"(101: Network is unreachable)", MechUnreachable, event.FailTimeout},
	{"(104: Connection reset by peer)", MechReset, event.FailReset},
	{"(32: Broken pipe)", MechReset, event.FailReset},
	{"upstream prematurely closed connection", MechPremature, event.FailEOF},
	{"connect() failed", MechConnectOther, event.FailOther},
}

// nginxUpstreamError is one error log entry about an upstream.
type nginxUpstreamError struct {
	wall     int64  // the entry's wall-clock time, read as if UTC (nginx writes no zone)
	line     int    // its line in the error log
	mech     string // Mech*
	class    string // event.Fail*
	upstream string // the upstream as logged: ip:port, or the upstream block's name
	client   string // the client's IP
	text     string // the message, up to the first comma
	request  string
	used     bool
}

// parseNginxErrorLine reads one line of nginx's error log. ok is false for
// a well-formed line that is no upstream failure (a notice, a worker
// starting); lerr is set for a line that is not the error log's.
func parseNginxErrorLine(line []byte) (e nginxUpstreamError, ok bool, lerr *LineError) {
	if len(line) < nginxErrTimeLen+3 {
		return e, false, lineErr(0, "time", "%q is not an nginx error log line (2006/01/02 15:04:05 [level] …)", clip(line, 40))
	}
	wall, err := time.Parse("2006/01/02 15:04:05", string(line[:nginxErrTimeLen]))
	if err != nil || line[nginxErrTimeLen] != ' ' {
		return e, false, lineErr(0, "time", "%q is not an nginx error log time (2006/01/02 15:04:05)", clip(line, nginxErrTimeLen))
	}
	if wall.Year() < 1971 || wall.Year() > 2261 {
		return e, false, lineErr(0, "time", "%q is out of range (years 1971-2261)", line[:nginxErrTimeLen])
	}
	rest := line[nginxErrTimeLen+1:]
	if len(rest) == 0 || rest[0] != '[' {
		return e, false, lineErr(0, "level", "no [level] after the time")
	}
	end := bytes.IndexByte(rest, ']')
	if end < 0 {
		return e, false, lineErr(0, "level", "'[' is never closed")
	}
	level := string(rest[1:end])
	switch level {
	case "debug", "info", "notice", "warn", "error", "crit", "alert", "emerg":
	default:
		return e, false, lineErr(0, "level", "%q is not an nginx log level", truncate(level, 20))
	}
	msg := string(rest[end+1:])
	// "PID#TID: *CONN " precede the message.
	if i := strings.Index(msg, ": "); i >= 0 && strings.Contains(msg[:i], "#") {
		msg = msg[i+2:]
	}
	if strings.HasPrefix(msg, "*") {
		if sp := strings.IndexByte(msg, ' '); sp > 0 {
			msg = msg[sp+1:]
		}
	}
	head, ctx, _ := strings.Cut(msg, ", client: ")
	e.wall = wall.UnixNano()
	e.text = head
	for _, m := range nginxMechanisms {
		if strings.Contains(head, m.words) {
			e.mech, e.class = m.mech, m.class
			if e.mech == "" {
				e.mech = MechTimeout
				if strings.Contains(head, "while connecting") {
					e.mech = MechConnectTimeout
				}
			}
			break
		}
	}
	if e.mech == mechNone {
		if !strings.Contains(head, "upstream") || !strings.Contains(ctx, "upstream: ") {
			return e, false, nil
		}
		e.mech, e.class = MechOther, event.FailOther
	}
	// The context: client: IP, server: NAME, request: "…", upstream: "http://ADDR/uri", host: "…"
	if c, _, _ := strings.Cut(ctx, ","); c != "" {
		e.client = strings.TrimSpace(c)
	}
	if _, r, ok := strings.Cut(ctx, `request: "`); ok {
		e.request, _, _ = strings.Cut(r, `"`)
	}
	if _, u, ok := strings.Cut(ctx, `upstream: "`); ok {
		u, _, _ = strings.Cut(u, `"`)
		if i := strings.Index(u, "://"); i >= 0 {
			u = u[i+3:]
		}
		if i := strings.IndexByte(u, '/'); i >= 0 {
			u = u[:i]
		}
		e.upstream = u
	}
	return e, true, nil
}

// ParseNginxError reads nginx's error log on its own: each upstream
// failure it records (connect() refused or timed out, a reset, an upstream
// that closed the connection early, no live upstreams) is one failed
// attempt, with its mechanism as the failure's class and the upstream as
// its backend. nginx writes whole seconds and no zone: the times are read
// in Options.TimeZone (UTC by default), and the failure's time is that
// second. An attempt that nginx retried on another upstream
// (proxy_next_upstream) is in the error log though the client may have got
// an answer: the access log joined with the error log
// (Options.ErrorLog) says which failures the clients saw.
func ParseNginxError(r io.Reader, opts Options, emit Emit) error {
	return scanLines(r, emit, func(line []byte, rec *Record) *LineError {
		e, ok, lerr := parseNginxErrorLine(line)
		if lerr != nil {
			return lerr
		}
		if !ok {
			return skipLine
		}
		t, err := checkRange(e.wall-opts.zoneOffset(e.wall)*int64(time.Second), string(line[:nginxErrTimeLen]), time.Unix(0, e.wall).UTC().Year())
		if err != nil {
			return lineErr(0, "time", "%v", err)
		}
		rec.Time = t
		rec.Failed = true
		rec.Reason = e.class
		rec.Status = 502
		if e.class == event.FailTimeout {
			rec.Status = 504
		}
		rec.Error = e.text
		rec.attr(AttrMechanism, e.mech)
		rec.attr(event.AttrVia, event.ProxyNginx)
		rec.attr(AttrLogSource, "error_log")
		rec.attr(AttrMethod, strings.SplitN(e.request, " ", 2)[0])
		if ap, ok := parseAddr(e.upstream); ok && ap.Addr().IsValid() {
			rec.Backend = e.upstream
		} else {
			rec.attr(AttrUpstreamName, e.upstream)
		}
		if a, ok := parseAddr(e.client); ok {
			rec.Client = a
		}
		return nil
	})
}

// NginxErrorLog is an nginx error log's upstream failures, indexed so the
// access log's failed lines can each find the entry that says why. Build
// it with LoadNginxErrorLog before parsing the access log.
type NginxErrorLog struct {
	name    string
	entries map[string][]*nginxUpstreamError // by upstream as logged, in time order
	// Rejected are the error log's lines that could not be read.
	Rejected []*LineError
	// Entries counts the upstream failures read.
	Entries int
	// Matched counts the entries an access log line took.
	Matched int
}

// MaxErrorLogEntries bounds the upstream failures held from one error log.
const MaxErrorLogEntries = 2_000_000

// LoadNginxErrorLog reads an nginx error log (name is for messages).
func LoadNginxErrorLog(name string, r io.Reader) (*NginxErrorLog, error) {
	l := &NginxErrorLog{name: name, entries: map[string][]*nginxUpstreamError{}}
	in, err := decompress(r)
	if err != nil {
		return nil, err
	}
	err = scanLines(in, func(rec *Record) error {
		if rec.Err != nil {
			e := *rec.Err
			e.File = name
			l.Rejected = append(l.Rejected, &e)
		}
		return nil
	}, func(line []byte, rec *Record) *LineError {
		e, ok, lerr := parseNginxErrorLine(line)
		if lerr != nil {
			return lerr
		}
		if !ok || l.Entries >= MaxErrorLogEntries {
			return skipLine
		}
		e.line = rec.Line
		l.entries[e.upstream] = append(l.entries[e.upstream], &e)
		l.Entries++
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, es := range l.entries {
		sort.SliceStable(es, func(i, j int) bool { return es[i].wall < es[j].wall })
	}
	return l, nil
}

// match finds the error log entry that explains an access log failure: an
// entry for the same upstream (and client, when both name one), not yet
// taken, whose second falls within the request (start − 1 s to end + 1 s,
// as both logs may round down). wallEnd is the request's end in the
// proxy's wall clock, read as if UTC like the entries.
func (l *NginxErrorLog) match(upstream, client string, wallEnd int64, d time.Duration) *nginxUpstreamError {
	if l == nil {
		return nil
	}
	es := l.entries[upstream]
	lo, hi := wallEnd-int64(d)-int64(time.Second), wallEnd+int64(time.Second)
	i := sort.Search(len(es), func(i int) bool { return es[i].wall >= lo })
	var best *nginxUpstreamError
	for ; i < len(es) && es[i].wall <= hi; i++ {
		e := es[i]
		if e.used || (client != "" && e.client != "" && e.client != client) {
			continue
		}
		if best == nil || abs64(e.wall-wallEnd) < abs64(best.wall-wallEnd) {
			best = e
		}
	}
	if best != nil {
		best.used = true
		l.Matched++
	}
	return best
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// explain gives a failed access log record the mechanism of the error log
// entry that matches it: its class (refused, timeout, reset, eof) and
// words. wallEnd is the record's end in the proxy's wall clock.
func (l *NginxErrorLog) explain(rec *Record, upstream, client string, wallEnd int64) {
	if l == nil || upstream == "" {
		return
	}
	e := l.match(upstream, client, wallEnd, rec.Duration)
	if e == nil {
		return
	}
	if e.class != event.FailStatus && e.class != event.FailOther {
		rec.Reason = e.class
	}
	rec.attr(AttrMechanism, e.mech)
	rec.attr(AttrErrorLogLine, l.name+":"+strconv.Itoa(e.line))
	if rec.Error == "" {
		rec.Error = e.text
	}
}

// zoneOffset is the offset in seconds of Options.TimeZone at the wall-clock
// time wall (read as if UTC); 0 (UTC) when none is set.
func (o *Options) zoneOffset(wall int64) int64 {
	if o.TimeZone == nil {
		return 0
	}
	t := time.Unix(0, wall).UTC()
	local := time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), o.TimeZone)
	_, off := local.Zone()
	return int64(off)
}
