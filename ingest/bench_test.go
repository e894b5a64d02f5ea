package ingest

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// benchLines is the size of the benchmark's nginx log.
const benchLines = 1_000_000

var (
	benchLogOnce sync.Once
	benchLog     []byte
)

// nginxBenchLog generates an access log in DefaultNginxFormat: 1,000
// requests a second from 200 clients over 20 upstream pods, 1% of them 502s
// (some after a retry on a second upstream), as a rollout leaves them.
func nginxBenchLog() []byte {
	benchLogOnce.Do(func() {
		var b bytes.Buffer
		b.Grow(benchLines * 190)
		t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.FixedZone("", 2*3600))
		var ts []byte
		lastSec := int64(-1)
		for i := range benchLines {
			at := t0.Add(time.Duration(i) * time.Millisecond)
			if s := at.Unix(); s != lastSec {
				ts = at.AppendFormat(ts[:0], "02/Jan/2006:15:04:05 -0700")
				lastSec = s
			}
			b.WriteString("10.0.")
			b.WriteString(strconv.Itoa(i % 200 / 100))
			b.WriteByte('.')
			b.WriteString(strconv.Itoa(i % 100))
			b.WriteString(" - - [")
			b.Write(ts)
			b.WriteString(`] "GET /api/v1/orders/`)
			b.WriteString(strconv.Itoa(i % 5000))
			b.WriteString(` HTTP/1.1" `)
			pod := "10.244.0." + strconv.Itoa(10+i%20) + ":8080"
			switch {
			case i%100 == 7:
				b.WriteString(`502 157 "-" "Go-http-client/1.1" `)
				b.WriteString(pod)
				b.WriteString(" 502 0.001\n")
			case i%100 == 57:
				b.WriteString(`502 157 "-" "Go-http-client/1.1" `)
				b.WriteString(pod + ", 10.244.0.9:8080 502, 502 0.004\n")
			default:
				b.WriteString(`200 1432 "https://shop.example/cart" "Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0" `)
				b.WriteString(pod)
				b.WriteString(" 200 0.012\n")
			}
		}
		benchLog = b.Bytes()
	})
	return benchLog
}

func benchResolver() *Resolver {
	r := NewResolver()
	for i := range 21 {
		e := event.Event{Time: 1, Kind: event.PodReady, Pod: event.PodRef{Namespace: "shop", Name: fmt.Sprintf("web-%d", i), UID: strconv.Itoa(i)},
			Local: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 244, 0, byte(9 + i)}), 0)}
		r.Add(&e)
	}
	return r
}

// BenchmarkImportNginx imports a 1,000,000-line nginx access log: parse,
// classify, resolve pods, build and seal the 10,000 failure events, batch
// them for the store. Run it with
//
//	go test ./ingest -run '^$' -bench BenchmarkImportNginx -benchtime 3x
//
// The lines/s metric is the import rate (target: at least 200,000).
func BenchmarkImportNginx(b *testing.B) {
	data := nginxBenchLog()
	res := benchResolver()
	parse := parserFor(b, "nginx", Options{})
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		st := newMemStore()
		st.discard = true
		im := &Importer{Store: st, Parser: parse, Resolver: res}
		sum, err := im.Import(context.Background(), "bench.log", bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		if sum.Lines != benchLines || sum.Failures != benchLines/50 || sum.Resolved != sum.Failures || sum.Rejected != 0 {
			b.Fatalf("summary %+v", sum)
		}
	}
	b.ReportMetric(float64(benchLines)*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
}

// BenchmarkImportNginxSQLite is the same import into the embedded SQLite
// store, end to end: the rate a user of `drainscope import` sees.
func BenchmarkImportNginxSQLite(b *testing.B) {
	data := nginxBenchLog()
	parse := parserFor(b, "nginx", Options{})
	b.SetBytes(int64(len(data)))
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		st, err := store.OpenSQLite(ctx, b.TempDir()+"/events.db")
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		im := &Importer{Store: st, Parser: parse}
		sum, err := im.Import(ctx, "bench.log", bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		st.Close()
		b.StartTimer()
		if sum.Stored != benchLines/50 {
			b.Fatalf("summary %+v", sum)
		}
	}
	b.ReportMetric(float64(benchLines)*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
}

// BenchmarkParseVegetaCSV parses 200,000 lines of `vegeta encode --to csv`
// (every 50th a failure), to weigh the one-line-per-record CSV splitter:
//
//	go test ./ingest -run '^$' -bench BenchmarkParseVegetaCSV -benchtime 5x
func BenchmarkParseVegetaCSV(b *testing.B) {
	const lines = 200_000
	var buf bytes.Buffer
	for i := range lines {
		code, errText := 200, ""
		if i%50 == 0 {
			code, errText = 0, `"Get ""http://10.1.2.3:8080/x"": dial tcp 10.1.2.3:8080: connect: connection refused"`
		}
		fmt.Fprintf(&buf, "%d,%d,2500000,0,%d,%s,aGVsbG8=,bench,%d,GET,http://10.1.2.3:8080/x,Q29udGVudC1UeXBlOiB0ZXh0L3BsYWluDQo=\n",
			1772355600000000000+int64(i)*1e6, code, 5*boolInt(code == 200), errText, i)
	}
	data := buf.Bytes()
	parse := parserFor(b, "vegeta-csv", Options{})
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		n, failed := 0, 0
		err := parse(bytes.NewReader(data), func(r *Record) error {
			if r.Err != nil {
				return r.Err
			}
			n++
			if r.Failed {
				failed++
			}
			return nil
		})
		if err != nil || n != lines || failed != lines/50 {
			b.Fatalf("%d lines, %d failed: %v", n, failed, err)
		}
	}
	b.ReportMetric(float64(lines)*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
}
