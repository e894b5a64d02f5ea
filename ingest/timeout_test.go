package ingest

import (
	"encoding/json"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

// parseWith runs format name's parser with opts over input.
func parseWith(t *testing.T, name, input string, opts Options) (recs []Record, bad []*LineError) {
	t.Helper()
	f, err := LookupFormat(name)
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.Parser(opts)
	if err != nil {
		t.Fatal(err)
	}
	err = p(strings.NewReader(input), func(r *Record) error {
		if r.Err != nil {
			c := *r.Err
			bad = append(bad, &c)
			return nil
		}
		c := *r
		c.Attrs = maps.Clone(r.Attrs)
		recs = append(recs, c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return recs, bad
}

// TestClientTimeout: a timeout logged at its end with no duration gets
// the client's timeout as its duration (the line's timeout_ms first, else
// --client-timeout), so it is aligned at its start; a duration the log
// gives, and failures that are not timeouts, are left alone.
func TestClientTimeout(t *testing.T) {
	jsonl := `{"time":"2026-03-01T09:00:05Z","target":"http://web/","error":"context deadline exceeded"}
{"time":"2026-03-01T09:00:06Z","target":"http://web/","error":"context deadline exceeded","timeout_ms":2500}
{"time":"2026-03-01T09:00:07Z","target":"http://web/","error":"context deadline exceeded","duration_ms":1200}
{"time":"2026-03-01T09:00:08Z","target":"http://web/","error":"connection refused"}
{"time":"2026-03-01T09:00:09Z","target":"http://web/","status":504,"reason":"timeout"}
`
	csv := "time,target,error,timeout_ms,duration_ms\n" +
		"2026-03-01T09:00:05Z,http://web/,i/o timeout,,\n" +
		"2026-03-01T09:00:06Z,http://web/,i/o timeout,2500,\n" +
		"2026-03-01T09:00:07Z,http://web/,i/o timeout,2500,1200\n" +
		"2026-03-01T09:00:08Z,http://web/,connection refused,,\n" +
		"2026-03-01T09:00:09Z,http://web/,read: timed out,,\n"
	const s = time.Second
	for _, c := range []struct {
		format, in string
		timeout    time.Duration
		want       []time.Duration
	}{
		{"jsonl", jsonl, 0, []time.Duration{0, 2500 * time.Millisecond, 1200 * time.Millisecond, 0, 0}},
		{"jsonl", jsonl, 5 * s, []time.Duration{5 * s, 2500 * time.Millisecond, 1200 * time.Millisecond, 0, 5 * s}},
		{"csv", csv, 0, []time.Duration{0, 2500 * time.Millisecond, 1200 * time.Millisecond, 0, 0}},
		{"csv", csv, 5 * s, []time.Duration{5 * s, 2500 * time.Millisecond, 1200 * time.Millisecond, 0, 5 * s}},
	} {
		recs, bad := parseWith(t, c.format, c.in, Options{ClientTimeout: c.timeout})
		if len(bad) > 0 || len(recs) != len(c.want) {
			t.Fatalf("%s: %d records, bad %v", c.format, len(recs), bad)
		}
		for i, r := range recs {
			if r.Duration != c.want[i] {
				t.Errorf("%s --client-timeout %v line %d (%s): duration %v, want %v", c.format, c.timeout, r.Line, r.Reason, r.Duration, c.want[i])
			}
			fromTimeout := r.Attrs[AttrDurationFrom] == DurationFromClientTimeout
			if gave := c.want[i] != 0 && r.Reason == event.FailTimeout && i != 2; fromTimeout != gave {
				t.Errorf("%s line %d: duration_from %q", c.format, r.Line, r.Attrs[AttrDurationFrom])
			}
			if e := r.Event(); e.Duration != int64(c.want[i]) {
				t.Errorf("%s line %d: event duration %d", c.format, r.Line, e.Duration)
			}
		}
	}
	// Every format gets it: nginx logs no duration for a 504 only when
	// $request_time is "-"; envoy and vegeta always give one.
	_, bad := parseWith(t, "jsonl", `{"time":"2026-03-01T09:00:05Z","error":"timeout","timeout_ms":"soon"}`+"\n", Options{})
	if len(bad) != 1 || bad[0].Field != "timeout_ms" || bad[0].Line != 1 {
		t.Errorf("a bad timeout_ms: %v", bad)
	}
	_, bad = parseWith(t, "csv", "time,error,timeout_ms\n2026-03-01T09:00:05Z,timeout,-3\n", Options{})
	if len(bad) != 1 || bad[0].Field != "timeout_ms" || bad[0].Line != 2 {
		t.Errorf("a negative timeout_ms: %v", bad)
	}
}

// TestHandlerClientTimeout: the ingest API takes the client's timeout as
// ?client_timeout= and per line as timeout_ms.
func TestHandlerClientTimeout(t *testing.T) {
	body := `{"time":"2026-03-01T09:00:05Z","target":"http://web/","error":"context deadline exceeded"}
{"time":"2026-03-01T09:00:06Z","target":"http://web/","error":"context deadline exceeded","timeout_ms":2500}
`
	st := newMemStore()
	h := &Handler{Store: st, Token: testToken, Window: TimeWindow{Past: -1, Ahead: -1}}
	res, b := post(t, h, "?client_timeout=5s", testToken, strings.NewReader(body), nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", res.StatusCode, b)
	}
	got := map[int64]int64{}
	for _, e := range st.failures() {
		got[e.Time] = e.Duration
	}
	if got[mustTime(t, "2026-03-01T09:00:05Z")] != int64(5*time.Second) || got[mustTime(t, "2026-03-01T09:00:06Z")] != int64(2500*time.Millisecond) {
		t.Errorf("durations stored %v", got)
	}
	res, b = post(t, h, "?client_timeout=soon", testToken, strings.NewReader(body), nil)
	var ie IngestError
	if res.StatusCode != http.StatusBadRequest || json.Unmarshal(b, &ie) != nil || !strings.Contains(ie.Error, "client_timeout") {
		t.Errorf("a bad client_timeout: %d %s", res.StatusCode, b)
	}
}
