package export_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/export"
	"github.com/drainscope/drainscope/internal/eventfile"
	"github.com/drainscope/drainscope/store"
)

// fixture is a recorded lab run (the web package's): the exit run's
// rollout of Deployment/sample-exit, with the clients' failures, its
// deletion, and the runs around it.
const fixture = "../web/testdata/lab-run.jsonl"

func fixtureStore(t *testing.T) (store.Store, []event.Event) {
	t.Helper()
	evs, err := eventfile.Read(fixture)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Append(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	return st, evs
}

// recorder is a sink that keeps what it is given.
type recorder struct {
	name       string
	idempotent bool
	got        []*analysis.Disruption
	err        error // returned once, then cleared
}

func (r *recorder) Name() string     { return r.name }
func (r *recorder) Idempotent() bool { return r.idempotent }
func (r *recorder) Deliver(_ context.Context, d *analysis.Disruption) error {
	if err := r.err; err != nil {
		r.err = nil
		return err
	}
	r.got = append(r.got, d)
	return nil
}

func (r *recorder) ids() []string {
	var out []string
	for _, d := range r.got {
		out = append(out, d.ID)
	}
	return out
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestFeedDeliversEachFinishedDisruptionOnce(t *testing.T) {
	st, evs := fixtureStore(t)
	ctx := context.Background()
	rs, err := analysis.FindDisruptions(ctx, st, store.Query{}, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var exit *analysis.Disruption
	for _, r := range rs {
		if r.Name == "sample-exit" && r.Trigger == analysis.TriggerRollout {
			exit = r
		}
	}
	if exit == nil {
		t.Fatalf("the fixture holds no template rollout of sample-exit: %+v", rs)
	}
	last := evs[len(evs)-1].Time
	for _, e := range evs {
		last = max(last, e.Time)
	}
	quiet := 20 * time.Second
	// The server started before the runs.
	clk := &clock{time.Unix(0, evs[0].Time).Add(-time.Minute)}
	events := &recorder{name: "events", idempotent: true}
	otlp := &recorder{name: "otlp"}
	var outcomes []string
	f := export.New(st, []export.Sink{events, otlp}, export.Options{
		Quiet: quiet, Now: clk.now, BaseURL: "https://drainscope.example/",
		Observe: func(sink, outcome string) { outcomes = append(outcomes, sink+":"+outcome) },
	})

	// Not finished: its last pod ended less than Quiet ago.
	clk.t = time.Unix(0, exit.To).Add(quiet / 2)
	if err := f.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range events.got {
		if d.ID == exit.ID {
			t.Fatalf("delivered %s %v after its last pod ended, before the quiet time %v", d.ID, quiet/2, quiet)
		}
	}

	clk.t = time.Unix(0, last).Add(quiet + time.Second)
	if err := f.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	var d *analysis.Disruption
	for _, g := range events.got {
		if g.Kind == "Deployment" && g.Name == "sample-exit" && g.Trigger == analysis.TriggerRollout {
			d = g
		}
	}
	if d == nil {
		t.Fatalf("the exit run's rollout was not delivered; got %v", events.ids())
	}
	// What the report says about the same rollout is what the feed says.
	res, err := analysis.Analyze(ctx, st, exit.Query())
	if err != nil {
		t.Fatal(err)
	}
	var ro *analysis.Disruption
	for i := range res.Disruptions {
		if res.Disruptions[i].ID == exit.ID {
			ro = &res.Disruptions[i]
		}
	}
	if ro == nil {
		t.Fatal("the analysis has no disruption of the feed's ID")
	}
	if d.Failures != ro.Failures || d.Failures == 0 || len(d.Replaced) != 4 || d.Inferred != ro.Inferred {
		t.Errorf("disruption: %d failures, %d inferred, %d pods replaced; the report: %d, %d, %d (want 4 replaced, failures)",
			d.Failures, d.Inferred, len(d.Replaced), ro.Failures, ro.Inferred, len(ro.Replaced))
	}
	sum := 0
	for _, c := range d.Causes {
		if c.Failures != ro.ByCause[c.Cause] || c.Inferred != ro.InferredByCause[c.Cause] {
			t.Errorf("cause %s: %d and %d inferred; the report: %d and %d", c.Cause, c.Failures, c.Inferred, ro.ByCause[c.Cause], ro.InferredByCause[c.Cause])
		}
		if c.Fix == "" && c.Cause != analysis.CauseUnexplained {
			t.Errorf("cause %s has no fix", c.Cause)
		}
		sum += c.Failures
	}
	if sum != d.Failures {
		t.Errorf("causes add up to %d, the disruption has %d", sum, d.Failures)
	}
	if d.ByCause[analysis.CauseKeepAliveAtExit] == 0 || !strings.Contains(d.CountsByCause(false), "keep-alive connection cut at exit") {
		t.Errorf("an exit at SIGTERM cuts keep-alive connections: %v (%s)", d.ByCause, d.CountsByCause(false))
	}
	want := exit.ID
	if d.ID != want || d.Link != "https://drainscope.example/rollouts/"+want {
		t.Errorf("id %q link %q; want the web UI's %q", d.ID, d.Link, want)
	}
	if len(d.Explained) == 0 {
		t.Error("no explained failure")
	}
	for _, af := range d.Explained {
		if af.Cause == analysis.CauseUnexplained || af.Pod == nil || !strings.HasPrefix(af.Pod.Name, "sample-exit-") ||
			af.Failure.Time < d.From || af.Failure.Time > d.To+int64(analysis.DisruptionPad) {
			t.Errorf("explained failure %+v: want a cause, a replaced pod and a time in the disruption", af)
		}
	}
	// Started after the disruption finished? No: the server was up, so
	// both sinks get it, once.
	if got, want := len(otlp.got), len(events.got); got != want || got < 2 {
		t.Errorf("the otlp sink got %v, the events sink %v: want the same disruptions, several", otlp.ids(), events.ids())
	}
	n := len(events.got)
	if err := f.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if len(events.got) != n || len(otlp.got) != n {
		t.Errorf("a second poll delivered again: %v", events.ids()[n:])
	}
	if !strings.Contains(strings.Join(outcomes, " "), "events:delivered") {
		t.Errorf("outcomes %v", outcomes)
	}

	// A restart: the idempotent sink is given what finished before it
	// started, the other sink nothing.
	events2 := &recorder{name: "events", idempotent: true}
	otlp2 := &recorder{name: "otlp"}
	f2 := export.New(st, []export.Sink{events2, otlp2}, export.Options{Quiet: quiet, Now: clk.now})
	if err := f2.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if len(events2.got) != n || len(otlp2.got) != 0 {
		t.Errorf("after a restart: events sink got %v, otlp sink %v; want all %d again (the sink dedupes), none", events2.ids(), otlp2.ids(), n)
	}
	// Past the backfill, nothing is looked at again.
	clk.t = clk.t.Add(2 * time.Hour)
	events3 := &recorder{name: "events", idempotent: true}
	if err := export.New(st, []export.Sink{events3}, export.Options{Quiet: quiet, Now: clk.now}).Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if len(events3.got) != 0 {
		t.Errorf("two hours later: %v delivered, want none (backfill 30 min)", events3.ids())
	}
}

func TestFeedRetriesDeferredAndFailed(t *testing.T) {
	st, evs := fixtureStore(t)
	ctx := context.Background()
	last := int64(0)
	for _, e := range evs {
		last = max(last, e.Time)
	}
	clk := &clock{time.Unix(0, evs[0].Time).Add(-time.Minute)}
	s := &recorder{name: "s", err: export.ErrDeferred}
	var outcomes []string
	f := export.New(st, []export.Sink{s}, export.Options{Quiet: 20 * time.Second, Now: clk.now,
		Observe: func(_, o string) { outcomes = append(outcomes, o) }})
	clk.t = time.Unix(0, last).Add(time.Minute)
	if err := f.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	n := len(s.got)
	s.err = errors.New("the API server is away")
	for range 3 {
		if err := f.Poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The first poll deferred one disruption, the second failed to deliver
	// it: the third delivered it, and nothing went twice.
	seen := map[string]bool{}
	for _, id := range s.ids() {
		if seen[id] {
			t.Errorf("%s delivered twice", id)
		}
		seen[id] = true
	}
	if len(s.got) != n+1 || outcomes[0] != export.OutcomeDeferred || !strings.Contains(strings.Join(outcomes, " "), export.OutcomeFailed) {
		t.Errorf("delivered %d after the first poll, %d after four; outcomes %v", n, len(s.got), outcomes)
	}
}
