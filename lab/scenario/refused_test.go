package scenario_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/ebpf"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/lab/scenario"
	"github.com/drainscope/drainscope/store"
)

// TestLabRefusedFallback runs the exit and graceful runs with two kernel
// captures at once: the lab's own, which sees refused connections through
// tcp_send_reset as 6.10+ does, and a shadow with that path withheld, which
// must see them through the fallback of kernels 5.8–6.9 (fentry on
// tcp_v4_send_reset, or kfree_skb's NO_SOCKET drop reason). Both must
// record the same refused SYNs, and the same resets sent without a socket,
// in each run; the counts are printed side by side.
func TestLabRefusedFallback(t *testing.T) {
	testenv.RequireRoot(t)
	if _, err := controlplane.CheckBinaries(""); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	if err := scenario.Preflight(""); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	if testing.Short() {
		t.Skip("two lab runs take about two minutes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var mu sync.Mutex
	var shadow []event.Event
	sh := &scenario.ShadowKernel{
		Config: ebpf.Config{WithoutFeatures: []ebpf.Feature{ebpf.FeatureNoSocketResets}},
		Emit: func(e event.Event) {
			if e.Kind == event.ConnRefused || e.Kind == event.RSTSent {
				mu.Lock()
				shadow = append(shadow, e)
				mu.Unlock()
			}
		},
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := scenario.Up(ctx, scenario.Options{
		AppCommand: []string{os.Args[0]}, AppEnv: []string{"DRAINSCOPE_LAB_SAMPLEAPP=1"},
		Store: st, WaitForLock: true, Log: log, Progress: testWriter{t}, Shadow: sh,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Down()
	if !c.Kernel() || sh.Collector() == nil {
		t.Fatalf("both kernel captures must run: %v", c.KernelErr)
	}
	by := sh.Collector().RefusedBy()
	if by == "" || by == "tcp_send_reset" {
		t.Fatalf("the shadow sees refused connections through %q, want a fallback (passed over: %v)", by, sh.Collector().RefusedPassedOver())
	}
	t.Logf("shadow capture: refused connections through %s (passed over: %v)", by, sh.Collector().RefusedPassedOver())
	runs, err := scenario.SelectRuns("exit,graceful")
	if err != nil {
		t.Fatal(err)
	}
	results, err := scenario.Execute(ctx, c, scenario.Config{Profile: scenario.Profiles["ci"], Runs: runs, Progress: testWriter{t}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	c.Sync()
	time.Sleep(500 * time.Millisecond) // the shadow's delay line
	events, err := store.Events(ctx, st, store.Query{Kinds: []event.Kind{event.ConnRefused, event.RSTSent}})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	fallback := append([]event.Event(nil), shadow...)
	mu.Unlock()

	// key names one reset: what it answered, not when each capture read it.
	key := func(e *event.Event) string { return fmt.Sprintf("%s %s>%s", e.Kind, e.Remote, e.Local) }
	noSocket := func(e *event.Event) bool {
		return e.Kind == event.ConnRefused || e.Reason == ebpf.ReasonNoSocket && e.PID == 0
	}
	count := func(es []event.Event, w event.Window) (refused, rst int, keys map[string]int) {
		keys = map[string]int{}
		for i := range es {
			e := &es[i]
			if e.Time < w.From || e.Time >= w.To || !noSocket(e) {
				continue
			}
			keys[key(e)]++
			if e.Kind == event.ConnRefused {
				refused++
			} else {
				rst++
			}
		}
		return
	}
	total := 0
	t.Logf("%-9s %28s %28s", "run", "conn_refused tcp_send_reset", "conn_refused "+by)
	for _, r := range results {
		w := r.Window()
		mainRefused, mainRST, mainKeys := count(events, w)
		fbRefused, fbRST, fbKeys := count(fallback, w)
		t.Logf("%-9s %28d %28d   (no-socket rst_sent: %d / %d; client failures %d)", r.Run.Name, mainRefused, fbRefused, mainRST, fbRST, r.Load.FailedTotal())
		total += mainRefused
		for k, n := range mainKeys {
			if fbKeys[k] != n {
				t.Errorf("run %s: %s seen %d times through tcp_send_reset, %d through %s", r.Run.Name, k, n, fbKeys[k], by)
			}
		}
		for k, n := range fbKeys {
			if mainKeys[k] == 0 {
				t.Errorf("run %s: %s seen %d times through %s only", r.Run.Name, k, n, by)
			}
		}
	}
	if total == 0 {
		t.Error("no refused connection in the exit and graceful runs: the comparison showed nothing")
	}
}
