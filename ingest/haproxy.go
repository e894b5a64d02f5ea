package ingest

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/drainscope/drainscope/event"
)

// HAProxyLogFormat is HAProxy 2.6's `option httplog` format followed by the
// server's address, which drainscope needs to name the pod (a server
// slot's name says nothing once the runtime API has moved it):
//
//	log-format "%ci:%cp [%tr] %ft %b/%s %TR/%Tw/%Tc/%Tr/%Ta %ST %B %CC %CS %tsc %ac/%fc/%bc/%sc/%rc %sq/%bq %hr %hs %{+Q}r %si:%sp"
const HAProxyLogFormat = `%ci:%cp [%tr] %ft %b/%s %TR/%Tw/%Tc/%Tr/%Ta %ST %B %CC %CS %tsc %ac/%fc/%bc/%sc/%rc %sq/%bq %hr %hs %{+Q}r %si:%sp`

// Attributes of HAProxy's log.
const (
	AttrTermination = "termination_state" // HAProxy's %tsc: who ended the session and in which state
	AttrServerName  = "server"            // HAProxy's server (slot) name
)

// haproxyFieldNames name the fields after [%tr], in order.
var haproxyFieldNames = []string{"frontend", "backend/server", "timers", "status", "bytes_read",
	"captured_request_cookie", "captured_response_cookie", "termination_state", "connections", "queues"}

// ParseHAProxy reads HAProxy's HTTP log (option httplog), with or without
// a syslog prefix, with or without header captures, and with the server's
// address (%si:%sp) after the request when the log-format adds it
// (HAProxyLogFormat); without it a server whose name is its ip:port still
// names the pod. %tr has no zone: it is read in Options.TimeZone (UTC by
// default). The failure's time is %tr plus %Ta, its duration %Ta.
//
// The termination state (%tsc) gives the mechanism: SC (the server refused
// the connection) is refused, sC a connect timeout, SH and SD (the server
// closed the connection before or while sending the response) eof, sH, sD
// and sQ timeouts. A request with a server-side termination is failed
// whatever its status; a request no server took (<NOSRV>, a 503) names no
// pod but its backend, whose ns_service_port name gives the Service.
func ParseHAProxy(r io.Reader, opts Options, emit Emit) error {
	var toks []string
	tz := opts.TimeZone
	if tz == nil {
		tz = time.UTC
	}
	return scanLines(r, emit, func(line []byte, rec *Record) *LineError {
		var lerr *LineError
		toks, lerr = haproxyTokens(line, toks[:0])
		if lerr != nil {
			return lerr
		}
		// The accept date [%tr] anchors the line: what precedes its
		// client address is a syslog prefix.
		at := -1
		for i, t := range toks {
			if len(t) > 2 && t[0] == '[' && len(t) >= 22 && t[3] == '/' && t[7] == '/' {
				at = i
				break
			}
		}
		if at < 1 && haproxyStatusLine(line) {
			return skipLine
		}
		if at < 1 {
			return lineErr(0, "accept_date", "no [%%tr] date (like [06/Feb/2009:12:14:14.655]) after a client address: not an HAProxy HTTP log line")
		}
		f := toks[at+1:]
		if len(f) < len(haproxyFieldNames)+1 {
			name := FieldLine
			if len(f) < len(haproxyFieldNames) {
				name = haproxyFieldNames[len(f)]
			}
			return lineErr(0, name, "missing: the line has %d fields after the date, option httplog has %d", len(f), len(haproxyFieldNames)+1)
		}
		start, err := time.ParseInLocation("02/Jan/2006:15:04:05.000", strings.Trim(toks[at], "[]"), tz)
		if err != nil {
			return lineErr(0, "accept_date", "%q is not HAProxy's %%tr (like 06/Feb/2009:12:14:14.655)", truncate(toks[at], 40))
		}
		startNS, err := checkRange(start.UnixNano(), toks[at], start.Year())
		if err != nil {
			return lineErr(0, "accept_date", "%v", err)
		}
		timers := strings.Split(f[2], "/")
		if len(timers) != 5 {
			return lineErr(0, "timers", "%q: want TR/Tw/Tc/Tr/Ta", truncate(f[2], 40))
		}
		ta, err := strconv.ParseInt(timers[4], 10, 64)
		if err != nil || ta < -1 || ta > 1e10 {
			return lineErr(0, "timers", "Ta %q is not milliseconds", truncate(timers[4], 20))
		}
		ta = max(ta, 0)
		end, lerr := endTime(startNS, ta*int64(time.Millisecond), "timers")
		if lerr != nil {
			return lerr
		}
		code, err := strconv.Atoi(f[3])
		if err != nil || code < -1 || code > 999 {
			return lineErr(0, "status", "%q is not an HTTP status", truncate(f[3], 20))
		}
		tsc := f[7]
		if len(tsc) != 4 && len(tsc) != 2 {
			return lineErr(0, "termination_state", "%q: want four flags like SC-- or ----", truncate(tsc, 20))
		}
		rec.Time = end
		rec.Status = max(code, 0)
		rec.Duration = time.Duration(ta) * time.Millisecond
		serverSide := tsc[0] == 'S' || tsc[0] == 's'
		rec.Failed = code <= 0 || opts.failStatus(code) || serverSide
		if !rec.Failed {
			return nil
		}
		rec.Reason = event.FailStatus
		if code <= 0 {
			rec.Reason = event.FailOther
		}
		if c := haproxyClass(tsc); c != "" {
			rec.Reason = c
		}
		rec.attr(event.AttrVia, event.ProxyHAProxy)
		rec.attr(AttrTermination, tsc)
		if a, ok := parseAddr(toks[at-1]); ok {
			rec.Client = a
		}
		backend, server, _ := strings.Cut(f[1], "/")
		rec.attr(AttrServerName, server)
		rec.attr(AttrUpstreamName, backend)
		rec.Service = underscoreService(backend)
		// After the captures, the request, then our %si:%sp.
		rest := f[len(haproxyFieldNames):]
		for len(rest) > 0 && strings.HasPrefix(rest[0], "{") {
			rest = rest[1:]
		}
		if len(rest) > 0 && strings.HasPrefix(rest[0], `"`) {
			req := strings.Trim(rest[0], `"`)
			if m, u, ok := strings.Cut(req, " "); ok {
				rec.attr(AttrMethod, m)
				if i := strings.LastIndexByte(u, ' '); i >= 0 {
					u = u[:i]
				}
				rec.Target = u
			}
			rest = rest[1:]
		}
		if server != "<NOSRV>" {
			for _, cand := range []string{strings.Join(rest, ""), server} {
				if ap, ok := parseAddr(cand); ok && ap.Addr().IsValid() && ap.Port() != 0 {
					rec.Backend = ap.String()
					break
				}
			}
		}
		return nil
	})
}

// haproxyClass maps a termination state to the class of failure its
// client saw; "" when it says nothing about the server.
func haproxyClass(tsc string) string {
	switch tsc[:2] {
	case "SC":
		return event.FailRefused
	case "sC", "sH", "sD", "sQ":
		return event.FailTimeout
	case "SH", "SD":
		return event.FailEOF
	}
	return ""
}

// underscoreService reads a backend named namespace_service_port (HAProxy
// ingress controllers' scheme) as namespace/service: a namespace holds no
// underscore, so the first one ends it.
func underscoreService(backend string) string {
	ns, rest, ok := strings.Cut(backend, "_")
	if !ok || ns == "" {
		return ""
	}
	i := strings.LastIndexByte(rest, '_')
	if i <= 0 {
		return ""
	}
	return ns + "/" + rest[:i]
}

// haproxyTokens splits a line into [bracketed], {captured}, "quoted" and
// bare fields; '[' opens a bracketed field only at a field's start (a
// syslog tag like haproxy[1234]: is bare).
func haproxyTokens(line []byte, toks []string) ([]string, *LineError) {
	for i := 0; i < len(line); {
		c := line[i]
		if c == ' ' || c == '\t' {
			i++
			continue
		}
		var end int
		switch c {
		case '[', '{':
			closer := byte(']')
			if c == '{' {
				closer = '}'
			}
			j := bytes.IndexByte(line[i:], closer)
			if j < 0 {
				return toks, lineErr(0, FieldLine, "%q at column %d is never closed", c, i+1)
			}
			end = i + j + 1
		case '"':
			j := i + 1
			for j < len(line) && line[j] != '"' {
				if line[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(line) {
				return toks, lineErr(0, "request", "quote at column %d is never closed (truncated line?)", i+1)
			}
			end = j + 1
		default:
			j := bytes.IndexAny(line[i:], " \t")
			if j < 0 {
				j = len(line) - i
			}
			end = i + j
		}
		toks = append(toks, string(line[i:end]))
		i = end
		if len(toks) > 64 {
			return toks, lineErr(0, FieldLine, "more than 64 fields: not an HAProxy HTTP log")
		}
	}
	return toks, nil
}

// haproxyStatusMessages begin the messages HAProxy writes to the same log
// as its requests (servers going up or down, proxies starting or stopping):
// they are no request, and no error of the log.
var haproxyStatusMessages = []string{"Server ", "Proxy ", "backend ", "Health check for ", "Stopping ", "Pausing ", "Resuming ", "Loading success", "[NOTICE]", "[WARNING]", "[ALERT]"}

// haproxyStatusLine reports whether line is one of HAProxy's own messages,
// with or without a syslog prefix (…haproxy[PID]: ).
func haproxyStatusLine(line []byte) bool {
	s := string(line)
	if i := strings.Index(s, "]: "); i >= 0 && i < 80 {
		s = s[i+3:]
	}
	for _, p := range haproxyStatusMessages {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
