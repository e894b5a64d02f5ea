package relay_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/memtest"
	"github.com/drainscope/drainscope/relay"
	"github.com/drainscope/drainscope/store"
)

// TestClientSendsTheWireForm: the agent's client sends JSON until the
// server's answer names the wire form, the wire form after; what is
// stored is the same either way, event for event. A server that does not
// name it (an older one) keeps getting JSON; one that stops taking it
// gets the batch again, as JSON, and nothing is dropped.
func TestClientSendsTheWireForm(t *testing.T) {
	ctx := context.Background()
	base := time.Now().Add(-10 * time.Minute)
	batch := func(i int) []event.Event {
		evs := events("a", base.Add(time.Duration(i)*time.Second), 50, "web-1")
		for j := range evs {
			evs[j].Kind, evs[j].Local = event.RSTSent, netip.MustParseAddrPort("10.0.0.9:8080")
			evs[j].Remote = netip.MustParseAddrPort("[fd00::7]:41000")
			evs[j].Attrs = map[string]string{"unread": "12", "state": "established"}
			evs[j].Seal()
		}
		return evs
	}
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("node:a"), 0o600)

	// Each request's content type, as the server saw it; wire decides
	// whether the server names the wire form in Accept-Post.
	var types []string
	wire := true
	st := sqlite(t)
	h := &relay.Handler{Store: st, Auth: nodeToken{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		types = append(types, r.Header.Get("Content-Type"))
		if !wire { // an older server: JSON only, no Accept-Post
			if r.Header.Get("Content-Type") == event.WireType {
				http.Error(w, `{"error":"decoding the batch: invalid character 'D'"}`, http.StatusBadRequest)
				return
			}
			h.ServeHTTP(noAcceptPost{w}, r)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	cl, err := relay.NewClient(srv.URL, tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	var sent []event.Event
	for i := range 3 {
		b := batch(i)
		if err := cl.Append(ctx, b); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		sent = append(sent, b...)
	}
	wire = false
	b := batch(3)
	if err := cl.Append(ctx, b); err == nil || store.RowLevel(err) {
		t.Fatalf("the wire form to a server that no longer takes it: %v, want an error to retry, not a refusal", err)
	}
	if err := cl.Append(ctx, b); err != nil {
		t.Fatalf("the batch again: %v", err)
	}
	sent = append(sent, b...)
	want := []string{"application/json", event.WireType, event.WireType, event.WireType, "application/json"}
	if !reflect.DeepEqual(types, want) {
		t.Errorf("content types sent: %q, want %q", types, want)
	}

	got, err := store.Events(ctx, st, store.Query{Node: "a"})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[event.ID]event.Event{}
	for _, e := range got {
		byID[e.ID] = e
	}
	if len(got) != len(sent) {
		t.Errorf("stored %d events, sent %d", len(got), len(sent))
	}
	for _, e := range sent {
		s, ok := byID[e.ID]
		if !ok {
			t.Errorf("event %s (%s at %d) not stored under its ID", e.ID, e.Kind, e.Time)
			continue
		}
		if !reflect.DeepEqual(s, e) {
			t.Errorf("stored %+v, sent %+v", s, e)
		}
	}
}

// noAcceptPost drops the Accept-Post header: an older server's answer.
type noAcceptPost struct{ http.ResponseWriter }

func (w noAcceptPost) WriteHeader(code int) {
	w.Header().Del("Accept-Post")
	w.ResponseWriter.WriteHeader(code)
}

// TestWireBodiesBounded: the wire form is held to the same bounds as JSON
// as it streams: a few KiB of gzip that expand to a million empty or
// valid records, or a header announcing four billion events, cost the
// server's heap a few MiB, and each refusal names what is wrong. A
// content type the server does not take is 415, naming those it does.
func TestWireBodiesBounded(t *testing.T) {
	h := &relay.Handler{Store: sqlite(t), Auth: nodeToken{}}
	srv := httptest.NewServer(h)
	defer srv.Close()
	valid := events("a", time.Now().Add(-time.Minute), 1, "web-1")
	fill := func(e event.Event, claim int) []byte {
		one := event.AppendWire(nil, []event.Event{e})
		raw := event.AppendWireHeader(nil, 0)
		n := 0
		for len(raw)+len(one) < relay.DefaultMaxBytes {
			raw = append(raw, one...)
			n++
		}
		if claim < 0 {
			claim = n
		}
		return append(event.AppendWireHeader(nil, claim), raw[len(raw)-n*len(one):]...)
	}
	for _, tc := range []struct {
		name     string
		body     []byte
		code     int
		maxHeap  uint64
		maxAlloc uint64
	}{
		{"empty events", fill(event.Event{}, -1), http.StatusForbidden, 4 << 20, 4 << 20},
		{"valid events", fill(valid[0], -1), http.StatusRequestEntityTooLarge, 32 << 20, 64 << 20},
		{"four billion announced, one sent", event.AppendWire(event.AppendWireHeader(nil, 1<<32-1), valid), http.StatusBadRequest, 4 << 20, 4 << 20},
	} {
		body := gzipOf(t, tc.body)
		var code int
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		heap, _ := memtest.Peak(func() { code = postBody(t, srv.URL, "node:a", event.WireType, body, true) })
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %d bytes of gzip (%d of the wire form) → %d; heap in use grew by at most %.1f MiB, %.1f MiB allocated in all",
			tc.name, len(body), len(tc.body), code, float64(heap)/(1<<20), float64(alloc)/(1<<20))
		if code != tc.code {
			t.Errorf("%s: %d, want %d", tc.name, code, tc.code)
		}
		if heap > tc.maxHeap || alloc > tc.maxAlloc {
			t.Errorf("%s: heap grew by %d bytes, %d allocated; want at most %d and %d", tc.name, heap, alloc, tc.maxHeap, tc.maxAlloc)
		}
	}

	req, _ := http.NewRequest(http.MethodPost, srv.URL+relay.EventsPath, strings.NewReader("time=1"))
	req.Header.Set("Authorization", "Bearer node:a")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(resp.Header.Get("Accept-Post"), event.WireType) {
		t.Errorf("a form: %d, Accept-Post %q; want 415 naming the wire form", resp.StatusCode, resp.Header.Get("Accept-Post"))
	}
}

// TestHandlerEventsInFlight: the batches taken at once hold at most
// MaxEventsInFlight events: a wire batch takes the count its header
// announces, a JSON batch MaxEvents. While one batch of 100 is held,
// another of 40 fits and is stored, one of 60 waits SlotWait and is
// answered 429, and so is a JSON batch of one event; once the first is
// stored the 60 fit.
func TestHandlerEventsInFlight(t *testing.T) {
	g := &gate{Store: sqlite(t), hold: make(chan struct{}), in: make(chan struct{}, 1)}
	h := &relay.Handler{Store: g, Auth: nodeToken{}, MaxEvents: 100, MaxEventsInFlight: 150, SlotWait: 200 * time.Millisecond}
	srv := httptest.NewServer(h)
	defer srv.Close()
	base := time.Now().Add(-time.Minute)
	wire := func(n int, at time.Duration) []byte {
		evs := events("a", base.Add(at), n, "web-1")
		return event.AppendWire(event.AppendWireHeader(nil, n), evs)
	}
	first := make(chan int, 1)
	go func() { first <- postBody(t, srv.URL, "node:a", event.WireType, wire(100, 0), false) }()
	<-g.in // the 100 are held, waiting for the store
	hold := g.hold
	g.hold = nil
	if code := postBody(t, srv.URL, "node:a", event.WireType, wire(40, time.Second), false); code != http.StatusOK {
		t.Errorf("40 events beside the 100 held, of 150: %d, want 200", code)
	}
	if code := postBody(t, srv.URL, "node:a", event.WireType, wire(60, 2*time.Second), false); code != http.StatusTooManyRequests {
		t.Errorf("60 events beside the 100 held, of 150: %d, want 429", code)
	}
	raw, _ := json.Marshal(relay.Batch{Events: events("a", base.Add(3*time.Second), 1, "web-1")})
	if code := postBody(t, srv.URL, "node:a", "application/json", raw, false); code != http.StatusTooManyRequests {
		t.Errorf("a JSON batch, which takes MaxEvents, beside the 100 held: %d, want 429", code)
	}
	close(hold)
	if code := <-first; code != http.StatusOK {
		t.Fatalf("the first batch: %d", code)
	}
	if code := postBody(t, srv.URL, "node:a", event.WireType, wire(60, 2*time.Second), false); code != http.StatusOK {
		t.Errorf("60 events once the 100 are stored: %d, want 200", code)
	}
	if n := count(t, g.Store, "a"); n != 200 {
		t.Errorf("stored %d events, want 100 + 40 + 60", n)
	}
}
