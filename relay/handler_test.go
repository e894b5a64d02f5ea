package relay_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/relay"
	"github.com/drainscope/drainscope/store"
)

// nodeToken is an Authenticator for the handler's bounds, which do not
// depend on how a token is checked (TestAgentWritesOnlyItsNode checks
// tokens against a real API server): the token "node:NAME" is NAME's
// agent.
type nodeToken struct{}

func (nodeToken) Authenticate(_ context.Context, tok string) (relay.Agent, error) {
	if n, ok := strings.CutPrefix(tok, "node:"); ok {
		return relay.Agent{Node: n, PodNamespace: "drainscope", Pod: "agent-" + n}, nil
	}
	return relay.Agent{}, &relay.AuthError{Status: 401, Msg: "not valid"}
}

// gate is a real SQLite store whose Append can be held, or fail.
type gate struct {
	store.Store
	hold chan struct{}
	in   chan struct{}
	fail error
}

func (g *gate) Append(ctx context.Context, b []event.Event) error {
	if g.hold != nil {
		g.in <- struct{}{}
		<-g.hold
	}
	if g.fail != nil {
		return g.fail
	}
	return g.Store.Append(ctx, b)
}

func sqlite(t testing.TB) store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func postRaw(t *testing.T, url, tok string, body []byte, gz bool) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+relay.EventsPath, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	if gz {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestHandlerBounds(t *testing.T) {
	st := sqlite(t)
	h := &relay.Handler{Store: st, Auth: nodeToken{}, MaxBytes: 64 << 10, MaxEvents: 100}
	srv := httptest.NewServer(h)
	defer srv.Close()
	base := time.Now().Add(-time.Minute)
	enc := func(evs []event.Event) []byte {
		b, _ := json.Marshal(relay.Batch{Events: evs})
		return b
	}
	gzipped := func(b []byte) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(b)
		zw.Close()
		return buf.Bytes()
	}
	if code := postRaw(t, srv.URL, "node:a", gzipped(enc(events("a", base, 100, "p"))), true); code != http.StatusOK {
		t.Errorf("100 events gzipped: %d, want 200", code)
	}
	if code := postRaw(t, srv.URL, "node:a", enc(events("a", base, 101, "p")), false); code != http.StatusRequestEntityTooLarge {
		t.Errorf("101 events with MaxEvents 100: %d, want 413", code)
	}
	// 64 KiB of events gzip to far less: the bound holds after decompression.
	big := enc(events("a", base, 100, strings.Repeat("x", 1000)))
	if code := postRaw(t, srv.URL, "node:a", gzipped(big), true); code != http.StatusRequestEntityTooLarge {
		t.Errorf("%d bytes gzipped to %d: %d, want 413", len(big), len(gzipped(big)), code)
	}
	if code := postRaw(t, srv.URL, "node:a", []byte(`{"events":[{"Tiem":1}]}`), false); code != http.StatusBadRequest {
		t.Errorf("unknown field: %d, want 400", code)
	}
	bad := events("a", base, 1, "p")
	bad[0].Kind = "made_up"
	if code := postRaw(t, srv.URL, "node:a", enc(bad), false); code != http.StatusBadRequest {
		t.Errorf("unknown kind: %d, want 400", code)
	}
	if n := count(t, st, "a"); n != 100 {
		t.Errorf("stored %d, want the first batch's 100 only", n)
	}
}

// TestHandlerBackPressure: with every slot storing, a batch is answered
// 429 at once; a failing store is 503; the client keeps both for a retry
// and treats a refusal as row-level.
func TestHandlerBackPressure(t *testing.T) {
	g := &gate{Store: sqlite(t), hold: make(chan struct{}), in: make(chan struct{}, 1)}
	h := &relay.Handler{Store: g, Auth: nodeToken{}, MaxConcurrent: 1}
	srv := httptest.NewServer(h)
	defer srv.Close()
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("node:a"), 0o600)
	cl, err := relay.NewClient(srv.URL, tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(-time.Minute)
	ctx := context.Background()
	first := make(chan error, 1)
	go func() { first <- cl.Append(ctx, events("a", base, 10, "p")) }()
	<-g.in // the first batch holds the only slot
	err = cl.Append(ctx, events("a", base.Add(time.Second), 10, "p"))
	if err == nil || !strings.Contains(err.Error(), "429") || store.RowLevel(err) {
		t.Errorf("second batch while the first is stored: %v, want a transient 429", err)
	}
	close(g.hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	g.hold, g.fail = nil, errors.New("disk full")
	if err := cl.Append(ctx, events("a", base, 1, "p")); err == nil || !strings.Contains(err.Error(), "503") || store.RowLevel(err) {
		t.Errorf("failing store: %v, want a transient 503", err)
	}
	g.fail = nil
	if err := cl.Append(ctx, events("b", base, 1, "p")); !store.RowLevel(err) || !strings.Contains(err.Error(), "403") {
		t.Errorf("another node's event: %v, want a row-level 403", err)
	}
	os.WriteFile(tok, []byte("rotated-but-wrong"), 0o600)
	if err := cl.Append(ctx, events("a", base, 1, "p")); err == nil || store.RowLevel(err) {
		t.Errorf("a token the server refuses: %v, want a transient 401 (kubelet may be rotating it)", err)
	}
}
