package ingest

import (
	"bufio"
	"bytes"
	"encoding/csv"
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
	var rec Record
	cr, off := openCSV(r)
	if off >= 0 {
		rec.reset(1)
		rec.Err = binaryError(off)
		return emit(&rec)
	}
	cr.ReuseRecord = true
	return scanCSV(cr, emit, &rec, func(fields []string, rec *Record) *LineError {
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

// scanCSV drives a CSV parser, numbering records by the line they start on.
// openCSV wraps r in a lenient CSV reader (records may differ in length,
// leading spaces trimmed), or returns the offset of binary content in r
// (-1 when r is text), which no CSV parser should try to read.
func openCSV(r io.Reader) (*csv.Reader, int) {
	br := bufio.NewReaderSize(r, 64<<10)
	if off := sniffBinary(br); off >= 0 {
		return nil, off
	}
	cr := csv.NewReader(br)
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	return cr, -1
}

func scanCSV(cr *csv.Reader, emit Emit, rec *Record, parse func(fields []string, rec *Record) *LineError) error {
	for n := 0; ; n++ {
		fields, err := cr.Read()
		if err == io.EOF {
			return nil
		}
		var pe *csv.ParseError
		switch {
		case errors.As(err, &pe):
			rec.reset(pe.StartLine)
			rec.Err = lineErr(pe.StartLine, FieldLine, "not CSV: %v at line %d column %d", pe.Err, pe.Line, pe.Column)
			if pe.Err == csv.ErrQuote {
				rec.Err.Msg += " (a quoted field never ends: truncated file?)"
			}
		case err != nil:
			return err
		default:
			line, _ := cr.FieldPos(0)
			rec.reset(line)
			for i, f := range fields {
				if j := bytes.IndexByte([]byte(f), 0); j >= 0 {
					rec.Err = lineErr(line, FieldLine, "binary data (NUL byte in column %d)", i+1)
					break
				}
			}
			if rec.Err == nil {
				if lerr := parse(fields, rec); lerr != nil {
					rec.reset(line)
					lerr.Line = line
					rec.Err = lerr
				}
			}
		}
		if err := emit(rec); err != nil {
			return err
		}
	}
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
