package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
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

// TestWriterAddOverPastLimit: the account of what was dropped (an
// agent's coverage span) is queued and stored even when the buffer is
// full, and a closed writer refuses and counts it.
func TestWriterAddOverPastLimit(t *testing.T) {
	s, px := openBehindProxy(t)
	px.Stop()
	w := NewWriter(s, WriterOptions{Batch: 1000, Interval: 20 * time.Millisecond, Limit: 100, RetryMax: 100 * time.Millisecond})
	evs := eventgen.Rollout(120, day0, 43, "checkout")
	if n := w.Add(evs[:110]...); n != 10 {
		t.Fatalf("Add dropped %d of 110 with a limit of 100, want 10", n)
	}
	if !w.AddOver(evs[110]) || !w.AddOver(evs[111]) {
		t.Fatal("AddOver refused an event with the buffer full")
	}
	if st := w.Stats(); st.Dropped != 10 || st.Pending != 102 || st.Received != 112 {
		t.Fatalf("stats %+v: want 10 dropped, 102 pending of 112 received", st)
	}
	px.Start()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, Query{}); n != 102 {
		t.Fatalf("%d events stored, want the 102 held", n)
	}
	if w.AddOver(evs[112]) || w.Stats().Dropped != 11 {
		t.Fatalf("a closed writer took an event, or did not count it: %+v", w.Stats())
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

// hangingStore's Append blocks: until its context ends, or (forever) until
// the test is over. called is closed at the first Append.
type hangingStore struct {
	Store
	forever  bool
	release  chan struct{}
	called   chan struct{}
	callOnce sync.Once
}

func (h *hangingStore) Append(ctx context.Context, batch []event.Event) error {
	h.callOnce.Do(func() { close(h.called) })
	if h.forever {
		<-h.release
		return errors.New("store fake: released")
	}
	select {
	case <-ctx.Done():
		return fmt.Errorf("store fake: appending %d events: %w", len(batch), ctx.Err())
	case <-h.release:
		return errors.New("store fake: released")
	}
}

// TestWriterCloseHonoursItsDeadline: a store whose Append hangs, in the
// writer's own loop or in Close's last flush, must not hold a shutdown
// past Close's deadline; the events stay counted as not written.
func TestWriterCloseHonoursItsDeadline(t *testing.T) {
	for _, tc := range []struct {
		name    string
		forever bool // Append ignores its context
		inLoop  bool // the loop's write hangs, before Close is called
	}{
		{"close's flush, append honours its context", false, false},
		{"close's flush, append blocks forever", true, false},
		{"loop's write, append honours its context", false, true},
		{"loop's write, append blocks forever", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &hangingStore{forever: tc.forever, release: make(chan struct{}), called: make(chan struct{})}
			t.Cleanup(func() { close(st.release) })
			// Until Close, the loop writes only a full batch or at the
			// interval: neither comes unless the loop's write is the case.
			batch, interval := 1000, time.Hour
			if tc.inLoop {
				batch, interval = 100, 10*time.Millisecond
			}
			w := NewWriter(st, WriterOptions{Batch: batch, Interval: interval, RetryMax: 50 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			const n = 250
			w.Add(eventgen.Rollout(n, day0, 43, "checkout")...)
			if tc.inLoop {
				select {
				case <-st.called:
				case <-time.After(10 * time.Second):
					t.Fatal("the writer's loop never wrote")
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- w.Close(ctx) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Close(ctx with a 100 ms deadline) did not return: a hung Append blocks the shutdown")
			}
			var ue *UnwrittenError
			if !errors.As(err, &ue) || ue.Events != n || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Close = %v; want an UnwrittenError for %d events wrapping the deadline", err, n)
			}
			if s := w.Stats(); s.Written != 0 || s.Pending != n || s.Received != n {
				t.Errorf("stats after Close: %+v; want all %d events received, none written, all still counted pending", s, n)
			}
		})
	}
}
