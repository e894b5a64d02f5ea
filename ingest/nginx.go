package ingest

import (
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// NginxCombined is nginx's predefined "combined" log format.
const NginxCombined = `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"`

// DefaultNginxFormat is what the nginx format reads unless given another
// log_format: combined followed by the upstream that answered, its status
// and the request time. Lines in plain combined are accepted too (with no
// upstream known).
const DefaultNginxFormat = NginxCombined + ` $upstream_addr $upstream_status $request_time`

// How a variable's extent in a line is found.
const (
	shapeDelim = iota // up to the first occurrence of the literal after it
	shapeFixed        // a fixed number of bytes
	shapeList         // nginx's upstream lists: "a, b : c"
)

type nginxItem struct {
	name  string
	after []byte // literal text following the variable
	shape int
	width int
}

// NginxFormat is a compiled nginx log_format: it splits a line into the
// format's variables by the literal text between them.
type NginxFormat struct {
	source   string
	prefix   []byte
	items    []nginxItem
	idx      map[string]int // variable name → index in items
	timeVar  string
	timeIdx  int          // items index of timeVar
	status   int          // items index of $status
	fallback *NginxFormat // tried when a line does not match this one
	// ingress marks ingress-nginx's formats: the upstream's name is kept
	// (for its Service), its placeholder upstream is no pod, and whole
	// seconds are marked coarse.
	ingress bool
}

// listVars are the variables nginx logs as lists, one entry per upstream
// tried, separated by ", " (and " : " across internal redirects).
var listVars = map[string]bool{
	"upstream_addr": true, "upstream_status": true, "upstream_response_time": true,
	"upstream_connect_time": true, "upstream_header_time": true, "upstream_response_length": true,
	"upstream_bytes_received": true, "upstream_bytes_sent": true,
}

// CompileNginx compiles an nginx log_format string. It takes the format as
// written in nginx.conf too: `log_format main '$remote_addr …' '…';` with
// the directive, name, escape= parameter and quotes removed.
func CompileNginx(format string) (*NginxFormat, error) {
	src, err := unquoteLogFormat(format)
	if err != nil {
		return nil, err
	}
	if src == "" {
		return nil, fmt.Errorf("log_format is empty")
	}
	f := &NginxFormat{source: src, idx: map[string]int{}}
	// Split into literal, var, literal, var, … literal.
	var lits []string
	var vars []string
	lit := strings.Builder{}
	for i := 0; i < len(src); {
		c := src[i]
		if c != '$' {
			lit.WriteByte(c)
			i++
			continue
		}
		name, n := varName(src[i+1:])
		if name == "" {
			return nil, fmt.Errorf("log_format %q: '$' at byte %d is not followed by a variable name", src, i)
		}
		lits = append(lits, lit.String())
		lit.Reset()
		vars = append(vars, name)
		i += 1 + n
	}
	lits = append(lits, lit.String())
	if len(vars) == 0 {
		return nil, fmt.Errorf("log_format %q has no variables", src)
	}
	f.prefix = []byte(lits[0])
	for i, name := range vars {
		it := nginxItem{name: name, after: []byte(lits[i+1])}
		switch {
		case name == "time_local":
			it.shape, it.width = shapeFixed, timeLocalLen
		case listVars[name]:
			it.shape = shapeList
		}
		if len(it.after) == 0 && i < len(vars)-1 && it.shape != shapeFixed {
			return nil, fmt.Errorf("log_format %q: $%s and $%s have no text between them, so a line cannot be split", src, name, vars[i+1])
		}
		if _, dup := f.idx[name]; !dup {
			f.idx[name] = i
		}
		f.items = append(f.items, it)
	}
	for _, tv := range []string{"msec", "time_iso8601", "time_local"} {
		if _, ok := f.idx[tv]; ok {
			f.timeVar = tv
			break
		}
	}
	if f.timeVar == "" {
		return nil, fmt.Errorf("log_format %q has no time: it needs $time_local, $time_iso8601 or $msec", src)
	}
	var ok bool
	if f.status, ok = f.idx["status"]; !ok {
		return nil, fmt.Errorf("log_format %q has no $status", src)
	}
	f.timeIdx = f.idx[f.timeVar]
	return f, nil
}

// defaultNginx compiles DefaultNginxFormat with plain combined as fallback.
func defaultNginx() *NginxFormat {
	f, err := CompileNginx(DefaultNginxFormat)
	if err != nil {
		panic(err)
	}
	f.fallback, err = CompileNginx(NginxCombined)
	if err != nil {
		panic(err)
	}
	return f
}

// String returns the log_format the parser reads.
func (f *NginxFormat) String() string { return f.source }

func varName(s string) (string, int) {
	if strings.HasPrefix(s, "{") {
		end := strings.IndexByte(s, '}')
		if end <= 1 {
			return "", 0
		}
		name := s[1:end]
		for i := 0; i < len(name); i++ {
			if !isVarByte(name[i]) {
				return "", 0
			}
		}
		return name, end + 1
	}
	n := 0
	for n < len(s) && isVarByte(s[n]) {
		n++
	}
	return s[:n], n
}

func isVarByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// unquoteLogFormat accepts a bare format string or a log_format directive
// as written in nginx.conf, and returns the format itself.
func unquoteLogFormat(s string) (string, error) {
	s = strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(s, "log_format"); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t' || rest[0] == '\n') {
		fields := strings.Fields(rest)
		if len(fields) < 2 {
			return "", fmt.Errorf("log_format directive %q: want 'log_format NAME FORMAT…;'", s)
		}
		rest = strings.TrimSpace(rest)
		rest = strings.TrimSpace(rest[len(fields[0]):]) // the name
		for strings.HasPrefix(rest, "escape=") || strings.HasPrefix(rest, "if=") {
			sp := strings.IndexAny(rest, " \t\n")
			if sp < 0 {
				return "", fmt.Errorf("log_format directive %q has no format after its parameters", s)
			}
			rest = strings.TrimSpace(rest[sp:])
		}
		s = strings.TrimSuffix(strings.TrimSpace(rest), ";")
	}
	s = strings.TrimSpace(s)
	if s == "" || (s[0] != '\'' && s[0] != '"') {
		return s, nil
	}
	// A sequence of quoted strings, concatenated as nginx does.
	var b strings.Builder
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '\'' || c == '"':
			j := i + 1
			for ; j < len(s) && s[j] != c; j++ {
				if s[j] == '\\' && j+1 < len(s) {
					j++
					b.WriteByte(s[j])
					continue
				}
				b.WriteByte(s[j])
			}
			if j >= len(s) {
				return "", fmt.Errorf("log_format %q: quote at byte %d is never closed", s, i)
			}
			i = j + 1
		default:
			return "", fmt.Errorf("log_format %q: text outside quotes at byte %d", s, i)
		}
	}
	return b.String(), nil
}

// nginxLine holds the byte ranges of one line's variables.
type nginxLine struct {
	spans [][2]int
	line  []byte
}

func (l *nginxLine) get(f *NginxFormat, name string) (string, bool) {
	i, ok := f.idx[name]
	if !ok {
		return "", false
	}
	s := l.spans[i]
	return string(l.line[s[0]:s[1]]), true
}

// split finds each variable's extent in line.
func (f *NginxFormat) split(line []byte, l *nginxLine) *LineError {
	l.line = line
	l.spans = l.spans[:0]
	if !bytes.HasPrefix(line, f.prefix) {
		return lineErr(0, f.items[0].name, "line does not start with %q as the log format does", f.prefix)
	}
	pos := len(f.prefix)
	for _, it := range f.items {
		if pos > len(line) || (pos == len(line) && (len(it.after) > 0 || it.shape == shapeFixed)) {
			return lineErr(0, it.name, "missing: the line ends before it")
		}
		end := 0
		switch it.shape {
		case shapeFixed:
			end = pos + it.width
			if end > len(line) || !bytes.HasPrefix(line[end:], it.after) {
				// Not the usual width: take it up to the text after it, and
				// let the value's own parser say what is wrong.
				i := -1
				if len(it.after) > 0 {
					i = bytes.Index(line[pos:], it.after)
				}
				if i < 0 {
					return lineErr(0, it.name, "%q is not a valid value and has no %q after it", clip(line[pos:], it.width), it.after)
				}
				end = pos + i
			}
		case shapeList:
			end = scanList(line, pos, it.after)
		default:
			if len(it.after) == 0 {
				end = len(line)
			} else {
				i := indexUnescaped(line[pos:], it.after)
				if i < 0 {
					return lineErr(0, it.name, "no %q after it: the line ends early or is in another format", it.after)
				}
				end = pos + i
			}
		}
		l.spans = append(l.spans, [2]int{pos, end})
		pos = end
		if !bytes.HasPrefix(line[pos:], it.after) {
			if pos >= len(line) {
				return lineErr(0, it.name, "the line ends where %q should follow it", it.after)
			}
			return lineErr(0, it.name, "%q follows it where the format has %q", clip(line[pos:], len(it.after)+8), it.after)
		}
		pos += len(it.after)
	}
	if pos != len(line) {
		return lineErr(0, f.items[len(f.items)-1].name, "unexpected text after it: %q (the log format has fewer fields)", clip(line[pos:], 40))
	}
	return nil
}

func clip(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// indexUnescaped finds lit in b, skipping a quote escaped by a backslash
// (nginx's escape=json writes \" inside values).
// bytes.Index already takes IndexByte's path for a one-byte lit.
func indexUnescaped(b, lit []byte) int {
	off := 0
	for {
		i := bytes.Index(b[off:], lit)
		if i < 0 {
			return -1
		}
		i += off
		if lit[0] != '"' || i == 0 || b[i-1] != '\\' || escapedBackslash(b, i-1) {
			return i
		}
		off = i + 1
	}
}

// escapedBackslash reports whether the backslash at i is itself escaped.
func escapedBackslash(b []byte, i int) bool {
	n := 0
	for ; i >= 0 && b[i] == '\\'; i-- {
		n++
	}
	return n%2 == 0
}

// scanList consumes an upstream list starting at pos: entries with no
// spaces, joined by ", " or " : ".
func scanList(line []byte, pos int, after []byte) int {
	stop := byte(' ')
	if len(after) > 0 {
		stop = after[0]
	}
	for {
		for pos < len(line) && line[pos] != ' ' && line[pos] != stop && line[pos] != ',' {
			pos++
		}
		rest := line[pos:]
		switch {
		case bytes.HasPrefix(rest, []byte(", ")) && len(rest) > 2 && rest[2] != ' ':
			pos += 2
		case bytes.HasPrefix(rest, []byte(" : ")) && len(rest) > 3 && rest[3] != ' ':
			pos += 3
		default:
			return pos
		}
	}
}

// nginxParser is one parse run's state: reused buffers and the time cache.
type nginxParser struct {
	f       *NginxFormat
	opts    *Options
	l       nginxLine
	lastRaw []byte
	lastNS  int64
	lastOff int64 // the zone offset of lastRaw, in seconds
}

// Parse reads an access log written in this format.
func (f *NginxFormat) Parse(r io.Reader, opts Options, emit Emit) error {
	p := &nginxParser{f: f, opts: &opts}
	var fb *nginxParser
	if f.fallback != nil {
		fb = &nginxParser{f: f.fallback, opts: &opts}
	}
	return scanLines(r, emit, func(line []byte, rec *Record) *LineError {
		lerr := p.parse(line, rec)
		if lerr != nil && fb != nil && fb.f.split(line, &fb.l) == nil {
			rec.reset(rec.Line)
			return fb.parseSplit(line, rec)
		}
		return lerr
	})
}

// ParseNginx reads an nginx access log in opts.LogFormat (DefaultNginxFormat
// when empty).
func ParseNginx(r io.Reader, opts Options, emit Emit) error {
	f, err := nginxFormat(opts.LogFormat)
	if err != nil {
		return err
	}
	return f.Parse(r, opts, emit)
}

func nginxFormat(logFormat string) (*NginxFormat, error) {
	if logFormat == "" {
		return defaultNginx(), nil
	}
	return CompileNginx(logFormat)
}

func (p *nginxParser) parse(line []byte, rec *Record) *LineError {
	if lerr := p.f.split(line, &p.l); lerr != nil {
		return lerr
	}
	return p.parseSplit(line, rec)
}

// parseSplit reads the record from a line p.l already holds the split of.
func (p *nginxParser) parseSplit(line []byte, rec *Record) *LineError {
	f := p.f
	// Every line: its time and status. Only failures pay for the rest.
	sp := p.l.spans[f.timeIdx]
	raw := line[sp[0]:sp[1]]
	if !bytes.Equal(raw, p.lastRaw) || p.lastRaw == nil {
		var ns int64
		var err error
		switch f.timeVar {
		case "time_local":
			ns, err = parseTimeLocal(raw)
		case "time_iso8601":
			ns, err = parseRFC3339(string(raw))
		default:
			ns, err = parseEpoch(string(raw), time.Second)
		}
		if err != nil {
			return lineErr(0, f.timeVar, "%v", err)
		}
		p.lastRaw = append(p.lastRaw[:0], raw...)
		p.lastNS = ns
		p.lastOff = rawZoneOffset(f.timeVar, raw, ns, p.opts)
	}
	rec.Time = p.lastNS
	sp = p.l.spans[f.status]
	st := line[sp[0]:sp[1]]
	code, ok := digits(st)
	if !ok || len(st) != 3 {
		return lineErr(0, "status", "%q is not an HTTP status", st)
	}
	rec.Status = code
	rec.Failed = p.opts.failStatus(code)
	if !rec.Failed {
		return nil
	}
	return p.failure(rec)
}

func (p *nginxParser) failure(rec *Record) *LineError {
	f, l := p.f, &p.l
	rec.Reason = "status"
	if v, ok := l.get(f, "request_time"); ok {
		d, err := parseSeconds(v)
		if err != nil {
			return lineErr(0, "request_time", "%v", err)
		}
		rec.Duration = d
	}
	if v, ok := l.get(f, "remote_addr"); ok {
		// Not an IP when nginx listens on a unix socket ("unix:"): the
		// failure stands, without a client address.
		a, _ := parseAddr(v)
		if port, ok := l.get(f, "remote_port"); ok && a.Addr().IsValid() {
			if n, err := strconv.ParseUint(port, 10, 16); err == nil {
				a = netip.AddrPortFrom(a.Addr(), uint16(n))
			}
		}
		rec.Client = a
	}
	if v, ok := l.get(f, "server_addr"); ok {
		if a, ok := parseAddr(v); ok && a.Addr().IsValid() {
			if port, ok := l.get(f, "server_port"); ok {
				if n, err := strconv.ParseUint(port, 10, 16); err == nil {
					a = netip.AddrPortFrom(a.Addr(), uint16(n))
				}
			}
			rec.Remote = a
		}
	}
	method, uri := "", ""
	if v, ok := l.get(f, "request"); ok && v != "-" {
		m, rest, ok := strings.Cut(v, " ")
		if ok {
			method = m
			if i := strings.LastIndexByte(rest, ' '); i >= 0 && strings.HasPrefix(rest[i+1:], "HTTP/") {
				rest = rest[:i]
			}
			uri = rest
		} else {
			uri = v
		}
	}
	if v, ok := l.get(f, "request_method"); ok && method == "" {
		method = v
	}
	for _, name := range []string{"request_uri", "uri"} {
		if v, ok := l.get(f, name); ok && uri == "" {
			uri = v
		}
	}
	host := ""
	for _, name := range []string{"host", "http_host", "server_name"} {
		if v, ok := l.get(f, name); ok && v != "-" && v != "" {
			host = v
			break
		}
	}
	rec.Target = host + uri
	rec.attr(AttrMethod, method)
	if v, ok := l.get(f, "upstream_addr"); ok && v != "-" {
		rec.Backend = lastListEntry(v)
		if rec.Backend != v {
			rec.attr(AttrUpstreams, v)
		}
	}
	if v, ok := l.get(f, "upstream_status"); ok && v != "-" {
		rec.attr(AttrUpstreamStatus, v)
	}
	if f.ingress {
		ingressNginxFailure(f, l, rec)
	}
	if p.opts.ErrorLog != nil {
		up := rec.Backend
		if up == "" {
			if v, ok := l.get(f, "upstream_addr"); ok && v != "-" {
				up = lastListEntry(v)
			}
		}
		client := ""
		if rec.Client.Addr().IsValid() {
			client = rec.Client.Addr().String()
		}
		p.opts.ErrorLog.explain(rec, up, client, rec.Time+p.lastOff*int64(time.Second))
	}
	return nil
}

// lastListEntry is the last upstream of an nginx list: the one whose answer
// (or failure) the client got.
func lastListEntry(v string) string {
	// ":" also separates host and port: only ", " and " : " separate entries.
	cut := 0
	if j := strings.LastIndex(v, ", "); j >= 0 {
		cut = j + 2
	}
	if k := strings.LastIndex(v, " : "); k >= 0 && k+3 > cut {
		cut = k + 3
	}
	return v[cut:]
}
