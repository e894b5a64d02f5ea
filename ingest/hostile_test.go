package ingest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/csv"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// goodLines holds, per format, a valid input of two failures.
var goodLines = map[string]string{
	"vegeta-json": `{"code":503,"timestamp":"2026-03-01T09:00:00Z","latency":1}` + "\n" + `{"code":0,"timestamp":"2026-03-01T09:00:01Z","latency":1,"error":"EOF"}` + "\n",
	"vegeta-csv":  "1772355600000000000,503,1,0,0,,,a,0,GET,http://x/,\n1772355601000000000,0,1,0,0,EOF,,a,1,GET,http://x/,\n",
	"nginx":       goodNginx,
	"envoy": `[2026-03-01T09:00:01.000Z] "GET /a HTTP/1.1" 503 UF,URX 0 91 25 - "10.0.0.9" "curl/8.5" "id-2" "web" "10.244.0.6:8080"` + "\n" +
		`[2026-03-01T09:00:02.000Z] "GET /b HTTP/1.1" 503 UF,URX 0 91 25 - "10.0.0.9" "curl/8.5" "id-3" "web" "10.244.0.6:8080"` + "\n",
	"envoy-json": `{"start_time":"2026-03-01T09:00:00Z","response_code":503}` + "\n" + `{"start_time":"2026-03-01T09:00:01Z","response_code":503}` + "\n",
	"jsonl":      goodJSONL + `{"time":"2026-03-01T09:00:01Z","error":"EOF"}` + "\n",
	"csv":        "time,status\n2026-03-01T09:00:00Z,503\n2026-03-01T09:00:01Z,503\n",
	// Two changes: the first snapshot's host added, then removed.
	"envoy-clusters": "# 2026-03-01T09:00:00Z\nweb::10.244.0.6:8080::health_flags::healthy\n" +
		"# 2026-03-01T09:00:01Z\nweb::10.244.0.6:8080::health_flags::/failed_eds_health\n",
	// Two states of the proxy: its drain's start and its exit.
	"istio-proxy": "2026-03-01T09:00:10.0105Z\tinfo\tAgent draining Proxy for termination\n" +
		"2026-03-01T09:00:15.014Z\twarn\tAborted proxy instance\n",
	"linkerd-proxy": "2026-03-01T09:00:10.004Z [    70.003401s]  INFO ThreadId(01) linkerd2_proxy::signal: received SIGTERM, starting shutdown\n" +
		"2026-03-01T09:00:11.004Z [    71.003401s]  INFO ThreadId(01) linkerd2_proxy: Received shutdown via admin interface\n",
}

// formatOptions are the options a format needs to read goodLines: a pod
// for a pod's own log.
func formatOptions(name string) Options {
	if f, err := LookupFormat(name); err == nil && f.PodLog() {
		return Options{Pod: "shop/web-7d9f-abcde"}
	}
	return Options{}
}

// A UTF-8 byte order mark (Excel, PowerShell) is no part of line 1: every
// format reads the file as if it were not there, strict mode included.
func TestByteOrderMark(t *testing.T) {
	for _, f := range Formats() {
		input, ok := goodLines[f.Name]
		if !ok {
			t.Fatalf("no good input for %s", f.Name)
		}
		for _, gz := range []bool{false, true} {
			in := "\ufeff" + input
			if gz {
				in = gzipString(t, in)
			}
			st := newMemStore()
			im := &Importer{Store: st, Parser: parserFor(t, f.Name, formatOptions(f.Name)), Strict: true}
			sum, err := im.Import(context.Background(), "bom.log", strings.NewReader(in))
			if err != nil || sum.Rejected != 0 || len(st.events) != 2 {
				t.Errorf("%s (gzip %v): err=%v, %s; want both failures stored", f.Name, gz, err, sum.Counts())
			}
		}
	}
}

// UTF-16 (PowerShell's default for >) is refused at line 1 with what to do
// about it, not as a line of garbage.
func TestUTF16Refused(t *testing.T) {
	var b strings.Builder
	b.WriteString("\xff\xfe")
	for _, c := range goodJSONL {
		b.WriteByte(byte(c))
		b.WriteByte(0)
	}
	im := &Importer{Parser: parserFor(t, "jsonl", Options{})}
	sum, _ := im.Import(context.Background(), "ps.log", strings.NewReader(b.String()))
	if sum.Rejected != 1 || sum.Lines != 1 || !strings.Contains(sum.Examples[0].Error(), "UTF-16") {
		t.Fatalf("%s %v; want one rejection naming UTF-16", sum.Counts(), sum.Examples)
	}
}

// A binary input is one rejection, at line 1, and nothing more of it is
// read; a text input with binary lines keeps its good lines.
func TestBinaryInputOneRejection(t *testing.T) {
	elf := "\x7fELF\x02\x01\x01\x00\x00\x00\n" + strings.Repeat("\x00\x01\xfe\x03\n", 2000)
	for _, f := range []string{"jsonl", "csv", "vegeta-csv", "nginx"} {
		im := &Importer{Parser: parserFor(t, f, Options{})}
		sum, _ := im.Import(context.Background(), "a.out", strings.NewReader(elf))
		if sum.Rejected != 1 || sum.Examples[0].Line != 1 || !strings.Contains(sum.Examples[0].Msg, "binary") {
			t.Errorf("%s: %s %v; want one rejection of line 1 as binary", f, sum.Counts(), sum.Examples)
		}
	}
	// Damaged lines everywhere but the first: each is rejected, the good ones kept.
	damaged := goodJSONL + strings.Repeat("\x00\x01\xfe\x03\n", 20) + goodJSONL
	im := &Importer{Store: newMemStore(), Parser: parserFor(t, "jsonl", Options{})}
	sum, _ := im.Import(context.Background(), "crash.log", strings.NewReader(damaged))
	if sum.Rejected != 20 || sum.Failures != 2 || sum.Examples[0].Line != 2 {
		t.Errorf("damaged log: %s, first %v; want 20 rejected from line 2 and 2 failures", sum.Counts(), sum.Examples[0])
	}
}

// A CSV line past MaxLineBytes is rejected, not buffered, and the next good
// line is kept.
func TestLongCSVLine(t *testing.T) {
	long := "1772355600000000000,0,1,0,0," + strings.Repeat("x", MaxLineBytes+10) + ",,a,0,GET,http://x/,\n"
	for _, c := range []struct{ format, input string }{
		{"vegeta-csv", long + goodLines["vegeta-csv"]},
		{"csv", "time_ns,status,error\n" + "1772355600000000000,0," + strings.Repeat("x", MaxLineBytes+10) + "\n1772355601000000000,503,\n"},
		// An unclosed quote used to read the rest of the input as one field.
		{"vegeta-csv", "1772355600000000000,0,1,0,0,\"" + strings.Repeat("x,\n", MaxLineBytes/2) + goodLines["vegeta-csv"]},
	} {
		st := newMemStore()
		im := &Importer{Store: st, Parser: parserFor(t, c.format, Options{})}
		sum, err := im.Import(context.Background(), "long.csv", strings.NewReader(c.input))
		if err != nil || sum.Rejected == 0 || sum.Examples[0].Line != 1+boolInt(c.format == "csv") {
			t.Fatalf("%s: err=%v %s %v; want the long line rejected", c.format, err, sum.Counts(), sum.Examples)
		}
		if len(st.failures()) == 0 || len(st.failures()) != sum.Failures {
			t.Errorf("%s: %s; want the good lines after it stored", c.format, sum.Counts())
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Invalid UTF-8 in a JSON string is stored cleaned (each bad byte U+FFFD,
// as event.CleanString does), not rejected: see checkJSONString.
func TestJSONInvalidUTF8Cleaned(t *testing.T) {
	st := newMemStore()
	im := &Importer{Store: st, Parser: parserFor(t, "jsonl", Options{}), Strict: true}
	in := `{"time":"2026-03-01T09:00:00Z","status":503,"target":"http://web/caf` + "\xe9" + `","error":"x\ud800y"}` + "\n"
	if _, err := im.Import(context.Background(), "a.jsonl", strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	fs := st.failures()
	if len(fs) != 1 {
		t.Fatalf("%d stored", len(fs))
	}
	for k, want := range map[string]string{"target": "http://web/caf\uFFFD", "error": "x\uFFFDy"} {
		if v := fs[0].Attrs[k]; v != want || !utf8.ValidString(v) {
			t.Errorf("%s = %q, want %q", k, v, want)
		}
	}
}

// The CSV splitter reads every one-line record as encoding/csv does (with
// TrimLeadingSpace), and refuses what encoding/csv refuses.
func TestCSVSplitterAgreesWithEncodingCSV(t *testing.T) {
	var sp csvSplitter
	for _, line := range []string{
		`a,b,c`, `a,,c,`, `,`, `"a,b",c`, ` "x""y" , z`, `"",""`, `a b,"c d"`, "\ttab,x", `"q"`,
		`a"b,c`, `"a"b,c`, `"open,c`, `x,"y`, `é,"ü",\`, `"a""",b`,
	} {
		cr := csv.NewReader(strings.NewReader(line + "\n"))
		cr.FieldsPerRecord, cr.TrimLeadingSpace = -1, true
		want, werr := cr.Read()
		got, bad, why := sp.split([]byte(line))
		if (werr != nil) != (bad >= 0) || (werr == nil && !reflect.DeepEqual(got, want)) {
			t.Errorf("%q: split %q (bad field %d: %s), encoding/csv %q (%v)", line, got, bad, why, want, werr)
		}
	}
}

func gzipString(t *testing.T, s string) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}
