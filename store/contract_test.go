package store

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/eventgen"
	"github.com/drainscope/drainscope/internal/pgtest"
)

// backend opens fresh, empty stores of one kind for a test.
type backend struct {
	name string
	// open returns a store on an empty database private to t, and the DSN
	// that reaches the same database.
	open func(t testing.TB) (Store, string)
}

func backends(t testing.TB) []backend {
	return []backend{
		{"sqlite", func(t testing.TB) (Store, string) {
			path := filepath.Join(t.TempDir(), "events.db")
			s, err := OpenSQLite(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s, path
		}},
		{"postgres", func(t testing.TB) (Store, string) {
			dsn := pgtest.Schema(t)
			s, err := OpenPostgres(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s, dsn
		}},
	}
}

func forEach(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

var day0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func count(t testing.TB, s Store, q Query) int {
	t.Helper()
	n := 0
	if err := s.Scan(context.Background(), q, func(*event.Event) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMigrationsAgree(t *testing.T) {
	pg, sl := mustMigrations(BackendPostgres), mustMigrations(BackendSQLite)
	if len(pg) != len(sl) {
		t.Fatalf("postgres has %d migrations, sqlite %d: each version must exist for both", len(pg), len(sl))
	}
	for i := range pg {
		if pg[i].name != sl[i].name {
			t.Errorf("migration %d: postgres %q, sqlite %q", i+1, pg[i].name, sl[i].name)
		}
	}
}

func TestContractRoundTrip(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := b.open(t)
		if v, err := s.Version(ctx); err != nil || v != LatestVersion {
			t.Fatalf("Version = %d, %v; want %d", v, err, LatestVersion)
		}
		in := eventgen.Rollout(2000, day0, 1, "checkout")
		in[3].Attrs = map[string]string{"a": "1", "quote\"d": "<x>"}
		in[3].Seal()
		if err := s.Append(ctx, in); err != nil {
			t.Fatal(err)
		}
		got, err := Events(ctx, s, Query{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(in) {
			t.Fatalf("stored %d events, read back %d", len(in), len(got))
		}
		byID := map[event.ID]event.Event{}
		for _, e := range in {
			byID[e.ID] = e
		}
		for i, g := range got {
			want, ok := byID[g.ID]
			if !ok {
				t.Fatalf("read back event %s that was never written", g.ID)
			}
			if !reflect.DeepEqual(g, want) {
				t.Fatalf("event %s changed in the store:\n got  %+v\n want %+v", g.ID, g, want)
			}
			if event.Identity(&g) != g.ID {
				t.Fatalf("event %s: identity of the read-back event differs", g.ID)
			}
			if i > 0 && got[i-1].Time > g.Time {
				t.Fatalf("events out of time order at %d", i)
			}
		}
	})
}

func TestContractQueries(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := b.open(t)
		a := eventgen.Rollout(3000, day0, 2, "checkout")
		for i := range a { // half the processes' signals and exits their container's main one's
			if (a[i].Kind == event.Signal || a[i].Kind == event.ProcessExit) && i%2 == 0 {
				a[i].Flags |= event.FlagMain
				a[i].Seal()
			}
		}
		c := eventgen.Rollout(1000, day0.Add(time.Hour), 3, "cart")
		for i := range c { // the cart rollout ran on another node
			c[i].Node = "node-b"
			// Half its states re-observed, in turn in its namespace and
			// in another one.
			if c[i].Entity() != "" && i%2 == 0 {
				c[i].Flags |= event.FlagObserved
				if i%4 == 0 {
					c[i].Pod.Namespace = "apps"
				}
			}
			c[i].Seal()
		}
		if err := s.Append(ctx, append(append([]event.Event(nil), a...), c...)); err != nil {
			t.Fatal(err)
		}
		want := func(f func(e *event.Event) bool) int {
			n := 0
			for _, all := range [][]event.Event{a, c} {
				for i := range all {
					if f(&all[i]) {
						n++
					}
				}
			}
			return n
		}
		mid := a[len(a)/2].Time
		pod := a[10].Pod.UID
		cases := []struct {
			name string
			q    Query
			f    func(e *event.Event) bool
		}{
			{"all", Query{}, func(*event.Event) bool { return true }},
			{"window", Query{Window: event.Window{From: a[100].Time, To: mid}}, func(e *event.Event) bool { return e.Time >= a[100].Time && e.Time < mid }},
			{"open-ended window", Query{Window: event.Window{From: mid}}, func(e *event.Event) bool { return e.Time >= mid }},
			{"kinds", Query{Kinds: []event.Kind{event.Signal, event.ProcessExit}}, func(e *event.Event) bool { return e.Kind == event.Signal || e.Kind == event.ProcessExit }},
			{"pod", Query{PodUIDs: []string{pod}}, func(e *event.Event) bool { return e.Pod.UID == pod }},
			{"workload", Query{Namespace: "shop", Workload: event.Workload{Kind: "Deployment", Name: "cart"}}, func(e *event.Event) bool { return e.Pod.Namespace == "shop" && e.Workload.Name == "cart" }},
			{"observed only in shop", Query{ObservedOnlyIn: "shop"}, func(e *event.Event) bool { return !e.Flags.Has(event.FlagObserved) || e.Pod.Namespace == "shop" }},
			{"observed only in apps", Query{ObservedOnlyIn: "apps", Window: event.Window{From: c[0].Time}},
				func(e *event.Event) bool {
					return e.Time >= c[0].Time && (!e.Flags.Has(event.FlagObserved) || e.Pod.Namespace == "apps")
				}},
			{"pod in window of kind", Query{PodUIDs: []string{pod}, Kinds: []event.Kind{event.ConnClosed}, Window: event.Window{From: a[0].Time, To: mid}},
				func(e *event.Event) bool { return e.Pod.UID == pod && e.Kind == event.ConnClosed && e.Time < mid }},
			{"node", Query{Node: "node-b"}, func(e *event.Event) bool { return e.Node == "node-b" }},
			{"lifecycle", Query{Lifecycle: true}, func(e *event.Event) bool { return IsLifecycle(e.Kind) && LifecycleRow(e) }},
			{"lifecycle of a window", Query{Lifecycle: true, Window: event.Window{From: a[100].Time, To: mid}}, func(e *event.Event) bool {
				return e.Time >= a[100].Time && e.Time < mid && IsLifecycle(e.Kind) && LifecycleRow(e)
			}},
			{"lifecycle of a pod", Query{Lifecycle: true, PodUIDs: []string{pod}},
				func(e *event.Event) bool {
					return e.Pod.UID == pod && IsLifecycle(e.Kind) && LifecycleRow(e)
				}},
			{"lifecycle of kinds", Query{Lifecycle: true, Kinds: []event.Kind{event.Signal, event.EndpointReady}},
				func(e *event.Event) bool {
					return (e.Kind == event.Signal || e.Kind == event.EndpointReady) && LifecycleRow(e)
				}},
		}
		for _, tc := range cases {
			if w := want(tc.f); w == 0 {
				t.Errorf("%s: the data has no event the query should select", tc.name)
			}
			if got, w := count(t, s, tc.q), want(tc.f); got != w {
				t.Errorf("%s: %d events, want %d", tc.name, got, w)
			}
		}
		if got := count(t, s, Query{Limit: 7}); got != 7 {
			t.Errorf("limit 7: got %d events", got)
		}
		// From the cart rollout's start, whose states are half observed:
		// the limit counts the events kept.
		if got := count(t, s, Query{Limit: 7, ObservedOnlyIn: "elsewhere", Window: event.Window{From: c[0].Time}}); got != 7 {
			t.Errorf("limit 7 of the observed elsewhere: got %d events", got)
		}
	})
}

func TestContractIdempotent(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := b.open(t)
		batch := eventgen.Rollout(1000, day0, 4, "checkout")
		for i := 0; i < 2; i++ {
			if err := s.Append(ctx, batch); err != nil {
				t.Fatalf("append %d: %v", i+1, err)
			}
		}
		if n := count(t, s, Query{}); n != len(batch) {
			t.Fatalf("same batch written twice: %d events stored, want %d", n, len(batch))
		}
		// A retried batch that overlaps what is stored, with a duplicate
		// inside it too, adds only what is new.
		more := eventgen.Rollout(1500, day0, 4, "checkout")
		retry := append(append([]event.Event(nil), more[500:]...), more[1499])
		if err := s.Append(ctx, retry); err != nil {
			t.Fatal(err)
		}
		if n := count(t, s, Query{}); n != 1500 {
			t.Fatalf("overlapping retry: %d events stored, want 1500", n)
		}
	})
}

// poison makes the database itself reject rows whose container is "poison", so
// a batch can fail midway inside the database, after earlier rows went in.
func poison(t *testing.T, s Store) {
	ctx := context.Background()
	var err error
	switch s := s.(type) {
	case *SQLite:
		_, err = s.db.ExecContext(ctx, `CREATE TRIGGER poison BEFORE INSERT ON events
			WHEN NEW.container = 'poison' BEGIN SELECT RAISE(ABORT, 'poisoned row'); END`)
	case *Postgres:
		_, err = s.pool.Exec(ctx, `CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF NEW.container = 'poison' THEN RAISE EXCEPTION 'poisoned row'; END IF; RETURN NEW; END $$;
			CREATE TRIGGER poison BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION poison();`)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func TestContractAtomicBatch(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := b.open(t)
		poison(t, s)
		batch := eventgen.Rollout(1000, day0, 5, "checkout")
		batch[700].Pod.Container = "poison"
		batch[700].Seal()
		err := s.Append(ctx, batch)
		if err == nil || !strings.Contains(err.Error(), "poisoned row") {
			t.Fatalf("Append = %v, want the database's error", err)
		}
		if n := count(t, s, Query{}); n != 0 {
			t.Fatalf("a batch that failed at row 700 left %d rows", n)
		}
		if batch[0].ID == 0 || len(batch) != 1000 {
			t.Fatal("Append changed the caller's batch")
		}
		// The caller still has the whole batch and can write it once fixed.
		batch[700].Pod.Container = "app"
		batch[700].Seal()
		if err := s.Append(ctx, batch); err != nil {
			t.Fatal(err)
		}
		if n := count(t, s, Query{}); n != 1000 {
			t.Fatalf("after the retry %d events, want 1000", n)
		}
	})
}

func TestContractRejectsInvalidEvents(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		s, _ := b.open(t)
		batch := eventgen.Rollout(10, day0, 6, "checkout")
		batch[4].Kind = "bogus"
		err := s.Append(context.Background(), batch)
		if err == nil || !strings.Contains(err.Error(), "batch event 4") || !strings.Contains(err.Error(), "field kind") {
			t.Fatalf("Append = %v; want an error naming event 4 and its kind field", err)
		}
		if n := count(t, s, Query{}); n != 0 {
			t.Fatalf("%d events stored from a rejected batch", n)
		}
	})
}

func TestContractPrune(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := b.open(t)
		var all []event.Event
		for d := 0; d < 3; d++ {
			all = append(all, eventgen.Rollout(300, day0.AddDate(0, 0, d), uint64(10+d), "checkout")...)
		}
		if err := s.Append(ctx, all); err != nil {
			t.Fatal(err)
		}
		// Day 0 goes whole; day 1 is cut a minute after its first event.
		cut := day0.AddDate(0, 0, 1).UnixNano() + int64(time.Minute)
		removed, err := s.Prune(ctx, cut)
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		for _, e := range all {
			if e.Time >= cut {
				want++
			}
		}
		if removed != int64(len(all)-want) {
			t.Errorf("Prune = %d, want the %d events it removed", removed, len(all)-want)
		}
		if got := count(t, s, Query{}); got != want {
			t.Fatalf("after prune: %d events, want %d", got, want)
		}
		if got := count(t, s, Query{Window: event.Window{To: cut}}); got != 0 {
			t.Fatalf("%d events older than the cut remain", got)
		}
		// Writing into a pruned day works again.
		if err := s.Append(ctx, all[:10]); err != nil {
			t.Fatal(err)
		}
	})
}
