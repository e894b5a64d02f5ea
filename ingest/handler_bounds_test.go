package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/memtest"
)

// batchStore records the size of every Append and keeps nothing.
type batchStore struct {
	memStore
	sizes []int
}

func (b *batchStore) Append(ctx context.Context, batch []event.Event) error {
	b.mu.Lock()
	b.sizes = append(b.sizes, len(batch))
	b.mu.Unlock()
	return nil
}

// peakHeap runs fn and returns the most heap in use seen above what was in
// use before.
func peakHeap(t *testing.T, fn func()) uint64 {
	t.Helper()
	heap, _ := memtest.Peak(fn)
	return heap
}

func recentJSONL(n int, at time.Time) []byte {
	var b bytes.Buffer
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `{"time_ns":%d,"error":"EOF","backend":"10.244.0.6:8080"}`+"\n", at.Add(time.Duration(i)*time.Microsecond).UnixNano())
	}
	return b.Bytes()
}

// An 8 MiB body of bad lines keeps no line beyond the examples: the answer
// counts the rest, and the heap stays small.
func TestHandlerManyBadLines(t *testing.T) {
	h := &Handler{Store: newMemStore(), Token: testToken}
	body := bytes.Repeat([]byte("x\n"), DefaultMaxBytes/2)
	var res *http.Response
	var out []byte
	peak := peakHeap(t, func() { res, out = post(t, h, "", testToken, bytes.NewReader(body), nil) })
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d: %.300s", res.StatusCode, out)
	}
	var e IngestError
	if err := json.Unmarshal(out, &e); err != nil {
		t.Fatal(err)
	}
	if len(e.Rejected) != MaxExamples || e.More != DefaultMaxBytes/2-MaxExamples {
		t.Errorf("%d examples, %d more; want %d and %d", len(e.Rejected), e.More, MaxExamples, DefaultMaxBytes/2-MaxExamples)
	}
	t.Logf("peak heap above the start: %.1f MiB", float64(peak)/(1<<20))
	if peak > 64<<20 {
		t.Errorf("peak heap %.1f MiB above the start, want at most 64 MiB", float64(peak)/(1<<20))
	}
}

// An 8 MiB body of good lines is stored in bounded batches, never held
// whole as events.
func TestHandlerBatches(t *testing.T) {
	st := &batchStore{}
	h := &Handler{Store: st, Token: testToken, BatchSize: 1000}
	now := time.Now()
	var body []byte
	for n := 1000; ; n += 1000 {
		if b := recentJSONL(n, now.Add(-time.Hour)); len(b) > DefaultMaxBytes-1000 {
			break
		} else {
			body = b
		}
	}
	var res *http.Response
	var out []byte
	peak := peakHeap(t, func() { res, out = post(t, h, "", testToken, bytes.NewReader(body), nil) })
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %.300s", res.StatusCode, out)
	}
	var got IngestResult
	json.Unmarshal(out, &got)
	total := 0
	for _, n := range st.sizes {
		total += n
		if n > 1000 {
			t.Errorf("a batch of %d events, want at most 1000", n)
		}
	}
	if total != got.Stored || got.Stored != bytes.Count(body, []byte("\n")) {
		t.Errorf("stored %d in %d batches, answer %+v, %d lines", total, len(st.sizes), got, bytes.Count(body, []byte("\n")))
	}
	t.Logf("%d failures in %d batches; peak heap above the start: %.1f MiB", got.Stored, len(st.sizes), float64(peak)/(1<<20))
	if peak > 64<<20 {
		t.Errorf("peak heap %.1f MiB above the start, want at most 64 MiB", float64(peak)/(1<<20))
	}
}

// Times far from the clock are refused per line, naming the field, and
// nothing of the request is stored.
func TestHandlerTimeWindow(t *testing.T) {
	st := newMemStore()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h := &Handler{Store: st, Token: testToken, Window: TimeWindow{Now: func() time.Time { return now }}}
	body := fmt.Sprintf(`{"time":"2026-11-30T12:00:00Z","error":"EOF"}
{"time":"1971-01-01T00:00:00Z","error":"EOF"}
{"time":"2261-06-01T00:00:00Z","error":"EOF"}
{"time":"%s","error":"EOF"}
`, now.Add(-31*24*time.Hour).Format(time.RFC3339))
	res, out := post(t, h, "", testToken, strings.NewReader(body), nil)
	var e IngestError
	json.Unmarshal(out, &e)
	if res.StatusCode != http.StatusBadRequest || len(e.Rejected) != 3 {
		t.Fatalf("status %d: %s", res.StatusCode, out)
	}
	for i, want := range []string{"before now", "after now", "before now"} {
		r := e.Rejected[i]
		if r.Line != i+2 || r.Field != "time" || !strings.Contains(r.Error, want) {
			t.Errorf("rejected %+v, want line %d, field time, %q", r, i+2, want)
		}
	}
	if n := len(st.failures()); n != 0 {
		t.Errorf("%d stored", n)
	}
	// Within the window the same shape is taken.
	res, out = post(t, h, "", testToken, strings.NewReader(`{"time":"2026-12-02T11:00:00Z","error":"EOF"}`+"\n"), nil)
	if res.StatusCode != http.StatusOK {
		t.Errorf("within the window: status %d: %s", res.StatusCode, out)
	}
	// A negative bound lifts it.
	h2 := &Handler{Store: st, Token: testToken, Window: TimeWindow{Past: -1, Now: func() time.Time { return now }}}
	if res, out := post(t, h2, "", testToken, strings.NewReader(`{"time":"1971-01-01T00:00:00Z","error":"EOF"}`+"\n"), nil); res.StatusCode != http.StatusOK {
		t.Errorf("past unbounded: status %d: %s", res.StatusCode, out)
	}
}

// Requests beyond MaxConcurrent are answered 503 with Retry-After at
// once, while the others are read.
func TestHandlerConcurrency(t *testing.T) {
	h := &Handler{Store: newMemStore(), Token: testToken, MaxConcurrent: 1}
	// The handler reads a body only once it holds a slot: the first
	// request's first read says it holds the only one. Probing before
	// that could take the slot first.
	reading := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-First") != "" {
			r.Body = readSignal{r.Body, func() { once.Do(func() { close(reading) }) }}
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	pr, pw := io.Pipe()
	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+ClientFailuresPath, pr)
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("X-First", "1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- 0
			return
		}
		res.Body.Close()
		first <- res.StatusCode
	}()
	pw.Write(recentJSONL(1, time.Now())) // the first request is being read
	select {
	case <-reading:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never read the first request's body")
	}
	var code int
	var retry string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+ClientFailuresPath, bytes.NewReader(recentJSONL(1, time.Now())))
		req.Header.Set("Authorization", "Bearer "+testToken)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		code, retry = res.StatusCode, res.Header.Get("Retry-After")
		if code == http.StatusServiceUnavailable {
			break
		}
	}
	if code != http.StatusServiceUnavailable || retry == "" {
		t.Errorf("second request: status %d, Retry-After %q; want 503 with Retry-After", code, retry)
	}
	pw.Close()
	if c := <-first; c != http.StatusOK {
		t.Errorf("first request: status %d", c)
	}
}

// A client that sends its body a byte at a time is cut at BodyTimeout.
func TestHandlerSlowBody(t *testing.T) {
	h := &Handler{Store: newMemStore(), Token: testToken, BodyTimeout: 500 * time.Millisecond}
	srv := httptest.NewServer(h)
	defer srv.Close()
	pr, pw := io.Pipe()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		line := recentJSONL(1, time.Now())
		for i := 0; ; i++ {
			select {
			case <-stop:
				pw.Close()
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := pw.Write(line[i%len(line) : i%len(line)+1]); err != nil {
				return
			}
		}
	}()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+ClientFailuresPath, pr)
	req.Header.Set("Authorization", "Bearer "+testToken)
	c := &http.Client{Timeout: 10 * time.Second}
	start := time.Now()
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestTimeout {
		t.Errorf("status %d after %v, want 408", res.StatusCode, time.Since(start))
	}
}

// readSignal calls read before each Read of its body.
type readSignal struct {
	io.ReadCloser
	read func()
}

func (r readSignal) Read(p []byte) (int, error) {
	r.read()
	return r.ReadCloser.Read(p)
}
