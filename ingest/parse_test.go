package ingest

import (
	"io"
	"maps"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

type parseFunc func(io.Reader, Options, Emit) error

// collect runs a parser and returns copies of its parsed records and its
// rejections.
func collect(t testing.TB, parse parseFunc, input string, opts Options) (recs []Record, bad []*LineError) {
	t.Helper()
	err := parse(strings.NewReader(input), opts, func(r *Record) error {
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
		t.Fatalf("parse: %v", err)
	}
	return recs, bad
}

func mustTime(t testing.TB, s string) int64 {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixNano()
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func TestVegetaJSON(t *testing.T) {
	in := `{"attack":"a","seq":0,"code":200,"timestamp":"2026-03-01T10:00:00.5+01:00","latency":1000000,"bytes_out":0,"bytes_in":2,"error":"","body":"b2s=","method":"GET","url":"http://10.1.2.3:8080/x","headers":{"Content-Type":["text/plain"]}}
{"attack":"a","seq":1,"code":0,"timestamp":"2026-03-01T09:00:01Z","latency":2500000,"bytes_out":0,"bytes_in":0,"error":"Get \"http://10.1.2.3:8080/x\": dial tcp 10.1.2.3:8080: connect: connection refused","body":null,"method":"GET","url":"http://10.1.2.3:8080/x","headers":null}
{"attack":"a","seq":2,"code":503,"timestamp":"2026-03-01T09:00:02Z","latency":100,"bytes_out":0,"bytes_in":0,"error":"503 Service Unavailable","body":null,"method":"GET","url":"https://[fd00::1]/y","headers":null}

{"attack":"a","seq":3,"code":404,"timestamp":"2026-03-01T09:00:03Z","latency":100,"error":"404 Not Found","url":"http://x/"}
`
	recs, bad := collect(t, ParseVegetaJSON, in, Options{})
	if len(bad) != 0 {
		t.Fatalf("rejected: %v", bad)
	}
	if len(recs) != 4 {
		t.Fatalf("got %d records, want 4", len(recs))
	}
	if recs[0].Failed || recs[3].Failed {
		t.Errorf("200 and 404 should not be failures: %+v %+v", recs[0], recs[3])
	}
	if got, want := recs[0].Time, mustTime(t, "2026-03-01T09:00:00.501Z"); got != want {
		t.Errorf("time = %v, want the end of the request %v", time.Unix(0, got).UTC(), time.Unix(0, want).UTC())
	}
	r := recs[1]
	if !r.Failed || r.Reason != event.FailRefused || r.Status != 0 || r.Remote != ap("10.1.2.3:8080") ||
		r.Target != "http://10.1.2.3:8080/x" || r.Duration != 2500*time.Microsecond || r.Line != 2 {
		t.Errorf("refused record = %+v", r)
	}
	if r.Attrs[AttrSeq] != "1" || r.Attrs[AttrAttack] != "a" || r.Attrs[AttrMethod] != "GET" {
		t.Errorf("attrs = %v", r.Attrs)
	}
	r = recs[2]
	if !r.Failed || r.Reason != event.FailStatus || r.Status != 503 || r.Remote != ap("[fd00::1]:443") || r.Line != 3 {
		t.Errorf("503 record = %+v", r)
	}
	if recs[3].Line != 5 {
		t.Errorf("blank line should still count: line = %d, want 5", recs[3].Line)
	}
}

func TestVegetaCSV(t *testing.T) {
	in := "1772355600000000000,200,1000,0,2,,b2s=,a,0,GET,http://10.1.2.3:8080/x,\n" +
		"1772355601000000000,0,5000,0,0,\"Get \"\"http://10.1.2.3:8080/x\"\": read tcp 10.0.0.9:5555->10.1.2.3:8080: read: connection reset by peer\",,a,1,GET,http://10.1.2.3:8080/x,\n" +
		// vegeta before the attack/seq/method/url columns
		"1772355602000000000,0,5000,0,0,EOF,\n"
	recs, bad := collect(t, ParseVegetaCSV, in, Options{})
	if len(bad) != 0 {
		t.Fatalf("rejected: %v", bad)
	}
	if len(recs) != 3 || recs[0].Failed || !recs[1].Failed || !recs[2].Failed {
		t.Fatalf("records = %+v", recs)
	}
	if recs[1].Reason != event.FailReset || recs[1].Time != 1772355601000005000 || recs[1].Line != 2 || recs[1].Client != ap("10.0.0.9:5555") {
		t.Errorf("reset record = %+v", recs[1])
	}
	if recs[2].Reason != event.FailEOF || recs[2].Target != "" {
		t.Errorf("eof record = %+v", recs[2])
	}
}

func TestNginxDefault(t *testing.T) {
	in := `10.0.0.9 - - [10/Oct/2025:13:55:36 +0200] "GET /ok HTTP/1.1" 200 12 "-" "curl/8.5" 10.244.0.5:8080 200 0.003
10.0.0.9 - alice [10/Oct/2025:13:55:37 +0200] "POST /pay?id=1 HTTP/1.1" 502 157 "https://shop/" "Mozilla/5.0 (X11; Linux)" 10.244.0.5:8080, 10.244.0.6:8080 502, 502 0.120
10.0.0.9 - - [10/Oct/2025:13:55:38 +0200] "GET /old HTTP/1.1" 504 0 "-" "curl/8.5"
10.0.0.9 - - [10/Oct/2025:13:55:39 +0200] "GET /r HTTP/1.1" 503 0 "-" "curl/8.5" 10.244.0.5:8080 : 10.244.0.7:80 504 : 503 1.000
`
	recs, bad := collect(t, ParseNginx, in, Options{})
	if len(bad) != 0 {
		t.Fatalf("rejected: %v", bad)
	}
	if len(recs) != 4 || recs[0].Failed {
		t.Fatalf("records = %+v", recs)
	}
	r := recs[1]
	if !r.Failed || r.Status != 502 || r.Reason != event.FailStatus || r.Backend != "10.244.0.6:8080" ||
		r.Attrs[AttrUpstreams] != "10.244.0.5:8080, 10.244.0.6:8080" || r.Attrs[AttrUpstreamStatus] != "502, 502" ||
		r.Duration != 120*time.Millisecond || r.Client != ap("10.0.0.9:0") || r.Target != "/pay?id=1" || r.Attrs[AttrMethod] != "POST" {
		t.Errorf("502 record = %+v", r)
	}
	if got, want := r.Time, mustTime(t, "2025-10-10T11:55:37Z"); got != want {
		t.Errorf("time = %d, want %d", got, want)
	}
	if r := recs[2]; !r.Failed || r.Backend != "" || r.Status != 504 {
		t.Errorf("plain combined line = %+v", r)
	}
	if r := recs[3]; r.Backend != "10.244.0.7:80" || r.Attrs[AttrUpstreamStatus] != "504 : 503" {
		t.Errorf("internal redirect line = %+v", r)
	}
}

func TestNginxLogFormat(t *testing.T) {
	cases := []struct {
		name, format, line string
		want               Record
	}{
		{
			name:   "msec and quoted upstream",
			format: `$msec $status "$upstream_addr" $remote_addr:$remote_port rt=$request_time "$request" $host`,
			line:   `1760097337.123 502 "10.244.0.5:8080" 10.0.0.9:41234 rt=0.010 "GET /a HTTP/1.1" shop.example`,
			want: Record{Time: 1760097337123000000, Status: 502, Backend: "10.244.0.5:8080", Client: ap("10.0.0.9:41234"),
				Duration: 10 * time.Millisecond, Target: "shop.example/a"},
		},
		{
			name:   "directive as in nginx.conf, escape=json",
			format: `log_format j escape=json '{"t":"$time_iso8601","s":$status,' '"u":"$upstream_addr","ua":"$http_user_agent","ra":"$remote_addr"}';`,
			line:   `{"t":"2025-10-10T13:55:37+02:00","s":503,"u":"10.244.0.5:8080","ua":"say \"hi\"","ra":"10.0.0.9"}`,
			want:   Record{Time: mustTime(t, "2025-10-10T11:55:37Z"), Status: 503, Backend: "10.244.0.5:8080", Client: ap("10.0.0.9:0")},
		},
		{
			name:   "braced variables, server address",
			format: `[${time_local}] ${status} ${server_addr}:${server_port} ${upstream_addr}`,
			line:   `[10/Oct/2025:13:55:37 +0000] 500 10.96.0.10:80 10.244.0.5:8080`,
			want:   Record{Time: mustTime(t, "2025-10-10T13:55:37Z"), Status: 500, Backend: "10.244.0.5:8080", Remote: ap("10.96.0.10:80")},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := CompileNginx(c.format)
			if err != nil {
				t.Fatal(err)
			}
			recs, bad := collect(t, f.Parse, c.line+"\n", Options{})
			if len(bad) != 0 {
				t.Fatalf("rejected: %v", bad[0])
			}
			r := recs[0]
			w := c.want
			if r.Time != w.Time || r.Status != w.Status || r.Backend != w.Backend || r.Client != w.Client ||
				r.Remote != w.Remote || r.Duration != w.Duration || (w.Target != "" && r.Target != w.Target) {
				t.Errorf("got  %+v\nwant %+v", r, w)
			}
		})
	}
}

func TestCompileNginxErrors(t *testing.T) {
	for _, f := range []string{
		``,
		`$status $request`,                        // no time
		`[$time_local] $request`,                  // no status
		`$time_iso8601$status`,                    // nothing between
		`[$time_local] $status $`,                 // dangling $
		`log_format main '$time_local $status`,    // unclosed quote
		`'$time_local $status' junk`,              // text outside quotes
		`[$time_local] $status ${upstream_addr`,   // unclosed brace
		`[$time_local] $status ${}`,               // empty braces
		`log_format main`,                         // no format
		`log_format main escape=json`,             // parameters only
		`[$time_local] $status $request $request`, // fine: duplicates are allowed
	} {
		_, err := CompileNginx(f)
		if (err == nil) != strings.HasSuffix(f, "$request $request") {
			t.Errorf("CompileNginx(%q) error = %v", f, err)
		}
	}
}

func TestEnvoy(t *testing.T) {
	in := `[2026-03-01T09:00:00.100Z] "GET /ok HTTP/1.1" 200 - 0 2 3 2 "-" "curl/8.5" "id-1" "web" "10.244.0.5:8080"
[2026-03-01T09:00:01.000Z] "GET /a HTTP/1.1" 503 UF,URX 0 91 25 - "10.0.0.9" "curl/8.5" "id-2" "web" "10.244.0.6:8080"
[2026-03-01T09:00:02.000Z] "GET /b HTTP/1.1" 503 UC 0 95 7 - "-" "curl/8.5 (x; y)" "id-3" "web" "10.244.0.6:8080"
[2026-03-01T09:00:03.000Z] "GET /c HTTP/1.1" 0 DC 0 0 1 - "-" "curl/8.5" "id-4" "web" "10.244.0.6:8080"
[2026-03-01T09:00:04.000Z] "GET /d HTTP/1.1" 503 UF upstream_reset_before_response_started{connection_failure,delayed_connect_error:_Connection_refused} - "delayed_connect_error:_Connection_refused" 0 91 3 - "-" "curl/8.5" "id-5" "web" "10.244.0.7:8080" outbound|80||web.default.svc.cluster.local 10.244.0.1:40000 10.96.0.10:80 10.0.0.9:55555 - default
[2026-03-01T09:00:05.000Z] "GET /e HTTP/1.1" 503 UC upstream_reset_before_response_started{connection_termination} - "-" 0 95 4 - "-" "curl/8.5" "id-6" "web" "10.244.0.7:8080" outbound|80||web.default.svc.cluster.local 10.244.0.1:40002 10.96.0.10:80 10.0.0.9:55556 - default
[2026-03-01T09:00:06.000Z] "GET /f HTTP/1.1" 504 UT 0 24 15000 - "-" "curl/8.5" "id-7" "web" "10.244.0.7:8080" outbound|80||web.default.svc.cluster.local 10.244.0.1:40004 10.96.0.10:80 10.0.0.9:55557 - default
`
	recs, bad := collect(t, ParseEnvoy, in, Options{})
	if len(bad) != 0 {
		t.Fatalf("rejected: %v", bad)
	}
	want := []struct {
		failed  bool
		reason  string
		backend string
	}{
		{false, "", ""},
		{true, event.FailRefused, "10.244.0.6:8080"},
		{true, event.FailEOF, "10.244.0.6:8080"},
		{false, "", ""}, // the client went away
		{true, event.FailRefused, "10.244.0.7:8080"},
		{true, event.FailEOF, "10.244.0.7:8080"},
		{true, event.FailTimeout, "10.244.0.7:8080"},
	}
	if len(recs) != len(want) {
		t.Fatalf("got %d records, want %d", len(recs), len(want))
	}
	for i, w := range want {
		r := recs[i]
		if r.Failed != w.failed || r.Reason != w.reason || (w.failed && r.Backend != w.backend) {
			t.Errorf("line %d: failed=%v reason=%q backend=%q, want %v %q %q", i+1, r.Failed, r.Reason, r.Backend, w.failed, w.reason, w.backend)
		}
	}
	if r := recs[1]; r.Time != mustTime(t, "2026-03-01T09:00:01.025Z") || r.Client != ap("10.0.0.9:0") || r.Attrs[AttrResponseFlags] != "UF,URX" {
		t.Errorf("default-format failure = %+v", r)
	}
	if r := recs[4]; r.Client != ap("10.0.0.9:55555") || r.Remote != ap("10.96.0.10:80") || r.Target != "web/d" ||
		r.Attrs[AttrUpstreamClstr] != "outbound|80||web.default.svc.cluster.local" || !strings.Contains(r.Attrs[AttrDetails], "Connection_refused") {
		t.Errorf("istio-format failure = %+v", r)
	}
}

func TestEnvoyJSON(t *testing.T) {
	in := `{"start_time":"2026-03-01T09:00:01.000Z","method":"GET","path":"/a","response_code":503,"response_flags":"UF,URX","duration":25,"upstream_host":"10.244.0.6:8080","authority":"web","downstream_remote_address":"10.0.0.9:5555","response_code_details":"upstream_reset_before_response_started{connection_failure}"}
{"start_time":"2026-03-01T09:00:02.000Z","response_code":"200","response_flags":"-","duration":"3","upstream_host":"10.244.0.6:8080"}
{"timestamp":"2026-03-01T09:00:03.000Z","status":500,"flags":null,"duration":1,"upstream_host":"10.244.0.6:8080"}
`
	recs, bad := collect(t, ParseEnvoyJSON, in, Options{})
	if len(bad) != 0 {
		t.Fatalf("rejected: %v", bad)
	}
	if len(recs) != 3 || !recs[0].Failed || recs[1].Failed || !recs[2].Failed {
		t.Fatalf("records = %+v", recs)
	}
	if r := recs[0]; r.Reason != event.FailRefused || r.Client != ap("10.0.0.9:5555") || r.Duration != 25*time.Millisecond || r.Target != "web/a" {
		t.Errorf("record = %+v", r)
	}
	if recs[2].Reason != event.FailStatus {
		t.Errorf("500 reason = %q", recs[2].Reason)
	}
}

func TestGeneric(t *testing.T) {
	jsonl := `{"time":"2026-03-01T09:00:00.25Z","target":"http://web/","status":200}
{"time_ns":1772355601123456789,"target":"http://web/","error":"('Connection aborted.', RemoteDisconnected('Remote end closed connection without response'))","client":"10.0.0.9:5555","backend":"10.244.0.5:8080","duration_ms":12.5}
{"time_ms":"1772355602000","target":"http://web/","status":"503"}
{"time_s":1772355603.5,"error":"boom","reason":"reset","service":"web"}
`
	recs, bad := collect(t, ParseJSONLines, jsonl, Options{})
	if len(bad) != 0 {
		t.Fatalf("rejected: %v", bad)
	}
	csvIn := "Time,Target,Error,Status,backend,duration_ms\n" +
		"2026-03-01T09:00:00.25Z,http://web/,,200,,\n" +
		"2026-03-01T09:00:01.123456789Z,http://web/,\"read: connection reset by peer\",,10.244.0.5:8080,12.5\n" +
		"2026-03-01T10:00:02+01:00,http://web/,,503,,\n"
	crecs, cbad := collect(t, ParseCSV, csvIn, Options{})
	if len(cbad) != 0 {
		t.Fatalf("csv rejected: %v", cbad)
	}
	if len(recs) != 4 || len(crecs) != 3 {
		t.Fatalf("records: jsonl %d, csv %d", len(recs), len(crecs))
	}
	if recs[0].Failed || crecs[0].Failed {
		t.Error("200 counted as failure")
	}
	if r := recs[1]; r.Time != 1772355601123456789 || r.Reason != event.FailEOF || r.Backend != "10.244.0.5:8080" ||
		r.Duration != 12500*time.Microsecond || r.Client != ap("10.0.0.9:5555") {
		t.Errorf("jsonl failure = %+v", r)
	}
	if r := recs[2]; r.Time != 1772355602000000000 || r.Reason != event.FailStatus || r.Status != 503 {
		t.Errorf("jsonl 503 = %+v", r)
	}
	if r := recs[3]; r.Time != 1772355603500000000 || r.Reason != event.FailReset || r.Service != "web" {
		t.Errorf("jsonl explicit reason = %+v", r)
	}
	if r := crecs[1]; r.Reason != event.FailReset || r.Time != 1772355601123456789 || r.Line != 3 {
		t.Errorf("csv failure = %+v", r)
	}
	if r := crecs[2]; r.Time != mustTime(t, "2026-03-01T09:00:02Z") || r.Status != 503 {
		t.Errorf("csv 503 = %+v", r)
	}
}

func TestGenericRejects(t *testing.T) {
	for _, c := range []struct{ line, field string }{
		{`{"time":1772355601,"status":500}`, "time"},                          // unit not named
		{`{"time":"2026-03-01T09:00:00","status":500}`, "time"},               // no zone
		{`{"time":"2026-03-01 09:00:00Z","status":500}`, "time"},              // not RFC 3339
		{`{"time_ms":"soon","status":500}`, "time_ms"},                        // not a number
		{`{"status":500}`, "time"},                                            // no time
		{`{"time":"2026-03-01T09:00:00Z","time_ns":1,"status":1}`, "time_ns"}, // two times
		{`{"time":"2026-03-01T09:00:00Z"}`, "status"},                         // neither status nor error
		{`{"time":"2026-03-01T09:00:00Z","status":"abc"}`, "status"},
		{`{"time":"2026-03-01T09:00:00Z","error":"x","reason":"meh"}`, "reason"},
		{`{"time":"2026-03-01T09:00:00Z","error":"x","client":"pod-a"}`, "client"},
		{`{"time":"2026-03-01T09:00:00Z","error":"x","duration_ms":"long"}`, "duration_ms"},
		{`{"time":"2026-03-01T09:00:00Z","error":{"a":1}}`, "error"},
		{`{"time":"2026-03-01T09:00:00Z","status":`, "status"}, // truncated
		{`[1,2]`, FieldLine},
		{`{"time":"1969-12-31T23:59:59Z","status":500}`, "time"},
	} {
		_, bad := collect(t, ParseJSONLines, c.line+"\n", Options{})
		if len(bad) != 1 || bad[0].Field != c.field || bad[0].Line != 1 {
			t.Errorf("%s: rejections %v, want one on field %s", c.line, bad, c.field)
		}
	}
}

func TestTimeLocal(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
	}{
		{"10/Oct/2000:13:55:36 -0700", "2000-10-10T20:55:36Z"},
		{"29/Feb/2024:00:00:00 +0530", "2024-02-28T18:30:00Z"},
		{"31/Dec/2025:23:59:59 +0000", "2025-12-31T23:59:59Z"},
	} {
		got, err := parseTimeLocal([]byte(c.in))
		if err != nil || got != mustTime(t, c.want) {
			t.Errorf("parseTimeLocal(%q) = %v, %v; want %s", c.in, time.Unix(0, got).UTC(), err, c.want)
		}
	}
	for _, in := range []string{"30/Feb/2024:00:00:00 +0000", "10/Foo/2000:13:55:36 -0700", "10/Oct/2000:25:55:36 -0700",
		"10/Oct/2000:13:55:36 0700x", "10/Oct/2000T13:55:36 -0700", "1/Oct/2000:13:55:36 -0700"} {
		if _, err := parseTimeLocal([]byte(in)); err == nil {
			t.Errorf("parseTimeLocal(%q) accepted", in)
		}
	}
}

func TestClassify(t *testing.T) {
	for msg, want := range map[string]string{
		`Get "http://10.0.0.1/": dial tcp 10.0.0.1:80: connect: connection refused`: event.FailRefused,
		`Get "http://10.0.0.1/": EOF`:                                                                                                       event.FailEOF,
		`Get "http://10.0.0.1/": unexpected EOF`:                                                                                            event.FailEOF,
		`read tcp 10.0.0.2:4000->10.0.0.1:80: read: connection reset by peer`:                                                               event.FailReset,
		`('Connection aborted.', RemoteDisconnected('Remote end closed connection without response'))`:                                      event.FailEOF,
		`('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))`:                                                    event.FailReset,
		`HTTPConnectionPool(host='web', port=80): Max retries exceeded (Caused by NewConnectionError(... [Errno 111] Connection refused'))`: event.FailRefused,
		`net/http: request canceled (Client.Timeout exceeded while awaiting headers)`:                                                       event.FailTimeout,
		`context deadline exceeded`:                                                                                                         event.FailTimeout,
		`curl: (52) Empty reply from server`:                                                                                                event.FailEOF,
		`write: broken pipe`:                                                                                                                event.FailReset,
		`geofence lookup failed`:                                                                                                            event.FailOther,
		``:                                                                                                                                  event.FailOther,
		`http: server closed idle connection`:                                                                                               event.FailEOF,
		`OSError: [Errno 113] No route to host`:                                                                                             event.FailTimeout,
		`Get "http://10.96.0.5/": dial tcp 10.96.0.5:80: connect: no route to host`:                                                         event.FailTimeout,
		`curl: (7) Failed to connect to 10.96.0.5 port 80 after 3071 ms: Couldn't connect to server`:                                        event.FailOther,
		`java.net.NoRouteToHostException: Host is unreachable`:                                                                              event.FailTimeout,
		`connect: network is unreachable`:                                                                                                   event.FailTimeout,
	} {
		if got := Classify(msg); got != want {
			t.Errorf("Classify(%q) = %q, want %q", msg, got, want)
		}
	}
}

func TestCodeSet(t *testing.T) {
	s, err := ParseCodeSet("500-599, 429")
	if err != nil {
		t.Fatal(err)
	}
	for c, want := range map[int]bool{429: true, 500: true, 599: true, 404: false, 600: false, -1: false, 1000: false} {
		if s.Has(c) != want {
			t.Errorf("Has(%d) = %v", c, !want)
		}
	}
	for _, bad := range []string{"", "5xx", "600-500", "99", "500-1000", ","} {
		if _, err := ParseCodeSet(bad); err == nil {
			t.Errorf("ParseCodeSet(%q) accepted", bad)
		}
	}
	recs, _ := collect(t, ParseVegetaJSON, `{"code":429,"timestamp":"2026-03-01T09:00:00Z","latency":1,"error":"429 Too Many Requests"}`+"\n", Options{FailStatus: s})
	if !recs[0].Failed {
		t.Error("429 not a failure with 429 in the set")
	}
}

func TestLongLine(t *testing.T) {
	long := `{"time":"2026-03-01T09:00:00Z","error":"` + strings.Repeat("x", MaxLineBytes) + `"}`
	in := long + "\n" + `{"time":"2026-03-01T09:00:01Z","error":"EOF"}` + "\n"
	recs, bad := collect(t, ParseJSONLines, in, Options{})
	if len(bad) != 1 || bad[0].Line != 1 || bad[0].Field != FieldLine || !strings.Contains(bad[0].Msg, "longer than") {
		t.Fatalf("rejections = %v", bad)
	}
	if len(recs) != 1 || recs[0].Line != 2 {
		t.Fatalf("records after the long line = %+v", recs)
	}
}

func TestCRLFAndNoFinalNewline(t *testing.T) {
	in := "{\"time\":\"2026-03-01T09:00:00Z\",\"error\":\"EOF\"}\r\n{\"time\":\"2026-03-01T09:00:01Z\",\"error\":\"EOF\"}"
	recs, bad := collect(t, ParseJSONLines, in, Options{})
	if len(bad) != 0 || len(recs) != 2 || recs[1].Line != 2 {
		t.Fatalf("records %+v, rejections %v", recs, bad)
	}
}

// A request's end must lie in the years every time must lie in; a duration
// that overflows or passes 2261 is an error naming the duration's field.
func TestEndTime(t *testing.T) {
	start := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC).UnixNano()
	if end, err := endTime(start, int64(time.Second), "latency"); err != nil || end != start+int64(time.Second) {
		t.Errorf("one second: %d, %v", end, err)
	}
	late := time.Date(2261, 12, 31, 12, 0, 0, 0, time.UTC).UnixNano()
	for _, tc := range []struct {
		start, d int64
	}{
		{start, -1},
		{start, 9_200_000_000_000_000_000},
		{late, int64(24 * time.Hour)},
	} {
		if _, err := endTime(tc.start, tc.d, "latency"); err == nil || err.Field != "latency" {
			t.Errorf("start %d + %d ns: %v, want an error on field latency", tc.start, tc.d, err)
		}
	}
}
