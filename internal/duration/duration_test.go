package duration

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"336h": 336 * time.Hour, "14d": 14 * Day, "1.5d": 36 * time.Hour, "90m": 90 * time.Minute,
		"0": 0, "0d": 0, "36500d": MaxDays * Day,
	} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "14days", "-1h", "-2d", "d", "1e9d", "36501d", "NaNd", "Infd", "+Infd"} {
		got, err := Parse(in)
		if err == nil {
			t.Errorf("Parse(%q) = %v, want an error", in, got)
		} else if !strings.Contains(err.Error(), `"`+in+`"`) {
			t.Errorf("Parse(%q): the error %q does not name the value", in, err)
		}
	}
}

func TestBefore(t *testing.T) {
	now := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"90m":                  now.Add(-90 * time.Minute),
		"1d":                   now.Add(-Day),
		"1.5d":                 now.Add(-36 * time.Hour),
		"2026-03-01T00:00:00Z": time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC),
	} {
		if got, err := Before(in, now); err != nil || !got.Equal(want) {
			t.Errorf("Before(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"yesterday", "-1h", "2026-03-01", "1e9d"} {
		if got, err := Before(in, now); err == nil || !strings.Contains(err.Error(), in) {
			t.Errorf("Before(%q) = %v, %v; want an error naming the value", in, got, err)
		}
	}
}
