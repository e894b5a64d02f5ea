package ingest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/drainscope/drainscope/event"
)

// envoyFields are the parts of an envoy access log line drainscope uses,
// whichever layout they came from.
type envoyFields struct {
	start, method, path, code, flags, duration         string
	details, termination, transport                    string
	xff, authority, upstream, cluster, dLocal, dRemote string
}

// envoyLayouts maps a text line's field count to where each field sits:
// envoy's default format (13), Istio before 1.8 (19) and since (22).
var envoyLayouts = map[int]envoyLayout{
	13: {request: 1, code: 2, flags: 3, details: -1, termination: -1, transport: -1, duration: 6, xff: 8, authority: 11, upstream: 12, cluster: -1, dLocal: -1, dRemote: -1},
	19: {request: 1, code: 2, flags: 3, details: -1, termination: -1, transport: -1, duration: 6, xff: 8, authority: 11, upstream: 12, cluster: 13, dLocal: 15, dRemote: 16},
	22: {request: 1, code: 2, flags: 3, details: 4, termination: 5, transport: 6, duration: 9, xff: 11, authority: 14, upstream: 15, cluster: 16, dLocal: 18, dRemote: 19},
}

type envoyLayout struct {
	request, code, flags, details, termination, transport, duration int
	xff, authority, upstream, cluster, dLocal, dRemote              int
}

// ParseEnvoy reads envoy access logs in envoy's default text format or
// Istio's (the default plus response code details, cluster and addresses).
// Envoy does not escape quotes inside quoted fields; a quoted value is taken
// to end at a quote followed by a space, so a user agent holding `" ` splits
// wrongly (the line is then rejected for its field count, not misread).
func ParseEnvoy(r io.Reader, opts Options, emit Emit) error {
	var toks []string
	var f envoyFields
	return scanLines(r, emit, func(line []byte, rec *Record) *LineError {
		var lerr *LineError
		toks, lerr = envoyTokens(line, toks[:0])
		if lerr != nil {
			return lerr
		}
		lay, ok := envoyLayouts[len(toks)]
		if !ok {
			return lineErr(0, FieldLine, "%d fields; envoy's default format has 13, Istio's 19 or 22 (use envoy-json or jsonl for others)", len(toks))
		}
		if !strings.HasPrefix(toks[0], "[") {
			return lineErr(0, "start_time", "%q is not a [START_TIME]", toks[0])
		}
		at := func(i int) string {
			if i < 0 {
				return ""
			}
			return strings.Trim(toks[i], `"`)
		}
		f = envoyFields{
			start: strings.Trim(toks[0], "[]"), code: at(lay.code), flags: at(lay.flags), duration: at(lay.duration),
			details: at(lay.details), termination: at(lay.termination), transport: at(lay.transport),
			xff: at(lay.xff), authority: at(lay.authority), upstream: at(lay.upstream), cluster: at(lay.cluster),
			dLocal: at(lay.dLocal), dRemote: at(lay.dRemote),
		}
		req := at(lay.request)
		if m, rest, ok := strings.Cut(req, " "); ok {
			f.method = m
			if i := strings.LastIndexByte(rest, ' '); i >= 0 {
				rest = rest[:i]
			}
			f.path = rest
		}
		return envoyRecord(rec, &opts, &f)
	})
}

// envoyTokens splits a text line into [bracketed], "quoted" and bare fields.
func envoyTokens(line []byte, toks []string) ([]string, *LineError) {
	for i := 0; i < len(line); {
		switch line[i] {
		case ' ', '\t':
			i++
			continue
		case '[':
			j := bytes.IndexByte(line[i:], ']')
			if j < 0 {
				return toks, lineErr(0, "start_time", "'[' at column %d is never closed", i+1)
			}
			toks = append(toks, string(line[i:i+j+1]))
			i += j + 1
		case '"':
			// A quoted field ends at a quote followed by a space or the end:
			// envoy does not escape quotes inside values.
			j := i + 1
			for {
				k := bytes.IndexByte(line[j:], '"')
				if k < 0 {
					return toks, lineErr(0, envoyTokenName(len(toks)), "quote at column %d is never closed (truncated line?)", i+1)
				}
				j += k
				if j+1 == len(line) || line[j+1] == ' ' {
					break
				}
				j++
			}
			toks = append(toks, string(line[i:j+1]))
			i = j + 1
		default:
			j := bytes.IndexByte(line[i:], ' ')
			if j < 0 {
				j = len(line) - i
			}
			toks = append(toks, string(line[i:i+j]))
			i += j
		}
		if len(toks) > 64 {
			return toks, lineErr(0, FieldLine, "more than 64 fields: not an envoy access log")
		}
	}
	return toks, nil
}

// envoyTokenName names the n-th field of envoy's default format.
func envoyTokenName(n int) string {
	names := []string{"start_time", "request", "response_code", "response_flags", "bytes_received", "bytes_sent",
		"duration", "upstream_service_time", "x_forwarded_for", "user_agent", "request_id", "authority", "upstream_host"}
	if n < len(names) {
		return names[n]
	}
	return FieldLine
}

// ParseEnvoyJSON reads envoy json_format lines. Keys are Istio's (start_time,
// response_code, response_flags, duration, upstream_host, authority, path,
// method, response_code_details, upstream_transport_failure_reason,
// downstream_remote_address, downstream_local_address, upstream_cluster,
// x_forwarded_for); "timestamp"/"@timestamp", "status"/"code" and
// "flags" are accepted as aliases.
func ParseEnvoyJSON(r io.Reader, opts Options, emit Emit) error {
	var f envoyFields
	return scanLines(r, emit, func(line []byte, rec *Record) *LineError {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			return jsonError(line, err)
		}
		get := func(keys ...string) (string, *LineError) {
			for _, k := range keys {
				raw, ok := m[k]
				if !ok {
					continue
				}
				s, err := jsonScalar(raw)
				if err != nil {
					return "", lineErr(0, k, "%v", err)
				}
				return s, nil
			}
			return "", nil
		}
		f = envoyFields{}
		var lerr *LineError
		for _, x := range []struct {
			dst  *string
			keys []string
		}{
			{&f.start, []string{"start_time", "timestamp", "@timestamp"}},
			{&f.code, []string{"response_code", "status", "code"}},
			{&f.flags, []string{"response_flags", "flags"}},
			{&f.duration, []string{"duration"}},
			{&f.method, []string{"method"}},
			{&f.path, []string{"path"}},
			{&f.details, []string{"response_code_details"}},
			{&f.termination, []string{"connection_termination_details"}},
			{&f.transport, []string{"upstream_transport_failure_reason"}},
			{&f.xff, []string{"x_forwarded_for"}},
			{&f.authority, []string{"authority"}},
			{&f.upstream, []string{"upstream_host"}},
			{&f.cluster, []string{"upstream_cluster"}},
			{&f.dLocal, []string{"downstream_local_address"}},
			{&f.dRemote, []string{"downstream_remote_address"}},
		} {
			if *x.dst, lerr = get(x.keys...); lerr != nil {
				return lerr
			}
		}
		if f.start == "" {
			return lineErr(0, "start_time", "missing")
		}
		if f.code == "" {
			return lineErr(0, "response_code", "missing")
		}
		return envoyRecord(rec, &opts, &f)
	})
}

// jsonScalar renders a JSON string, number, bool or null as text.
func jsonScalar(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		if err := checkJSONString(s); err != nil {
			return "", err
		}
		return s, nil
	case '{', '[':
		return "", fmt.Errorf("JSON %s where a string or number was expected", map[byte]string{'{': "object", '[': "array"}[raw[0]])
	}
	return string(raw), nil
}

// checkJSONString rejects a decoded JSON string holding a NUL (\u0000).
// A line with a raw NUL byte is rejected as binary (scanLines); an escaped
// one is the same corruption, or a crafted value, and no client or proxy
// logs it in a URL, an address or an error. Storing it cleaned (U+FFFD, as
// event.CleanString would) keeps a target nobody requested, so the record
// is rejected, naming its field. Invalid UTF-8 is not rejected: the JSON
// decoder already turns each bad byte into U+FFFD, which is what
// event.CleanString does too, and a proxy's escape=json output carries a
// request's non-UTF-8 bytes as they came, on a failure worth keeping.
func checkJSONString(s string) error {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return fmt.Errorf("the string holds a NUL character (\\u0000) at character %d: not a logged value", utf8.RuneCountInString(s[:i])+1)
	}
	return nil
}

// envoyUpstreamFailure lists response flags that mean the request failed
// on the way to or from the upstream.
var envoyUpstreamFailure = map[string]bool{
	"UF": true, "UC": true, "UR": true, "UT": true, "UH": true, "URX": true, "NR": true, "UO": true,
	"LR": true, "NC": true, "UMSDR": true, "UPE": true, "OM": true, "DF": true,
}

func envoyRecord(rec *Record, opts *Options, f *envoyFields) *LineError {
	start, err := parseRFC3339(f.start)
	if err != nil {
		return lineErr(0, "start_time", "%v", err)
	}
	code := 0
	if f.code != "-" {
		if code, err = strconv.Atoi(f.code); err != nil || code < 0 || code > 999 {
			return lineErr(0, "response_code", "%q is not an HTTP status", f.code)
		}
	}
	dur, err := parseMillis(f.duration)
	if err != nil {
		return lineErr(0, "duration", "%q is not a count of milliseconds", f.duration)
	}
	end, lerr := endTime(start, int64(dur), "duration")
	if lerr != nil {
		return lerr
	}
	rec.Time = end
	rec.Status = code
	rec.Duration = dur
	flags := f.flags
	if flags == "-" {
		flags = ""
	}
	upstreamFail := false
	var has = map[string]bool{}
	for _, fl := range strings.Split(flags, ",") {
		fl = strings.TrimSpace(fl)
		if fl == "" {
			continue
		}
		has[fl] = true
		if envoyUpstreamFailure[fl] {
			upstreamFail = true
		}
	}
	// A response code of 0 with DC alone is a client that went away, not a
	// failure of the service.
	rec.Failed = upstreamFail || opts.failStatus(code) || (code == 0 && !has["DC"])
	if !rec.Failed {
		return nil
	}
	var details []string
	for _, d := range []string{f.details, f.termination, f.transport} {
		if d != "" && d != "-" && d != "via_upstream" {
			details = append(details, d)
		}
	}
	rec.Reason = envoyReason(has, strings.Join(details, " "), code != 0 && opts.failStatus(code))
	rec.attr(AttrDetails, strings.Join(details, " "))
	rec.attr(AttrResponseFlags, flags)
	rec.attr(AttrMethod, dash(f.method))
	rec.attr(AttrUpstreamClstr, dash(f.cluster))
	rec.Target = dash(f.authority) + dash(f.path)
	rec.Backend = dash(f.upstream)
	if a, ok := parseAddr(f.dRemote); ok {
		rec.Client = a
	}
	if !rec.Client.IsValid() && f.xff != "" {
		first, _, _ := strings.Cut(f.xff, ",")
		if a, ok := parseAddr(strings.TrimSpace(first)); ok {
			rec.Client = a
		}
	}
	if a, ok := parseAddr(f.dLocal); ok {
		rec.Remote = a
	}
	return nil
}

func dash(s string) string {
	if s == "-" {
		return ""
	}
	return s
}

// envoyReason picks the failure class: envoy's details when they name the
// cause, then the response flags, then the status.
func envoyReason(flags map[string]bool, details string, statusFailed bool) string {
	d := strings.ToLower(details)
	switch {
	case strings.Contains(d, "refused"):
		return event.FailRefused
	case strings.Contains(d, "connection_termination"):
		return event.FailEOF
	case strings.Contains(d, "remote_reset"), strings.Contains(d, "reset_by_peer"), strings.Contains(d, "reset by peer"):
		return event.FailReset
	case strings.Contains(d, "timeout"):
		return event.FailTimeout
	}
	switch {
	case flags["UT"]:
		return event.FailTimeout
	case flags["UF"]:
		// Envoy's UF means the TCP connect to the upstream failed; with no
		// details to say otherwise, that is a refused connection.
		return event.FailRefused
	case flags["UC"]:
		return event.FailEOF
	case flags["UR"]:
		return event.FailReset
	case statusFailed:
		return event.FailStatus
	}
	return event.FailOther
}
