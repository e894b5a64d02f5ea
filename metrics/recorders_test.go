package metrics

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// TestRecorderSpanAge: the server lists each node whose newest stored
// coverage span is old, in its agent's intervals; a node whose agent said
// it stopped, or that went silent over an hour ago, is not listed.
func TestRecorderSpanAge(t *testing.T) {
	ctx := context.Background()
	st, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	span := func(node string, ago time.Duration, reason, interval string) event.Event {
		e := event.Event{Time: now.Add(-ago).UnixNano(), Kind: event.RecorderCoverage, Node: node, Source: event.SourceAgent,
			Duration: int64(time.Second), Reason: reason, Attrs: map[string]string{event.AttrSession: "s", event.AttrInterval: interval}}
		e.Seal()
		return e
	}
	evs := []event.Event{
		span("node-silent", 40*time.Second, event.CoverRunning, "10s"),
		span("node-silent", 50*time.Second, event.CoverRunning, "10s"),
		span("node-fine", 2*time.Second, event.CoverRunning, "10s"),
		span("node-fine", 12*time.Second, event.CoverRunning, "10s"),
		span("node-stopped", 30*time.Second, event.CoverStopped, "10s"),
		span("node-gone", 2*time.Hour, event.CoverRunning, "10s"),
	}
	if err := st.Append(ctx, evs); err != nil {
		t.Fatal(err)
	}
	m := New("server", "test")
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); m.RunRecorders(rctx, st, time.Hour, nil) }()
	var body string
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(body, "node-fine"); {
		if time.Now().After(deadline) {
			t.Fatalf("no span read in 10 s:\n%s", body)
		}
		time.Sleep(20 * time.Millisecond)
		body = scrape(t, m)
	}
	cancel()
	<-done
	got := map[string]float64{}
	for _, l := range strings.Split(body, "\n") {
		if !strings.HasPrefix(l, "drainscope_recorder_span_age_intervals{") {
			continue
		}
		var v float64
		node := l[strings.Index(l, `node="`)+6 : strings.Index(l, `"}`)]
		if _, err := fmt.Sscan(l[strings.LastIndex(l, " ")+1:], &v); err != nil {
			t.Fatal(err)
		}
		got[node] = v
	}
	t.Logf("span ages in intervals: %v", got)
	if v := got["node-silent"]; v < 3.9 || v > 5 {
		t.Errorf("node-silent: %v intervals, want about 4 (40 s at 10 s)", v)
	}
	if v, ok := got["node-fine"]; !ok || v > 1 {
		t.Errorf("node-fine: %v (listed %v), want below 1", v, ok)
	}
	for _, n := range []string{"node-stopped", "node-gone"} {
		if _, ok := got[n]; ok {
			t.Errorf("%s listed: its agent stopped, or it went silent over an hour ago", n)
		}
	}
}
