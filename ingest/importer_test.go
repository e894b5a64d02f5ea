package ingest

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

func parserFor(t testing.TB, format string, opts Options) Parser {
	t.Helper()
	f, err := LookupFormat(format)
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.Parser(opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// goodNginx is a valid nginx log: 3 lines, 2 failures.
const goodNginx = `10.0.0.9 - - [10/Oct/2025:13:55:36 +0200] "GET /ok HTTP/1.1" 200 12 "-" "curl/8.5" 10.244.0.5:8080 200 0.003
10.0.0.9 - - [10/Oct/2025:13:55:37 +0200] "GET /a HTTP/1.1" 502 157 "-" "curl/8.5" 10.244.0.6:8080 502 0.001
10.0.0.9 - - [10/Oct/2025:13:55:38 +0200] "GET /b HTTP/1.1" 502 157 "-" "curl/8.5" 10.244.0.6:8080 502 0.001
`

// The bad inputs the issue names, each with the line and field its first
// rejection must name.
var badInputs = []struct {
	name, format, input string
	line                int
	field               string
	good                int // failures in the good lines
}{
	{
		name: "truncated file", format: "nginx",
		input: goodNginx + `10.0.0.9 - - [10/Oct/2025:13:55:39 +0200] "GET /c HTTP/1.1" 50`,
		line:  4, field: "status", good: 2,
	},
	{
		name: "truncated json", format: "vegeta-json",
		input: `{"code":503,"timestamp":"2026-03-01T09:00:00Z","latency":1,"error":"503"}` + "\n" + `{"code":0,"timestamp":"2026-03-01T09:00:01Z","latency":12`,
		line:  2, field: "latency", good: 1,
	},
	{
		name: "truncated csv", format: "vegeta-csv",
		input: "1772355600000000000,503,1,0,0,503 Service Unavailable,,a,0,GET,http://x/,\n1772355601000000000,0,1,0,0,\"Get \\\"http://x/\\\": conn",
		line:  2, field: "error", good: 1,
	},
	{
		name: "wrong format", format: "nginx",
		input: `{"code":503,"timestamp":"2026-03-01T09:00:00Z","latency":1,"error":"503"}` + "\n",
		line:  1, field: "remote_addr", good: 0,
	},
	{
		name: "wrong format for envoy", format: "envoy",
		input: goodNginx,
		line:  1, field: FieldLine, good: 0,
	},
	{
		name: "bad timestamp", format: "nginx",
		input: goodNginx + `10.0.0.9 - - [10/Okt/2025:13:55:39 +0200] "GET /c HTTP/1.1" 502 157 "-" "curl/8.5" 10.244.0.6:8080 502 0.001` + "\n",
		line:  4, field: "time_local", good: 2,
	},
	{
		name: "bad timestamp in vegeta", format: "vegeta-json",
		input: `{"code":503,"timestamp":"2026-03-01T09:00:00","latency":1,"error":"503"}` + "\n",
		line:  1, field: "timestamp", good: 0,
	},
	{
		name: "bad timestamp in envoy", format: "envoy",
		input: `[2026-03-01 09:00:01] "GET /a HTTP/1.1" 503 UF 0 91 25 - "-" "curl/8.5" "id-2" "web" "10.244.0.6:8080"` + "\n",
		line:  1, field: "start_time", good: 0,
	},
	{
		name: "binary file", format: "nginx",
		input: "\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03\x00>\x00\x01\x00\x00\x00" + strings.Repeat("\x00\x01\xfe", 300),
		line:  1, field: FieldLine, good: 0,
	},
	{
		name: "binary file as csv", format: "csv",
		input: "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
		line:  1, field: FieldLine, good: 0,
	},
	{
		name: "binary line inside a log", format: "nginx",
		input: goodNginx + "10.0.0.9 - - [10/Oct/2025:13:55:39 +0200] \"GET /c\x00\x00 HTTP/1.1\" 502\n",
		line:  4, field: FieldLine, good: 2,
	},
	{
		name: "garbage line in a small file", format: "jsonl",
		input: goodJSONL + "\x01\x02\x03\x04\x05\x06\x07\x08\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1c\x1d\n" + goodJSONL,
		line:  2, field: FieldLine, good: 2,
	},
	{
		name: "NUL line in a small file", format: "jsonl",
		input: goodJSONL + strings.Repeat("\x00", 40) + "\n" + goodJSONL,
		line:  2, field: FieldLine, good: 2,
	},
	{
		name: "garbage first line", format: "csv",
		input: "\x01\x00\x00\x02garbage\ntime,status\n2026-03-01T09:00:00Z,503\n2026-03-01T09:00:01Z,503\n",
		line:  1, field: FieldLine, good: 2,
	},
	{
		name: "unterminated quote in vegeta csv", format: "vegeta-csv",
		input: "1772355600000000000,0,1,0,0,\"dial tcp: connection refused,,a,0,GET,http://x/,\n1772355601000000000,503,1,0,0,,,a,1,GET,http://x/,\n",
		line:  1, field: "error", good: 1,
	},
	{
		name: "unterminated quote in csv", format: "csv",
		input: "time,status,error\n2026-03-01T09:00:00Z,0,\"connection reset\n2026-03-01T09:00:01Z,503,ok\n",
		line:  2, field: "error", good: 1,
	},
	{
		name: "escaped NUL in a jsonl target", format: "jsonl",
		input: `{"time":"2026-03-01T09:00:00Z","status":503,"target":"http://web/a\u0000b"}` + "\n" + goodJSONL,
		line:  1, field: "target", good: 1,
	},
	{
		name: "escaped NUL in a vegeta error", format: "vegeta-json",
		input: `{"code":0,"timestamp":"2026-03-01T09:00:00Z","latency":1,"error":"EOF\u0000"}` + "\n" + `{"code":503,"timestamp":"2026-03-01T09:00:01Z","latency":1}` + "\n",
		line:  1, field: "error", good: 1,
	},
	{
		name: "escaped NUL in an envoy-json host", format: "envoy-json",
		input: `{"start_time":"2026-03-01T09:00:00Z","response_code":503,"upstream_host":"\u00001.2.3.4:80"}` + "\n" + `{"start_time":"2026-03-01T09:00:01Z","response_code":503}` + "\n",
		line:  1, field: "upstream_host", good: 1,
	},
	{
		name: "deeply nested json", format: "jsonl",
		input: `{"time":"2026-03-01T09:00:00Z","status":503,"x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + "}\n" + goodJSONL,
		line:  1, field: "x", good: 1,
	},
	{
		name: "huge status", format: "jsonl",
		input: `{"time":"2026-03-01T09:00:00Z","status":1e400}` + "\n" + goodJSONL,
		line:  1, field: "status", good: 1,
	},
	{
		name: "huge duration", format: "jsonl",
		input: `{"time":"2026-03-01T09:00:00Z","status":503,"duration_ms":1e30}` + "\n" + goodJSONL,
		line:  1, field: "duration_ms", good: 1,
	},
	{
		name: "NaN duration", format: "envoy-json",
		input: `{"start_time":"2026-03-01T09:00:00Z","response_code":503,"duration":NaN}` + "\n" + `{"start_time":"2026-03-01T09:00:01Z","response_code":503}` + "\n",
		line:  1, field: "duration", good: 1,
	},
	{
		name: "huge latency", format: "vegeta-json",
		input: `{"code":503,"timestamp":"2026-03-01T09:00:00Z","latency":1e300}` + "\n" + `{"code":503,"timestamp":"2026-03-01T09:00:01Z","latency":1}` + "\n",
		line:  1, field: "latency", good: 1,
	},
	{
		name: "year far off", format: "jsonl",
		input: `{"time":"9999-12-31T23:59:59Z","status":503}` + "\n" + `{"time_s":"99999999999","status":503}` + "\n" + goodJSONL,
		line:  1, field: "time", good: 1,
	},
	{
		name: "year before 1971", format: "vegeta-csv",
		input: "1000000000,503,1,0,0,,,a,0,GET,http://x/,\n1772355601000000000,503,1,0,0,,,a,1,GET,http://x/,\n",
		line:  1, field: "timestamp", good: 1,
	},
	{
		name: "huge epoch", format: "csv",
		input: "time_ms,status\n1e30,503\n99999999999999999999,503\n1772355602000,503\n",
		line:  2, field: "time_ms", good: 1,
	},
}

// goodJSONL is one line of generic JSON lines: a failure.
const goodJSONL = `{"time":"2026-03-01T09:00:00Z","status":503,"target":"http://web/"}` + "\n"

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	for _, c := range badInputs {
		t.Run(c.name, func(t *testing.T) {
			for _, strict := range []bool{false, true} {
				st := newMemStore()
				im := &Importer{Store: st, Parser: parserFor(t, c.format, Options{}), Strict: strict}
				sum, err := im.Import(ctx, "in/"+c.format+".log", strings.NewReader(c.input))
				if sum.Rejected == 0 {
					t.Fatalf("strict=%v: nothing rejected", strict)
				}
				first := sum.Examples[0]
				if first.File != "in/"+c.format+".log" || first.Line != c.line || first.Field != c.field {
					t.Errorf("strict=%v: first rejection %q names %s:%d field %q, want line %d field %q",
						strict, first, first.File, first.Line, first.Field, c.line, c.field)
				}
				msg := first.Error()
				if !strings.HasPrefix(msg, fmt.Sprintf("in/%s.log:%d: field %s: ", c.format, c.line, c.field)) {
					t.Errorf("message %q does not start with file:line: field", msg)
				}
				stored := len(st.failures())
				if strict {
					var re *RejectedError
					if !errors.As(err, &re) || stored != 0 || sum.Stored != 0 {
						t.Errorf("strict: err=%v, %d stored; want a RejectedError and nothing stored", err, stored)
					}
				} else {
					if err != nil {
						t.Errorf("default mode: err = %v", err)
					}
					if stored != c.good || sum.Stored != c.good {
						t.Errorf("default mode: %d stored (summary %d), want the %d good failures", stored, sum.Stored, c.good)
					}
				}
			}
		})
	}
}

func TestTruncatedHint(t *testing.T) {
	im := &Importer{Parser: parserFor(t, "nginx", Options{})}
	sum, _ := im.Import(context.Background(), "a.log", strings.NewReader(badInputs[0].input))
	if !strings.Contains(sum.Examples[0].Error(), "truncated") {
		t.Errorf("no hint of truncation in %q", sum.Examples[0])
	}
}

func TestImportBatchesAndSummary(t *testing.T) {
	// 10,000 lines, every tenth a 502, across several batches.
	var b strings.Builder
	base := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	for i := range 10000 {
		status := 200
		if i%10 == 0 {
			status = 502
		}
		fmt.Fprintf(&b, "10.0.0.%d - - [%s] \"GET /%d HTTP/1.1\" %d 0 \"-\" \"k6\" 10.244.0.%d:8080 %d 0.00%d\n",
			i%200, base.Add(time.Duration(i)*time.Millisecond).Format("02/Jan/2006:15:04:05 -0700"), i, status, i%3+5, status, i%10)
	}
	st := newMemStore()
	im := &Importer{Store: st, Parser: parserFor(t, "nginx", Options{}), BatchSize: 300}
	sum, err := im.Import(context.Background(), "big.log", strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Lines != 10000 || sum.Successes != 9000 || sum.Failures != 1000 || sum.Stored != 1000 || sum.Rejected != 0 {
		t.Errorf("summary = %+v", sum)
	}
	if st.appends != 4 {
		t.Errorf("%d appends, want 4 batches of at most 300", st.appends)
	}
	if n := len(st.failures()); n != 1000 {
		t.Errorf("%d stored", n)
	}
	// Importing again stores nothing new.
	if _, err := im.Import(context.Background(), "big.log", strings.NewReader(b.String())); err != nil {
		t.Fatal(err)
	}
	if n := len(st.failures()); n != 1000 {
		t.Errorf("re-import: %d stored, want still 1000", n)
	}
	var out bytes.Buffer
	sum.WriteTo(&out)
	if !strings.Contains(out.String(), "10000 lines read: 9000 succeeded, 1000 failed (1000 stored") {
		t.Errorf("summary text: %s", out.String())
	}
}

func TestIdenticalFailuresKept(t *testing.T) {
	// nginx stamps whole seconds: the same client failing twice in one
	// second writes two identical lines, which are two failures.
	line := `10.0.0.9 - - [10/Oct/2025:13:55:37 +0200] "GET /a HTTP/1.1" 502 157 "-" "curl/8.5" 10.244.0.6:8080 502 0.001` + "\n"
	st := newMemStore()
	im := &Importer{Store: st, Parser: parserFor(t, "nginx", Options{})}
	for range 2 {
		if _, err := im.Import(context.Background(), "a.log", strings.NewReader(line+line+line)); err != nil {
			t.Fatal(err)
		}
	}
	fs := st.failures()
	if len(fs) != 3 {
		t.Fatalf("%d stored, want 3 (and a second import adds none)", len(fs))
	}
	occ := map[string]bool{}
	for _, e := range fs {
		occ[e.Attrs[AttrOccurrence]] = true
	}
	if !occ[""] || !occ["2"] || !occ["3"] {
		t.Errorf("occurrences = %v", occ)
	}
}

func TestImportGzip(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(goodNginx))
	zw.Close()
	im := &Importer{Parser: parserFor(t, "nginx", Options{})}
	sum, err := im.Import(context.Background(), "a.log.gz", &buf)
	if err != nil || sum.Failures != 2 || sum.Lines != 3 {
		t.Fatalf("sum=%+v err=%v", sum, err)
	}
}

func TestImportStoreFailure(t *testing.T) {
	st := newMemStore()
	st.failAt = 1
	im := &Importer{Store: st, Parser: parserFor(t, "nginx", Options{})}
	_, err := im.Import(context.Background(), "a.log", strings.NewReader(goodNginx))
	if !errors.Is(err, errInjected) {
		t.Fatalf("err = %v, want the store's", err)
	}
}

func TestImportResolvesPods(t *testing.T) {
	t0 := mustTime(t, "2025-10-10T11:55:00Z")
	webA := event.PodRef{Namespace: "shop", Name: "web-7d9f-a", UID: "uid-a"}
	webB := event.PodRef{Namespace: "shop", Name: "web-7d9f-b", UID: "uid-b"}
	wl := event.Workload{Kind: "Deployment", Name: "web"}
	st := newMemStore(
		event.Event{Time: t0, Kind: event.PodReady, Node: "n1", Source: event.SourceWatcher, Pod: webA, Workload: wl, Local: ap("10.244.0.5:0")},
		event.Event{Time: t0 + 1, Kind: event.EndpointReady, Node: "n1", Source: event.SourceWatcher, Pod: webB, Workload: wl, Local: ap("10.244.0.6:8080"), Service: "web"},
	)
	im := &Importer{Store: st, Parser: parserFor(t, "nginx", Options{})}
	sum, err := im.Import(context.Background(), "a.log", strings.NewReader(goodNginx))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Resolved != 2 {
		t.Errorf("resolved %d of %d", sum.Resolved, sum.Failures)
	}
	for _, e := range st.failures() {
		if e.Pod != webB || e.Workload != wl || e.Service != "web" || e.Attrs[event.AttrBackend] != "10.244.0.6:8080" {
			t.Errorf("failure %+v not attributed to %v", e, webB)
		}
		if err := e.Validate(); err != nil || e.Source != event.SourceClient || e.Kind != event.ClientFailure || e.Code != 502 {
			t.Errorf("event %+v: %v", e, err)
		}
	}
}

func TestResolver(t *testing.T) {
	ip := netip.MustParseAddr("10.244.0.5")
	a := event.PodRef{Namespace: "ns", Name: "a", UID: "a"}
	b := event.PodRef{Namespace: "ns", Name: "b", UID: "b"}
	sec := int64(time.Second)
	r := NewResolver()
	r.Lookahead = 30 * time.Second
	evs := []event.Event{
		{Time: 100 * sec, Kind: event.EndpointAdded, Pod: a, Local: netip.AddrPortFrom(ip, 8080), Service: "web"},
		{Time: 110 * sec, Kind: event.PodReady, Pod: a, Local: netip.AddrPortFrom(ip, 0)},
		{Time: 200 * sec, Kind: event.EndpointRemoved, Pod: a, Local: netip.AddrPortFrom(ip, 8080), Service: "web"},
		{Time: 900 * sec, Kind: event.PodReady, Pod: b, Local: netip.AddrPortFrom(ip, 0)}, // the address reused
		{Time: 50 * sec, Kind: event.Signal, Pod: b, Local: netip.AddrPortFrom(ip, 0)},    // not an address event
		{Time: 60 * sec, Kind: event.PodReady, Local: netip.AddrPortFrom(ip, 0)},          // no pod
	}
	rand.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	for i := range evs {
		r.Add(&evs[i])
	}
	for _, c := range []struct {
		t    int64
		want event.PodRef
		svc  string
		ok   bool
	}{
		{10 * sec, event.PodRef{}, "", false}, // long before anything
		{90 * sec, a, "web", true},            // just before the first claim
		{150 * sec, a, "web", true},           // after pod_ready: Service carried forward
		{250 * sec, a, "web", true},           // terminating, after removal: still a's
		{899 * sec, a, "web", true},
		{900 * sec, b, "", true},
		{5000 * sec, b, "", true},
	} {
		o, ok := r.Lookup(ip, c.t)
		if ok != c.ok || o.Pod != c.want || o.Service != c.svc {
			t.Errorf("Lookup at %ds = %+v, %v; want %v %q %v", c.t/sec, o, ok, c.want, c.svc, c.ok)
		}
	}
	if _, ok := r.Lookup(netip.MustParseAddr("10.244.0.9"), 150*sec); ok {
		t.Error("unknown address resolved")
	}
	if _, ok := r.Lookup(netip.MustParseAddr("::ffff:10.244.0.5"), 150*sec); !ok {
		t.Error("v4-mapped address not resolved")
	}
	var nilRes *Resolver
	if _, ok := nilRes.Lookup(ip, 0); ok {
		t.Error("nil resolver resolved")
	}
}

func TestProgressLine(t *testing.T) {
	p := &Progress{}
	p.SetSize(1000)
	im := &Importer{Parser: parserFor(t, "nginx", Options{}), Progress: p}
	if _, err := im.Import(context.Background(), "a.log", strings.NewReader(goodNginx)); err != nil {
		t.Fatal(err)
	}
	line := p.Line(200)
	if !strings.HasPrefix(line, "a.log [") || !strings.Contains(line, "3 lines") || !strings.Contains(line, "2 failed") {
		t.Errorf("progress line %q", line)
	}
	if n := len(p.Line(30)); n != 30 {
		t.Errorf("line not cut to width: %d", n)
	}
	var out bytes.Buffer
	stop := ShowProgress(&out, p, 80, time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	stop()
	if !strings.Contains(out.String(), "a.log") || !strings.HasSuffix(out.String(), "\r\x1b[K") {
		t.Errorf("progress output %q", out.String())
	}
}
