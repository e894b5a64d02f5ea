package web

import (
	"context"
	"net/http"
	"reflect"
	"testing"

	"github.com/drainscope/drainscope/internal/eventfile"
	"github.com/drainscope/drainscope/internal/pgtest"
	"github.com/drainscope/drainscope/store"
)

// postgresStore opens the fixture in a schema of its own in the throwaway
// Postgres that scripts/test.sh starts (DRAINSCOPE_TEST_POSTGRES).
func postgresStore(t *testing.T) store.Store {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, pgtest.Schema(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	evs, err := eventfile.Read(fixturePath)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Append(ctx, evs); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestPostgresAnswersLikeSQLite serves the fixture from both stores and
// compares the answers every page draws from.
func TestPostgresAnswersLikeSQLite(t *testing.T) {
	pg := newTestServer(t, postgresStore(t))
	sl := newTestServer(t, fixtureStore(t))
	r := ids(t, sl)
	waitIdle(t, sl)
	ids(t, pg)
	waitIdle(t, pg)
	for _, path := range []string{
		"/api/v1/rollouts",
		"/api/v1/rollouts/" + r.checkout.ID + "?events=true",
		"/api/v1/rollouts/" + r.checkout.ID + "/timeline?width=1200",
		"/api/v1/rollouts/" + r.checkout.ID + "/alignment",
		"/api/v1/rollouts/" + r.evil.ID + "/failures",
	} {
		a, b := do(t, sl, http.MethodGet, path), do(t, pg, http.MethodGet, path)
		if a.code != 200 || b.code != 200 {
			t.Fatalf("%s: sqlite %d, postgres %d: %s", path, a.code, b.code, truncate(b.body, 300))
		}
		var x, y map[string]any
		x, y = decode[map[string]any](t, a), decode[map[string]any](t, b)
		for _, m := range []map[string]any{x, y} { // when each read its model differs, nothing else may
			if st, ok := m["stats"].(map[string]any); ok {
				delete(st, "built_ns")
				delete(st, "build_took_ns")
			}
		}
		if !reflect.DeepEqual(x, y) {
			t.Errorf("%s: Postgres answers differently from SQLite:\nsqlite   %s\npostgres %s", path, truncate(a.body, 600), truncate(b.body, 600))
		}
	}
}
