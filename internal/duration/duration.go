// Package duration reads the durations drainscope's flags take. It takes Go's
// (90m, 336h) and days (1d, 1.5d), which time.ParseDuration lacks, and times
// given either as such a duration before now or in RFC 3339.
package duration

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Day is 24 hours: the "d" of "14d".
const Day = 24 * time.Hour

// MaxDays bounds a duration in days: a century, well inside what a
// time.Duration holds (292 years), so that no "1e9d" wraps around.
const MaxDays = 100 * 365

// Parse reads a non-negative duration in time.ParseDuration's form or in
// days with a "d" suffix ("14d", "1.5d"). Its error names the value;
// flags word their own (what 0 means for them).
func Parse(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseFloat(n, 64)
		// Negated so that NaN is refused too.
		if err != nil || !(days >= 0 && days <= MaxDays) {
			return 0, fmt.Errorf("%q: want a duration (90m, 2h) or days (1d, 1.5d)", s)
		}
		return time.Duration(days * float64(Day)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q: want a duration (90m, 2h) or days (1d, 1.5d)", s)
	}
	return d, nil
}

// Before reads a time: an RFC 3339 one, or a duration before now as Parse
// reads it ("90m", "2h", "1d").
func Before(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := Parse(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither a duration before now (90m, 2h, 1d) nor an RFC 3339 time (2026-03-14T12:00:00Z)", s)
	}
	return now.Add(-d), nil
}
