package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/drainscope/drainscope/metrics"
	"github.com/drainscope/drainscope/store"
)

// retentionFlag is --retention: a duration (336h) or a number of days
// (14d, 1.5d), 0 to keep everything. set tells whether it was given.
type retentionFlag struct {
	keep time.Duration
	set  bool
}

func (f *retentionFlag) String() string {
	if f == nil {
		return ""
	}
	// 336h, not 336h0m0s.
	out := strings.TrimSuffix(strings.TrimSuffix(f.keep.String(), "0s"), "0m")
	if out == "" {
		return "0"
	}
	return out
}

func (f *retentionFlag) Set(s string) error {
	d, err := parseDays(s)
	if err != nil {
		return err // the flag package names the flag and the value
	}
	f.keep, f.set = d, true
	return nil
}

// registerRetention adds --retention to fs with the given usage text.
func registerRetention(fs *flag.FlagSet, usage string) *retentionFlag {
	f := &retentionFlag{keep: store.DefaultRetention}
	fs.Var(f, "retention", usage)
	return f
}

// parseDays reads a non-negative duration, in time.ParseDuration's form or
// as days with a "d" suffix ("14d", "1.5d"), which it lacks.
func parseDays(s string) (time.Duration, error) {
	bad := errors.New("want a duration such as 336h or 14d (0 keeps everything)")
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseFloat(n, 64)
		if err != nil || days < 0 || days > 100*365 {
			return 0, bad
		}
		return time.Duration(days * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, bad
	}
	return d, nil
}

// startRetention prunes st in the background until the returned stop is
// called (or ctx ends); stop waits for a pass under way to give up. active
// nil means this process always prunes.
func startRetention(ctx context.Context, st store.Store, m *metrics.Metrics, keep time.Duration, active func() bool) (stop func()) {
	r := &store.Retention{Store: st, Keep: keep, Active: active, Logger: slog.Default()}
	if m != nil {
		m.WatchRetention(r.Stats)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	return func() { cancel(); <-done }
}
