package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/eventgen"
)

func TestRowLevel(t *testing.T) {
	pg := func(code string) error { return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "x"} }
	rowLevel := map[string]error{
		"22021 invalid byte sequence":        pg("22021"),
		"22P05 untranslatable character":     pg("22P05"),
		"22001 string too long":              pg("22001"),
		"23502 not null":                     pg("23502"),
		"23514 check, no partition":          pg("23514"),
		"54000 index row too long":           pg("54000"),
		"wrapped on one line":                wrapLine("store x: appending 3 events", pg("22021")),
		"wrapped twice":                      fmt.Errorf("writing: %w", wrapLine("store x", pg("23505"))),
		"an event that does not validate":    checkBatch([]event.Event{{Kind: "bogus"}}),
		"sqlite constraint (from the db)":    sqliteError(t, "INSERT INTO t VALUES (NULL)"),
		"sqlite trigger abort (from the db)": sqliteError(t, "INSERT INTO t VALUES ('poison')"),
	}
	transient := map[string]error{
		"nil":                          nil,
		"08006 connection failure":     pg("08006"),
		"57P01 admin shutdown":         pg("57P01"),
		"53300 too many connections":   pg("53300"),
		"25006 read-only transaction":  pg("25006"),
		"40001 serialization failure":  pg("40001"),
		"53100 disk full":              pg("53100"),
		"54001 statement too complex":  pg("54001"),
		"P0001 raised by a trigger":    pg("P0001"),
		"short code":                   pg("2"),
		"connection refused":           &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")},
		"timeout":                      fmt.Errorf("appending: %w", context.DeadlineExceeded),
		"cancelled during a bad batch": fmt.Errorf("%w: %w", context.Canceled, pg("22021")),
		"flattened, code lost":         fmt.Errorf("appending: %s", pg("22021")),
		"sqlite busy (from the db)":    sqliteBusy(t),
	}
	for name, err := range rowLevel {
		if !RowLevel(err) {
			t.Errorf("%s (%v): not row-level", name, err)
		}
	}
	for name, err := range transient {
		if RowLevel(err) {
			t.Errorf("%s (%v): row-level", name, err)
		}
	}
}

// incompressible is n bytes of random letters and digits: Postgres
// compresses an index row before it measures it.
func incompressible(n int) string {
	const abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	r := rand.New(rand.NewPCG(uint64(n), 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = abc[r.IntN(len(abc))]
	}
	return string(b)
}

// sqliteError runs stmt on a table that refuses NULL and, by a trigger,
// 'poison', and returns the driver's error.
func sqliteError(t *testing.T, stmt string) error {
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE t (x TEXT NOT NULL);
		CREATE TRIGGER p BEFORE INSERT ON t WHEN NEW.x = 'poison' BEGIN SELECT RAISE(ABORT, 'poisoned row'); END`); err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(stmt)
	if err == nil {
		t.Fatalf("%s succeeded", stmt)
	}
	return err
}

// sqliteBusy returns the error of a write while another connection holds
// the write lock.
func sqliteBusy(t *testing.T) error {
	path := filepath.Join(t.TempDir(), "busy.db")
	a, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Exec("CREATE TABLE t (x)"); err != nil {
		t.Fatal(err)
	}
	tx, err := a.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	b, err := sql.Open("sqlite", "file:"+path+"?_busy_timeout=0")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, err = b.Exec("INSERT INTO t VALUES (1)")
	if err == nil {
		t.Fatal("a write went in under another connection's lock")
	}
	return err
}

// refusingStore refuses, as Postgres does, any batch holding an event whose
// container is "poison", and fails transiently on the calls listed in down.
type refusingStore struct {
	Store
	mu     sync.Mutex
	calls  int
	down   map[int]bool // call numbers (from 1) that fail as an outage
	stored map[event.ID]int
	order  []event.ID
}

func newRefusingStore() *refusingStore {
	return &refusingStore{down: map[int]bool{}, stored: map[event.ID]int{}}
}

func (f *refusingStore) Append(ctx context.Context, batch []event.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.down[f.calls] {
		return wrapLine("store fake: appending", &net.OpError{Op: "write", Net: "tcp", Err: errors.New("broken pipe")})
	}
	for i := range batch {
		if batch[i].Pod.Container == "poison" {
			return wrapLine(fmt.Sprintf("store fake: appending %d events", len(batch)),
				&pgconn.PgError{Severity: "ERROR", Code: "22021", Message: `invalid byte sequence for encoding "UTF8": 0xc3`})
		}
	}
	for i := range batch {
		f.stored[batch[i].ID]++
		f.order = append(f.order, batch[i].ID)
	}
	return nil
}

// logBuffer collects a Writer's log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) lines(substr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}

func closeWriter(t *testing.T, w *Writer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Close(ctx); err != nil {
		t.Fatalf("Close: %v (stats %+v)", err, w.Stats())
	}
}

// Events older than MaxAge when their write comes are dropped and counted
// as refused, never sent: a relay refuses them, and a buffer of them held
// through a long outage would be split down to single events, two
// requests each. The others are written in their order, a batch a write.
func TestWriterDropsEventsPastMaxAge(t *testing.T) {
	f := newRefusingStore()
	var logs logBuffer
	w := NewWriter(f, WriterOptions{Batch: 100, Interval: 10 * time.Millisecond, MaxAge: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	now := time.Now()
	evs := eventgen.Rollout(300, now.Add(-time.Minute), 7, "checkout")
	var fresh []event.ID
	for i := range evs {
		if i%3 == 0 {
			evs[i].Time = now.Add(-2*time.Hour + time.Duration(i)*time.Millisecond).UnixNano()
			evs[i].Seal()
		} else {
			fresh = append(fresh, evs[i].ID)
		}
	}
	w.Add(evs...)
	closeWriter(t, w)
	st := w.Stats()
	if st.Written != 200 || st.Rejected != 100 || st.Pending != 0 {
		t.Fatalf("stats %+v; want 200 written, 100 refused for their age", st)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Equal(f.order, fresh) {
		t.Errorf("stored %d events; want the 200 fresh ones, in their order", len(f.order))
	}
	if f.calls != 3 {
		t.Errorf("%d writes; want 3, one per batch of 100, none for the old events", f.calls)
	}
	if lines := logs.lines("older than the store takes"); len(lines) != 3 || !strings.Contains(lines[0], "events=34") {
		t.Errorf("want a line per batch, the first naming its 34 old events:\n%s", strings.Join(lines, "\n"))
	}
}

// Refused events anywhere in a batch, alone or side by side, are dropped
// and counted; every other event is stored once, in order, and the writes
// it took stay near 2·log2(batch) per refused event.
func TestWriterIsolatesRefusedEvents(t *testing.T) {
	const n, batch = 3000, 1000
	evs := eventgen.Rollout(n, day0, 50, "checkout")
	bad := map[int]bool{0: true, 517: true, 518: true, 999: true, 1000: true, 2999: true}
	for i := range bad {
		evs[i].Pod.Container = "poison"
		evs[i].Seal()
	}
	f := newRefusingStore()
	var logs logBuffer
	w := NewWriter(f, WriterOptions{Batch: batch, Interval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	w.Add(evs...)
	closeWriter(t, w)

	st := w.Stats()
	if st.Written != n-int64(len(bad)) || st.Rejected != int64(len(bad)) || st.Dropped != 0 || st.Pending != 0 || st.Failures != 0 {
		t.Fatalf("stats %+v; want %d written, %d rejected, no failures", st, n-len(bad), len(bad))
	}
	var want []event.ID
	for i := range evs {
		if !bad[i] {
			want = append(want, evs[i].ID)
		}
	}
	if len(f.order) != len(want) {
		t.Fatalf("%d events stored, want %d", len(f.order), len(want))
	}
	for i, id := range want {
		if f.order[i] != id || f.stored[id] != 1 {
			t.Fatalf("stored event %d is %v (written %d times), want %v once", i, f.order[i], f.stored[id], id)
		}
	}
	// Three batches; bisecting one refused event in 1000 takes about
	// 2·log2(1000) ≈ 20 writes.
	if f.calls > 3+len(bad)*2*10 {
		t.Errorf("%d writes for %d refused events in 3 batches", f.calls, len(bad))
	}
	lines := logs.lines("store refused an event")
	if len(lines) != len(bad) {
		t.Fatalf("%d log lines for %d refused events:\n%s", len(lines), len(bad), strings.Join(lines, "\n"))
	}
	for i, l := range lines {
		e := &evs[[]int{0, 517, 518, 999, 1000, 2999}[i]]
		if !strings.Contains(l, "kind="+string(e.Kind)) || !strings.Contains(l, "pod="+e.Pod.String()) ||
			!strings.Contains(l, "id="+e.ID.String()) || !strings.Contains(l, "SQLSTATE 22021") || !strings.Contains(l, "rejected_row") {
			t.Errorf("log line lacks the kind, pod, id or store error of event %v: %s", e.ID, l)
		}
	}
}

// An outage in the middle of isolating a refused event loses nothing and
// writes nothing twice: what was settled stays settled, the rest is kept
// and retried.
func TestWriterOutageWhileIsolating(t *testing.T) {
	const n = 1000
	evs := eventgen.Rollout(n, day0, 51, "checkout")
	evs[700].Pod.Container = "poison"
	evs[700].Seal()
	for down := 2; down <= 12; down++ {
		f := newRefusingStore()
		f.down[down] = true // call 1 is the whole batch; later ones the halves
		w := NewWriter(f, WriterOptions{Batch: n, Interval: time.Hour, RetryMax: 10 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler)})
		w.Add(evs...)
		closeWriter(t, w)
		st := w.Stats()
		if st.Written != n-1 || st.Rejected != 1 || st.Failures != 1 || st.Pending != 0 {
			t.Errorf("outage at write %d: stats %+v; want %d written, 1 rejected, 1 failure", down, st, n-1)
		}
		if len(f.stored) != n-1 || len(f.order) != n-1 {
			t.Errorf("outage at write %d: %d distinct events stored in %d writes of rows, want %d once each",
				down, len(f.stored), len(f.order), n-1)
		}
	}
}

// An outage is not a refusal: the batch is kept whole, nothing is dropped.
func TestWriterKeepsBatchThroughOutage(t *testing.T) {
	evs := eventgen.Rollout(500, day0, 52, "checkout")
	f := newRefusingStore()
	for i := 1; i <= 3; i++ {
		f.down[i] = true
	}
	w := NewWriter(f, WriterOptions{Batch: 1000, Interval: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	w.Add(evs...)
	waitFor(t, "two failed writes", func() bool { return w.Stats().Failures >= 2 })
	if st := w.Stats(); st.Rejected != 0 || st.Written != 0 || st.Pending != 500 {
		t.Fatalf("during the outage: %+v; want all 500 held, none rejected", st)
	}
	closeWriter(t, w)
	if st := w.Stats(); st.Written != 500 || st.Rejected != 0 || st.Failures != 3 || len(f.stored) != 500 {
		t.Fatalf("after the outage: %+v, %d stored", st, len(f.stored))
	}
}

// The embedded store refuses a row through a trigger (SQLITE_CONSTRAINT)
// and an event that does not validate: both are dropped, the rest stored.
func TestWriterSQLiteRefusedRows(t *testing.T) {
	s, err := OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	poison(t, s)
	evs := eventgen.Rollout(5000, day0, 53, "checkout")
	evs[1234].Pod.Container = "poison"
	evs[1234].Seal()
	evs[4321].ID = 0 // not sealed: Validate refuses it
	w := NewWriter(s, WriterOptions{Batch: 5000, Interval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	w.Add(evs...)
	closeWriter(t, w)
	if st := w.Stats(); st.Written != 4998 || st.Rejected != 2 || st.Pending != 0 {
		t.Fatalf("stats %+v; want 4,998 written and 2 rejected", st)
	}
	if n := count(t, s, Query{}); n != 4998 {
		t.Fatalf("%d events stored, want 4,998", n)
	}
}

// One event Postgres refuses among 10,000 in one batch: the 9,999 others
// and every later event are stored, the one is dropped and counted. The
// events are sealed (sanitized) first and poisoned afterwards, as a
// producer that bypassed Seal would; each poison is one Postgres refuses.
func TestWriterPostgresRefusedRow(t *testing.T) {
	for _, tc := range []struct {
		name, why string // why: what the log says of the refusal
		poison    func(e *event.Event)
	}{
		{"comm cut mid-character", "SQLSTATE 22021", func(e *event.Event) { e.Comm = "servidor-canci\xc3" }},
		{"NUL in text", "SQLSTATE 22021", func(e *event.Event) { e.Pod.Container = "app\x00" }},
		{"NUL in an attribute", "SQLSTATE 22P05", func(e *event.Event) { e.Attrs = map[string]string{"message": "a\x00b"} }},
		// Its day partition would end past int64: Validate refuses it
		// rather than leave Postgres to fail creating the partition.
		{"time past 2261", "field time", func(e *event.Event) { e.Time = math.MaxInt64 - 1000; e.Seal() }},
		// Past its bound, refused by Validate before Postgres sees it.
		{"a 10 KB pod UID", "field pod.uid", func(e *event.Event) { e.Pod.UID = incompressible(10_000); e.Seal() }},
		// An entity key past what a B-tree row holds (about 2.7 KB):
		// Postgres refuses the index row, SQLSTATE 54000. A dataplane
		// event's key holds its proxy attribute, which Validate leaves
		// alone.
		{"an index row past Postgres's bound", "SQLSTATE 54000", func(e *event.Event) {
			e.Kind, e.Source, e.Service, e.Local = event.DataplaneEndpointRemoved, event.SourceDataplane, "checkout", netip.MustParseAddrPort("10.244.0.9:8080")
			e.Attrs = map[string]string{event.AttrProxy: incompressible(10_000)}
			e.Seal()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := openBehindProxy(t)
			evs := eventgen.Rollout(11_000, day0, 54, "checkout")
			const bad = 6_543
			tc.poison(&evs[bad])
			var logs logBuffer
			w := NewWriter(s, WriterOptions{Batch: 10_000, Interval: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			start := time.Now()
			w.Add(evs[:10_000]...) // one full batch holding the poisoned row
			waitFor(t, "the first batch to settle", func() bool { st := w.Stats(); return st.Written+st.Rejected >= 10_000 })
			t.Logf("10,000 events with one refused settled in %v", time.Since(start).Round(time.Millisecond))
			w.Add(evs[10_000:]...) // and the events after it are not held up
			closeWriter(t, w)

			st := w.Stats()
			if st.Written != 10_999 || st.Rejected != 1 || st.Dropped != 0 || st.Pending != 0 {
				t.Fatalf("stats %+v; want 10,999 written, 1 rejected, none dropped for a full buffer", st)
			}
			stored := map[event.ID]bool{}
			err := s.Scan(context.Background(), Query{}, func(e *event.Event) error { stored[e.ID] = true; return nil })
			if err != nil {
				t.Fatal(err)
			}
			for i := range evs {
				if stored[evs[i].ID] != (i != bad) {
					t.Fatalf("event %d stored: %v", i, stored[evs[i].ID])
				}
			}
			if len(stored) != 10_999 {
				t.Fatalf("%d events stored, want 10,999", len(stored))
			}
			lines := logs.lines("store refused an event")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.why) ||
				!strings.Contains(lines[0], "pod="+evs[bad].Pod.String()) || !strings.Contains(lines[0], "kind="+string(evs[bad].Kind)) {
				t.Fatalf("want one log line naming the event and %q, got:\n%s", tc.why, strings.Join(lines, "\n"))
			}
		})
	}
}
