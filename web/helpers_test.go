package web

import (
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/store"
)

// newTestServer serves st at the fixture's clock.
func newTestServer(t testing.TB, st store.Store, mod ...func(*Options)) *Server {
	t.Helper()
	opts := Options{Store: st, Now: func() time.Time { return fixtureNow }, UpdateEvery: 50 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(t.Output(), nil))}
	for _, m := range mod {
		m(&opts)
	}
	s := New(opts)
	t.Cleanup(s.Close) // before the store closes: cleanups run last first
	return s
}

type resp struct {
	code   int
	header http.Header
	body   string
}

func do(t testing.TB, h http.Handler, method, target string, hdr ...string) resp {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Result().Body)
	return resp{rec.Code, rec.Result().Header, string(b)}
}

func decode[T any](t testing.TB, r resp) T {
	t.Helper()
	var v T
	if err := json.NewDecoder(strings.NewReader(r.body)).Decode(&v); err != nil {
		t.Fatalf("decoding %q: %v", truncate(r.body, 300), err)
	}
	return v
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func flagInt(name string, def int, usage string) *int { return flag.Int(name, def, usage) }
