package store

import (
	"context"
	"testing"
	"time"

	"github.com/drainscope/drainscope/internal/eventgen"
	"github.com/drainscope/drainscope/internal/pgtest"
)

// openBehindProxy opens a Postgres store whose connections go through a
// proxy the test can stop, as if the server went away.
func openBehindProxy(t *testing.T) (*Postgres, *pgtest.Proxy) {
	dsn := pgtest.Schema(t)
	px := pgtest.NewProxy(t, dsn)
	s, err := OpenPostgres(context.Background(), px.DSN(dsn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, px
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestWriterSurvivesOutage(t *testing.T) {
	s, px := openBehindProxy(t)
	w := NewWriter(s, WriterOptions{Batch: 1000, Interval: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond})
	evs := eventgen.Rollout(30_000, day0, 40, "checkout")

	w.Add(evs[:10_000]...)
	waitFor(t, "the first events to be written", func() bool { return w.Stats().Written == 10_000 })

	px.Stop()
	for i := 10_000; i < 20_000; i += 500 { // producers go on during the outage
		w.Add(evs[i : i+500]...)
	}
	waitFor(t, "a failed write", func() bool { return w.Stats().Failures > 0 })
	if st := w.Stats(); st.Pending != 10_000 || st.Dropped != 0 {
		t.Fatalf("during the outage: %+v; want all 10,000 new events held", st)
	}

	px.Start()
	w.Add(evs[20_000:]...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	if st.Received != 30_000 || st.Written != 30_000 || st.Dropped != 0 || st.Pending != 0 {
		t.Fatalf("after recovery: %+v", st)
	}
	if n := count(t, s, Query{}); n != 30_000 {
		t.Fatalf("%d events stored, want 30,000 (produced = stored)", n)
	}
}

func TestWriterCountsDropsPastLimit(t *testing.T) {
	s, px := openBehindProxy(t)
	px.Stop()
	w := NewWriter(s, WriterOptions{Batch: 1000, Interval: 20 * time.Millisecond, Limit: 5000, RetryMax: 100 * time.Millisecond})
	evs := eventgen.Rollout(8000, day0, 41, "checkout")
	dropped := 0
	for i := 0; i < len(evs); i += 1000 {
		dropped += w.Add(evs[i : i+1000]...)
	}
	if st := w.Stats(); dropped != 3000 || st.Dropped != 3000 || st.Pending != 5000 {
		t.Fatalf("dropped %d, stats %+v; want exactly 3,000 dropped and 5,000 held", dropped, st)
	}
	px.Start()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, Query{}); n != 5000 {
		t.Fatalf("%d events stored, want the 5,000 held", n)
	}
}

func TestWriterCloseReportsWhatItCouldNotWrite(t *testing.T) {
	s, px := openBehindProxy(t)
	px.Stop()
	w := NewWriter(s, WriterOptions{Batch: 100, RetryMax: 50 * time.Millisecond})
	w.Add(eventgen.Rollout(250, day0, 42, "checkout")...)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := w.Close(ctx)
	ue, ok := err.(*UnwrittenError)
	if !ok || ue.Events != 250 {
		t.Fatalf("Close = %v; want an UnwrittenError for 250 events", err)
	}
}
