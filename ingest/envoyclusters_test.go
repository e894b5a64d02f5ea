package ingest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

// change is one endpoint change as the tests compare them.
type change struct {
	kind            event.Kind
	at, ns, svc, ep string
	cluster, node   string
	line            int // the line that closed the snapshot
}

func parseChanges(t *testing.T, input string, opts Options) ([]change, []*LineError) {
	t.Helper()
	var out []change
	var bad []*LineError
	err := ParseEnvoyClusters(strings.NewReader(input), opts, func(r *Record) error {
		if r.Err != nil {
			c := *r.Err
			bad = append(bad, &c)
			return nil
		}
		e := r.Event()
		e.Seal()
		if err := e.Validate(); err != nil {
			t.Fatalf("line %d: invalid event: %v", r.Line, err)
		}
		if e.Attrs[event.AttrProxy] != event.ProxyEnvoy || e.Source != event.SourceDataplane {
			t.Fatalf("event %+v: want proxy envoy, source dataplane", e)
		}
		out = append(out, change{e.Kind, timeString(e.Time), e.Pod.Namespace, e.Service, e.Local.String(),
			e.Attrs[event.AttrCluster], e.Node, r.Line})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, bad
}

func timeString(ns int64) string {
	return strings.TrimSuffix(strings.TrimPrefix(time.Unix(0, ns).UTC().Format(time.RFC3339Nano), "2026-03-01T"), "Z")
}

// The fixture is envoy's /clusters text format as envoy's admin handler
// (source/server/admin/clusters_handler.cc) prints it, line for line:
// outlier and circuit breaker lines, added_via_api, then per host its
// stats, hostname, health_flags (HostUtility::healthFlagsToString:
// "healthy" or /flag/…), weight, locality, canary, priority and success
// rates. The cluster names follow Istio's and Envoy Gateway's schemes; the
// addresses, counts and times are made up. Between the snapshots, one web
// host starts draining (EDS draining) and then leaves, a new one appears,
// and the gateway's backend fails its active health check; the last
// snapshot is a failed poll.
func TestEnvoyClustersFixture(t *testing.T) {
	data, err := os.ReadFile("testdata/envoy_clusters.log")
	if err != nil {
		t.Fatal(err)
	}
	got, bad := parseChanges(t, string(data), Options{ProxyName: "ingress-1", BaselineOnly: true})
	if len(bad) != 0 {
		t.Fatalf("rejected: %v", bad)
	}
	web := "outbound|8080||web.shop.svc.cluster.local"
	gw := "httproute/shop/api/rule/0"
	want := []change{
		{event.DataplaneEndpointRemoved, "09:00:00.305120034", "shop", "web", "10.244.0.11:8080", web, "ingress-1", 155},
		{event.DataplaneEndpointRemoved, "09:00:00.5078812", "", gw, "10.244.1.7:3000", gw, "ingress-1", 232},
		{event.DataplaneEndpointAdded, "09:00:00.5078812", "shop", "web", "10.244.0.13:8080", web, "ingress-1", 232},
	}
	if len(got) != len(want) {
		t.Fatalf("changes:\n%v\nwant\n%v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("change %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	// By default the first snapshot's hosts are added at its time.
	got, _ = parseChanges(t, string(data), Options{})
	if len(got) != 6 || got[0].kind != event.DataplaneEndpointAdded || got[0].line != 78 || got[0].node != "envoy" {
		t.Errorf("with the baseline: %+v, want 3 added at line 78, which closed the first snapshot (proxy envoy), then the 3 changes", got)
	}
}

func TestEnvoyClustersDiff(t *testing.T) {
	in := "# 1772355600\n" +
		"a::10.0.0.1:80::health_flags::healthy\n" +
		"a::[fd00::1]:80::health_flags::healthy\n" +
		"a::[fd00::1]:80::cx_active::0\n" +
		"# 1772355600.5\n" + // unchanged
		"a::10.0.0.1:80::health_flags::healthy\n" +
		"a::[fd00::1]:80::health_flags::healthy\n" +
		"# 1772355601.25\n" + // v6 host turns unhealthy, and back
		"a::10.0.0.1:80::health_flags::healthy\n" +
		"a::[fd00::1]:80::health_flags::/failed_outlier_check\n" +
		"# 1772355602\n" +
		"a::10.0.0.1:80::health_flags::healthy\n" +
		"a::[fd00::1]:80::health_flags::healthy\n" +
		"# 1772355603\n" + // cluster a gone as a whole: its hosts leave
		"b::10.0.0.1:80::health_flags::healthy\n"
	got, bad := parseChanges(t, in, Options{BaselineOnly: true})
	if len(bad) != 0 {
		t.Fatalf("rejected: %v", bad)
	}
	var s []string
	for _, c := range got {
		s = append(s, string(c.kind)[19:]+" "+c.svc+" "+c.ep+" "+c.at)
	}
	want := "removed a [fd00::1]:80 09:00:01.25|added a [fd00::1]:80 09:00:02|" +
		"removed a 10.0.0.1:80 09:00:03|removed a [fd00::1]:80 09:00:03|added b 10.0.0.1:80 09:00:03"
	if g := strings.Join(s, "|"); g != want {
		t.Errorf("changes\n%s\nwant\n%s", g, want)
	}
	// An input that stops mid-snapshot (no final newline) keeps what came
	// before and reads nothing into the cut snapshot.
	cut := strings.TrimSuffix(in, "\n")
	if got, _ := parseChanges(t, cut, Options{BaselineOnly: true}); len(got) != 2 {
		t.Errorf("cut input: %d changes, want the 2 before the last snapshot", len(got))
	}
}

func TestEnvoyClusterService(t *testing.T) {
	for _, c := range []struct{ cluster, ns, svc string }{
		{"outbound|8080||web.shop.svc.cluster.local", "shop", "web"},
		{"outbound|80|v2|reviews.default.svc.corp.example", "default", "reviews"},
		{"inbound|8080||", "", "inbound|8080||"},
		{"outbound|443||api.example.com", "", "outbound|443||api.example.com"},
		{"httproute/shop/api/rule/0", "", "httproute/shop/api/rule/0"},
		{"web_backend", "", "web_backend"},
	} {
		if ns, svc := envoyClusterService(c.cluster); ns != c.ns || svc != c.svc {
			t.Errorf("%q: %q/%q, want %q/%q", c.cluster, ns, svc, c.ns, c.svc)
		}
	}
}

func TestEnvoyClustersBadLines(t *testing.T) {
	in := "a::10.0.0.1:80::health_flags::healthy\n" + // before any timestamp
		"# 2026-03-01 09:00:00Z\n" +
		"# 2026-03-01T09:00:00Z\n" +
		"a::10.0.0.1:80::health_flags::healthy\n" +
		"a::10.0.0.2:99999::health_flags::healthy\n" +
		"a::10.0.0.3:80::health_flags::ok\n" +
		"upstream connect error\n" +
		"::10.0.0.4:80::health_flags::healthy\n" +
		"# 2026-03-01T09:00:01Z\n" +
		"a::10.0.0.9:80::health_flags::/failed_active_hc\n"
	im := &Importer{Store: newMemStore(), Parser: parserFor(t, "envoy-clusters", Options{BaselineOnly: true})}
	sum, err := im.Import(context.Background(), "clusters.log", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, e := range sum.Examples {
		msgs = append(msgs, e.Error())
	}
	want := []string{
		"clusters.log:1: field (line): a host line before the first timestamp line",
		"clusters.log:2: field time: \"2026-03-01 09:00:00Z\" is not RFC 3339",
		"clusters.log:5: field address: \"10.0.0.2:99999\" is not a host IP:PORT",
		"clusters.log:6: field health_flags: \"ok\"",
		"clusters.log:7: field (line): not envoy /clusters output",
		"clusters.log:8: field cluster: empty cluster name",
	}
	if len(msgs) != len(want) {
		t.Fatalf("rejections:\n%s", strings.Join(msgs, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(msgs[i], want[i]) {
			t.Errorf("rejection %d: %q, want it to start %q", i, msgs[i], want[i])
		}
	}
	// The good host of the first snapshot left in the second: kept.
	if sum.Changes != 1 || sum.Stored != 1 {
		t.Errorf("%s: want the one removal stored", sum.Counts())
	}
}
