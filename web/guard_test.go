package web

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/ingest"
	"github.com/drainscope/drainscope/internal/httpauth"
	"github.com/drainscope/drainscope/store"
)

// brokenStore fails every read with an error that quotes a DSN, as a
// careless wrapper might.
type brokenStore struct {
	store.Store
	err error
}

func (b brokenStore) Scan(context.Context, store.Query, func(*event.Event) error) error { return b.err }

// syncBuffer is a log sink the server's goroutines may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServerErrorsStayInTheLog: a store error reaches neither the API's
// body, nor the error page, nor the update stream; each answer names a
// request id under which the log has the error, its password masked.
func TestServerErrorsStayInTheLog(t *testing.T) {
	const secret = "Pw0rdSecret"
	storeErr := errors.New(`store postgres://drainscope:` + secret + `@db.internal:5432/events?password=` + secret +
		`: querying events: ERROR: relation "events_2261_01_01" does not exist`)
	var logs syncBuffer
	s := newTestServer(t, brokenStore{fixtureStore(t), storeErr}, func(o *Options) {
		o.Log = slog.New(slog.NewTextHandler(&logs, nil))
	})
	check := func(what, body, id string) {
		t.Helper()
		for _, leak := range []string{secret, "db.internal", "events_2261"} {
			if strings.Contains(body, leak) {
				t.Errorf("%s: the answer holds %q: %s", what, leak, truncate(body, 400))
			}
		}
		if id == "" || !strings.Contains(body, id) {
			t.Errorf("%s: no request id %q in the answer: %s", what, id, truncate(body, 400))
			return
		}
		log := logs.String()
		var line string
		for l := range strings.SplitSeq(log, "\n") {
			if strings.Contains(l, id) {
				line = l
			}
		}
		if !strings.Contains(line, "events_2261") || !strings.Contains(line, "db.internal") {
			t.Errorf("%s: the log has no line with request %s and the error: %s", what, id, log)
		}
		if strings.Contains(log, secret) {
			t.Errorf("%s: the log holds the password: %s", what, log)
		}
	}

	b := do(t, s, "GET", "/api/v1/rollouts")
	if b.code != http.StatusInternalServerError {
		t.Fatalf("API: %d, want 500", b.code)
	}
	e := decode[apiError](t, b)
	check("API", b.body, e.RequestID)
	if b.header.Get("X-Request-Id") != e.RequestID {
		t.Errorf("X-Request-Id %q, body's %q", b.header.Get("X-Request-Id"), e.RequestID)
	}

	p := do(t, s, "GET", "/rollouts")
	if p.code != http.StatusInternalServerError {
		t.Fatalf("page: %d, want 500", p.code)
	}
	check("page", p.body, p.header.Get("X-Request-Id"))

	srv := httptest.NewServer(s)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/v1/updates", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	var data string
	for sc.Scan() {
		if sc.Text() == "event: error" && sc.Scan() {
			data = sc.Text()
			break
		}
	}
	_, id, _ := strings.Cut(data, "request ")
	check("update stream", data, strings.TrimSuffix(id, `"`))
}

// TestBadRequestErrorsRedacted: a 4xx answer keeps its message, masked.
func TestBadRequestErrorsRedacted(t *testing.T) {
	s := newTestServer(t, fixtureStore(t))
	rec := httptest.NewRecorder()
	s.fail(rec, httptest.NewRequest("GET", "/api/v1/rollouts", nil), bad(errors.New("since: postgres://u:Pw0rdSecret@h/db is not a duration")))
	if rec.Code != 400 || strings.Contains(rec.Body.String(), "Pw0rdSecret") || !strings.Contains(rec.Body.String(), "not a duration") {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
}

func TestSafeNext(t *testing.T) {
	for next, want := range map[string]string{
		"/rollouts?since=1h":                 "/rollouts?since=1h",
		"/rollouts/default/Deployment/web/1": "/rollouts/default/Deployment/web/1",
		"/rollouts/ns/Deployment/a%2Fb/1":    "/rollouts/ns/Deployment/a%2Fb/1",
		"":                                   "/rollouts",
		"//evil.example/phish":               "/rollouts",
		"/\\evil.example/phish":              "/rollouts",
		"\\\\evil.example/phish":             "/rollouts",
		"\\evil.example":                     "/rollouts",
		"/\t/evil.example/phish":             "/rollouts",
		"/\n/evil.example/phish":             "/rollouts",
		"/\r/evil.example/phish":             "/rollouts",
		"\t//evil.example/phish":             "/rollouts",
		" //evil.example/phish":              "/rollouts",
		"/ /evil.example":                    "/rollouts",
		"/\x00/evil.example":                 "/rollouts",
		"/\u3000/evil.example":               "/rollouts",
		"https://evil.example/":              "/rollouts",
		"https:evil.example":                 "/rollouts",
		"javascript:alert(1)":                "/rollouts",
		"evil.example":                       "/rollouts",
		"/%2F/evil.example":                  "/rollouts",
		"/%2fevil.example":                   "/rollouts",
		"/%5Cevil.example":                   "/rollouts",
		"/%09/evil.example":                  "/rollouts",
		"%2F%2Fevil.example":                 "/rollouts",
		"/%zz":                               "/rollouts",
	} {
		if got := safeNext(next); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", next, got, want)
		}
	}
}

func postLogin(s http.Handler, remote string, form url.Values) resp {
	req := httptest.NewRequest("POST", "/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.RemoteAddr = remote
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return resp{rec.Code, rec.Result().Header, rec.Body.String()}
}

// TestLoginNextStaysHere: the probe, a tab the browser drops.
func TestLoginNextStaysHere(t *testing.T) {
	const token = "a-token-of-thirty-two-characters"
	s := newTestServer(t, fixtureStore(t), func(o *Options) { o.AuthToken = token })
	for _, next := range []string{"/\t/evil.example/phish", "/\\evil.example", "//evil.example"} {
		b := postLogin(s, "192.0.2.1:1", url.Values{"token": {token}, "next": {next}})
		if b.code != http.StatusSeeOther || b.header.Get("Location") != "/rollouts" {
			t.Errorf("next %q: %d to %q, want 303 to /rollouts", next, b.code, b.header.Get("Location"))
		}
	}
	if b := do(t, s, "GET", "/login?next="+url.QueryEscape("/\t/evil.example/phish")); strings.Contains(b.body, "evil.example") {
		t.Errorf("the login page carries the off-site next on: %s", truncate(b.body, 400))
	}
}

// TestAuthFailuresLimited: wrong tokens from one address, at /login, in a
// bearer header, a cookie, ?token= or at the ingest endpoint, are answered
// 429 with Retry-After after the burst; the right token still passes from
// that address (everyone behind a port-forward or a proxy shares it), and
// a wrong one is refused again; another address is not blocked; the
// block ends after the wait.
func TestAuthFailuresLimited(t *testing.T) {
	const token = "ui-token-of-thirty-two-characters"
	const ingestToken = "ingest-token-of-thirty-two-chars"
	var mu sync.Mutex
	now := time.Unix(1e9, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	st := fixtureStore(t)
	s := newTestServer(t, st, func(o *Options) {
		o.AuthToken = token
		o.Ingest = &ingest.Handler{Store: st, Token: ingestToken}
		o.AuthFailures = &httpauth.FailureLimiter{Burst: 3, Every: time.Minute, Now: clock}
	})
	get := func(remote, target string, hdr ...string) resp {
		req := httptest.NewRequest("GET", target, nil)
		req.RemoteAddr = remote
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return resp{rec.Code, rec.Result().Header, rec.Body.String()}
	}
	ingestPost := func(remote, tok string) resp {
		req := httptest.NewRequest("POST", ingest.ClientFailuresPath, strings.NewReader(""))
		req.RemoteAddr = remote
		req.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return resp{rec.Code, rec.Result().Header, rec.Body.String()}
	}
	blocked := func(what string, b resp) {
		t.Helper()
		if b.code != http.StatusTooManyRequests || b.header.Get("Retry-After") == "" {
			t.Errorf("%s: %d (Retry-After %q), want 429 with Retry-After", what, b.code, b.header.Get("Retry-After"))
		}
	}
	for name, try := range map[string]func(remote string, right bool) resp{
		"login": func(remote string, right bool) resp {
			tok := "wrong"
			if right {
				tok = token
			}
			return postLogin(s, remote, url.Values{"token": {tok}})
		},
		"bearer": func(remote string, right bool) resp {
			tok := "wrong"
			if right {
				tok = token
			}
			return get(remote, "/api/v1/causes", "Authorization", "Bearer "+tok)
		},
		"cookie": func(remote string, right bool) resp {
			tok := "wrong"
			if right {
				tok = token
			}
			return get(remote, "/api/v1/causes", "Cookie", tokenCookie+"="+tok)
		},
		"address": func(remote string, right bool) resp {
			tok := "wrong"
			if right {
				tok = token
			}
			return get(remote, "/rollouts?token="+tok)
		},
		"ingest": func(remote string, right bool) resp {
			tok := "wrong"
			if right {
				tok = ingestToken
			}
			return ingestPost(remote, tok)
		},
	} {
		t.Run(name, func(t *testing.T) {
			attacker, other := "198.51.100.1:4000", "198.51.100.2:4000"
			switch name { // each case its own addresses
			case "bearer":
				attacker, other = "198.51.100.3:4000", "198.51.100.4:4000"
			case "cookie":
				attacker, other = "198.51.100.5:4000", "198.51.100.6:4000"
			case "address":
				attacker, other = "198.51.100.7:4000", "198.51.100.8:4000"
			case "ingest":
				attacker, other = "[2001:db8::1]:4000", "[2001:db8:0:1::1]:4000"
			}
			for i := range 3 {
				if b := try(attacker, false); b.code == http.StatusTooManyRequests {
					t.Fatalf("attempt %d within the burst: 429", i+1)
				}
			}
			blocked("wrong token after the burst", try(attacker, false))
			if b := try(attacker, true); b.code == http.StatusTooManyRequests || b.code == http.StatusUnauthorized {
				t.Errorf("the right token from the blocked address: %d; want it let in", b.code)
			}
			blocked("a wrong token again after the right one", try(attacker, false))
			if name == "ingest" {
				// The same /64 is the same client.
				blocked("a wrong token from another address of the /64", try("[2001:db8::2]:4000", false))
			}
			if b := try(other, true); b.code == http.StatusTooManyRequests || b.code == http.StatusUnauthorized {
				t.Errorf("another address with the right token: %d", b.code)
			}
			mu.Lock()
			now = now.Add(time.Minute)
			mu.Unlock()
			if b := try(attacker, true); b.code == http.StatusTooManyRequests || b.code == http.StatusUnauthorized {
				t.Errorf("after the wait, the right token: %d", b.code)
			}
		})
	}
	// Requests without a token are not guesses: they do not count.
	for range 10 {
		get("198.51.100.9:1", "/api/v1/causes")
	}
	if b := get("198.51.100.9:1", "/api/v1/causes", "Authorization", "Bearer "+token); b.code != 200 {
		t.Errorf("after requests with no token: %d", b.code)
	}
}

// TestUpdatesPerClient: one address cannot take every stream.
func TestUpdatesPerClient(t *testing.T) {
	s := newTestServer(t, fixtureStore(t), func(o *Options) { o.MaxClientStreams = 2 })
	slot := func(remote string) (func(), int) {
		req := httptest.NewRequest("GET", "/api/v1/updates", nil)
		req.RemoteAddr = remote
		rec := httptest.NewRecorder()
		release, ok := s.streamSlot(rec, req)
		if !ok {
			return nil, rec.Code
		}
		return release, 200
	}
	r1, _ := slot("192.0.2.1:1")
	r2, _ := slot("192.0.2.1:2")
	if _, code := slot("192.0.2.1:3"); code != http.StatusTooManyRequests {
		t.Errorf("a third stream from one address: %d, want 429", code)
	}
	r3, code := slot("192.0.2.2:1")
	if code != 200 {
		t.Fatalf("another address: %d", code)
	}
	r1()
	r4, code := slot("192.0.2.1:4")
	if code != 200 {
		t.Errorf("after one closed: %d", code)
	}
	r2()
	r3()
	r4()
	s.streamMu.Lock()
	defer s.streamMu.Unlock()
	if s.streamsTotal != 0 || len(s.streamsBy) != 0 {
		t.Errorf("after all closed: %d streams, %v", s.streamsTotal, s.streamsBy)
	}
}

// TestUpdatesPerClientHTTP: the same through the handler, with a real
// stream open.
func TestUpdatesPerClientHTTP(t *testing.T) {
	s := newTestServer(t, fixtureStore(t), func(o *Options) { o.MaxClientStreams = 1 })
	srv := httptest.NewServer(s)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/v1/updates", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("first stream: %d", res.StatusCode)
	}
	res2, err := http.Get(srv.URL + "/api/v1/updates")
	if err != nil {
		t.Fatal(err)
	}
	res2.Body.Close()
	if res2.StatusCode != http.StatusTooManyRequests || res2.Header.Get("Retry-After") == "" {
		t.Errorf("second stream from the same address: %d, want 429 with Retry-After", res2.StatusCode)
	}
}

// TestUpdatesLifetime: a stream ends by itself after its lifetime, having
// said when to come back; the next one is served.
func TestUpdatesLifetime(t *testing.T) {
	s := newTestServer(t, fixtureStore(t), func(o *Options) { o.StreamLifetime = 300 * time.Millisecond; o.MaxClientStreams = 1 })
	srv := httptest.NewServer(s)
	defer srv.Close()
	for round := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/v1/updates", nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 200 {
			t.Fatalf("round %d: %d", round, res.StatusCode)
		}
		body, err := io.ReadAll(res.Body) // returns once the server ends the stream
		res.Body.Close()
		cancel()
		if err != nil {
			t.Fatalf("round %d: the stream did not end by itself: %v", round, err)
		}
		if !strings.Contains(string(body), "retry: ") || !strings.Contains(string(body), "event: rollouts") {
			t.Errorf("round %d: %q", round, body)
		}
	}
}

// postAgentEvents posts an empty batch to the agents' endpoint from
// remote with tok and returns the status.
func postAgentEvents(s *Server, remote, tok string) int {
	req := httptest.NewRequest("POST", "/api/v1/agent/events", strings.NewReader("{}"))
	req.RemoteAddr = remote
	req.Header.Set("Authorization", "Bearer "+tok)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec.Code
}

// knownAgents is an agents' handler that knows the token "agent" (as a
// TokenReviewer that accepted it does), taking it and refusing others.
type knownAgents struct{}

func (knownAgents) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer agent" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (knownAgents) KnownToken(tok string) bool { return tok == "agent" }

// TestKnownAgentPassesABlockedAddress: agents behind one NAT share an
// address; after wrong tokens from it, an agent whose token the handler
// knows still writes, while an unknown token is refused before the
// handler (no TokenReview for it).
func TestKnownAgentPassesABlockedAddress(t *testing.T) {
	s := newTestServer(t, fixtureStore(t), func(o *Options) {
		o.AgentEvents = knownAgents{}
		o.AuthFailures = &httpauth.FailureLimiter{Burst: 2, Every: time.Hour}
	})
	post := func(tok string) int { return postAgentEvents(s, "198.51.100.21:1", tok) }
	for range 2 {
		post("forged")
	}
	if code := post("another-forged"); code != http.StatusTooManyRequests {
		t.Errorf("an unknown token from the blocked address: %d, want 429", code)
	}
	if code := post("agent"); code != http.StatusOK {
		t.Errorf("a known agent's token from the blocked address: %d, want 200", code)
	}
}

// TestAgentEventsMounted: the agents' endpoint is reached without the UI's
// token (agents carry their own), and its 401s count as wrong tokens.
func TestAgentEventsMounted(t *testing.T) {
	st := fixtureStore(t)
	s := newTestServer(t, st, func(o *Options) {
		o.AuthToken = "ui-token-of-thirty-two-characters"
		// A handler that does not say which tokens it knows.
		o.AgentEvents = http.HandlerFunc(knownAgents{}.ServeHTTP)
		o.AuthFailures = &httpauth.FailureLimiter{Burst: 2, Every: time.Hour}
	})
	post := func(tok string) int { return postAgentEvents(s, "198.51.100.20:1", tok) }
	if code := post("agent"); code != http.StatusOK {
		t.Fatalf("agent's token: %d, want 200", code)
	}
	for range 2 {
		post("wrong")
	}
	if code := post("agent"); code != http.StatusTooManyRequests {
		t.Errorf("after 2 wrong tokens with a burst of 2: %d, want 429", code)
	}
}
