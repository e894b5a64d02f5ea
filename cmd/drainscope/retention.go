package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"strings"
	"time"

	"github.com/drainscope/drainscope/internal/duration"
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
	d, err := duration.Parse(s)
	if err != nil {
		// The flag package names the flag and the value.
		return errors.New("want a duration such as 336h or 14d (0 keeps everything)")
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
