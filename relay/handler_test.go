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
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/memtest"
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
	if hold := g.hold; hold != nil {
		g.in <- struct{}{}
		<-hold
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
	return postBody(t, url, tok, "", body, gz)
}

// postBody posts body with Content-Type ctype (none when empty), gzipped
// when gz, and answers the status.
func postBody(t *testing.T, url, tok, ctype string, body []byte, gz bool) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+relay.EventsPath, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
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
	long := events("a", base, 100, "p")
	for i := range long {
		long[i].Attrs = map[string]string{"message": strings.Repeat("x", 1000)}
	}
	big := enc(long)
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

// TestHandlerStringBounds: each event's strings are held to their bounds
// as the body is decoded (event.CheckBounds), the refusal naming the
// event and the field; one event of more JSON than MaxEventBytes is
// refused before it is whole.
func TestHandlerStringBounds(t *testing.T) {
	st := sqlite(t)
	h := &relay.Handler{Store: st, Auth: nodeToken{}}
	srv := httptest.NewServer(h)
	defer srv.Close()
	base := time.Now().Add(-time.Minute)
	for _, tc := range []struct {
		name string
		mod  func(e *event.Event)
		code int
		says string
	}{
		{"a 10 KB pod UID", func(e *event.Event) { e.Pod.UID = strings.Repeat("u", 10_000) }, http.StatusBadRequest, "event 1: field pod.uid: 10000 bytes, past its bound of 128"},
		{"a 300-byte namespace", func(e *event.Event) { e.Pod.Namespace = strings.Repeat("n", 300) }, http.StatusBadRequest, "field pod.namespace"},
		{"a 100-byte proxy", func(e *event.Event) { e.Attrs = map[string]string{event.AttrProxy: strings.Repeat("p", 100)} }, http.StatusBadRequest, "field attrs[proxy]"},
		{"a 1 MiB attribute", func(e *event.Event) { e.Attrs = map[string]string{"message": strings.Repeat("m", 1<<20)} }, http.StatusRequestEntityTooLarge, "event 1: more than 524288 bytes;"},
	} {
		evs := events("a", base, 3, "web-1")
		tc.mod(&evs[1])
		code, ref := post(t, srv.URL, "node:a", evs)
		if code != tc.code || ref.Event == nil || *ref.Event != 1 || !strings.Contains(ref.Error, tc.says) {
			t.Errorf("%s: %d %+v, want %d naming event 1 and %q", tc.name, code, ref, tc.code, tc.says)
		}
	}
	if code := postRaw(t, srv.URL, "node:a", []byte(`{"events":[],"events":[]}`), false); code != http.StatusBadRequest {
		t.Errorf("events twice: %d, want 400", code)
	}
	if n := count(t, st, "a"); n != 0 {
		t.Errorf("%d events stored, want none", n)
	}
}

// TestHandlerBackPressure: with every slot storing, a batch waits
// SlotWait for one and is answered 429 if none frees; one that frees in
// time takes the batch; a failing store is 503; the client keeps both for
// a retry and treats a refusal as row-level.
func TestHandlerBackPressure(t *testing.T) {
	g := &gate{Store: sqlite(t), hold: make(chan struct{}), in: make(chan struct{}, 1)}
	const wait = 300 * time.Millisecond
	h := &relay.Handler{Store: g, Auth: nodeToken{}, MaxConcurrent: 1, SlotWait: wait}
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
	t0 := time.Now()
	err = cl.Append(ctx, events("a", base.Add(time.Second), 10, "p"))
	if err == nil || !strings.Contains(err.Error(), "429") || store.RowLevel(err) || time.Since(t0) < wait {
		t.Errorf("second batch while the first is stored: %v after %s, want a transient 429 after waiting %s", err, time.Since(t0), wait)
	}
	// A third waits while the first is still held, and is stored once the
	// first is: its slot freed within SlotWait.
	third := make(chan error, 1)
	go func() { third <- cl.Append(ctx, events("a", base.Add(2*time.Second), 10, "p")) }()
	time.Sleep(wait / 3)
	hold := g.hold
	g.hold = nil // the third goes straight through once it has the slot
	close(hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-third; err != nil {
		t.Errorf("a batch whose slot freed while it waited: %v, want it stored", err)
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

// gzipOf compresses b at the best ratio.
func gzipOf(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return buf.Bytes()
}

// TestHandlerSmallBodyHugeBatch: a few KiB of gzip that expand to
// millions of events are refused as they stream, with the server's heap
// growing by a few MiB, not by the millions of events: empty events are
// refused at the first, valid ones at the first past MaxEvents.
func TestHandlerSmallBodyHugeBatch(t *testing.T) {
	h := &relay.Handler{Store: sqlite(t), Auth: nodeToken{}}
	srv := httptest.NewServer(h)
	defer srv.Close()
	// Within the 16 MiB a body may expand to.
	fill := func(one string) []byte {
		var raw bytes.Buffer
		raw.WriteString(`{"events":[`)
		for raw.Len()+len(one)+3 < relay.DefaultMaxBytes {
			if raw.Len() > len(`{"events":[`) {
				raw.WriteByte(',')
			}
			raw.WriteString(one)
		}
		raw.WriteString(`]}`)
		return raw.Bytes()
	}
	valid, _ := json.Marshal(events("a", time.Now().Add(-time.Minute), 1, "web-1")[0])
	for _, tc := range []struct {
		name     string
		one      string
		code     int
		maxHeap  uint64
		maxAlloc uint64
	}{
		// The empty events of the body an attacker would send: before,
		// 5.6 million decoded (6.5 GiB at peak) before the count was
		// checked. The first is refused: its source is no agent's.
		{"empty events", `{}`, http.StatusForbidden, 4 << 20, 4 << 20},
		// Valid events, identical, past MaxEvents: the 20,000 taken cost
		// what a batch of 20,000 costs, not more.
		{"valid events", string(valid), http.StatusRequestEntityTooLarge, 32 << 20, 64 << 20},
	} {
		raw := fill(tc.one)
		n := bytes.Count(raw, []byte(tc.one))
		body := gzipOf(t, raw)
		var code int
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		heap, _ := memtest.Peak(func() { code = postRaw(t, srv.URL, "node:a", body, true) })
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %d events in %d bytes of gzip (%d of JSON) → %d; heap in use grew by at most %.1f MiB, %.1f MiB allocated in all",
			tc.name, n, len(body), len(raw), code, float64(heap)/(1<<20), float64(alloc)/(1<<20))
		if code != tc.code {
			t.Errorf("%s: %d, want %d", tc.name, code, tc.code)
		}
		if heap > tc.maxHeap || alloc > tc.maxAlloc {
			t.Errorf("%s: heap grew by %d bytes, %d allocated; want at most %d and %d", tc.name, heap, alloc, tc.maxHeap, tc.maxAlloc)
		}
	}
}

// TestHandlerTimes: an event's time must lie within MaxAge (an hour)
// before the server's clock and MaxAhead (a minute) after it. Each event
// out of bounds is a refusal of its own, naming the field and the bound:
// the agent's client and Writer store the rest of its batch and drop it
// alone.
func TestHandlerTimes(t *testing.T) {
	st := sqlite(t)
	now := time.Now()
	h := &relay.Handler{Store: st, Auth: nodeToken{}, Now: func() time.Time { return now }}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, tc := range []struct {
		name string
		at   time.Time
		says string // "" for taken
	}{
		{"59 min before", now.Add(-59 * time.Minute), ""},
		{"61 min before", now.Add(-61 * time.Minute), "field time: " + now.Add(-61*time.Minute).UTC().Format(time.RFC3339Nano) +
			" is 1h1m0s before the server's clock, more than the 1h0m0s taken"},
		{"30 s ahead", now.Add(30 * time.Second), ""},
		{"2 min ahead", now.Add(2 * time.Minute), "is 2m0s past the server's clock, more than the 1m0s taken"},
		{"1970", time.Unix(0, 1), "field time: 1970-01-01T00:00:00.000000001Z is"},
		{"2261", time.Date(2261, 12, 31, 0, 0, 0, 0, time.UTC), "field time: 2261-12-31T00:00:00Z is"},
	} {
		code, ref := post(t, srv.URL, "node:a", events("a", tc.at, 1, "web-1"))
		switch {
		case tc.says == "" && code != http.StatusOK:
			t.Errorf("%s: %d %+v, want 200", tc.name, code, ref)
		case tc.says != "" && (code != http.StatusBadRequest || ref.Event == nil || *ref.Event != 0 || !strings.Contains(ref.Error, tc.says)):
			t.Errorf("%s: %d %+v, want 400 naming event 0 and %q", tc.name, code, ref, tc.says)
		}
	}

	// Through the agent's client and a Writer (without the agent's own
	// MaxAge): 100 events, three of them out of bounds.
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("node:b"), 0o600)
	cl, err := relay.NewClient(srv.URL, tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	evs := events("b", now.Add(-10*time.Minute), 100, "web-2")
	for _, i := range []int{3, 50, 97} {
		evs[i].Time = now.Add(-3 * time.Hour).UnixNano()
		evs[i].Seal()
	}
	w := store.NewWriter(cl, store.WriterOptions{Batch: 100, Interval: 10 * time.Millisecond})
	w.Add(evs...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if ws := w.Stats(); ws.Written != 97 || ws.Rejected != 3 {
		t.Errorf("writer %+v: want 97 written, 3 refused", ws)
	}
	if n := count(t, st, "b"); n != 97 {
		t.Errorf("%d of node b's events stored, want 97", n)
	}
}
