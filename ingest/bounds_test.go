package ingest

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/drainscope/drainscope/event"
)

const dataplaneToken = "dataplane-token-of-its-own"

// A dataplane format is refused unless the server was told to take it, and
// then only with the dataplane token; that token posts nothing else.
func TestHandlerDataplaneFormats(t *testing.T) {
	snap, err := os.ReadFile("testdata/envoy_clusters.log")
	if err != nil {
		t.Fatal(err)
	}
	jsonl := `{"time":"2026-03-01T09:00:01Z","target":"http://web/","error":"EOF"}` + "\n"
	lifted := TimeWindow{Past: -1, Ahead: -1}
	both := append(ClientFailureFormats(), "envoy-clusters")
	for _, tc := range []struct {
		what    string
		h       *Handler
		query   string
		token   string
		body    string
		status  int
		message string
	}{
		{"default formats, envoy-clusters with the ingest token", &Handler{Token: testToken, Window: lifted},
			"?format=envoy-clusters", testToken, string(snap), http.StatusForbidden, "not taken here"},
		{"default formats, envoy-clusters with a dataplane token", &Handler{Token: testToken, DataplaneToken: dataplaneToken, Window: lifted},
			"?format=envoy-clusters", dataplaneToken, string(snap), http.StatusForbidden, "not taken here"},
		{"told to take it, with the ingest token", &Handler{Token: testToken, DataplaneToken: dataplaneToken, Formats: both, Window: lifted},
			"?format=envoy-clusters", testToken, string(snap), http.StatusForbidden, "needs the dataplane token"},
		{"told to take it, with the dataplane token", &Handler{Token: testToken, DataplaneToken: dataplaneToken, Formats: both, Window: lifted},
			"?format=envoy-clusters", dataplaneToken, string(snap), http.StatusOK, `"stored"`},
		{"the dataplane token posting client failures", &Handler{Token: testToken, DataplaneToken: dataplaneToken, Formats: both, Window: lifted},
			"", dataplaneToken, jsonl, http.StatusForbidden, "dataplane formats only"},
		{"client failures with the ingest token", &Handler{Token: testToken, DataplaneToken: dataplaneToken, Formats: both, Window: lifted},
			"", testToken, jsonl, http.StatusOK, `"stored"`},
		{"a format left out", &Handler{Token: testToken, Formats: []string{"jsonl"}, Window: lifted},
			"?format=csv", testToken, "time,error\n", http.StatusForbidden, "not taken here"},
	} {
		st := newMemStore()
		tc.h.Store = st
		res, body := post(t, tc.h, tc.query, tc.token, strings.NewReader(tc.body), nil)
		if res.StatusCode != tc.status || !strings.Contains(string(body), tc.message) {
			t.Errorf("%s: %d %s; want %d containing %q", tc.what, res.StatusCode, body, tc.status, tc.message)
		}
		if tc.status != http.StatusOK && len(st.events) != 0 {
			t.Errorf("%s: %d events stored on a refusal", tc.what, len(st.events))
		}
	}
}

// A name longer than Kubernetes allows is refused, naming the field; the
// credentials of a URL are gone before the store sees the event.
func TestBoundedNamesAndCredentials(t *testing.T) {
	long := strings.Repeat("a", 64)
	input := strings.Join([]string{
		`{"time":"2026-03-01T09:00:01Z","error":"EOF","service":"` + long + `"}`,
		`{"time":"2026-03-01T09:00:02Z","error":"EOF","service":"` + strings.Repeat("b", 63) + `"}`,
		`{"time":"2026-03-01T09:00:03Z","error":"Get \"https://user:tok3n@web.shop/x\": EOF","target":"https://user:tok3n@web.shop/x?q=1","backend":"http://admin@10.0.0.1:80"}`,
	}, "\n") + "\n"
	parse, err := LookupFormat("jsonl")
	if err != nil {
		t.Fatal(err)
	}
	p, err := parse.Parser(Options{})
	if err != nil {
		t.Fatal(err)
	}
	var bad []*LineError
	var good []event.Event
	err = Bounded(p, TimeWindow{Past: -1, Ahead: -1})(strings.NewReader(input), func(r *Record) error {
		if r.Err != nil {
			bad = append(bad, r.Err)
			return nil
		}
		good = append(good, r.Event())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) != 1 || bad[0].Line != 1 || bad[0].Field != "service" || !strings.Contains(bad[0].Error(), "63") {
		t.Errorf("rejected %v; want line 1, field service, naming the limit", bad)
	}
	if len(good) != 2 {
		t.Fatalf("%d records kept, want 2", len(good))
	}
	e := good[1]
	for k, v := range e.Attrs {
		if strings.Contains(v, "tok3n") || strings.Contains(v, "admin@") || strings.Contains(v, "user:") {
			t.Errorf("attr %s = %q still holds a credential", k, v)
		}
	}
	if got, want := e.Attrs[event.AttrTarget], "https://web.shop/x?q=1"; got != want {
		t.Errorf("target %q, want %q", got, want)
	}
	for in, want := range map[string]string{
		"https://user:token@host/":          "https://host/",
		"http://h/p?next=http://u:p@x/":     "http://h/p?next=http://x/",
		"Get \"https://t@h:8443/a\": EOF":   "Get \"https://h:8443/a\": EOF",
		"10.0.0.1:8080":                     "10.0.0.1:8080",
		"mailto:someone@example.invalid":    "mailto:someone@example.invalid",
		"http://host/path@with-at":          "http://host/path@with-at",
		"ws://a:b@c and https://d@e/f done": "ws://c and https://e/f done",
	} {
		if got := StripURLCredentials(in); got != want {
			t.Errorf("StripURLCredentials(%q) = %q, want %q", in, got, want)
		}
	}
}
