package web

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/ingest"
	"github.com/drainscope/drainscope/store"
)

// fixtureIDs are the fixture's rollouts, found through the list API.
type fixtureIDs struct {
	checkout, ledger, evil RolloutSummary
}

func ids(t *testing.T, h http.Handler) fixtureIDs {
	t.Helper()
	var out fixtureIDs
	for _, r := range decode[Rollouts](t, do(t, h, http.MethodGet, "/api/v1/rollouts")).Rollouts {
		switch {
		case r.WorkloadName == "checkout":
			out.checkout = r
		case r.WorkloadName == "ledger":
			out.ledger = r
		case strings.Contains(r.WorkloadName, "<img"):
			out.evil = r
		}
	}
	if out.checkout.ID == "" || out.ledger.ID == "" || out.evil.ID == "" {
		t.Fatalf("fixture rollouts not all listed: %+v", out)
	}
	return out
}

func TestAPI(t *testing.T) {
	st := fixtureStore(t)
	s := newTestServer(t, st)
	r := ids(t, s)
	co := "/api/v1/rollouts/" + r.checkout.ID
	// One failure and one lifecycle event to look up.
	fs := decode[Failures](t, do(t, s, http.MethodGet, co+"/failures?limit=1000"))
	tl := decode[Timeline](t, do(t, s, http.MethodGet, co+"/timeline"))
	base, _ := strconv.ParseInt(tl.Base, 10, 64)
	mark := tl.Lanes[0].Marks[0]
	eventPath := fmt.Sprintf("/api/v1/events/%d/%s", base+mark.T, mark.ID)

	tests := []struct {
		name   string
		method string
		path   string
		code   int
		check  func(t *testing.T, body resp)
	}{
		{"list is newest first", "GET", "/api/v1/rollouts", 200, func(t *testing.T, b resp) {
			l := decode[Rollouts](t, b)
			if l.Total != 3 || len(l.Rollouts) != 3 || l.Rollouts[0].WorkloadName != "checkout" || l.Rollouts[2].Namespace != `ns"'<b>` {
				t.Errorf("list: %+v", l)
			}
			if l.Version == "" || l.Now != fixtureNow.UnixNano() {
				t.Errorf("version %q now %d", l.Version, l.Now)
			}
		}},
		{"list by namespace", "GET", "/api/v1/rollouts?namespace=payments", 200, wantNames("ledger")},
		{"list by workload name", "GET", "/api/v1/rollouts?workload=check", 200, wantNames("checkout")},
		{"list by kind/name", "GET", "/api/v1/rollouts?namespace=shop&workload=Deployment/checkout", 200, wantNames("checkout")},
		{"list since an hour", "GET", "/api/v1/rollouts?since=1h", 200, wantNames("checkout")},
		{"list by RFC 3339 range", "GET", "/api/v1/rollouts?from=2026-03-14T10:30:00Z&to=2026-03-14T11:30:00Z", 200, wantNames("ledger")},
		{"list: bad from", "GET", "/api/v1/rollouts?from=yesterday", 400, wantError("from")},
		{"list: bad since", "GET", "/api/v1/rollouts?since=-1h", 400, wantError("since")},
		{"list: from after to", "GET", "/api/v1/rollouts?from=20&to=10", 400, wantError("before")},
		{"rollout: pods old and new", "GET", co, 200, func(t *testing.T, b resp) {
			d := decode[RolloutDetail](t, b)
			roles := map[string]int{}
			for _, p := range d.Pods {
				roles[p.Role]++
				if p.Timeline == nil {
					t.Errorf("pod %s has no timeline", p.Pod.Name)
				}
			}
			if roles["old"] != 4 || roles["new"] != 4 || len(d.NewPods) != 4 {
				t.Errorf("roles %v, new pods %d", roles, len(d.NewPods))
			}
			if d.Rollout.Failures != 20 || d.Rollout.ByCause[analysis.CauseKeepAliveAtExit] != 9 || d.Rollout.ByCause[analysis.CauseEndpointRace] != 7 ||
				d.Rollout.ByCause[analysis.CauseSIGKILL] != 3 || d.Rollout.ByCause[analysis.CauseInFlight] != 1 {
				t.Errorf("summary %+v", d.Rollout)
			}
			if d.Rollout.WorstGap == nil || *d.Rollout.WorstGap != -880_000_000 {
				t.Errorf("worst gap %v, want -880 ms (SIGTERM 20 ms after deletion, node-b out 900 ms after)", d.Rollout.WorstGap)
			}
		}},
		{"rollout: paged, with events", "GET", co + "?pod_offset=6&pod_limit=5&events=true", 200, func(t *testing.T, b resp) {
			d := decode[RolloutDetail](t, b)
			if d.PodsTotal != 8 || d.PodOffset != 6 || len(d.Pods) != 2 || len(d.Pods[0].Timeline.Events) == 0 {
				t.Errorf("%d of %d pods from %d", len(d.Pods), d.PodsTotal, d.PodOffset)
			}
		}},
		{"rollout: bad pod_limit", "GET", co + "?pod_limit=5000", 400, wantError("pod_limit")},
		{"rollout: unknown", "GET", "/api/v1/rollouts/shop/Deployment/checkout/1", 404, wantError("no such rollout")},
		{"rollout: bad start", "GET", "/api/v1/rollouts/shop/Deployment/checkout/soon", 400, wantError("start")},
		{"rollout: escaped names", "GET", "/api/v1/rollouts/" + r.evil.ID, 200, func(t *testing.T, b resp) {
			d := decode[RolloutDetail](t, b)
			if len(d.Pods) != 1 || d.Pods[0].Pod.Name != "<script>alert(1)</script>" {
				t.Errorf("pods %+v", d.Pods)
			}
			if strings.Contains(b.body, "<script>") {
				t.Error("JSON carries a raw <script>; it should be \\u003c-escaped")
			}
		}},
		{"timeline: lanes, marks, legend", "GET", co + "/timeline", 200, func(t *testing.T, b resp) {
			tl := decode[Timeline](t, b)
			if len(tl.Lanes) != 8 || tl.LanesTotal != 8 || tl.Failures != "client" {
				t.Fatalf("%d lanes of %d, failures %q", len(tl.Lanes), tl.LanesTotal, tl.Failures)
			}
			marks, kinds := 0, map[string]bool{}
			for _, l := range tl.Lanes {
				marks += len(l.FailureMarks)
				for _, m := range l.Marks {
					kinds[m.Kind] = true
				}
				for _, f := range l.FailureMarks {
					if f.T < tl.View.From || f.T >= tl.View.To {
						t.Errorf("failure mark at %d outside the view %+v", f.T, tl.View)
					}
				}
			}
			if marks != 20 || tl.Stats.Aggregated {
				t.Errorf("%d failure marks (aggregated %v), want all 20 individually", marks, tl.Stats.Aggregated)
			}
			for _, k := range []string{"pod_deletion", "signal", "process_exit", "listener_closed", "endpoint_not_ready", "endpoint_removed", "pod_ready"} {
				if !kinds[k] {
					t.Errorf("no %s mark", k)
				}
			}
			old := tl.Lanes[0]
			if old.Role != "old" || old.Phases.Deletion == nil || old.Phases.Sigterm == nil || old.Phases.Exit == nil || len(old.Spreads) == 0 {
				t.Errorf("first lane %+v", old)
			}
			if len(tl.Causes) < 6 || tl.Causes[0].Color == "" {
				t.Errorf("legend %+v", tl.Causes)
			}
		}},
		{"timeline: inferred failures", "GET", co + "/timeline?failures=inferred", 200, func(t *testing.T, b resp) {
			n := 0
			for _, l := range decode[Timeline](t, b).Lanes {
				for _, f := range l.FailureMarks {
					if !f.Inferred {
						t.Errorf("client failure %+v among inferred", f)
					}
					n++
				}
			}
			if n != 20 {
				t.Errorf("%d inferred marks", n)
			}
		}},
		{"timeline: a range shows only its pods", "GET", fmt.Sprintf("%s/timeline?from=%d&to=%d", co, base-3*sec, base+1*sec), 200, func(t *testing.T, b resp) {
			tl := decode[Timeline](t, b)
			if tl.LanesTotal != 3 || tl.View.From != -3*sec || tl.View.To != sec {
				t.Errorf("range: %d lanes, view %+v", tl.LanesTotal, tl.View)
			}
		}},
		{"timeline: lane paging", "GET", co + "/timeline?lane_offset=6&lane_limit=5", 200, func(t *testing.T, b resp) {
			tl := decode[Timeline](t, b)
			if len(tl.Lanes) != 2 || tl.LaneOffset != 6 || tl.LanesTotal != 8 {
				t.Errorf("paging: %d lanes from %d of %d", len(tl.Lanes), tl.LaneOffset, tl.LanesTotal)
			}
		}},
		{"timeline: bad failures", "GET", co + "/timeline?failures=some", 400, wantError("failures")},
		{"timeline: bad range", "GET", co + "/timeline?from=20&to=10", 400, wantError("from")},
		{"timeline: only from", "GET", co + "/timeline?from=20", 400, wantError("both")},
		{"timeline: bad width", "GET", co + "/timeline?width=wide", 400, wantError("width")},
		{"alignment", "GET", co + "/alignment", 200, func(t *testing.T, b resp) {
			a := decode[Alignment](t, b)
			n := 0
			for _, c := range a.Causes {
				n += c.Count
				if c.Fix == "" && c.Cause != analysis.CauseUnexplained {
					t.Errorf("cause %s has no fix", c.Cause)
				}
			}
			if n != 20 || a.FromSigterm.Count != 20 || a.FromExit.Count == 0 || len(a.Legend) < 6 {
				t.Errorf("alignment: %d in causes, %d from SIGTERM, %d from exit", n, a.FromSigterm.Count, a.FromExit.Count)
			}
		}},
		{"failures by cause, reported and inferred", "GET", co + "/failures?cause=sigkill", 200, func(t *testing.T, b resp) {
			if f := decode[Failures](t, b); f.Total != 6 {
				t.Errorf("%d sigkill failures, want 3 reported and 3 inferred", f.Total)
			}
		}},
		{"failures by cause, reported", "GET", co + "/failures?cause=sigkill&inferred=false", 200, func(t *testing.T, b resp) {
			f := decode[Failures](t, b)
			if f.Total != 3 || len(f.Failures) != 3 || f.Failures[0].Cause != analysis.CauseSIGKILL || f.Failures[0].Color == "" {
				t.Errorf("%+v", f)
			}
		}},
		{"failures paged", "GET", co + "/failures?offset=5&limit=2", 200, func(t *testing.T, b resp) {
			f := decode[Failures](t, b)
			if f.Total != len(fs.Failures) || len(f.Failures) != 2 || f.Failures[0].I != fs.Failures[5].I {
				t.Errorf("total %d, %d listed", f.Total, len(f.Failures))
			}
		}},
		{"failures: bad limit", "GET", co + "/failures?limit=100000", 400, wantError("limit")},
		{"failures: bad inferred", "GET", co + "/failures?inferred=maybe", 400, wantError("inferred")},
		{"failure by index", "GET", co + "/failures/0", 200, func(t *testing.T, b resp) {
			f := decode[IndexedFailure](t, b)
			if f.Explanation == "" || len(f.Evidence) == 0 || f.Pod == nil {
				t.Errorf("%+v", f)
			}
		}},
		{"failure: no such index", "GET", co + "/failures/9999", 404, wantError("no failure")},
		{"failure: bad index", "GET", co + "/failures/x", 400, wantError("index")},
		{"event", "GET", eventPath, 200, func(t *testing.T, b resp) {
			e := decode[analysis.EventView](t, b)
			if e.ID != mark.ID || e.Summary == "" {
				t.Errorf("%+v", e)
			}
		}},
		{"event: unknown", "GET", fmt.Sprintf("/api/v1/events/%d/%s", base+mark.T+1, mark.ID), 404, wantError("no event")},
		{"event: bad id", "GET", fmt.Sprintf("/api/v1/events/%d/xyz", base), 400, wantError("id")},
		{"causes", "GET", "/api/v1/causes", 200, func(t *testing.T, b resp) {
			c := decode[Causes](t, b)
			if len(c.Causes) != len(analysis.Rules) || c.Causes[0].Color == "" {
				t.Errorf("%+v", c)
			}
		}},
		{"unknown endpoint", "GET", "/api/v1/nope", 404, wantError("no such endpoint")},
		{"method not allowed", "POST", "/api/v1/rollouts", 405, func(t *testing.T, b resp) {
			if b.header.Get("Allow") != "GET" {
				t.Errorf("Allow %q", b.header.Get("Allow"))
			}
		}},
		{"ingest not mounted without a handler", "POST", "/api/v1/client-failures", 404, nil},
		{"page method not allowed", "DELETE", "/rollouts", 405, nil},
		{"unknown page", "GET", "/nowhere", 404, nil},
		{"root redirects", "GET", "/", 303, func(t *testing.T, b resp) {
			if b.header.Get("Location") != "/rollouts" {
				t.Errorf("Location %q", b.header.Get("Location"))
			}
		}},
		{"healthz", "GET", "/healthz", 200, nil},
		{"head of a page", "HEAD", "/rollouts", 200, nil},
		{"static", "GET", "/static/timeline.js", 200, func(t *testing.T, b resp) {
			if !strings.HasPrefix(b.header.Get("Content-Type"), "text/javascript") || b.header.Get("ETag") == "" {
				t.Errorf("headers %v", b.header)
			}
		}},
		{"static: unknown", "GET", "/static/nope.js", 404, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := do(t, s, tc.method, tc.path)
			if b.code != tc.code {
				t.Fatalf("%s %s: %d, want %d: %s", tc.method, tc.path, b.code, tc.code, truncate(b.body, 300))
			}
			if csp := b.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
				t.Errorf("CSP %q", csp)
			}
			if b.header.Get("X-Content-Type-Options") != "nosniff" || b.header.Get("X-Frame-Options") != "DENY" {
				t.Errorf("security headers missing: %v", b.header)
			}
			if strings.HasPrefix(tc.path, "/api/") && tc.code != 405 || tc.code == 405 && strings.HasPrefix(tc.path, "/api/") {
				if ct := b.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
					t.Errorf("Content-Type %q", ct)
				}
			}
			if tc.check != nil {
				tc.check(t, b)
			}
		})
	}
}

func wantNames(names ...string) func(t *testing.T, b resp) {
	return func(t *testing.T, b resp) {
		t.Helper()
		l := decode[Rollouts](t, b)
		var got []string
		for _, r := range l.Rollouts {
			got = append(got, r.WorkloadName)
		}
		if strings.Join(got, ",") != strings.Join(names, ",") {
			t.Errorf("listed %q, want %q", got, names)
		}
	}
}

func wantError(part string) func(t *testing.T, b resp) {
	return func(t *testing.T, b resp) {
		t.Helper()
		e := decode[apiError](t, b)
		if !strings.Contains(e.Error, part) {
			t.Errorf("error %q does not mention %q", e.Error, part)
		}
	}
}

func TestCompressed(t *testing.T) {
	s := newTestServer(t, fixtureStore(t))
	co := "/api/v1/rollouts/" + ids(t, s).checkout.ID + "/timeline"
	b := do(t, s, "GET", co, "Accept-Encoding", "gzip")
	if b.code != 200 || b.header.Get("Content-Encoding") != "gzip" {
		t.Errorf("timeline with Accept-Encoding gzip: %d, Content-Encoding %q", b.code, b.header.Get("Content-Encoding"))
	}
}

func TestStaticRevalidates(t *testing.T) {
	s := newTestServer(t, fixtureStore(t))
	first := do(t, s, "GET", "/static/app.css")
	again := do(t, s, "GET", "/static/app.css", "If-None-Match", first.header.Get("ETag"))
	if again.code != http.StatusNotModified {
		t.Errorf("revalidation: %d, want 304", again.code)
	}
	if v := do(t, s, "GET", "/static/app.css?v=1"); !strings.Contains(v.header.Get("Cache-Control"), "max-age") {
		t.Errorf("versioned asset Cache-Control %q", v.header.Get("Cache-Control"))
	}
}

func TestAuth(t *testing.T) {
	const token = "s3cret-token"
	s := newTestServer(t, fixtureStore(t), func(o *Options) { o.AuthToken = token })
	tests := []struct {
		name   string
		method string
		path   string
		hdr    []string
		code   int
		loc    string
		cookie bool
	}{
		{"page without token goes to login", "GET", "/rollouts?since=1h", nil, 303, "/login?next=%2Frollouts%3Fsince%3D1h", false},
		{"API without token", "GET", "/api/v1/rollouts", nil, 401, "", false},
		{"API with a wrong token", "GET", "/api/v1/rollouts", []string{"Authorization", "Bearer nope"}, 401, "", false},
		{"API with the token", "GET", "/api/v1/rollouts", []string{"Authorization", "Bearer " + token}, 200, "", false},
		{"page with the cookie", "GET", "/rollouts", []string{"Cookie", tokenCookie + "=" + token}, 200, "", false},
		{"static needs it too", "GET", "/static/app.css", nil, 303, "", false},
		{"token in the address sets the cookie", "GET", "/rollouts?token=" + token + "&since=1h", nil, 303, "/rollouts?since=1h", true},
		{"wrong token in the address", "GET", "/rollouts?token=nope", nil, 303, "", false},
		{"healthz is open", "GET", "/healthz", nil, 200, "", false},
		{"login page is open", "GET", "/login", nil, 200, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := do(t, s, tc.method, tc.path, tc.hdr...)
			if b.code != tc.code {
				t.Fatalf("%d, want %d", b.code, tc.code)
			}
			if tc.loc != "" && b.header.Get("Location") != tc.loc {
				t.Errorf("Location %q, want %q", b.header.Get("Location"), tc.loc)
			}
			c := b.header.Get("Set-Cookie")
			if tc.cookie != (c != "") {
				t.Errorf("Set-Cookie %q", c)
			}
			if c != "" && (!strings.Contains(c, "HttpOnly") || !strings.Contains(c, "SameSite=Strict")) {
				t.Errorf("cookie %q is not HttpOnly and SameSite=Strict", c)
			}
		})
	}
	post := func(form url.Values) resp {
		req := httptest.NewRequest("POST", "/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return resp{rec.Code, rec.Result().Header, rec.Body.String()}
	}
	if b := post(url.Values{"token": {token}, "next": {"//evil.example/x"}}); b.code != 303 || b.header.Get("Location") != "/rollouts" || b.header.Get("Set-Cookie") == "" {
		t.Errorf("login: %d to %q", b.code, b.header.Get("Location"))
	}
	if b := post(url.Values{"token": {"nope"}}); b.code != 401 || b.header.Get("Set-Cookie") != "" {
		t.Errorf("wrong login: %d", b.code)
	}
}

// /readyz answers 503 with the reason until Options.Ready says the server
// can take what it serves, and needs no token, as a probe has none.
func TestReadyz(t *testing.T) {
	var ready error = errors.New("the server's pod index has not listed the pods yet")
	s := newTestServer(t, fixtureStore(t), func(o *Options) {
		o.AuthToken = "0123456789abcdef0123456789abcdef"
		o.Ready = func() error { return ready }
	})
	if b := do(t, s, "GET", "/readyz"); b.code != 503 || !strings.Contains(b.body, "pod index has not listed") {
		t.Errorf("before: %d %q, want 503 with the reason", b.code, b.body)
	}
	if b := do(t, s, "GET", "/healthz"); b.code != 200 {
		t.Errorf("healthz while not ready: %d, want 200 (alive)", b.code)
	}
	ready = nil
	if b := do(t, s, "GET", "/readyz"); b.code != 200 {
		t.Errorf("after: %d %q, want 200", b.code, b.body)
	}
}

func TestHostCheck(t *testing.T) {
	s := newTestServer(t, fixtureStore(t), func(o *Options) { o.AllowedHosts = []string{"localhost", "127.0.0.1", "::1"} })
	for host, code := range map[string]int{"localhost:8080": 200, "127.0.0.1:8080": 200, "[::1]:8080": 200, "rebound.example:8080": 421} {
		req := httptest.NewRequest("GET", "/healthz", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != code {
			t.Errorf("Host %s: %d, want %d", host, rec.Code, code)
		}
	}
}

func TestIngestMounted(t *testing.T) {
	st := fixtureStore(t)
	s := newTestServer(t, st, func(o *Options) {
		o.AuthToken = "ui-token"
		o.Ingest = &ingest.Handler{Store: st, Token: "ingest-token", Window: ingest.TimeWindow{Now: func() time.Time { return fixtureNow }}}
	})
	body := `{"time":"2026-03-14T12:00:40Z","target":"http://checkout/","error":"EOF","backend":"10.244.0.13:8080"}` + "\n"
	for _, tc := range []struct {
		token string
		code  int
	}{{"", 401}, {"ui-token", 401}, {"ingest-token", 200}} {
		req := httptest.NewRequest("POST", ingest.ClientFailuresPath, strings.NewReader(body))
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != tc.code {
			t.Errorf("token %q: %d, want %d: %s", tc.token, rec.Code, tc.code, rec.Body)
		}
	}
}

// countingAnalyze counts the reads the server makes.
func countingAnalyze(n *atomic.Int32) AnalyzeFunc {
	return func(ctx context.Context, st store.Store, q store.Query, opts analysis.Options) (*analysis.Result, error) {
		n.Add(1)
		return analysis.AnalyzeWith(ctx, st, q, opts)
	}
}

// TestModelCache: concurrent requests for one rollout share one read; a
// finished rollout is served from memory; one in progress is read again
// after LiveTTL; ?refresh=1 forces a read.
func TestModelCache(t *testing.T) {
	st := fixtureStore(t)
	var reads atomic.Int32
	var mu sync.Mutex
	now := fixtureNow
	s := newTestServer(t, st, func(o *Options) {
		o.Analyze = countingAnalyze(&reads)
		o.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	co := "/api/v1/rollouts/" + ids(t, s).checkout.ID
	// The list queued every rollout for its summary; wait for those reads.
	waitIdle(t, s)
	reads.Store(0)
	s.mu.Lock()
	clear(s.models)
	s.mu.Unlock()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if b := do(t, s, "GET", co+"/timeline"); b.code != 200 {
				t.Errorf("%d", b.code)
			}
		}()
	}
	wg.Wait()
	do(t, s, "GET", co+"/alignment")
	if n := reads.Load(); n != 1 {
		t.Errorf("%d reads for concurrent and repeated requests, want 1", n)
	}
	do(t, s, "GET", co+"/timeline?refresh=1")
	if n := reads.Load(); n != 2 {
		t.Errorf("refresh: %d reads, want 2", n)
	}
	// Just after its last termination the rollout may still grow.
	end := time.Unix(0, decode[RolloutDetail](t, do(t, s, "GET", co)).Rollout.To)
	mu.Lock()
	now = end.Add(10 * time.Second)
	mu.Unlock()
	do(t, s, "GET", co+"/timeline?refresh=1")
	if !decode[Timeline](t, do(t, s, "GET", co+"/timeline")).Rollout.Live {
		t.Error("a rollout 10 s after its last termination is not live")
	}
	before := reads.Load()
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	do(t, s, "GET", co+"/timeline")
	if reads.Load() != before+1 {
		t.Errorf("a live rollout was not read again after its TTL")
	}
}

func waitIdle(t *testing.T, s *Server) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		busy := s.working || len(s.flight) > 0
		s.mu.Unlock()
		if !busy {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("background reads did not finish")
}

// TestUpdates reads the update stream until it reports the summaries
// landing.
func TestUpdates(t *testing.T) {
	s := newTestServer(t, fixtureStore(t))
	srv := httptest.NewServer(s)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/v1/updates", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	sc := bufio.NewScanner(res.Body)
	var versions []string
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "data: "); ok {
			versions = append(versions, v)
			if strings.Contains(v, `"pending":0`) {
				break
			}
		}
	}
	if len(versions) < 2 || !strings.Contains(versions[0], `"pending":3`) {
		t.Errorf("updates %q: want a first event with 3 pending, then one with none", versions)
	}
}

func TestUpdatesLimit(t *testing.T) {
	s := newTestServer(t, fixtureStore(t), func(o *Options) { o.MaxStreams = 1 })
	s.streamMu.Lock()
	s.streamsTotal++ // another client's stream
	s.streamMu.Unlock()
	if b := do(t, s, "GET", "/api/v1/updates"); b.code != http.StatusServiceUnavailable || b.header.Get("Retry-After") == "" {
		t.Errorf("over the limit: %d", b.code)
	}
}
