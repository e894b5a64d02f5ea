package web

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/store"
)

// postgresStore opens the fixture in a schema of its own in the throwaway
// Postgres that scripts/test.sh starts (DRAINSCOPE_TEST_POSTGRES).
func postgresStore(t *testing.T) store.Store {
	t.Helper()
	base := testenv.Env(t, "DRAINSCOPE_TEST_POSTGRES", "DSN of a throwaway Postgres database")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connecting to the test Postgres: %v", err)
	}
	defer conn.Close(ctx)
	schema := fmt.Sprintf("web_%d_%d", time.Now().UnixNano(), rand.IntN(1<<30))
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c, err := pgx.Connect(ctx, base); err == nil {
			c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
			c.Close(ctx)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	st, err := store.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	evs, err := readFixture(fixturePath)
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
