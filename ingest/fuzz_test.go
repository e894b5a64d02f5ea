package ingest

// One fuzz test per parser. In CI each runs for a bounded time, one at a
// time (go test allows one -fuzz target per run):
//
//	for f in $(go test ./ingest -list '^Fuzz' | grep ^Fuzz); do
//		go test ./ingest -run '^$' -fuzz "^$f\$" -fuzztime 10s || exit 1
//	done
//
// Without -fuzz, go test runs each against its seeds only.

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/drainscope/drainscope/event"
)

// checkParse runs parse over data and checks what any parser must hold for
// any input: no panic, lines numbered upward from 1, every rejection naming
// a line and a field, every failure making a valid event.
func checkParse(t *testing.T, parse Parser, data []byte) {
	conv := newConverter(NewResolver())
	last := 0
	err := parse(bytes.NewReader(data), func(r *Record) error {
		if r.Line < 1 || r.Line < last {
			t.Fatalf("line %d after line %d", r.Line, last)
		}
		last = r.Line
		if r.Err != nil {
			if r.Err.Line != r.Line || r.Err.Field == "" || r.Err.Msg == "" {
				t.Fatalf("rejection without line or field: %#v", r.Err)
			}
			if !strings.Contains(r.Err.Error(), "field "+r.Err.Field) {
				t.Fatalf("message %q does not name its field", r.Err.Error())
			}
			return nil
		}
		if r.Time <= 0 {
			t.Fatalf("record with time %d", r.Time)
		}
		if r.Status < 0 || r.Status > 999 {
			t.Fatalf("status %d", r.Status)
		}
		if !r.Failed {
			return nil
		}
		if r.Kind == event.ProxyState {
			checkProxyState(t, conv, r)
			return nil
		}
		if r.Kind != "" {
			checkDataplaneRecord(t, conv, r)
			return nil
		}
		if !validReason(r.Reason) {
			t.Fatalf("failure with reason %q", r.Reason)
		}
		// A NUL, raw or escaped, rejects its line: no record carries one.
		texts := []string{r.Target, r.Error, r.Backend, r.Service}
		for k, v := range r.Attrs {
			texts = append(texts, k, v)
		}
		for _, s := range texts {
			if strings.IndexByte(s, 0) >= 0 {
				t.Fatalf("failure with a NUL in %q", s)
			}
		}
		e, lerr := conv.event(r)
		if lerr != nil {
			t.Fatalf("failure makes an invalid event: %v", lerr)
		}
		if e.Kind != event.ClientFailure || e.Source != event.SourceClient || e.ID == 0 {
			t.Fatalf("event %+v", e)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("parse returned %v for an in-memory input", err)
	}
}

// checkDataplaneRecord checks a proxy endpoint change: a valid event of a
// dataplane kind, naming an endpoint and its proxy.
func checkDataplaneRecord(t *testing.T, conv *converter, r *Record) {
	e, lerr := conv.event(r)
	if lerr != nil {
		t.Fatalf("change makes an invalid event: %v", lerr)
	}
	if !e.Kind.IsDataplane() || e.Source != event.SourceDataplane || e.Node == "" || !e.Local.IsValid() || e.Service == "" {
		t.Fatalf("event %+v", e)
	}
}

// checkProxyState checks a mesh proxy's state: a valid event naming the
// pod and container its log is of.
func checkProxyState(t *testing.T, conv *converter, r *Record) {
	e, lerr := conv.event(r)
	if lerr != nil {
		t.Fatalf("proxy state makes an invalid event: %v", lerr)
	}
	if e.Source != event.SourceClient || e.Pod.Namespace == "" || e.Pod.Name == "" || e.Pod.Container == "" || e.Reason == "" {
		t.Fatalf("event %+v", e)
	}
}

func fuzzParser(f *testing.F, format string, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
		f.Add([]byte("\ufeff" + s)) // a UTF-8 byte order mark, as Windows tools write
	}
	if s, ok := goodLines[format]; ok {
		f.Add([]byte("\ufeff" + s))
		// A damaged line between good ones, and a garbage first line.
		f.Add([]byte(s + "\x01\x02\x03\x04\x05\x06\x07\x08\x0e\x0f\x10\x11\n" + s))
		f.Add([]byte("\x01\x00\x00\x02garbage\n" + s))
	}
	for _, c := range badInputs {
		if c.format == format {
			f.Add([]byte(c.input))
		}
	}
	f.Add([]byte{})
	f.Add([]byte("\n\n\r\n"))
	f.Add([]byte("\x00\x01\x02binary"))
	f.Add([]byte("\xff\xfe{\x00\"\x00"))  // UTF-16
	f.Add([]byte("\ufeff\ufeff\n\ufeff")) // more than one mark
	f.Add([]byte("\"open quote, \"\n\"\"\"\n,\",\n"))
	parse, err := mustFormat(format).Parser(formatOptions(format))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkParse(t, parse, data) })
}

func mustFormat(name string) Format {
	f, err := LookupFormat(name)
	if err != nil {
		panic(err)
	}
	return f
}

func FuzzVegetaJSON(f *testing.F) {
	readSample(f, "vegeta.jsonl")
	fuzzParser(f, "vegeta-json",
		`{"code":0,"timestamp":"2026-03-01T09:00:01Z","latency":2500000,"error":"Get \"http://10.1.2.3:8080/x\": dial tcp 10.1.2.3:8080: connect: connection refused","url":"http://10.1.2.3:8080/x"}`,
		`{"code":503,"timestamp":"2026-03-01T09:00:01+14:00","latency":-1}`,
		`{"code":70000,"timestamp":"9999-03-01T09:00:01Z","latency":9223372036854775807}`,
		`{"code":0,"timestamp":"2026-03-01T09:00:00Z\u0000","latency":1,"error":"EOF\u0000","url":"`+"\xff"+`"}`)
}

func FuzzVegetaCSV(f *testing.F) {
	readSample(f, "vegeta.csv")
	fuzzParser(f, "vegeta-csv",
		"1772355601000000000,0,5000,0,0,\"read tcp 10.0.0.9:5555->10.1.2.3:8080: read: connection reset by peer\",,a,1,GET,http://10.1.2.3:8080/x,\n",
		"1772355602000000000,0,5000,0,0,EOF,\n",
		"9223372036854775807,0,9223372036854775807,0,0,EOF,\n\"unterminated",
		"1772355600000000000,0,1,0,0,\"dial tcp: connection refused,,a,0,GET,http://x/,\n1772355601000000000,503,1,0,0,,,a,1,GET,http://x/,\n",
		"1772355600000000000,0,1,0,0,\"a\"\"b\"x,\n1772355600000000000,0,1,0,0,a\"b,\n")
}

func FuzzNginx(f *testing.F) {
	readSample(f, "nginx_access.log")
	fuzzParser(f, "nginx", goodNginx,
		`10.0.0.9 - - [10/Oct/2025:13:55:39 +0200] "GET /r HTTP/1.1" 503 0 "-" "curl/8.5" 10.244.0.5:8080 : 10.244.0.7:80 504 : 503 1.000`+"\n",
		`10.0.0.9 - - [31/Dec/1969:23:59:59 +0000] "GET / HTTP/1.1" 502 0 "-" "-" - - -`+"\n")
}

// FuzzNginxLogFormat fuzzes the log_format compiler together with the
// parser it builds: any format that compiles must parse any line safely.
func FuzzNginxLogFormat(f *testing.F) {
	f.Add(DefaultNginxFormat, []byte(goodNginx))
	f.Add(customNginxFormat, []byte(`{"t":"1760097337.123","s":"502","up":"127.0.0.3:8080","ups":"502","c":"127.0.0.1:4000","rt":"0.000","req":"GET / HTTP/1.1","host":"x"}`+"\n"))
	f.Add(`$msec $status "$upstream_addr" $remote_addr:$remote_port rt=$request_time "$request" $host`,
		[]byte(`1760097337.123 502 "10.244.0.5:8080, 10.244.0.6:80" 10.0.0.9:41234 rt=0.010 "GET /a HTTP/1.1" shop`+"\n"))
	f.Add(`[${time_local}] ${status} ${server_addr}:${server_port} ${upstream_addr}`, []byte("[10/Oct/2025:13:55:37 +0000] 500 10.96.0.10:80 10.244.0.5:8080\n"))
	f.Add(`$time_iso8601 $status`, []byte("2025-10-10T13:55:37+02:00 500\n"))
	f.Fuzz(func(t *testing.T, format string, data []byte) {
		nf, err := CompileNginx(format)
		if err != nil {
			return
		}
		checkParse(t, func(r io.Reader, emit Emit) error { return nf.Parse(r, Options{}, emit) }, data)
	})
}

func FuzzEnvoy(f *testing.F) {
	fuzzParser(f, "envoy",
		`[2026-03-01T09:00:01.000Z] "GET /a HTTP/1.1" 503 UF,URX 0 91 25 - "10.0.0.9" "curl/8.5" "id-2" "web" "10.244.0.6:8080"`+"\n",
		`[2026-03-01T09:00:04.000Z] "GET /d HTTP/1.1" 503 UF upstream_reset_before_response_started{connection_failure} - "delayed_connect_error:_Connection_refused" 0 91 3 - "-" "curl/8.5" "id-5" "web" "10.244.0.7:8080" outbound|80||web.default.svc.cluster.local 10.244.0.1:40000 10.96.0.10:80 10.0.0.9:55555 - default`+"\n",
		`[2026-03-01T09:00:03.000Z] "GET /c HTTP/1.1" 0 DC 0 0 1 - "-" "curl/8.5" "id-4" "web" "-"`+"\n")
}

func FuzzEnvoyJSON(f *testing.F) {
	fuzzParser(f, "envoy-json",
		`{"start_time":"2026-03-01T09:00:01.000Z","method":"GET","path":"/a","response_code":503,"response_flags":"UF,URX","duration":25,"upstream_host":"10.244.0.6:8080","authority":"web","downstream_remote_address":"10.0.0.9:5555"}`+"\n",
		`{"timestamp":"2026-03-01T09:00:03.000Z","status":"0","flags":"UC","duration":"1.5"}`+"\n",
		`{"start_time":"2026-03-01T09:00:00Z","response_code":503,"upstream_host":"\u0000","duration":1e300}`+"\n")
}

func FuzzEnvoyClusters(f *testing.F) {
	readSample(f, "envoy_clusters.log")
	fuzzParser(f, "envoy-clusters",
		"# 2026-03-01T09:00:00Z\na::10.0.0.1:80::health_flags::healthy\n# 1772355601.5\na::[fd00::1]:80::health_flags::/failed_active_hc\n",
		"# 1772355600\na::[::]:0::health_flags::healthy\n# 9999999999999\n#\n# -1\na::[fd00::1::x\n[::1]:80::health_flags::healthy\n# 1772355601\n")
}

func FuzzIstioProxy(f *testing.F) {
	readSample(f, "istio_proxy.log")
	fuzzParser(f, "istio-proxy",
		"2026-03-01T09:00:12Z\tinfo\tThere are still 99999999999999999999 active connections\n",
		"0001-01-01T00:00:00Z\twarn\tAborting proxy\n2026-03-01T09:00:12Z 2026-03-01T09:00:12Z\tinfo\tAgent draining Proxy\n")
}

func FuzzLinkerdProxy(f *testing.F) {
	readSample(f, "linkerd_proxy.log")
	fuzzParser(f, "linkerd-proxy",
		"[    70.003401s]  INFO ThreadId(01) linkerd2_proxy::signal: received SIGTERM, starting shutdown\n")
}

func FuzzJSONLines(f *testing.F) {
	fuzzParser(f, "jsonl",
		`{"time_ns":1772355601123456789,"target":"http://web/","error":"RemoteDisconnected","client":"10.0.0.9:5555","backend":"10.244.0.5:8080","duration_ms":12.5}`+"\n",
		`{"time":"2026-03-01T09:00:00.25Z","status":503,"reason":"refused","service":"web"}`+"\n",
		`{"time_s":"1772355603.5","error":"boom","remote":"[fd00::1]:80"}`+"\n",
		`{"time":"2026-03-01T09:00:00Z","status":503,"target":"a\u0000","error":"\ud800\udfff`+"\xff\xc3"+`"}`+"\n",
		`{"time_ns":-1,"time_ms":1e400,"status":NaN,"duration_ms":-0.5}`+"\n",
		`{"time":"0001-01-01T00:00:00Z","status":503}`+"\n"+`{"time":"2262-04-12T00:00:00Z","status":503}`+"\n")
}

func FuzzCSV(f *testing.F) {
	fuzzParser(f, "csv",
		"time,target,error,status,backend,duration_ms\n2026-03-01T09:00:01Z,http://web/,\"connection reset by peer\",,10.244.0.5:8080,12.5\n",
		"time_ms,status\n1772355602000,503\n1772355602001,200\n",
		"time,time\nx,y\n",
		"time,status,error\n2026-03-01T09:00:00Z,0,\"connection reset\n2026-03-01T09:00:01Z,503,ok\n",
		"\ufefftime,\"status\"\n2026-03-01T09:00:00Z,\"503\"\"\"\n2026-03-01T09:00:00Z,503\n",
		"\"time\nstatus\"\n")
}
