package ingest

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

// The lines below follow each format's documentation field for field; the
// addresses, names, times and sizes are made up.

// ingress-nginx's upstreaminfo, as the controller's log-format-upstream
// writes it: a success, a 502 after a retry, and a 503 its balancer sent
// with no endpoint (the placeholder 0.0.0.1).
const goodIngressNginx = `10.0.0.9 - - [01/Mar/2026:09:00:00 +0000] "GET /ok HTTP/1.1" 200 12 "-" "curl/8.5" 80 0.003 [shop-web-80] [] 10.244.0.5:8080 12 0.003 200 5a1d2c3e4f
10.0.0.9 - - [01/Mar/2026:09:00:01 +0000] "POST /pay HTTP/1.1" 502 150 "-" "curl/8.5" 95 0.004 [shop-web-80] [] 10.244.0.6:8080, 10.244.0.7:8080 0, 0 0.001, 0.002 502, 502 6b2e3d4f50
10.0.0.9 - - [01/Mar/2026:09:00:02 +0000] "GET /cart HTTP/1.1" 503 190 "-" "curl/8.5" 80 0.000 [shop-web-80] [] 0.0.0.1:80 0 0.000 503 7c3f4e5061
`

const goodHAProxy = `Mar  1 09:00:01 lb haproxy[2101]: 10.0.0.9:40100 [01/Mar/2026:09:00:01.250] fe_http shop_web_80/srv1 0/0/-1/-1/3 503 217 - - SC-- 2/2/0/0/0 0/0 "GET /a HTTP/1.1" 10.244.0.6:8080
10.0.0.9:40101 [01/Mar/2026:09:00:02.000] fe_http shop_web_80/srv2 0/0/0/-1/1500 502 209 - - SH-- 2/2/0/0/0 0/0 {shop.example} "POST /pay HTTP/1.1" 10.244.0.7:8080
`

const goodTraefik = `{"ClientAddr":"10.0.0.9:40200","ClientHost":"10.0.0.9","DownstreamStatus":502,"Duration":2500000,"OriginStatus":0,"RequestHost":"shop.example","RequestMethod":"GET","RequestPath":"/a","RouterName":"shop-web-shop-example@kubernetes","ServiceAddr":"10.244.0.6:8080","ServiceName":"shop-web-80@kubernetes","ServiceURL":"http://10.244.0.6:8080","StartUTC":"2026-03-01T09:00:01.100000000Z","level":"info","msg":"","time":"2026-03-01T09:00:01Z"}
{"ClientAddr":"10.0.0.9:40201","DownstreamStatus":503,"Duration":100000,"OriginStatus":0,"RequestMethod":"GET","RequestPath":"/b","ServiceAddr":"","ServiceName":"shop-web-80@kubernetes","StartUTC":"2026-03-01T09:00:02Z"}
`

// The AWS documentation's example entry with made-up values, then a 502
// and a 504 whose target sent no response.
const goodALB = `http 2026-03-01T09:00:00.186641Z app/my-loadbalancer/50dc6c495c0c9188 192.168.131.39:2817 10.244.0.5:8080 0.000 0.001 0.000 200 200 34 366 "GET http://www.example.com:80/ HTTP/1.1" "curl/7.46.0" - - arn:aws:elasticloadbalancing:us-east-2:123456789012:targetgroup/k8s-shop-web-73e2d6bc24/73e2d6bc24d8a067 "Root=1-58337262-36d228ad5d99923122bbe354" "-" "-" 0 2026-03-01T09:00:00.185000Z "forward" "-" "-" "10.244.0.5:8080" "200" "-" "-" TID_1234
http 2026-03-01T09:00:01.500000Z app/my-loadbalancer/50dc6c495c0c9188 192.168.131.39:2818 10.244.0.6:8080 0.000 -1 -1 502 - 34 272 "GET http://www.example.com:80/a HTTP/1.1" "curl/7.46.0" - - arn:aws:elasticloadbalancing:us-east-2:123456789012:targetgroup/k8s-shop-web-73e2d6bc24/73e2d6bc24d8a067 "Root=1-58337262-36d228ad5d99923122bbe355" "-" "-" 0 2026-03-01T09:00:01.498000Z "forward" "-" "-" "10.244.0.6:8080" "-" "-" "-" TID_1235
https 2026-03-01T09:01:02.000000Z app/my-loadbalancer/50dc6c495c0c9188 192.168.131.39:2819 10.244.0.7:8080 0.000 -1 -1 504 - 34 272 "GET https://www.example.com:443/b HTTP/1.1" "curl/7.46.0" ECDHE-RSA-AES128-GCM-SHA256 TLSv1.2 arn:aws:elasticloadbalancing:us-east-2:123456789012:targetgroup/k8s-shop-web-73e2d6bc24/73e2d6bc24d8a067 "Root=1-58337262-36d228ad5d99923122bbe356" "www.example.com" "arn:aws:acm:us-east-2:123456789012:certificate/12345678-1234-1234-1234-123456789012" 1 2026-03-01T09:01:01.990000Z "forward" "-" "-" "10.244.0.7:8080" "-" "-" "-" TID_1236
`

const goodGCPLB = `{"insertId":"a1","jsonPayload":{"@type":"type.googleapis.com/google.cloud.loadbalancing.type.LoadBalancerLogEntry","statusDetails":"failed_to_connect_to_backend","backendTargetProjectNumber":"projects/123456789012"},"httpRequest":{"requestMethod":"GET","requestUrl":"http://shop.example/a","requestSize":"80","status":502,"responseSize":"300","userAgent":"curl/8.5","remoteIp":"203.0.113.9","serverIp":"10.244.0.6","latency":"0.002100s"},"resource":{"type":"http_load_balancer","labels":{"backend_service_name":"k8s1-1a2b3c4d-shop-web-80-5e6f7a8b","zone":"global","project_id":"shop-prod"}},"timestamp":"2026-03-01T09:00:01.100000Z","severity":"WARNING","logName":"projects/shop-prod/logs/requests"}
{"insertId":"a2","jsonPayload":{"statusDetails":"backend_connection_closed_before_data_sent_to_client"},"httpRequest":{"requestMethod":"POST","requestUrl":"http://shop.example/pay","status":502,"remoteIp":"203.0.113.9","serverIp":"10.244.0.7","latency":"1.5s"},"resource":{"type":"http_load_balancer","labels":{"backend_service_name":"k8s1-1a2b3c4d-shop-web-80-5e6f7a8b"}},"timestamp":"2026-03-01T09:00:02Z"}
`

// Two snapshots of describe-target-health: 10.244.0.6 drains.
const goodTargetHealth = `# 2026-03-01T09:00:00Z shop/web
{
    "TargetHealthDescriptions": [
        {"Target": {"Id": "10.244.0.6", "Port": 8080, "AvailabilityZone": "us-east-2a"}, "HealthCheckPort": "8080", "TargetHealth": {"State": "healthy"}}
    ]
}
# 2026-03-01T09:00:02.5Z shop/web
{
    "TargetHealthDescriptions": [
        {"Target": {"Id": "10.244.0.6", "Port": 8080}, "HealthCheckPort": "8080", "TargetHealth": {"State": "draining", "Reason": "Target.DeregistrationInProgress", "Description": "Target deregistration is in progress"}}
    ]
}
`

const goodNginxError = `2026/03/01 09:00:01 [error] 31#31: *1201 connect() failed (111: Connection refused) while connecting to upstream, client: 10.0.0.9, server: shop.example, request: "POST /pay HTTP/1.1", upstream: "http://10.244.0.7:8080/pay", host: "shop.example"
2026/03/01 09:00:02 [error] 31#31: *1202 upstream prematurely closed connection while reading response header from upstream, client: 10.0.0.9, server: shop.example, request: "GET /a HTTP/1.1", upstream: "http://10.244.0.6:8080/a", host: "shop.example"
`

func init() {
	goodLines["ingress-nginx"] = goodIngressNginx
	goodLines["haproxy"] = goodHAProxy
	goodLines["traefik"] = goodTraefik
	goodLines["alb"] = goodALB[strings.IndexByte(goodALB, '\n')+1:]
	goodLines["gcp-lb"] = goodGCPLB
	goodLines["target-health"] = goodTargetHealth
	goodLines["nginx-error"] = goodNginxError
}

// failure is a record as the format tests compare them.
type failure struct {
	at, reason, backend, service string
	status                       int
	attrs                        map[string]string
}

func readFailures(t *testing.T, format, input string, opts Options, res *Resolver) ([]failure, []*LineError) {
	t.Helper()
	parse := parserFor(t, format, opts)
	conv := newConverter(res)
	var out []failure
	var bad []*LineError
	err := parse(strings.NewReader(input), func(r *Record) error {
		if r.Err != nil {
			c := *r.Err
			bad = append(bad, &c)
			return nil
		}
		if !r.Failed {
			return nil
		}
		e, lerr := conv.event(r)
		if lerr != nil {
			t.Fatalf("line %d: %v", r.Line, lerr)
		}
		out = append(out, failure{timeString(e.Time), e.Reason, e.Attrs[event.AttrBackend], serviceKeyOf(&e), int(e.Code), e.Attrs})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, bad
}

func serviceKeyOf(e *event.Event) string {
	if e.Kind.IsDataplane() && e.Pod.Namespace != "" {
		return e.Pod.Namespace + "/" + e.Service
	}
	return e.Service
}

func checkFailures(t *testing.T, got []failure, want []failure) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d failures, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.at != w.at || g.reason != w.reason || g.backend != w.backend || g.service != w.service || g.status != w.status {
			t.Errorf("failure %d: got %s %s %d backend %q service %q, want %s %s %d backend %q service %q",
				i, g.at, g.reason, g.status, g.backend, g.service, w.at, w.reason, w.status, w.backend, w.service)
		}
		for k, v := range w.attrs {
			if g.attrs[k] != v {
				t.Errorf("failure %d: %s = %q, want %q", i, k, g.attrs[k], v)
			}
		}
	}
}

func TestIngressNginx(t *testing.T) {
	got, bad := readFailures(t, "ingress-nginx", goodIngressNginx, Options{}, nil)
	if len(bad) > 0 {
		t.Fatal(bad[0])
	}
	checkFailures(t, got, []failure{
		{at: "09:00:01", reason: "status", backend: "10.244.0.7:8080", service: "shop/web", status: 502,
			attrs: map[string]string{AttrUpstreamName: "shop-web-80", AttrTimeResolution: "1s", AttrUpstreams: "10.244.0.6:8080, 10.244.0.7:8080"}},
		// The balancer's placeholder is no pod: the 503 names its Service only.
		{at: "09:00:02", reason: "status", backend: "", service: "shop/web", status: 503,
			attrs: map[string]string{AttrUpstreamName: "shop-web-80"}},
	})
}

// A name with more than one dash before its port splits several ways: it is
// resolved only against the Services the store knows, and left unresolved
// when none or more than one split is known.
func TestUpstreamService(t *testing.T) {
	known := map[string]bool{"team-a/web": true, "team/a-web": false, "prod/api-v2": true, "x-y/z": true, "x/y-z": true}
	has := func(k string) bool { return known[k] }
	for _, c := range []struct{ name, want, wantUnknown string }{
		{"shop-web-80", "shop/web", "shop/web"},
		{"shop-web-http", "shop/web", "shop/web"},
		{"team-a-web-8080", "team-a/web", ""},
		{"prod-api-v2-80", "prod/api-v2", ""},
		{"x-y-z-80", "", ""}, // both splits known: ambiguous
		{"shop-web-80@kubernetes", "shop/web", "shop/web"},
		{"upstream-default-backend", "", ""},
		{"web", "", ""},
		{"-web-80", "", ""},
		{"shop-web-", "", ""},
	} {
		if got := UpstreamService(c.name, has); got != c.want {
			t.Errorf("UpstreamService(%q) with known Services = %q, want %q", c.name, got, c.want)
		}
		if got := UpstreamService(c.name, nil); got != c.wantUnknown {
			t.Errorf("UpstreamService(%q) with none known = %q, want %q", c.name, got, c.wantUnknown)
		}
	}
}

// The importer resolves an ambiguous upstream name against the Services
// the store's events name.
func TestIngressNginxServiceFromStore(t *testing.T) {
	line := `10.0.0.9 - - [01/Mar/2026:09:00:02 +0000] "GET / HTTP/1.1" 503 190 "-" "curl/8.5" 80 0.000 [team-a-web-80] [] - - - - 7c3f4e5061` + "\n"
	svc := event.Event{Time: time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC).UnixNano(), Kind: event.ServiceChanged, Node: "node-1", Source: event.SourceWatcher,
		Pod: event.PodRef{Namespace: "team-a"}, Service: "web", Reason: event.ChangeObserved}
	for _, c := range []struct {
		seed []event.Event
		want string
	}{{nil, ""}, {[]event.Event{svc}, "team-a/web"}} {
		st := newMemStore(c.seed...)
		im := &Importer{Store: st, Parser: parserFor(t, "ingress-nginx", Options{})}
		if _, err := im.Import(context.Background(), "access.log", strings.NewReader(line)); err != nil {
			t.Fatal(err)
		}
		var got *event.Event
		for i := range st.events {
			if st.events[i].Kind == event.ClientFailure {
				got = &st.events[i]
			}
		}
		if got == nil || got.Service != c.want {
			t.Errorf("with %d known Services: stored %+v, want Service %q", len(c.seed), got, c.want)
		}
	}
}

// The error log gives each access log 502 its mechanism: a refused connect
// is refused, never a gateway error that could read as a cut connection.
func TestNginxErrorJoin(t *testing.T) {
	access := `10.0.0.9 - - [01/Mar/2026:09:00:01 +0000] "POST /pay HTTP/1.1" 502 150 "-" "curl/8.5" 95 0.004 [shop-web-80] [] 10.244.0.7:8080 0 0.001 502 6b2e3d4f50
10.0.0.9 - - [01/Mar/2026:09:00:02 +0000] "GET /a HTTP/1.1" 502 150 "-" "curl/8.5" 95 0.004 [shop-web-80] [] 10.244.0.6:8080 0 0.001 502 6b2e3d4f51
10.0.0.9 - - [01/Mar/2026:09:00:09 +0000] "GET /b HTTP/1.1" 502 150 "-" "curl/8.5" 95 0.004 [shop-web-80] [] 10.244.0.6:8080 0 0.001 502 6b2e3d4f52
`
	el, err := LoadNginxErrorLog("error.log", strings.NewReader(goodNginxError+"2026/03/01 09:00:03 [notice] 1#1: signal process started\n"))
	if err != nil || len(el.Rejected) > 0 || el.Entries != 2 {
		t.Fatalf("error log: %v, %d entries, rejected %v", err, el.Entries, el.Rejected)
	}
	got, _ := readFailures(t, "ingress-nginx", access, Options{ErrorLog: el}, nil)
	checkFailures(t, got, []failure{
		{at: "09:00:01", reason: "refused", backend: "10.244.0.7:8080", service: "shop/web", status: 502,
			attrs: map[string]string{AttrMechanism: MechRefused, AttrErrorLogLine: "error.log:1"}},
		{at: "09:00:02", reason: "eof", backend: "10.244.0.6:8080", service: "shop/web", status: 502,
			attrs: map[string]string{AttrMechanism: MechPremature, AttrErrorLogLine: "error.log:2"}},
		// No entry within the request: the 502 keeps its status, unexplained by the error log.
		{at: "09:00:09", reason: "status", backend: "10.244.0.6:8080", service: "shop/web", status: 502,
			attrs: map[string]string{AttrMechanism: ""}},
	})
	if el.Matched != 2 {
		t.Errorf("matched %d entries, want 2", el.Matched)
	}
}

// The error log's whole seconds carry no zone; the access log's $time_local
// does, and the join reads the error log in it.
func TestNginxErrorJoinZone(t *testing.T) {
	access := `10.0.0.9 - - [01/Mar/2026:11:00:01 +0200] "GET /a HTTP/1.1" 502 150 "-" "curl/8.5" 10.244.0.7:8080 502 0.004` + "\n"
	el, _ := LoadNginxErrorLog("error.log", strings.NewReader(strings.Replace(goodNginxError, "2026/03/01 09:00:01", "2026/03/01 11:00:01", 1)))
	got, _ := readFailures(t, "nginx", access, Options{ErrorLog: el}, nil)
	if len(got) != 1 || got[0].reason != "refused" || got[0].at != "09:00:01" {
		t.Fatalf("%+v", got)
	}
}

func TestNginxErrorAlone(t *testing.T) {
	in := goodNginxError + `2026/03/01 09:00:04 [error] 31#31: *1203 no live upstreams while connecting to upstream, client: 10.0.0.9, server: shop.example, request: "GET / HTTP/1.1", upstream: "http://shop-web-80/", host: "shop.example"
2026/03/01 09:00:05 [error] 31#31: *1204 upstream timed out (110: Connection timed out) while connecting to upstream, client: 10.0.0.9, server: , request: "GET / HTTP/1.1", upstream: "http://10.244.0.8:8080/", host: "shop.example"
2026/03/01 09:00:06 [error] 31#31: *1205 recv() failed (104: Connection reset by peer) while reading response header from upstream, client: 10.0.0.9, server: , request: "GET / HTTP/1.1", upstream: "http://10.244.0.8:8080/", host: "shop.example"
2026/03/01 09:00:07 [warn] 31#31: *1206 an upstream response is buffered to a temporary file /var/cache/nginx/1 while reading upstream, client: 10.0.0.9
`
	got, bad := readFailures(t, "nginx-error", in, Options{}, nil)
	if len(bad) > 0 {
		t.Fatal(bad[0])
	}
	checkFailures(t, got, []failure{
		{at: "09:00:01", reason: "refused", backend: "10.244.0.7:8080", status: 502, attrs: map[string]string{AttrMechanism: MechRefused}},
		{at: "09:00:02", reason: "eof", backend: "10.244.0.6:8080", status: 502, attrs: map[string]string{AttrMechanism: MechPremature}},
		{at: "09:00:04", reason: "status", service: "shop/web", status: 502, attrs: map[string]string{AttrMechanism: MechNoLiveUpstreams, AttrUpstreamName: "shop-web-80"}},
		{at: "09:00:05", reason: "timeout", backend: "10.244.0.8:8080", status: 504, attrs: map[string]string{AttrMechanism: MechConnectTimeout}},
		{at: "09:00:06", reason: "reset", backend: "10.244.0.8:8080", status: 502, attrs: map[string]string{AttrMechanism: MechReset}},
	})
}

func TestHAProxy(t *testing.T) {
	// HAProxy's documentation's example (a success), then the failures.
	in := `Feb  6 12:14:14 localhost haproxy[14389]: 10.0.1.2:33317 [06/Feb/2026:12:14:14.655] http-in static/srv1 10/0/30/69/109 200 2750 - - ---- 1/1/1/1/0 0/0 {1wt.eu} {} "GET /index.html HTTP/1.1"
` + goodHAProxy + `10.0.0.9:40102 [01/Mar/2026:09:00:03.000] fe_http shop_web_80/srv3 0/0/0/-1/30000 504 194 - - sH-- 2/2/0/0/0 0/0 "GET /slow HTTP/1.1" 10.244.0.8:8080
10.0.0.9:40103 [01/Mar/2026:09:00:04.000] fe_http shop_web_80/<NOSRV> 0/-1/-1/-1/0 503 217 - - SC-- 2/2/0/0/0 0/0 "GET / HTTP/1.1" -:-
10.0.0.9:40104 [01/Mar/2026:09:00:05.000] fe_http shop_web_80/10.244.0.9:8080 0/0/-1/-1/5 503 217 - - SC-- 2/2/0/0/0 0/0 "GET / HTTP/1.1"
`
	got, bad := readFailures(t, "haproxy", in, Options{}, nil)
	if len(bad) > 0 {
		t.Fatal(bad[0])
	}
	checkFailures(t, got, []failure{
		{at: "09:00:01.253", reason: "refused", backend: "10.244.0.6:8080", service: "shop/web", status: 503, attrs: map[string]string{AttrTermination: "SC--"}},
		{at: "09:00:03.5", reason: "eof", backend: "10.244.0.7:8080", service: "shop/web", status: 502, attrs: map[string]string{AttrTermination: "SH--"}},
		{at: "09:00:33", reason: "timeout", backend: "10.244.0.8:8080", service: "shop/web", status: 504},
		{at: "09:00:04", reason: "refused", backend: "", service: "shop/web", status: 503},
		{at: "09:00:05.005", reason: "refused", backend: "10.244.0.9:8080", service: "shop/web", status: 503},
	})
}

func TestTraefik(t *testing.T) {
	got, bad := readFailures(t, "traefik", goodTraefik, Options{}, nil)
	if len(bad) > 0 {
		t.Fatal(bad[0])
	}
	checkFailures(t, got, []failure{
		{at: "09:00:01.1025", reason: "status", backend: "10.244.0.6:8080", service: "shop/web", status: 502, attrs: map[string]string{AttrOriginStatus: "0"}},
		{at: "09:00:02.0001", reason: "status", backend: "", service: "shop/web", status: 503},
	})
}

func TestALB(t *testing.T) {
	got, bad := readFailures(t, "alb", goodALB, Options{}, nil)
	if len(bad) > 0 {
		t.Fatal(bad[0])
	}
	checkFailures(t, got, []failure{
		{at: "09:00:01.5", reason: "status", backend: "10.244.0.6:8080", status: 502, attrs: map[string]string{AttrTargetStatus: "-"}},
		{at: "09:01:02", reason: "timeout", backend: "10.244.0.7:8080", status: 504},
	})
}

func TestGCPLB(t *testing.T) {
	got, bad := readFailures(t, "gcp-lb", goodGCPLB, Options{}, nil)
	if len(bad) > 0 {
		t.Fatal(bad[0])
	}
	checkFailures(t, got, []failure{
		{at: "09:00:01.1021", reason: "refused", backend: "10.244.0.6", status: 502, attrs: map[string]string{AttrStatusDetails: "failed_to_connect_to_backend"}},
		{at: "09:00:03.5", reason: "eof", backend: "10.244.0.7", status: 502},
	})
}

func TestTargetHealth(t *testing.T) {
	gcp := `# 1772355600
[{"backend": "https://www.googleapis.com/compute/v1/projects/p/zones/us-east1-b/networkEndpointGroups/k8s1-1a2b-shop-web-80-5e6f", "status": {"healthStatus": [{"healthState": "HEALTHY", "ipAddress": "10.244.0.6", "port": 8080}, {"healthState": "HEALTHY", "ipAddress": "10.244.0.7", "port": 8080}], "kind": "compute#backendServiceGroupHealth"}}]
# 1772355601.5
# 1772355603
[{"backend": "https://www.googleapis.com/compute/v1/projects/p/zones/us-east1-b/networkEndpointGroups/k8s1-1a2b-shop-web-80-5e6f", "status": {"healthStatus": [{"healthState": "HEALTHY", "ipAddress": "10.244.0.7", "port": 8080}, {"healthState": "UNHEALTHY", "ipAddress": "10.244.0.8", "port": 8080}]}}]
`
	for _, c := range []struct {
		name, in string
		opts     Options
		want     []string
	}{
		{"aws", goodTargetHealth, Options{}, []string{
			"dataplane_endpoint_added 09:00:00 alb shop/web 10.244.0.6:8080 healthy",
			"dataplane_endpoint_removed 09:00:02.5 alb shop/web 10.244.0.6:8080 draining"}},
		{"aws named", goodTargetHealth, Options{ProxyName: "alb-shop", BaselineOnly: true}, []string{
			"dataplane_endpoint_removed 09:00:02.5 alb-shop shop/web 10.244.0.6:8080 draining"}},
		// The empty snapshot (a failed poll) is skipped, not every target gone.
		{"gcp", gcp, Options{Service: "shop/web"}, []string{
			"dataplane_endpoint_added 09:00:00 gcp-lb shop/web 10.244.0.6:8080 HEALTHY",
			"dataplane_endpoint_added 09:00:00 gcp-lb shop/web 10.244.0.7:8080 HEALTHY",
			"dataplane_endpoint_removed 09:00:03 gcp-lb shop/web 10.244.0.6:8080 gone"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			err := ParseTargetHealth(strings.NewReader(c.in), c.opts, func(r *Record) error {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				e := r.Event()
				got = append(got, strings.Join([]string{string(e.Kind), timeString(e.Time), e.Node, serviceKeyOf(&e), e.Local.String(), e.Attrs[AttrTargetState]}, " "))
				if e.Attrs[event.AttrProxy] == "" || e.Source != event.SourceDataplane {
					t.Fatalf("%+v", e)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
}

// Each bad line is rejected with its line and the field at fault.
func TestIngressFormatsBadLines(t *testing.T) {
	for _, c := range []struct {
		format, input string
		line          int
		field         string
	}{
		{"ingress-nginx", goodIngressNginx + `10.0.0.9 - - [01/Mar/2026:09:00:03 +0000] "GET / HTTP/1.1" 5x3 0 "-" "-" 80 0.000 [shop-web-80] [] - - - - x` + "\n", 4, "status"},
		{"ingress-nginx", `10.0.0.9 - - [01/Mar/2026:09:00:03 +0000] "GET / HTTP/1.1" 503 0 "-" "-" 80 0.0x0 [shop-web-80] [] - - - - x` + "\n", 1, "request_time"},
		{"nginx-error", goodNginxError + "2026/13/01 09:00:01 [error] 1#1: *1 connect() failed\n", 3, "time"},
		{"nginx-error", "2026/03/01 09:00:01 [oops] 1#1: x\n", 1, "level"},
		{"haproxy", goodHAProxy + `10.0.0.9:1 [01/Mar/2026:09:00:01.000] fe be/s 0/0/0/0/x 503 0 - - SC-- 1/1/1/1/0 0/0 "GET / HTTP/1.1"` + "\n", 3, "timers"},
		{"haproxy", `10.0.0.9:1 [01/Mar/2026:09:00:01.000] fe be/s 0/0/0/0/1 5o3 0 - - SC-- 1/1/1/1/0 0/0 "GET / HTTP/1.1"` + "\n", 1, "status"},
		{"haproxy", `10.0.0.9:1 [01/Mar/2026:09:00:01.000] fe be/s 0/0/0/0/1 503 0 - - SCXYZ 1/1/1/1/0 0/0 "GET / HTTP/1.1"` + "\n", 1, "termination_state"},
		{"haproxy", `10.0.0.9:1 fe be/s` + "\n", 1, "accept_date"},
		{"traefik", goodTraefik + `{"DownstreamStatus":502,"StartUTC":"2026-03-01 09:00:00"}` + "\n", 3, "StartUTC"},
		{"traefik", `{"DownstreamStatus":502,"StartUTC":"2026-03-01T09:00:00Z","Duration":"x"}` + "\n", 1, "Duration"},
		{"alb", goodALB + `http 2026-03-01T09:00:00Z app/x 1.2.3.4:5 - -1 -1 -1 5xx - 0 0 "GET / HTTP/1.1" "-"` + "\n", 4, "elb_status_code"},
		{"alb", `tcp 2026-03-01T09:00:00Z app/x 1.2.3.4:5 - -1 -1 -1 502 - 0 0 "GET / HTTP/1.1" "-"` + "\n", 1, "type"},
		{"alb", `http 2026-03-01T09:00:00Z app/x` + "\n", 1, "client:port"},
		{"gcp-lb", goodGCPLB + `{"timestamp":"2026-03-01T09:00:00Z","httpRequest":{"status":502,"latency":"12ms"}}` + "\n", 3, "httpRequest.latency"},
		{"gcp-lb", `{"timestamp":"2026-03-01T09:00:00Z","jsonPayload":{}}` + "\n", 1, "httpRequest.status"},
		{"target-health", "# 2026-03-01T09:00:00Z\n{\n  \"TargetHealthDescriptions\": [\n    {\"Target\": {\"Id\": \"10.0.0.1\", \"Port\": 80},,}\n  ]\n}\n# 2026-03-01T09:00:01Z\n", 4, "Port"},
		{"target-health", "# 2026-03-01T09:00:00Z\n{\"TargetHealthDescriptions\": [{\"Target\": {\"Id\": \"10.0.0.1\", \"Port\": 70000}}]}\n", 2, "Target.Id"},
		{"target-health", "{\"TargetHealthDescriptions\": []}\n", 1, FieldLine},
		{"target-health", "# yesterday\n", 1, "time"},
	} {
		_, bad := readFailures(t, c.format, c.input, Options{}, nil)
		if len(bad) != 1 || bad[0].Line != c.line || bad[0].Field != c.field {
			t.Errorf("%s %q: rejections %v, want one at line %d field %s", c.format, truncate(c.input, 60), bad, c.line, c.field)
			continue
		}
		if msg := bad[0].Error(); !strings.Contains(msg, "field "+c.field) {
			t.Errorf("%s: %q does not name its field", c.format, msg)
		}
	}
}

// The importer names the file in each rejection: file:line: field.
func TestIngressFormatsFileLine(t *testing.T) {
	im := &Importer{Parser: parserFor(t, "haproxy", Options{})}
	sum, _ := im.Import(context.Background(), "haproxy.log", strings.NewReader(goodHAProxy+"garbage\n"))
	if sum.Rejected != 1 || !strings.HasPrefix(sum.Examples[0].Error(), "haproxy.log:3: field accept_date: ") {
		t.Fatalf("%s %v", sum.Counts(), sum.Examples)
	}
}

func TestIngressFormatsResolvePods(t *testing.T) {
	res := NewResolver()
	t0 := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC).UnixNano()
	for i, ip := range []string{"10.244.0.6", "10.244.0.7"} {
		e := event.Event{Time: t0, Kind: event.PodReady, Pod: event.PodRef{Namespace: "shop", Name: "web-" + ip, UID: string(rune('a' + i))},
			Local: netip.AddrPortFrom(netip.MustParseAddr(ip), 0)}
		res.Add(&e)
	}
	for _, f := range []string{"haproxy", "traefik", "gcp-lb", "ingress-nginx"} {
		parse := parserFor(t, f, Options{})
		conv := newConverter(res)
		resolved, failed := 0, 0
		parse(strings.NewReader(goodLines[f]), func(r *Record) error {
			if r.Err != nil || !r.Failed {
				return nil
			}
			failed++
			e, _ := conv.event(r)
			if !e.Pod.IsZero() {
				resolved++
			}
			return nil
		})
		if failed == 0 || resolved == 0 {
			t.Errorf("%s: %d of %d failures on a pod", f, resolved, failed)
		}
	}
}

func FuzzIngressNginx(f *testing.F) {
	fuzzParser(f, "ingress-nginx", goodIngressNginx,
		`10.0.0.9 - - [01/Mar/2026:09:00:01 +0000] "GET / HTTP/1.1" 503 0 "-" "-" 80 0.000 [a-b-c-d-80] [] 0.0.0.1:80 : 10.244.0.5:8080 0 : 0 0.000 : 0.001 503 : 502 x`+"\n")
}

func FuzzNginxError(f *testing.F) {
	fuzzParser(f, "nginx-error", goodNginxError,
		"2026/03/01 09:00:01 [error] 31#31: *1 no live upstreams while connecting to upstream, client: , upstream: \"http://[::1]:80/\"\n")
}

func FuzzHAProxy(f *testing.F) {
	fuzzParser(f, "haproxy", goodHAProxy,
		`10.0.0.9:1 [01/Mar/2026:09:00:01.000] fe b/<NOSRV> -1/-1/-1/-1/-1 -1 0 - - sQ-- 0/0/0/0/3 0/0 {a b} {"} "GET \" HTTP/1.1" [::1]:80`+"\n")
}

func FuzzTraefik(f *testing.F) {
	fuzzParser(f, "traefik", goodTraefik, `{"DownstreamStatus":0,"StartUTC":"2261-12-31T23:59:59Z","Duration":9223372036854775807}`+"\n")
}

func FuzzALB(f *testing.F) {
	fuzzParser(f, "alb", goodALB)
}

func FuzzGCPLB(f *testing.F) {
	fuzzParser(f, "gcp-lb", goodGCPLB, `{"timestamp":"2026-03-01T09:00:00Z","httpRequest":{"status":0,"latency":".s","serverIp":"::ffff:10.0.0.1"}}`+"\n")
}

func FuzzTargetHealth(f *testing.F) {
	fuzzParser(f, "target-health", goodTargetHealth,
		"# 1772355600 a/b\n[{\"status\":{\"healthStatus\":[{\"healthState\":\"HEALTHY\",\"ipAddress\":\"fd00::1\",\"port\":1}]}}]\n# 1772355601 a/b\n{\"healthStatus\":[]}\n")
}
