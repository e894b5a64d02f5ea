package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// AttrAttack and AttrSeq keep vegeta's attack name and sequence number.
const (
	AttrAttack = "attack"
	AttrSeq    = "seq"
)

type vegetaResult struct {
	Attack    string  `json:"attack"`
	Seq       *uint64 `json:"seq"`
	Code      *int    `json:"code"`
	Timestamp *string `json:"timestamp"`
	Latency   *int64  `json:"latency"`
	Error     string  `json:"error"`
	Method    string  `json:"method"`
	URL       string  `json:"url"`
}

// ParseVegetaJSON reads `vegeta encode --to json` output: one result per line.
func ParseVegetaJSON(r io.Reader, opts Options, emit Emit) error {
	var v vegetaResult
	return scanLines(r, emit, func(line []byte, rec *Record) *LineError {
		v = vegetaResult{}
		if err := json.Unmarshal(line, &v); err != nil {
			return jsonError(line, err)
		}
		for _, f := range [...]struct {
			name string
			s    *string
		}{{"attack", &v.Attack}, {"error", &v.Error}, {"method", &v.Method}, {"url", &v.URL}, {"timestamp", v.Timestamp}} {
			if f.s == nil {
				continue
			}
			if err := checkJSONString(*f.s); err != nil {
				return lineErr(0, f.name, "%v", err)
			}
		}
		switch {
		case v.Timestamp == nil:
			return lineErr(0, "timestamp", "missing")
		case v.Code == nil:
			return lineErr(0, "code", "missing")
		case v.Latency == nil:
			return lineErr(0, "latency", "missing")
		}
		start, err := parseRFC3339(*v.Timestamp)
		if err != nil {
			return lineErr(0, "timestamp", "%v", err)
		}
		seq := ""
		if v.Seq != nil {
			seq = strconv.FormatUint(*v.Seq, 10)
		}
		return vegetaRecord(rec, &opts, start, *v.Code, *v.Latency, v.Error, v.Attack, seq, v.Method, v.URL)
	})
}

// vegetaCSVColumns names the columns of `vegeta encode --to csv`, in order.
var vegetaCSVColumns = [...]string{"timestamp", "code", "latency", "bytes_out", "bytes_in", "error", "body", "attack", "seq", "method", "url", "headers"}

// ParseVegetaCSV reads `vegeta encode --to csv` output. Older vegeta
// versions wrote fewer columns; the first six are required.
func ParseVegetaCSV(r io.Reader, opts Options, emit Emit) error {
	var sp csvSplitter
	return scanLines(r, emit, func(line []byte, rec *Record) *LineError {
		fields, bad, why := sp.split(line)
		if bad >= 0 {
			name := FieldLine
			if bad < len(vegetaCSVColumns) {
				name = vegetaCSVColumns[bad]
			}
			return lineErr(0, name, "not CSV: %s", why)
		}
		if len(fields) < 6 {
			return lineErr(0, vegetaCSVColumns[len(fields)], "missing (the line has %d of vegeta's 12 columns)", len(fields))
		}
		if len(fields) > len(vegetaCSVColumns) {
			return lineErr(0, FieldLine, "%d columns, vegeta writes at most %d", len(fields), len(vegetaCSVColumns))
		}
		ts, err := parseEpoch(fields[0], time.Nanosecond)
		if err != nil {
			return lineErr(0, "timestamp", "%v", err)
		}
		code, err := strconv.Atoi(fields[1])
		if err != nil || code < 0 || code > 999 {
			return lineErr(0, "code", "%q is not an HTTP status", fields[1])
		}
		lat, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil || lat < 0 {
			return lineErr(0, "latency", "%q is not a count of nanoseconds", fields[2])
		}
		col := func(i int) string {
			if i < len(fields) {
				return fields[i]
			}
			return ""
		}
		return vegetaRecord(rec, &opts, ts, code, lat, fields[5], col(7), col(8), col(9), col(10))
	})
}

func vegetaRecord(rec *Record, opts *Options, start int64, code int, latency int64, errText, attack, seq, method, target string) *LineError {
	if code < 0 || code > 999 {
		return lineErr(0, "code", "%d is not an HTTP status", code)
	}
	end, lerr := endTime(start, latency, "latency")
	if lerr != nil {
		return lerr
	}
	rec.Time = end
	rec.Status = code
	rec.Duration = time.Duration(latency)
	rec.Failed = code == 0 || opts.failStatus(code)
	if !rec.Failed {
		return nil
	}
	if code != 0 {
		rec.Reason = "status"
	} else {
		rec.Reason = Classify(errText)
		rec.Error = errText
		rec.Client = goErrorClient(errText)
	}
	rec.Target = target
	rec.Remote = urlRemote(target)
	rec.attr(AttrMethod, method)
	rec.attr(AttrAttack, attack)
	rec.attr(AttrSeq, seq)
	return nil
}

// urlRemote is the address a URL dials when its host is an IP literal.
func urlRemote(raw string) netip.AddrPort {
	u, err := url.Parse(raw)
	if err != nil {
		return netip.AddrPort{}
	}
	a, err := netip.ParseAddr(u.Hostname())
	if err != nil {
		return netip.AddrPort{}
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(a.Unmap(), uint16(p))
}

// jsonError turns a decoding error into a LineError naming the field being
// read: the type error's field, or the last key before a syntax error.
func jsonError(line []byte, err error) *LineError {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te):
		f := te.Field
		if f == "" {
			f = FieldLine
		}
		return lineErr(0, f, "JSON %s where %s was expected", te.Value, te.Type)
	case errors.As(err, &se):
		off := int(se.Offset)
		f := lastJSONKey(line, off)
		msg := se.Error()
		if off >= len(line) {
			msg += " (the line ends inside the JSON value: truncated?)"
		}
		return lineErr(0, f, "not JSON: %s at column %d", msg, off)
	default:
		if errors.Is(err, io.ErrUnexpectedEOF) || err.Error() == "unexpected end of JSON input" {
			return lineErr(0, lastJSONKey(line, len(line)), "not JSON: the line ends inside a value (truncated?)")
		}
		return lineErr(0, FieldLine, "not JSON: %v", err)
	}
}

// lastJSONKey finds the last `"key":` before off, to name the field a syntax
// error interrupted; FieldLine when there is none.
func lastJSONKey(line []byte, off int) string {
	if off > len(line) {
		off = len(line)
	}
	s := line[:off]
	for {
		i := bytes.LastIndexByte(s, ':')
		if i < 0 {
			return FieldLine
		}
		j := i - 1
		for j >= 0 && (s[j] == ' ' || s[j] == '\t') {
			j--
		}
		if j > 0 && s[j] == '"' {
			k := bytes.LastIndexByte(s[:j], '"')
			if k >= 0 && (k == 0 || s[k-1] != '\\') {
				key := s[k+1 : j]
				if len(key) > 0 && len(key) <= 64 && bytes.IndexAny(key, "\"{}[],") < 0 {
					return string(key)
				}
			}
		}
		s = s[:i]
	}
}

// goErrorClient finds the client's own address in a Go net error, which
// names the connection as "read tcp CLIENT->SERVER: …".
func goErrorClient(msg string) netip.AddrPort {
	i := strings.Index(msg, "tcp ")
	if i < 0 {
		return netip.AddrPort{}
	}
	rest := msg[i+4:]
	j := strings.Index(rest, "->")
	if j < 0 {
		return netip.AddrPort{}
	}
	a, err := netip.ParseAddrPort(rest[:j])
	if err != nil {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}
