package ingest

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/drainscope/drainscope/event"
)

const testToken = "s3cret-token"

func post(t *testing.T, h http.Handler, query, token string, body io.Reader, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, ClientFailuresPath+query, body)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return res, b
}

func TestHandler(t *testing.T) {
	jsonl := `{"time":"2026-03-01T09:00:00Z","target":"http://web/","status":200}
{"time":"2026-03-01T09:00:01Z","target":"http://web/","error":"EOF","backend":"10.244.0.6:8080"}
{"time":"2026-03-01T09:00:02Z","target":"http://web/","status":503,"backend":"10.244.0.6:8080"}
`
	webB := event.PodRef{Namespace: "shop", Name: "web-b", UID: "b"}
	st := newMemStore(event.Event{Time: mustTime(t, "2026-03-01T08:00:00Z"), Kind: event.PodReady, Node: "n1",
		Source: event.SourceWatcher, Pod: webB, Local: ap("10.244.0.6:0")})
	// The fixtures are of fixed dates: lift the window around the clock.
	h := &Handler{Store: st, Token: testToken, MaxBytes: 4096, Window: TimeWindow{Past: -1, Ahead: -1}}

	t.Run("stores jsonl", func(t *testing.T) {
		res, body := post(t, h, "", testToken, strings.NewReader(jsonl), nil)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", res.StatusCode, body)
		}
		var got IngestResult
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		if got != (IngestResult{Lines: 3, Succeeded: 1, Failed: 2, Stored: 2, Resolved: 2}) {
			t.Errorf("result %+v", got)
		}
		for _, e := range st.failures() {
			if e.Pod != webB {
				t.Errorf("not attributed: %+v", e)
			}
		}
	})
	t.Run("same body again stores nothing twice", func(t *testing.T) {
		res, _ := post(t, h, "", testToken, strings.NewReader(jsonl), nil)
		if res.StatusCode != http.StatusOK || len(st.failures()) != 2 {
			t.Errorf("status %d, %d stored", res.StatusCode, len(st.failures()))
		}
	})
	t.Run("other formats by query", func(t *testing.T) {
		q := "?format=nginx&fail_status=" + url.QueryEscape("500-599,499")
		res, body := post(t, h, q, testToken, strings.NewReader(goodNginx+
			`10.0.0.9 - - [10/Oct/2025:13:55:39 +0200] "GET /c HTTP/1.1" 499 0 "-" "curl/8.5" 10.244.0.6:8080 - 0.500`+"\n"), nil)
		var got IngestResult
		json.Unmarshal(body, &got)
		if res.StatusCode != http.StatusOK || got.Failed != 3 {
			t.Errorf("status %d: %s", res.StatusCode, body)
		}
		lf := url.QueryEscape(`[$time_local] $status $upstream_addr`)
		res, body = post(t, h, "?format=nginx&log_format="+lf, testToken,
			strings.NewReader("[10/Oct/2025:13:55:39 +0200] 503 10.244.0.6:8080\n"), nil)
		json.Unmarshal(body, &got)
		if res.StatusCode != http.StatusOK || got.Stored != 1 || got.Resolved != 0 {
			// 2025: before the pod's first event by far, so not resolved.
			t.Errorf("log_format: status %d: %s", res.StatusCode, body)
		}
	})
	t.Run("gzip", func(t *testing.T) {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write([]byte(`{"time":"2026-03-01T09:00:09Z","error":"connection refused"}` + "\n"))
		zw.Close()
		res, body := post(t, h, "", testToken, &buf, map[string]string{"Content-Encoding": "gzip"})
		if res.StatusCode != http.StatusOK {
			t.Errorf("status %d: %s", res.StatusCode, body)
		}
	})

	before := len(st.failures())
	for _, c := range []struct {
		name, method, query, token string
		body                       string
		hdr                        map[string]string
		status                     int
		contains                   string
	}{
		{"no token", "POST", "", "", jsonl, nil, 401, "bearer"},
		{"wrong token", "POST", "", "s3cret-tokem", jsonl, nil, 401, "bearer"},
		{"GET", "GET", "", testToken, "", nil, 405, "POST"},
		{"unknown format", "POST", "?format=apache", testToken, jsonl, nil, 400, "unknown format"},
		{"log_format for jsonl", "POST", "?log_format=%24status", testToken, jsonl, nil, 400, "applies to nginx and ingress-nginx only"},
		{"bad fail_status", "POST", "?fail_status=5xx", testToken, jsonl, nil, 400, "status set"},
		{"too large", "POST", "", testToken, strings.Repeat(jsonl, 100), nil, 413, "larger than 4096"},
		{"gzip bomb", "POST", "", testToken, "", map[string]string{"Content-Encoding": "gzip"}, 413, "larger than"},
		{"bad encoding", "POST", "", testToken, jsonl, map[string]string{"Content-Encoding": "br"}, 415, "gzip"},
		{"one bad line: all or nothing", "POST", "", testToken,
			`{"time":"2026-03-01T09:00:05Z","error":"EOF"}` + "\n" + `{"time":"yesterday","error":"EOF"}` + "\n", nil, 400, `"field": "time"`},
		{"truncated", "POST", "", testToken, `{"time":"2026-03-01T09:00:05Z","error":"EOF"}` + "\n" + `{"time":"2026-03-01T09:0`, nil, 400, "truncated"},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := io.Reader(strings.NewReader(c.body))
			if c.name == "gzip bomb" {
				var buf bytes.Buffer
				zw := gzip.NewWriter(&buf)
				zw.Write(bytes.Repeat([]byte{'\n'}, 1<<20))
				zw.Close()
				body = &buf
			}
			req := httptest.NewRequest(c.method, ClientFailuresPath+c.query, body)
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			for k, v := range c.hdr {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != c.status || !strings.Contains(strings.ToLower(rec.Body.String()), strings.ToLower(c.contains)) {
				t.Errorf("status %d, body %s; want %d containing %q", rec.Code, rec.Body.String(), c.status, c.contains)
			}
			if c.status == 401 && rec.Header().Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	if after := len(st.failures()); after != before {
		t.Errorf("refused requests stored %d events", after-before)
	}

	t.Run("no token configured", func(t *testing.T) {
		res, _ := post(t, &Handler{Store: st}, "", "", strings.NewReader(jsonl), nil)
		if res.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("status %d", res.StatusCode)
		}
	})
	t.Run("store failure", func(t *testing.T) {
		bad := newMemStore()
		bad.failAt = 1
		res, _ := post(t, &Handler{Store: bad, Token: testToken, Window: TimeWindow{Past: -1, Ahead: -1}}, "", testToken, strings.NewReader(jsonl), nil)
		if res.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("status %d", res.StatusCode)
		}
	})
	t.Run("over a real server", func(t *testing.T) {
		srv := httptest.NewServer(h)
		defer srv.Close()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+ClientFailuresPath+"?format=vegeta-json", strings.NewReader(
			`{"code":0,"timestamp":"2026-03-01T09:00:07Z","latency":5,"error":"Get \"http://10.244.0.6:8080/\": dial tcp 10.244.0.6:8080: connect: connection refused","url":"http://10.244.0.6:8080/"}`+"\n"))
		req.Header.Set("Authorization", "bearer "+testToken)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var got IngestResult
		json.NewDecoder(res.Body).Decode(&got)
		if res.StatusCode != 200 || got.Resolved != 1 {
			t.Errorf("status %d, %+v", res.StatusCode, got)
		}
	})
}
