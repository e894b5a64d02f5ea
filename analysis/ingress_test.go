package analysis

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/ingest"
	"github.com/drainscope/drainscope/store"
)

// importLog parses one proxy log line through ingest's parser for format
// and records its failures, as drainscope import stores them.
func importLog(t *testing.T, r *rec, format, input string, opts ingest.Options) {
	t.Helper()
	f, err := ingest.LookupFormat(format)
	if err != nil {
		t.Fatal(err)
	}
	parse, err := f.Parser(opts)
	if err != nil {
		t.Fatal(err)
	}
	err = parse(strings.NewReader(input), func(rec *ingest.Record) error {
		if rec.Err != nil {
			t.Fatalf("%s line rejected: %v", format, rec.Err)
		}
		if !rec.Failed {
			return nil
		}
		e := rec.Event()
		if e.Service == "" && rec.Attrs[ingest.AttrUpstreamName] != "" {
			e.Service = ingest.UpstreamService(rec.Attrs[ingest.AttrUpstreamName], nil)
		}
		r.add(e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// haproxyDataplane records HAProxy's own view of the pod, as the lab's
// poller of `show servers state` does: its add and its removal.
func haproxyDataplane(r *rec, p *tpod, d int64, added bool) {
	k := event.DataplaneEndpointRemoved
	if added {
		k = event.DataplaneEndpointAdded
	}
	r.add(event.Event{Time: r.at(d), Kind: k, Node: "haproxy", Source: event.SourceDataplane,
		Pod: event.PodRef{Namespace: p.ref.Namespace}, Service: p.svc, Local: p.addr(),
		Attrs: map[string]string{event.AttrProxy: event.ProxyHAProxy}})
}

func analyzeRec(t *testing.T, r *rec) *Result {
	t.Helper()
	res, err := AnalyzeEvents(r.events, store.Query{Window: event.Window{From: r.t0 - 2*60*s, To: r.t0 + 2*60*s}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func ingressCauses(res *Result) map[Cause]int {
	out := map[Cause]int{}
	for _, c := range res.Causes {
		out[c.Cause] += c.Count
	}
	return out
}

// A refused connect that HAProxy logged (SC--) on a pod the EndpointSlice
// had removed 0.9 s before, while HAProxy's own server list still held it
// until 2 s after the removal, is the ingress's lag: named with the lag in
// numbers, never a keep-alive cut. Without HAProxy's list recorded it is an
// endpoint race; a refused connect is never a keep-alive cut either way.
func TestProxyLagCause(t *testing.T) {
	run := func(withList bool) *Result {
		r := newRec("node-a")
		p := r.pod("web-a", "10.244.0.11")
		r.created(p, -60*s)
		r.ready(p, -58*s)
		if withList {
			haproxyDataplane(r, p, -57*s, true)
		}
		r.deletion(p, 0, 30*time.Second)
		r.leave(p, 100*ms, 0)
		r.signal(p, 110*ms, 15)
		r.listenerClosed(p, 120*ms)
		r.exit(p, 130*ms, 0, 0)
		if withList {
			haproxyDataplane(r, p, 2100*ms, false)
		}
		start := time.Unix(0, r.at(time.Duration(1000*ms).Nanoseconds())).UTC()
		line := fmt.Sprintf(`10.244.0.1:40100 [%s] fe_http default_web_80/srv1 0/0/-1/-1/1 503 217 - - SC-- 2/2/0/0/0 0/0 "GET / HTTP/1.1" 10.244.0.11:8080`+"\n",
			start.Format("02/Jan/2006:15:04:05.000"))
		importLog(t, r, "haproxy", line, ingest.Options{})
		return analyzeRec(t, r)
	}
	res := run(true)
	if c := ingressCauses(res); c[CauseProxyLag] != 1 || c[CauseKeepAliveAtExit] != 0 {
		t.Fatalf("causes %v: want the refused connect named the ingress's lag", c)
	}
	var fix string
	for _, c := range res.Causes {
		if c.Cause == CauseProxyLag {
			fix = c.Fix
		}
	}
	if !strings.Contains(fix, "haproxy") || !strings.Contains(fix, "2.0 s") || !strings.Contains(fix, "deregistration delay < preStop sleep < terminationGracePeriodSeconds") {
		t.Errorf("fix %q: want haproxy's measured lag of 2.0 s and the ALB ordering", fix)
	}
	found := false
	for _, f := range res.Failures {
		for _, ev := range f.Evidence {
			if strings.Contains(ev.Role, "haproxy haproxy still listed it: its own removal came 2.0 s after the EndpointSlice's") {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("no evidence names haproxy's lag: %+v", res.Failures)
	}
	lagged := false
	for _, l := range res.DataplaneLag {
		if l.Node == "haproxy" && l.Proxy == event.ProxyHAProxy && l.P99 == 2000*ms {
			lagged = true
		}
	}
	if !lagged {
		t.Errorf("measured lags %+v: want haproxy's 2.0 s beside kube-proxy's", res.DataplaneLag)
	}
	if c := ingressCauses(run(false)); c[CauseProxyLag] != 0 || c[CauseKeepAliveAtExit] != 0 || c[CauseEndpointRace] != 1 {
		t.Errorf("without HAProxy's list: causes %v, want an endpoint race", c)
	}
}

// ingress-nginx's 503 with no endpoint (its balancer's placeholder
// upstream) is named "no ready endpoints" for the Service its
// $proxy_upstream_name names only when that Service had none.
func TestIngressNginxNoEndpoints(t *testing.T) {
	run := func(othersReady bool) map[Cause]int {
		r := newRec("node-a")
		p := r.pod("web-a", "10.244.0.11")
		q := r.pod("web-b", "10.244.0.12")
		r.created(p, -60*s)
		r.ready(p, -58*s)
		r.created(q, -60*s)
		r.ready(q, -58*s)
		r.deletion(p, 0, 30*time.Second)
		r.leave(p, 100*ms, 0)
		r.removed(p, 200*ms, 0)
		if !othersReady {
			r.deletion(q, 0, 30*time.Second)
			r.leave(q, 100*ms, 0)
			r.removed(q, 200*ms, 0)
		}
		at := time.Unix(0, r.at(2*s)).UTC()
		line := fmt.Sprintf(`10.0.0.9 - - [%s] "GET / HTTP/1.1" 503 190 "-" "curl/8.5" 80 0.000 [default-web-80] [] 0.0.0.1:80 0 0.000 503 7c3f4e5061`+"\n",
			at.Format("02/Jan/2006:15:04:05 -0700"))
		importLog(t, r, "ingress-nginx", line, ingest.Options{})
		return ingressCauses(analyzeRec(t, r))
	}
	if c := run(false); c[CauseNoReadyEndpoints] != 1 {
		t.Errorf("Service with no endpoint: causes %v, want no ready endpoints", c)
	}
	if c := run(true); c[CauseNoReadyEndpoints] != 0 {
		t.Errorf("Service with a ready endpoint: causes %v, want anything but no ready endpoints", c)
	}
}

// A proxy's 502 says only that its upstream failed: a bare one (a proxy's
// access log with no mechanism, like nginx's without its error log) on a
// pod at its exit is not named a keep-alive cut by itself, since a refused
// connect is a 502 too. The pod's kernel closing that connection at exit
// makes it one, and so does HAProxy's own account of it (SD: the server
// closed the connection during the data phase), while HAProxy's SC (the
// server refused the connect) never is.
func TestBare502IsNoCut(t *testing.T) {
	run := func(add func(r *rec, p *tpod)) map[Cause]int {
		r := newRec("node-a")
		p := r.pod("web-a", "10.244.0.11")
		r.created(p, -60*s)
		r.ready(p, -58*s)
		r.deletion(p, 0, 30*time.Second)
		r.signal(p, 10*ms, 15)
		r.exit(p, 20*ms, 0, 0)
		r.leave(p, 400*ms, 0)
		add(r, p)
		return ingressCauses(analyzeRec(t, r))
	}
	bare := func(r *rec, p *tpod) {
		r.failure(22*ms, client(1), event.FailStatus, backend(p), func(e *event.Event) { e.Code = 502 })
	}
	if c := run(bare); c[CauseKeepAliveAtExit] != 0 || c[CauseInFlight] != 0 || c[CauseUnexplained] != 1 {
		t.Errorf("a bare 502 at exit: causes %v, want unexplained", c)
	}
	closed := func(r *rec, p *tpod) {
		r.connClosed(p, 21*ms, client(1), "", event.FlagAtExit)
		bare(r, p)
	}
	if c := run(closed); c[CauseKeepAliveAtExit] != 1 {
		t.Errorf("a 502 on a connection the exit closed: causes %v, want a keep-alive cut", c)
	}
	haproxy := func(tsc string) func(r *rec, p *tpod) {
		return func(r *rec, p *tpod) {
			start := time.Unix(0, r.at(20*ms)).UTC()
			importLog(t, r, "haproxy", fmt.Sprintf(`10.244.0.1:40100 [%s] fe_http default_web_80/srv1 0/0/0/-1/2 502 217 - - %s 2/2/0/0/0 0/0 "GET / HTTP/1.1" 10.244.0.11:8080`+"\n",
				start.Format("02/Jan/2006:15:04:05.000"), tsc), ingest.Options{})
		}
	}
	if c := run(haproxy("SD--")); c[CauseKeepAliveAtExit] != 1 {
		t.Errorf("HAProxy's SD at exit: causes %v, want a keep-alive cut", c)
	}
	if c := run(haproxy("SC--")); c[CauseKeepAliveAtExit] != 0 || c[CauseInFlight] != 0 {
		t.Errorf("HAProxy's SC at exit: causes %v, want no cut", c)
	}
}

// An ingress's own watch may get an EndpointSlice change before the
// recorder's does: HAProxy's removal recorded 6 ms before the watch's
// leave is a lag of 0, counted among its removals, not left out.
func TestProxyRemovalBeforeWatch(t *testing.T) {
	r := newRec("node-a")
	p := r.pod("web-a", "10.244.0.11")
	q := r.pod("web-b", "10.244.0.12")
	for _, x := range []*tpod{p, q} {
		r.created(x, -60*s)
		r.ready(x, -58*s)
		haproxyDataplane(r, x, -57*s, true)
	}
	r.deletion(p, 0, 30*time.Second)
	haproxyDataplane(r, p, 94*ms, false)
	r.leave(p, 100*ms, 0)
	r.deletion(q, 2*s, 30*time.Second)
	r.leave(q, 2100*ms, 0)
	haproxyDataplane(r, q, 2140*ms, false)
	res := analyzeRec(t, r)
	for _, l := range res.DataplaneLag {
		if l.Node == "haproxy" {
			if l.Samples != 2 || l.Max != 40*ms {
				t.Errorf("haproxy's lag %+v: want 2 removals, 0 and 40 ms", l)
			}
			return
		}
	}
	t.Errorf("no haproxy lag in %+v", res.DataplaneLag)
}
