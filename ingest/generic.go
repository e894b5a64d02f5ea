package ingest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// GenericColumns are the columns (CSV header names, JSON keys) the generic
// formats read; see the package documentation for their meaning.
var GenericColumns = []string{"time", "time_ns", "time_ms", "time_s", "target", "error", "status",
	"client", "remote", "backend", "duration_ms", "timeout_ms", "service", "reason"}

var timeColumns = []struct {
	name string
	unit time.Duration // 0: RFC 3339
}{{"time", 0}, {"time_ns", time.Nanosecond}, {"time_ms", time.Millisecond}, {"time_s", time.Second}}

// genericRecord fills rec from a row's columns; get returns a column's
// value and whether the row has it.
func genericRecord(rec *Record, opts *Options, get func(string) (string, bool)) *LineError {
	var timeCol string
	for _, tc := range timeColumns {
		v, ok := get(tc.name)
		if !ok || v == "" {
			continue
		}
		if timeCol != "" {
			return lineErr(0, tc.name, "more than one time column (%s and %s): give one", timeCol, tc.name)
		}
		timeCol = tc.name
		var err error
		if tc.unit == 0 {
			if isNumber(v) {
				return lineErr(0, "time", "%q is a number: name its unit with time_ns, time_ms or time_s", v)
			}
			rec.Time, err = parseRFC3339(v)
		} else {
			rec.Time, err = parseEpoch(v, tc.unit)
		}
		if err != nil {
			return lineErr(0, tc.name, "%v", err)
		}
	}
	if timeCol == "" {
		return lineErr(0, "time", "missing (give time, time_ns, time_ms or time_s)")
	}
	errText, _ := get("error")
	errText = strings.TrimSpace(errText)
	status := 0
	if v, ok := get("status"); ok && v != "" && v != "-" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 999 {
			return lineErr(0, "status", "%q is not an HTTP status", v)
		}
		status = n
	}
	if status == 0 && errText == "" {
		return lineErr(0, "status", "no status and no error: cannot tell whether the request failed")
	}
	rec.Status = status
	rec.Failed = errText != "" || status == 0 || opts.failStatus(status)
	if !rec.Failed {
		return nil
	}
	if v, ok := get("reason"); ok && v != "" {
		if !validReason(v) {
			return lineErr(0, "reason", "%q is not a failure class (eof, refused, reset, timeout, status, other)", v)
		}
		rec.Reason = v
	} else {
		rec.Reason = Classify(errText)
		if errText == "" || (rec.Reason == "other" && opts.failStatus(status)) {
			rec.Reason = "status"
		}
	}
	rec.Error = errText
	rec.Target, _ = get("target")
	rec.Service, _ = get("service")
	if v, ok := get("duration_ms"); ok {
		d, err := parseMillis(v)
		if err != nil {
			return lineErr(0, "duration_ms", "%v", err)
		}
		rec.Duration = d
	}
	if v, ok := get("timeout_ms"); ok && v != "" && v != "-" {
		d, err := parseMillis(v)
		if err != nil || d <= 0 {
			return lineErr(0, "timeout_ms", "%q is not a positive number of milliseconds", v)
		}
		rec.Timeout = d
	}
	for _, c := range []struct {
		name string
		dst  *netip.AddrPort
	}{{"client", &rec.Client}, {"remote", &rec.Remote}} {
		v, _ := get(c.name)
		a, ok := parseAddr(v)
		if !ok {
			return lineErr(0, c.name, "%q is not an IP address or ip:port", v)
		}
		*c.dst = a
	}
	if v, _ := get("backend"); v != "" && v != "-" {
		rec.Backend = v
	}
	return nil
}

func isNumber(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if (s[i] < '0' || s[i] > '9') && s[i] != '.' {
			return false
		}
	}
	return true
}

// ParseJSONLines reads generic JSON lines: one object per line with the
// GenericColumns as keys; values may be strings or numbers.
func ParseJSONLines(r io.Reader, opts Options, emit Emit) error {
	return scanLines(r, emit, func(line []byte, rec *Record) *LineError {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			return jsonError(line, err)
		}
		var bad *LineError
		lerr := genericRecord(rec, &opts, func(k string) (string, bool) {
			raw, ok := m[k]
			if !ok {
				return "", false
			}
			s, err := jsonScalar(raw)
			if err != nil && bad == nil {
				bad = lineErr(0, k, "%v", err)
			}
			return s, true
		})
		if bad != nil {
			return bad
		}
		return lerr
	})
}

// ParseCSV reads generic CSV whose first line names the columns (any of
// GenericColumns, in any order; others are ignored).
func ParseCSV(r io.Reader, opts Options, emit Emit) error {
	var sp csvSplitter
	var header []string
	var col map[string]int
	return scanLines(r, emit, func(line []byte, rec *Record) *LineError {
		fields, bad, why := sp.split(line)
		if header == nil {
			if lerr := readCSVHeader(fields, bad, why, &header, &col); lerr != nil {
				lerr.final = true // without its header no line can be read
				return lerr
			}
			return skipLine
		}
		if bad >= 0 {
			name := FieldLine
			if bad < len(header) {
				name = columnName(header, bad)
			}
			return lineErr(0, name, "not CSV: %s", why)
		}
		if len(fields) != len(header) {
			name := FieldLine
			if len(fields) < len(header) {
				name = columnName(header, len(fields))
			}
			return lineErr(0, name, "%d columns where the header has %d", len(fields), len(header))
		}
		return genericRecord(rec, &opts, func(k string) (string, bool) {
			i, ok := col[k]
			if !ok {
				return "", false
			}
			return strings.TrimSpace(fields[i]), true
		})
	})
}

// readCSVHeader reads the first line of a generic CSV: the columns' names.
func readCSVHeader(fields []string, bad int, why string, header *[]string, col *map[string]int) *LineError {
	if bad >= 0 {
		return lineErr(0, FieldLine, "header: not CSV: %s (nothing else read)", why)
	}
	names := map[string]int{}
	for i, h := range fields {
		h = strings.ToLower(strings.TrimSpace(h))
		if h == "" {
			continue // an unnamed column is one drainscope does not read
		}
		if _, dup := names[h]; dup {
			return lineErr(0, h, "header names the column twice (nothing else read)")
		}
		names[h] = i
	}
	hasTime := false
	for _, tc := range timeColumns {
		if _, ok := names[tc.name]; ok {
			hasTime = true
		}
	}
	if !hasTime {
		return lineErr(0, "time", "the header (first line) names no time column; it must name the columns, e.g. time,target,error,status (nothing else read)")
	}
	*header, *col = append([]string(nil), fields...), names
	return nil
}

// columnName names the i-th column of a generic CSV for a rejection.
func columnName(header []string, i int) string {
	if name := strings.TrimSpace(header[i]); name != "" {
		return name
	}
	return fmt.Sprintf("column %d", i+1)
}
