package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/ingest"
	"github.com/drainscope/drainscope/internal/memtest"
	"github.com/drainscope/drainscope/internal/pgtest"
	"github.com/drainscope/drainscope/store"
	"github.com/drainscope/drainscope/web"
)

const hostileToken = "hostile-suite-ingest-token-0123456789abcdef"

// hostileServer is the server as serve wires it (web.NewServer's timeouts,
// the ingest handler with its defaults), on a loopback port.
type hostileServer struct {
	url string
	st  store.Store
	dsn string
}

func startHostile(t testing.TB, dsn string, bodyTimeout time.Duration) *hostileServer {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	h := web.New(web.Options{
		Store:   st,
		Ingest:  &ingest.Handler{Store: st, Token: hostileToken, BodyTimeout: bodyTimeout},
		Context: ctx,
	})
	ts := httptest.NewUnstartedServer(h)
	ts.Config = web.NewServer("", h)
	ts.Start()
	t.Cleanup(func() { ts.Close(); h.Close(); st.Close() })
	return &hostileServer{url: ts.URL, st: st, dsn: dsn}
}

func (s *hostileServer) post(t testing.TB, query string, body io.Reader, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url+ingest.ClientFailuresPath+query, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+hostileToken)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("POST: %v", err)
		return 0, nil, nil
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, b
}

// answers checks that the server still answers the rollouts list.
func (s *hostileServer) answers(t testing.TB, after string) {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second}
	res, err := c.Get(s.url + "/api/v1/rollouts")
	if err != nil {
		t.Errorf("after %s: GET /api/v1/rollouts: %v", after, err)
		return
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("after %s: GET /api/v1/rollouts: %d %.300s", after, res.StatusCode, b)
	}
}

func recentLines(n int, at time.Time) []byte {
	var b bytes.Buffer
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `{"time_ns":%d,"error":"EOF","backend":"10.244.0.6:8080","target":"http://web.shop/"}`+"\n",
			at.Add(time.Duration(i)*time.Microsecond).UnixNano())
	}
	return b.Bytes()
}

// linesOf fills about size bytes with lines like recentLines.
func linesOf(size int, at time.Time) []byte {
	one := len(recentLines(1, at))
	return recentLines(size/one, at)
}

func hostileStores(t *testing.T) map[string]string {
	return map[string]string{
		"sqlite":   filepath.Join(t.TempDir(), "events.db"),
		"postgres": pgtest.Schema(t),
	}
}

// TestHostileInput sends what a bad client with the ingest token sends, on
// each store, and checks after each probe that nothing broke: the answer
// is a 4xx (or 503 when full) naming the problem, and GET /api/v1/rollouts
// still answers 200.
func TestHostileInput(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 8 MiB bodies and waits for slow-client timeouts")
	}
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			dsn := hostileStores(t)[name]
			s := startHostile(t, dsn, 0)
			now := time.Now()
			s.answers(t, "start")

			// The slow clients run beside the other probes: each waits
			// for a server timeout.
			var slow sync.WaitGroup
			slow.Add(2)
			go func() { defer slow.Done(); slowHeader(t, s) }()
			go func() { defer slow.Done(); slowBody(t, startHostile(t, dsn, 2*time.Second)) }()

			probe := func(what string, status int, contains string, query string, body []byte, hdr ...string) []byte {
				t.Helper()
				code, _, out := s.post(t, query, bytes.NewReader(body), hdr...)
				if code != status || !strings.Contains(string(out), contains) {
					t.Errorf("%s: %d %.400s; want %d containing %q", what, code, out, status, contains)
				}
				s.answers(t, what)
				return out
			}
			probe("an oversized body", 413, "larger than", "", linesOf(9<<20, now))
			out := probe("8 MiB of bad lines", 400, "nothing was stored", "", bytes.Repeat([]byte("x\n"), 4<<20))
			var e ingest.IngestError
			json.Unmarshal(out, &e)
			if len(e.Rejected) != ingest.MaxExamples || e.More != 4<<20-ingest.MaxExamples {
				t.Errorf("8 MiB of bad lines: %d listed, %d more", len(e.Rejected), e.More)
			}
			probe("8 MiB of good lines", 200, `"stored"`, "", linesOf(8<<20-4096, now.Add(-time.Hour)))

			var gz bytes.Buffer
			zw := gzip.NewWriter(&gz)
			zw.Write(bytes.Repeat([]byte("\n"), 64<<20))
			zw.Close()
			probe("a gzip bomb", 413, "larger than", "", gz.Bytes(), "Content-Encoding", "gzip")

			deep := strings.Repeat("[", 500_000) + strings.Repeat("]", 500_000)
			probe("deeply nested JSON", 400, "rejected", "", []byte(`{"time":`+deep+`,"error":"EOF"}`+"\n"+
				`{"time_ns":1,"error":`+strings.Repeat(`{"a":`, 100_000)+"1"+strings.Repeat("}", 100_000)+"}\n"))
			probe("NaN and huge numbers", 400, "rejected", "", []byte(
				`{"time_ns":NaN,"error":"EOF"}`+"\n"+
					`{"time_ns":1e400,"error":"EOF"}`+"\n"+
					`{"time_s":1e300,"error":"EOF"}`+"\n"+
					`{"time_ns":99999999999999999999999999,"error":"EOF"}`+"\n"+
					fmt.Sprintf(`{"time_ns":%d,"status":1e30,"error":"EOF"}`, now.UnixNano())+"\n"+
					fmt.Sprintf(`{"time_ns":%d,"duration_ms":1e300,"error":"EOF"}`, now.UnixNano())+"\n"))
			out = probe("years far off", 400, `"field": "time"`, "", []byte(
				`{"time":"1971-01-01T00:00:00Z","error":"EOF"}`+"\n"+
					`{"time":"2261-12-31T23:59:59Z","error":"EOF"}`+"\n"+
					`{"time":"9999-12-31T23:59:59Z","error":"EOF"}`+"\n"+
					`{"time_s":-62135596800,"error":"EOF"}`+"\n"))
			if n := strings.Count(string(out), `"line"`); n != 4 {
				t.Errorf("years far off: %d lines rejected, want 4: %s", n, out)
			}
			var days bytes.Buffer
			for i := 0; i < 3000; i++ {
				fmt.Fprintf(&days, `{"time":"%s","error":"EOF"}`+"\n", time.Date(1971, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i).Format(time.RFC3339))
			}
			start := time.Now()
			probe("3,000 distinct days", 400, "nothing was stored", "", days.Bytes())
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("3,000 distinct days took %v", d)
			}
			var window bytes.Buffer
			for i := 0; i < 40; i++ { // as many days as the window holds, some past it
				fmt.Fprintf(&window, `{"time_ns":%d,"error":"EOF"}`+"\n", now.Add(-time.Duration(i)*24*time.Hour).UnixNano())
			}
			probe("40 days back from now", 400, "more than the 30d accepted", "", window.Bytes())
			probe("invalid UTF-8", 200, `"stored": 2`, "", []byte(
				fmt.Sprintf("{\"time_ns\":%d,\"error\":\"reset \xff\xfe by peer\",\"target\":\"http://web/\xc3\"}\n", now.UnixNano())+
					fmt.Sprintf("{\"time_ns\":%d,\"error\":\"EOF\",\"service\":\"w\xe2\x82\"}\n", now.UnixNano()+1)))
			// A JSON NUL is stored cleaned or refused by the parser; either
			// way the server goes on.
			if code, _, out := s.post(t, "", strings.NewReader(fmt.Sprintf(`{"time_ns":%d,"error":"EOF \u0000 nul"}`+"\n", now.UnixNano()+2))); code != 200 && code != 400 {
				t.Errorf("a JSON NUL: %d %.300s", code, out)
			}
			s.answers(t, "a JSON NUL")
			probe("a binary body", 400, "rejected", "", bytes.Repeat([]byte{0, 0xff, 0x1f, '\n'}, 1<<18))

			// A proxy's routing is no client failure: envoy-clusters is
			// refused with the ingest token unless the server was told to
			// take it, and nothing reaches the store.
			snap, err := os.ReadFile("../../ingest/testdata/envoy_clusters.log")
			if err != nil {
				t.Fatal(err)
			}
			snapNow := strings.ReplaceAll(string(snap), "2026-03-01T", now.UTC().Format("2006-01-02T"))
			probe("envoy-clusters with the ingest token", 403, "not taken here", "?format=envoy-clusters", []byte(snapNow))
			if n := countKind(t, s.st, event.SourceDataplane); n != 0 {
				t.Errorf("envoy-clusters with the ingest token: %d dataplane events stored", n)
			}
			// A Service name past its Kubernetes limit, refused naming the field.
			probe("a 1 MiB service name", 400, `"field": "service"`, "", []byte(fmt.Sprintf(`{"time_ns":%d,"error":"EOF","service":"%s"}`+"\n",
				now.UnixNano()+3, strings.Repeat("s", 1<<20-100))))
			// Credentials in the URL a client asked for are gone before
			// the store keeps the failure.
			probe("a URL with credentials", 200, `"stored": 1`, "", []byte(fmt.Sprintf(
				`{"time_ns":%d,"error":"Get \"https://user:cr3dential@web.shop/pay\": EOF","target":"https://user:cr3dential@web.shop/pay","backend":"http://tok3n@10.244.0.6:8080"}`+"\n",
				now.UnixNano()+4)))
			if err := s.st.Scan(context.Background(), store.Query{Window: event.Window{From: now.UnixNano(), To: now.UnixNano() + 10}}, func(e *event.Event) error {
				for k, v := range e.Attrs {
					if strings.Contains(v, "cr3dential") || strings.Contains(v, "tok3n") {
						t.Errorf("stored attr %s = %q holds a credential", k, v)
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}

			// Many ingests at once: each is served or told to come back.
			var wg sync.WaitGroup
			var codes sync.Map
			body := linesOf(1<<20, now.Add(-2*time.Hour))
			for i := 0; i < 16; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					code, hdr, _ := s.post(t, "", bytes.NewReader(body))
					if code == http.StatusServiceUnavailable && hdr.Get("Retry-After") == "" {
						t.Errorf("503 without Retry-After")
					}
					n, _ := codes.LoadOrStore(code, new(atomic.Int32))
					n.(*atomic.Int32).Add(1)
				}()
			}
			wg.Wait()
			got := map[int]int32{}
			codes.Range(func(k, v any) bool { got[k.(int)] = v.(*atomic.Int32).Load(); return true })
			if got[200] == 0 || got[200]+got[503] != 16 {
				t.Errorf("16 ingests at once: statuses %v; want 200s and 503s only", got)
			}
			t.Logf("16 ingests at once: %v", got)
			s.answers(t, "16 ingests at once")

			// Many update streams from one client: it gets its share
			// (8), the next is refused with Retry-After, and the server
			// goes on answering.
			sctx, scancel := context.WithCancel(context.Background())
			opened := 0
			for i := 0; i < 9; i++ {
				req, _ := http.NewRequestWithContext(sctx, http.MethodGet, s.url+"/api/v1/updates", nil)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Errorf("stream %d: %v", i, err)
					break
				}
				if res.StatusCode == http.StatusOK {
					opened++
					defer res.Body.Close()
					continue
				}
				res.Body.Close()
				if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" || i != 8 {
					t.Errorf("stream %d: %d (Retry-After %q); want the 9th alone refused with 429", i, res.StatusCode, res.Header.Get("Retry-After"))
				}
			}
			if opened != 8 {
				t.Errorf("%d streams opened for one client, want 8", opened)
			}
			s.answers(t, "many update streams")
			scancel()
			slow.Wait()
			s.answers(t, "the slow clients")

			if name == "postgres" {
				// Nothing far off reached the schema.
				c, err := pgx.Connect(context.Background(), dsn)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close(context.Background())
				var n int
				if err := c.QueryRow(context.Background(), "SELECT count(*) FROM pg_inherits WHERE inhparent = 'events'::regclass").Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n > 3 {
					t.Errorf("%d partitions after the probes, want at most 3 (today, yesterday and the day before)", n)
				}
			}
		})
	}
}

// countKind counts the stored events whose source is source.
func countKind(t *testing.T, st store.Store, source event.Source) int {
	t.Helper()
	n := 0
	if err := st.Scan(context.Background(), store.Query{}, func(e *event.Event) error {
		if e.Source == source {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// slowHeader sends a request's header a byte a second: ReadHeaderTimeout
// (5 s in web.NewServer) must close the connection.
func slowHeader(t *testing.T, s *hostileServer) {
	c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Error(err)
		return
	}
	defer c.Close()
	closed := make(chan time.Time, 1)
	go func() {
		io.Copy(io.Discard, c)
		closed <- time.Now()
	}()
	start := time.Now()
	head := "POST " + ingest.ClientFailuresPath + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + hostileToken + "\r\n"
	for i := 0; ; i = (i + 1) % len(head) {
		select {
		case at := <-closed:
			if d := at.Sub(start); d > 10*time.Second {
				t.Errorf("slow header: closed after %v, want about 5 s", d)
			}
			return
		case <-time.After(time.Second):
		}
		if time.Since(start) > 20*time.Second {
			t.Errorf("slow header: still open after %v", time.Since(start))
			return
		}
		c.Write([]byte{head[i]})
	}
}

// slowBody sends a body a byte a second: the handler's BodyTimeout (2 s
// here) must answer 408 and stop reading.
func slowBody(t *testing.T, s *hostileServer) {
	c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Error(err)
		return
	}
	defer c.Close()
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100000\r\n\r\n", ingest.ClientFailuresPath, hostileToken)
	start := time.Now()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
			if _, err := c.Write([]byte("x")); err != nil {
				return
			}
		}
	}()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Errorf("slow body: no answer after %v: %v", time.Since(start), err)
		return
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestTimeout || time.Since(start) > 10*time.Second {
		t.Errorf("slow body: %d after %v, want 408 after about 2 s", res.StatusCode, time.Since(start))
	}
}

// BenchmarkHostileMemory measures the server's memory, in this process,
// above idle for one 8 MiB hostile POST (bad lines; good lines) and for
// four at once, on SQLite (and Postgres with DRAINSCOPE_TEST_POSTGRES), and
// checks the server still answers after each. Run:
//
//	go test ./cmd/drainscope -run '^$' -bench HostileMemory -benchtime 1x -count 5
func BenchmarkHostileMemory(b *testing.B) {
	stores := map[string]func(testing.TB) string{
		"sqlite": func(t testing.TB) string { return filepath.Join(t.TempDir(), "events.db") },
	}
	if os.Getenv("DRAINSCOPE_TEST_POSTGRES") != "" {
		stores["postgres"] = func(t testing.TB) string { return pgtest.Schema(t) }
	}
	names := make([]string, 0, len(stores))
	for n := range stores {
		names = append(names, n)
	}
	sort.Strings(names)
	now := time.Now()
	bodies := map[string][]byte{
		"bad-lines":  bytes.Repeat([]byte("x\n"), 4<<20),
		"good-lines": linesOf(8<<20-4096, now.Add(-time.Hour)),
	}
	for _, st := range names {
		for _, kind := range []string{"bad-lines", "good-lines"} {
			for _, n := range []int{1, 4} {
				b.Run(fmt.Sprintf("%s/%s/x%d", st, kind, n), func(b *testing.B) {
					s := startHostile(b, stores[st](b), 0)
					s.answers(b, "start")
					var heaps, rsss []float64
					for i := 0; i < b.N; i++ {
						heap, rss := memtest.Peak(func() {
							var wg sync.WaitGroup
							for j := 0; j < n; j++ {
								wg.Add(1)
								go func() {
									defer wg.Done()
									code, _, out := s.post(b, "", bytes.NewReader(bodies[kind]))
									if code != 200 && code != 400 {
										b.Errorf("status %d: %.200s", code, out)
									}
								}()
							}
							wg.Wait()
						})
						s.answers(b, kind)
						heaps = append(heaps, float64(heap)/(1<<20))
						rsss = append(rsss, float64(rss)/(1<<20))
					}
					b.ReportMetric(slices.Max(heaps), "MiB-heap-above-idle")
					b.ReportMetric(slices.Max(rsss), "MiB-rss-above-idle")
					b.ReportMetric(slices.Max(heaps)/float64(n), "MiB-heap-per-post")
					// The heap in use includes what the collector has not
					// reclaimed yet, up to as much again as is live (GOGC),
					// and this process also holds the benchmark's bodies.
					if peak := slices.Max(heaps); peak > 64 {
						b.Errorf("%.1f MiB of heap above idle for %d at once, want at most 64", peak, n)
					}
				})
			}
		}
	}
}
