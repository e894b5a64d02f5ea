package analysis

import (
	"fmt"
	"net/netip"
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
		r.envoySnapshots(t, b.String())
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

// envoyLine is one line of Istio's default access log (22 fields), as a
// client's sidecar writes it: the upstream host is the pod it picked.
func envoyLine(at int64, code, flags, details, upstream string, client netip.AddrPort) string {
	up := upstream
	if up == "" {
		up = "-"
	}
	return fmt.Sprintf(`[%s] "GET /x HTTP/1.1" %s %s %s - "-" 0 91 2 - "-" "curl/8.5" "id" "web" "%s" outbound|80||web.default.svc.cluster.local 10.244.0.1:40000 10.96.0.10:80 %s - default`,
		time.Unix(0, at).UTC().Format("2006-01-02T15:04:05.000Z"), code, flags, details, up, client)
}

// TestEnvoyFlagsMechanisms: each of envoy's response flags in a client
// sidecar's log, at the end of a pod whose app exits at SIGTERM, names
// the mechanism it is: UF (the upstream connect failed) the endpoint
// race, UC (the upstream connection ended) the keep-alive cut at exit, UH
// (no healthy upstream) no ready endpoints, NR (no route) nothing the
// endpoints explain, and DC (the downstream went away) no failure of the
// server at all.
func TestEnvoyFlagsMechanisms(t *testing.T) {
	for _, tc := range []struct {
		flags, code, details string
		none                 bool // no endpoint ready: the Service's only pod gone
		want                 Cause
		failed               bool
	}{
		{"UF", "503", "upstream_reset_before_response_started{connection_failure}", false, CauseEndpointRace, true},
		{"UF,URX", "503", "-", false, CauseEndpointRace, true},
		{"UC", "503", "upstream_reset_before_response_started{connection_termination}", false, CauseKeepAliveAtExit, true},
		{"UH", "503", "no_healthy_upstream", true, CauseNoReadyEndpoints, true},
		{"NR", "404", "route_not_found", false, CauseUnexplained, true},
		{"DC", "0", "downstream_remote_disconnect", false, "", false},
	} {
		t.Run(tc.flags, func(t *testing.T) {
			r := newRec()
			a := r.running("web-a", "10.244.0.10")
			r.deletion(a, 0, 30*time.Second)
			r.signal(a, 10*ms, 15)
			r.listenerClosed(a, 10*ms)
			r.exit(a, 20*ms, 0, 15)
			c := client(1)
			upstream := a.addr().String()
			switch tc.flags {
			case "UC":
				r.connClosed(a, 20*ms, c, "local", event.FlagAtExit)
			case "UF", "UF,URX":
				r.refused(a, 100*ms, c)
			}
			if tc.none || tc.flags == "NR" {
				upstream = ""
			}
			r.leave(a, 400*ms, 0)
			if tc.none {
				r.removed(a, 500*ms, 0)
			} else {
				b := r.running("web-b", "10.244.0.11")
				_ = b
			}
			at := 100*ms + 1*ms
			if tc.none {
				at = 700 * ms
			}
			line := envoyLine(r.at(at)-2*ms, tc.code, tc.flags, tc.details, upstream, c)
			var failed []event.Event
			err := ingest.ParseEnvoy(strings.NewReader(line+"\n"), ingest.Options{}, func(rec *ingest.Record) error {
				if rec.Err != nil {
					t.Fatalf("line rejected: %v", rec.Err)
				}
				if rec.Failed {
					failed = append(failed, rec.Event())
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if (len(failed) > 0) != tc.failed {
				t.Fatalf("flags %s: %d failures recorded, want failed=%v", tc.flags, len(failed), tc.failed)
			}
			for _, e := range failed {
				r.add(e)
			}
			fs := clientFailures(analyzeAll(t, r))
			if !tc.failed {
				if len(fs) != 0 {
					t.Errorf("flags %s: %+v, want no failure", tc.flags, fs)
				}
				return
			}
			if len(fs) != 1 || fs[0].Cause != tc.want {
				var got []Cause
				for _, f := range fs {
					got = append(got, f.Cause)
				}
				t.Errorf("flags %s: causes %v, want %s", tc.flags, got, tc.want)
			}
		})
	}
}

// TestMeshedClientRaceByTheMeshLag: a client in the mesh reaches pods
// through its own sidecar, whose endpoint list is the mesh's, not
// kube-proxy's. Its refusal 2 s after the watch saw the endpoint leave is
// no race kube-proxy's lag explains; with the client's envoy still
// listing the pod until 3 s (its /clusters snapshots), it is the endpoint
// race, judged by the mesh's lag.
func TestMeshedClientRaceByTheMeshLag(t *testing.T) {
	for _, snapshots := range []bool{false, true} {
		r := newRec("node-a")
		a := r.running("web-a", "10.244.0.10")
		b := r.running("web-b", "10.244.0.11")
		r.deletion(a, 0, 30*time.Second)
		r.leave(a, 10*ms, 0)
		r.signal(a, 20*ms, 15)
		r.listenerClosed(a, 20*ms)
		r.exit(a, 30*ms, 0, 15)
		r.refused(a, 2*s, client(1))
		r.failure(2*s+1*ms, client(1), event.FailRefused, backend(a))
		if snapshots {
			var sb strings.Builder
			cluster := "outbound|8080||web.default.svc.cluster.local"
			for _, d := range []int64{-60 * s, 1 * s, 3 * s} {
				fmt.Fprintf(&sb, "# %s\n", time.Unix(0, r.at(d)).UTC().Format(time.RFC3339Nano))
				if d < 3*s {
					fmt.Fprintf(&sb, "%s::%s::health_flags::healthy\n", cluster, a.addr())
				}
				fmt.Fprintf(&sb, "%s::%s::health_flags::healthy\n", cluster, b.addr())
			}
			r.envoySnapshots(t, sb.String())
		}
		fs := clientFailures(analyzeAll(t, r))
		want := CauseUnexplained // 2 s after the watch's removal: beyond kube-proxy's assumed 1 s
		if snapshots {
			want = CauseEndpointRace // the client's own proxy still sent there
		}
		if len(fs) != 1 || fs[0].Cause != want {
			t.Errorf("snapshots=%v: %+v, want one %s", snapshots, fs, want)
		}
	}
}

// envoySnapshots adds what node-a's envoy's /clusters snapshots in text
// say, as drainscope import --format envoy-clusters stores it.
func (r *rec) envoySnapshots(t *testing.T, text string) {
	t.Helper()
	err := ingest.ParseEnvoyClusters(strings.NewReader(text), ingest.Options{ProxyName: "node-a"}, func(rec *ingest.Record) error {
		if rec.Err != nil {
			t.Fatalf("snapshot rejected: %v", rec.Err)
		}
		r.add(rec.Event())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
