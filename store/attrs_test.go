package store

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"
)

// attrsCases are the shapes decodeAttrs meets: jsonb's text of what the
// agents write, and what only encoding/json reads.
var attrsCases = []string{
	`{}`,
	`{"proxy": "nftables", "proxy_recorded": "true"}`,
	`{"kernel_release": "6.1.0-27-amd64", "kernel_features": "current_task_btf,reset_reason,main_process"}`,
	`{"a":"1","a":"2"}`,
	` { "k" : "v" } `,
	`{"why": "kube-proxy's \"metrics\" did not answer"}`,
	`{"tab": "a\tb"}`,
	`{"utf8": "Grüße, 日本"}`,
	"{\"bad\": \"\xff\xfe\"}",
	`{"n": 1}`,
	`{"nested": {"a": "b"}}`,
	`null`,
	`{"a": "b",}`,
	`{"a": "b"} x`,
	`{"a" "b"}`,
	`[]`,
	``,
}

// TestDecodeAttrs: the fast path gives exactly what encoding/json gives,
// and takes the plain shapes itself.
func TestDecodeAttrs(t *testing.T) {
	for _, c := range attrsCases {
		checkAttrs(t, []byte(c))
	}
	for _, c := range []string{`{}`, `{"proxy": "nftables", "proxy_recorded": "true"}`, ` { "k" : "v" } `, `{"utf8": "Grüße, 日本"}`, `{"a":"1","a":"2"}`} {
		if _, ok := decodeFlatAttrs([]byte(c), nil); !ok {
			t.Errorf("%s: not read by the fast path", c)
		}
	}
	for _, c := range []string{`{"why": "a \"b\""}`, "{\"bad\": \"\xff\"}", `{"n": 1}`, `null`, `{"a": "b",}`} {
		if _, ok := decodeFlatAttrs([]byte(c), nil); ok {
			t.Errorf("%s: read by the fast path, which must leave it to encoding/json", c)
		}
	}
}

func checkAttrs(t *testing.T, b []byte) {
	t.Helper()
	var want map[string]string
	wantErr := json.Unmarshal(b, &want)
	var in interner
	for _, in := range []*interner{nil, &in, &in} { // the second time from the table
		got, err := decodeAttrs(b, in)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%q: error %v, encoding/json's %v", b, err, wantErr)
		}
		if err == nil && (!reflect.DeepEqual(got, want) || (got == nil) != (want == nil)) {
			t.Fatalf("%q: %#v, encoding/json's %#v", b, got, want)
		}
	}
}

func FuzzDecodeAttrs(f *testing.F) {
	for _, c := range attrsCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkAttrs(t, b) })
}

// BenchmarkDecodeAttrs decodes a dataplane event's attributes (jsonb's
// text) with encoding/json and with decodeAttrs, in alternating rounds,
// and reports the median ratio of their times with its spread.
//
//	go test ./store -run '^$' -bench DecodeAttrs -benchtime 1x
func BenchmarkDecodeAttrs(b *testing.B) {
	in := []byte(`{"proxy": "nftables", "proxy_rule": "endpoint-4NDLKXBB-shop/checkout/tcp/http__10.244.7.12/8080", "proxy_recorded": "true"}`)
	const rounds, per = 21, 20000
	timeIt := func(fn func()) time.Duration {
		t0 := time.Now()
		for range per {
			fn()
		}
		return time.Since(t0)
	}
	var ratios []float64
	var sink map[string]string
	for b.Loop() {
		ratios = ratios[:0]
		for range rounds {
			old := timeIt(func() {
				var m map[string]string
				if err := json.Unmarshal(in, &m); err != nil {
					b.Fatal(err)
				}
				sink = m
			})
			cur := timeIt(func() {
				m, err := decodeAttrs(in, nil)
				if err != nil {
					b.Fatal(err)
				}
				sink = m
			})
			ratios = append(ratios, float64(cur)/float64(old))
		}
	}
	_ = sink
	slices.Sort(ratios)
	med, p10, p90 := ratios[len(ratios)/2], ratios[len(ratios)/10], ratios[len(ratios)*9/10]
	b.ReportMetric(med, "new/old")
	b.Logf("decodeAttrs ÷ encoding/json, %d alternating rounds of %d decodes: median %.3f (p10–p90 %s)", rounds, per, med, fmt.Sprintf("%.3f–%.3f", p10, p90))
}
