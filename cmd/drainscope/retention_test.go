package main

import (
	"context"
	"flag"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/eventgen"
	"github.com/drainscope/drainscope/store"
	"github.com/drainscope/drainscope/watcher"
)

// TestDurationFlags checks that --retention and --max-past read days as
// internal/duration does, and that a bad value's error names the flag and
// the value (the flag package's part) and what the flag wants.
func TestDurationFlags(t *testing.T) {
	var f retentionFlag
	if f.Set("14d"); f.String() != "336h" || !f.set {
		t.Errorf("--retention 14d reads back as %q (set %v)", f.String(), f.set)
	}
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	r := registerRetention(fs, "keep")
	w := registerWindow(fs)
	if err := fs.Parse([]string{"-retention", "1.5d", "-max-past", "30d"}); err != nil || r.keep != 36*time.Hour || w.past.d != 30*24*time.Hour || w.past.String() != "30d" {
		t.Errorf("--retention 1.5d --max-past 30d: %v, %v, %v", err, r.keep, w.past.d)
	}
	for _, tc := range []struct{ flag, value, want string }{
		{"retention", "2weeks", "0 keeps everything"},
		{"max-past", "-1d", "0 lifts the bound"},
		{"max-ahead", "NaNd", "0 lifts the bound"},
	} {
		err := fs.Parse([]string{"-" + tc.flag, tc.value})
		if err == nil || !strings.Contains(err.Error(), tc.flag) || !strings.Contains(err.Error(), tc.value) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("-%s %s: error %v; want one naming the flag, the value and %q", tc.flag, tc.value, err, tc.want)
		}
	}
}

func TestAgentPrunes(t *testing.T) {
	ctx := context.Background()
	sqlite, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "e.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer sqlite.Close()
	var pg store.Store = struct{ store.Store }{sqlite} // any store that is not SQLite
	leading := false
	lease := func() bool { return leading }
	for _, tc := range []struct {
		name   string
		set    bool
		mode   watcher.Mode
		st     store.Store
		prunes bool
		gated  bool // only while it holds the lease
	}{
		{"postgres, all nodes", false, watcher.EveryNode, pg, false, false},
		{"postgres, leader mode", false, watcher.Leader, pg, true, true},
		{"postgres, flag given", true, watcher.EveryNode, pg, true, false},
		{"sqlite", false, watcher.EveryNode, sqlite, true, false},
	} {
		active, ok := agentPrunes(&retentionFlag{set: tc.set}, tc.mode, tc.st, lease)
		if ok != tc.prunes || (active != nil) != tc.gated {
			t.Errorf("%s: prunes %v, gated %v; want %v, %v", tc.name, ok, active != nil, tc.prunes, tc.gated)
		}
		if active != nil {
			leading = true
			if !active() {
				t.Errorf("%s: not active while leading", tc.name)
			}
			leading = false
			if active() {
				t.Errorf("%s: active while not leading", tc.name)
			}
		}
	}
}

// TestServePrunes: drainscope serve with the default retention deletes
// events older than 14 days when it starts, and keeps the recent ones.
func TestServePrunes(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "e.db")
	st, err := store.OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	old := eventgen.Rollout(500, now.AddDate(0, 0, -20), 1, "checkout")
	recent := eventgen.Rollout(300, now.Add(-time.Hour), 2, "checkout")
	if err := st.Append(ctx, append(old, recent...)); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		done <- runServe(sctx, fs, []string{"--listen", addr, "--store", path})
	}()
	count := func(w event.Window) int {
		evs, err := store.Events(ctx, st, store.Query{Window: w})
		if err != nil {
			t.Fatal(err)
		}
		return len(evs)
	}
	cutoff := now.AddDate(0, 0, -14).UnixNano()
	for deadline := time.Now().Add(30 * time.Second); count(event.Window{To: cutoff}) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d events older than 14 days remain", count(event.Window{To: cutoff}))
		}
	}
	if n := count(event.Window{}); n != len(recent) {
		t.Errorf("%d events left, want the %d recent ones", n, len(recent))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
