package ingest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ingressBenchLines is each format's log size in BenchmarkImportIngressFormats.
const ingressBenchLines = 200_000

// ingressBenchLog writes n lines in format: 1,000 requests a second over 20
// pods, every 50th a 502 on its pod, the rest 200s, each line as long as
// the format's documented example.
func ingressBenchLog(format string, n int) []byte {
	var b bytes.Buffer
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	for i := range n {
		at := t0.Add(time.Duration(i) * time.Millisecond)
		pod := "10.244.0." + strconv.Itoa(10+i%20) + ":8080"
		status, fail := "200", i%50 == 7
		if fail {
			status = "502"
		}
		client := "10.0." + strconv.Itoa(i%200/100) + "." + strconv.Itoa(i%100)
		switch format {
		case "nginx":
			fmt.Fprintf(&b, `%s - - [%s] "GET /api/v1/orders/%d HTTP/1.1" %s 1432 "-" "Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0" %s %s 0.012`+"\n",
				client, at.Format("02/Jan/2006:15:04:05 -0700"), i%5000, status, pod, status)
		case "ingress-nginx":
			fmt.Fprintf(&b, `%s - - [%s] "GET /api/v1/orders/%d HTTP/1.1" %s 1432 "-" "Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0" 412 0.012 [shop-web-80] [] %s 1432 0.012 %s 5a1d2c3e4f%d`+"\n",
				client, at.Format("02/Jan/2006:15:04:05 -0700"), i%5000, status, pod, status, i)
		case "haproxy":
			tsc := "----"
			if fail {
				tsc = "SH--"
			}
			fmt.Fprintf(&b, `%s:%d [%s] fe_http shop_web_80/srv%d 0/0/0/11/12 %s 1432 - - %s 20/20/1/1/0 0/0 "GET /api/v1/orders/%d HTTP/1.1" %s`+"\n",
				client, 40000+i%20000, at.Format("02/Jan/2006:15:04:05.000"), i%20, status, tsc, i%5000, pod)
		case "traefik":
			fmt.Fprintf(&b, `{"ClientAddr":"%s:%d","DownstreamStatus":%s,"Duration":12000000,"OriginStatus":%s,"RequestHost":"shop.example","RequestMethod":"GET","RequestPath":"/api/v1/orders/%d","ServiceAddr":"%s","ServiceName":"shop-web-80@kubernetes","StartUTC":"%s","level":"info"}`+"\n",
				client, 40000+i%20000, status, status, i%5000, pod, at.Format(time.RFC3339Nano))
		case "alb":
			ts := status
			if fail {
				ts = "-"
			}
			fmt.Fprintf(&b, `http %s app/shop/50dc6c495c0c9188 %s:%d %s 0.000 0.012 0.000 %s %s 34 1432 "GET http://shop.example:80/api/v1/orders/%d HTTP/1.1" "curl/8.5" - - arn:aws:elasticloadbalancing:us-east-2:123456789012:targetgroup/k8s-shop-web/73e2d6bc24d8a067 "Root=1-58337262-36d228ad5d99923122bbe354" "-" "-" 0 %s "forward" "-" "-" "%s" "%s" "-" "-" TID_1`+"\n",
				at.Format("2006-01-02T15:04:05.000000Z"), client, 40000+i%20000, pod, status, ts, i%5000, at.Add(-12*time.Millisecond).Format("2006-01-02T15:04:05.000000Z"), pod, ts)
		case "gcp-lb":
			sd := "response_sent_by_backend"
			if fail {
				sd = "backend_connection_closed_before_data_sent_to_client"
			}
			fmt.Fprintf(&b, `{"insertId":"a%d","jsonPayload":{"statusDetails":"%s"},"httpRequest":{"requestMethod":"GET","requestUrl":"http://shop.example/api/v1/orders/%d","status":%s,"remoteIp":"%s","serverIp":"%s","latency":"0.012s"},"resource":{"type":"http_load_balancer","labels":{"backend_service_name":"k8s1-1a2b-shop-web-80-5e6f"}},"timestamp":"%s"}`+"\n",
				i, sd, i%5000, status, client, strings.TrimSuffix(pod, ":8080"), at.Format(time.RFC3339Nano))
		}
	}
	return b.Bytes()
}

// BenchmarkImportIngressFormats imports 200,000 lines of each proxy and
// load balancer format the same way BenchmarkImportNginx does (parse,
// classify, resolve pods, build and seal the failures, batch them), the
// formats interleaved round by round so that they share the machine's
// state, and prints each one's median lines/s, its spread and its ratio to
// nginx's measured in the same run:
//
//	go test ./ingest -run '^$' -bench BenchmarkImportIngressFormats -benchtime 1x
func BenchmarkImportIngressFormats(b *testing.B) {
	formats := []string{"nginx", "ingress-nginx", "haproxy", "traefik", "alb", "gcp-lb"}
	logs := map[string][]byte{}
	for _, f := range formats {
		logs[f] = ingressBenchLog(f, ingressBenchLines)
	}
	res := benchResolver()
	const rounds = 5
	rates := map[string][]float64{}
	for b.Loop() {
		for range rounds {
			for _, f := range formats {
				st := newMemStore()
				st.discard = true
				im := &Importer{Store: st, Parser: parserFor(b, f, Options{}), Resolver: res}
				start := time.Now()
				sum, err := im.Import(context.Background(), f+".log", bytes.NewReader(logs[f]))
				el := time.Since(start)
				if err != nil || sum.Lines != ingressBenchLines || sum.Failures != ingressBenchLines/50 || sum.Resolved != sum.Failures || sum.Rejected != 0 {
					b.Fatalf("%s: %v, %s %v", f, err, sum.Counts(), sum.Examples)
				}
				rates[f] = append(rates[f], float64(ingressBenchLines)/el.Seconds())
			}
		}
	}
	med := func(v []float64) float64 { s := slices.Clone(v); slices.Sort(s); return s[len(s)/2] }
	base := med(rates["nginx"])
	var out strings.Builder
	fmt.Fprintf(&out, "\n%-14s %12s %25s %9s\n", "format", "median l/s", "spread (min-max) l/s", "vs nginx")
	for _, f := range formats {
		v := rates[f]
		fmt.Fprintf(&out, "%-14s %12.0f %12.0f-%-12.0f %8.2fx\n", f, med(v), slices.Min(v), slices.Max(v), med(v)/base)
		b.ReportMetric(med(v), f+"-lines/s")
	}
	b.Log(out.String())
}
