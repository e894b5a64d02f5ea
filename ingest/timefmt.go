package ingest

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// parseRFC3339 reads an RFC 3339 timestamp, which must carry its zone.
func parseRFC3339(s string) (int64, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		if _, err2 := time.Parse("2006-01-02T15:04:05.999999999", s); err2 == nil {
			return 0, fmt.Errorf("%q has no time zone: add Z or an offset such as +02:00", s)
		}
		if _, err2 := time.Parse("2006-01-02 15:04:05.999999999Z07:00", s); err2 == nil {
			return 0, fmt.Errorf("%q is not RFC 3339: use T between date and time", s)
		}
		return 0, fmt.Errorf("%q is not an RFC 3339 timestamp (like 2026-01-02T15:04:05.123Z)", s)
	}
	return checkRange(t.UnixNano(), s, t.Year())
}

// checkRange rejects times the nanosecond clock cannot hold or that are
// not after the epoch.
func checkRange(ns int64, s string, year int) (int64, error) {
	if year < 1971 || year > 2261 || ns <= 0 {
		return 0, fmt.Errorf("%q is out of range (years 1971-2261)", s)
	}
	return ns, nil
}

var months = [...]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}

// timeLocalLen is the width of nginx's $time_local: 10/Oct/2000:13:55:36 -0700.
const timeLocalLen = 26

// parseTimeLocal reads nginx's $time_local, which always carries its offset.
func parseTimeLocal(b []byte) (int64, error) {
	bad := func(why string) (int64, error) {
		return 0, fmt.Errorf("%q is not an nginx $time_local (like 10/Oct/2000:13:55:36 -0700): %s", b, why)
	}
	if len(b) != timeLocalLen {
		return bad("wrong length")
	}
	if b[2] != '/' || b[6] != '/' || b[11] != ':' || b[14] != ':' || b[17] != ':' || b[20] != ' ' {
		return bad("wrong separators")
	}
	day, ok1 := digits(b[0:2])
	year, ok2 := digits(b[7:11])
	hh, ok3 := digits(b[12:14])
	mm, ok4 := digits(b[15:17])
	ss, ok5 := digits(b[18:20])
	zh, ok6 := digits(b[22:24])
	zm, ok7 := digits(b[24:26])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) {
		return bad("not a number")
	}
	mon := 0
	for i, m := range months {
		if string(b[3:6]) == m {
			mon = i + 1
			break
		}
	}
	if mon == 0 {
		return bad("unknown month")
	}
	if day < 1 || day > daysIn(mon, year) || hh > 23 || mm > 59 || ss > 60 || zh > 14 || zm > 59 {
		return bad("out of range")
	}
	off := (zh*60 + zm) * 60
	switch b[21] {
	case '+':
	case '-':
		off = -off
	default:
		return bad("offset must start with + or -")
	}
	sec := time.Date(year, time.Month(mon), day, hh, mm, ss, 0, time.UTC).Unix() - int64(off)
	return checkRange(sec*1e9, string(b), year)
}

func daysIn(mon, year int) int {
	switch mon {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

func digits(b []byte) (int, bool) {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, len(b) > 0
}

// parseEpoch reads a Unix time in the given unit ("s" allows a fraction).
func parseEpoch(s string, unit time.Duration) (int64, error) {
	s = strings.TrimSpace(s)
	if unit == time.Second {
		f, err := parseDecimal(s, 9)
		if err != nil {
			return 0, fmt.Errorf("%q is not Unix seconds: %v", s, err)
		}
		return checkEpoch(f, s)
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer count of %s since the Unix epoch", s, unitName(unit))
	}
	if v > math.MaxInt64/int64(unit) || v < 0 {
		return 0, fmt.Errorf("%q %s is out of range", s, unitName(unit))
	}
	return checkEpoch(v*int64(unit), s)
}

func checkEpoch(ns int64, s string) (int64, error) {
	return checkRange(ns, s, time.Unix(0, ns).UTC().Year())
}

func unitName(u time.Duration) string {
	switch u {
	case time.Nanosecond:
		return "nanoseconds"
	case time.Microsecond:
		return "microseconds"
	case time.Millisecond:
		return "milliseconds"
	}
	return "seconds"
}

// parseDecimal reads a non-negative decimal like "12.345" and scales it by
// 10^scale without going through floating point: "1.5" at scale 3 is 1500.
// Extra fraction digits are truncated.
func parseDecimal(s string, scale int) (int64, error) {
	if s == "" {
		return 0, errors.New("empty")
	}
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" {
		return 0, errors.New("no digits")
	}
	var v int64
	for i := 0; i < len(whole); i++ {
		c := whole[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not a decimal number", s)
		}
		if v > (math.MaxInt64-9)/10 {
			return 0, fmt.Errorf("%q is too large", s)
		}
		v = v*10 + int64(c-'0')
	}
	for i := 0; i < scale; i++ {
		var d int64
		if i < len(frac) {
			c := frac[i]
			if c < '0' || c > '9' {
				return 0, fmt.Errorf("%q is not a decimal number", s)
			}
			d = int64(c - '0')
		}
		if v > (math.MaxInt64-9)/10 {
			return 0, fmt.Errorf("%q is too large", s)
		}
		v = v*10 + d
	}
	for i := scale; i < len(frac); i++ {
		if frac[i] < '0' || frac[i] > '9' {
			return 0, fmt.Errorf("%q is not a decimal number", s)
		}
	}
	return v, nil
}

// parseSeconds reads a duration in seconds with a fraction ("0.123"), as
// nginx logs $request_time; "-" is unknown (0).
func parseSeconds(s string) (time.Duration, error) {
	if s == "-" || s == "" {
		return 0, nil
	}
	v, err := parseDecimal(s, 9)
	if err != nil {
		return 0, err
	}
	return time.Duration(v), nil
}

// parseMillis reads a duration in milliseconds, integer or decimal.
func parseMillis(s string) (time.Duration, error) {
	if s == "-" || s == "" {
		return 0, nil
	}
	v, err := parseDecimal(s, 6)
	if err != nil {
		return 0, err
	}
	return time.Duration(v), nil
}

// endTime is start plus a request's duration, or an error naming field
// when the end falls outside the years every other time must lie in
// (checkRange), overflow included.
func endTime(start, d int64, field string) (int64, *LineError) {
	if d < 0 {
		return 0, lineErr(0, field, "%d ns is negative", d)
	}
	if start > math.MaxInt64-d {
		return 0, lineErr(0, field, "%d ns after the start is past the year 2261", d)
	}
	end := start + d
	if _, err := checkRange(end, fmt.Sprintf("%d ns after the start", d), time.Unix(0, end).UTC().Year()); err != nil {
		return 0, lineErr(0, field, "%v", err)
	}
	return end, nil
}
