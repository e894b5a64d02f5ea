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

// An envoy's endpoint removal, imported from snapshots of its admin
// /clusters, is when the endpoint left rotation on that proxy: with the
// proxy named after its node, a refusal after it (plus DataplaneSlack) is
// set aside even within the assumed 1 s of the watch, as for kube-proxy's
// rules; one before it is an endpoint race. While envoy still lists the
// host healthy, both refusals are in rotation; with no snapshots, both are
// within the watch's assumed lag.
func TestEnvoyRemovalEndsRotation(t *testing.T) {
	run := func(snapshots, removed bool) (*Result, int64) {
		r := newRec("node-a")
		p := r.pod("web-a", "10.244.0.11")
		other := r.pod("web-b", "10.244.0.12")
		for _, q := range []*tpod{p, other} {
			r.created(q, -60*s)
			r.ready(q, -58*s)
		}
		p.pid = 5000
		r.deletion(p, 0, 30*time.Second)
		r.signal(p, 10*ms, 15)
		r.exit(p, 12*ms, 0, 0)
		r.leave(p, 100*ms, 0)
		r.refused(p, 200*ms, client(1)) // envoy still sent there
		r.refused(p, 600*ms, client(2)) // 500 ms after the watch, 300 ms after envoy's removal
		var b strings.Builder
		cluster := "outbound|8080||web.default.svc.cluster.local"
		for _, d := range []int64{-58*s + 50*ms, 200 * ms, 300 * ms, 500 * ms} {
			fmt.Fprintf(&b, "# %s\n", time.Unix(0, r.at(d)).UTC().Format(time.RFC3339Nano))
			if d < 300*ms || !removed {
				fmt.Fprintf(&b, "%s::%s::health_flags::healthy\n", cluster, p.addr())
			}
			fmt.Fprintf(&b, "%s::%s::health_flags::healthy\n", cluster, other.addr())
		}
		if !snapshots {
			b.Reset()
		}
		err := ingest.ParseEnvoyClusters(strings.NewReader(b.String()), ingest.Options{ProxyName: "node-a"}, func(rec *ingest.Record) error {
			if rec.Err != nil {
				t.Fatalf("snapshot rejected: %v", rec.Err)
			}
			r.add(rec.Event())
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		res, err := AnalyzeEvents(r.events, store.Query{Window: event.Window{From: r.t0 - 2*60*s, To: r.t0 + 2*60*s}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return res, r.at(300 * ms)
	}
	res, removal := run(true, true)
	if inf := res.Inference; inf.ByProof[ProofRefusedSYN] != 1 || inf.RefusedOutOfRotation != 1 || inf.ByProof[ProofRefusedLagging] != 0 {
		t.Errorf("inference %+v: want one refused SYN in rotation, one set aside", inf)
	}
	if len(res.DataplaneLag) != 1 || res.DataplaneLag[0].Node != "node-a" || res.DataplaneLag[0].Proxy != "envoy" || res.DataplaneLag[0].P99 != 200*ms {
		t.Errorf("measured lag %+v, want node-a's envoy 200 ms behind the watch", res.DataplaneLag)
	}
	if l := LagLine(res.DataplaneLag); !strings.Contains(l, "(measured, envoy)") {
		t.Errorf("lag line %q does not name envoy", l)
	}
	for _, tl := range res.Timelines {
		if tl.Pod.Name == "web-a" && (tl.OutOfRotation == nil || tl.OutOfRotation.Last != removal) {
			t.Errorf("out of rotation %+v, want envoy's removal at +300 ms", tl.OutOfRotation)
		}
	}
	if res, _ := run(true, false); res.Inference.RefusedOutOfRotation != 0 || res.Inference.ByProof[ProofRefusedSYN] != 2 {
		t.Errorf("envoy still sending: %+v, want both refusals in rotation", res.Inference)
	}
	if res, _ := run(false, false); res.Inference.RefusedOutOfRotation != 0 || res.Inference.ByProof[ProofRefusedLagging] != 2 {
		t.Errorf("no snapshots: %+v, want both refusals within the watch's lag", res.Inference)
	}
}
