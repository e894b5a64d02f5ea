package ingest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

// TestProxyLogStates: an istio-proxy container's log and a linkerd-proxy
// one, as kubectl logs gives them, become the proxy's states at their
// lines' times, the pod and container named by the options; envoy's
// access log and the proxies' other lines are no part of them.
func TestProxyLogStates(t *testing.T) {
	at := func(s string) int64 {
		tm, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixNano()
	}
	type state struct {
		at, reason, conns string
	}
	for _, tc := range []struct {
		format, file, container string
		want                    []state
	}{
		{"istio-proxy", "istio_proxy.log", "istio-proxy", []state{
			{"2026-03-01T09:00:10.0105Z", event.ProxyDraining, ""},
			{"2026-03-01T09:00:12.0123Z", event.ProxyConnections, "3"},
			{"2026-03-01T09:00:15.0124Z", event.ProxyTerminating, ""},
			{"2026-03-01T09:00:15.0125Z", event.ProxyTerminating, ""},
			{"2026-03-01T09:00:15.014Z", event.ProxyExited, ""},
		}},
		{"linkerd-proxy", "linkerd_proxy.log", "linkerd-proxy", []state{
			{"2026-03-01T09:00:10.004Z", event.ProxyDraining, ""},
		}},
	} {
		t.Run(tc.format, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st := newMemStore()
			im := &Importer{Store: st, Parser: parserFor(t, tc.format, Options{Pod: "shop/web-7d9f-abcde"}), Strict: true}
			sum, err := im.Import(context.Background(), tc.file, f)
			if err != nil {
				t.Fatal(err)
			}
			if sum.States != len(tc.want) || sum.Changes != 0 || sum.Failures != 0 || len(st.events) != len(tc.want) {
				t.Fatalf("%s, %d stored; want %d states", sum.Counts(), len(st.events), len(tc.want))
			}
			if want := fmt.Sprintf("%d states of the proxy (%d stored), 0 rejected", len(tc.want), len(tc.want)); sum.Counts() != want {
				t.Errorf("summary %q, want %q", sum.Counts(), want)
			}
			for i, w := range tc.want {
				e := st.events[i]
				pod := event.PodRef{Namespace: "shop", Name: "web-7d9f-abcde", Container: tc.container}
				if e.Kind != event.ProxyState || e.Time != at(w.at) || e.Reason != w.reason || e.Pod != pod ||
					e.Attrs[event.AttrConnections] != w.conns || e.Source != event.SourceClient {
					t.Errorf("state %d: %+v; want %s at %s, %s connections, of %v", i, e, w.reason, w.at, w.conns, pod)
				}
			}
		})
	}
}

// TestProxyLogNeedsItsPod: a proxy's log names no pod, so the format
// refuses to start without one, and the options that name one are
// refused for the formats whose lines name their own.
func TestProxyLogNeedsItsPod(t *testing.T) {
	for _, pod := range []string{"", "web-7d9f", "shop/", "/web", "a/b/c"} {
		_, err := mustFormat("istio-proxy").Parser(Options{Pod: pod})
		if err == nil || !strings.Contains(err.Error(), "--pod NAMESPACE/NAME") {
			t.Errorf("pod %q: %v; want the pod asked for", pod, err)
		}
	}
	if _, err := mustFormat("nginx").Parser(Options{Pod: "shop/web"}); err == nil || !strings.Contains(err.Error(), "--pod") {
		t.Errorf("nginx with a pod: %v; want it refused", err)
	}
	// Without kubectl's timestamps a linkerd-proxy line has no time of day.
	im := &Importer{Store: newMemStore(), Parser: parserFor(t, "linkerd-proxy", Options{Pod: "shop/web"})}
	sum, _ := im.Import(context.Background(), "l.log", strings.NewReader("[    70.003401s]  INFO ThreadId(01) linkerd2_proxy::signal: received SIGTERM, starting shutdown\n"))
	if sum.Rejected != 1 || sum.Examples[0].Field != "time" || !strings.Contains(sum.Examples[0].Msg, "--timestamps") {
		t.Errorf("%s %v; want the line refused, naming kubectl logs --timestamps", sum.Counts(), sum.Examples)
	}
}

// TestProxyLogNotOverTheAPI: the ingest API takes no pod's own log, even
// named in its formats: a client's token would speak for any pod.
func TestProxyLogNotOverTheAPI(t *testing.T) {
	if slices.Contains(ClientFailureFormats(), "istio-proxy") {
		t.Error("istio-proxy among the API's default formats")
	}
	h := &Handler{Formats: []string{"istio-proxy"}}
	if msg := h.refuseFormat(mustFormat("istio-proxy"), false); !strings.Contains(msg, "drainscope import --pod") {
		t.Errorf("refusal %q; want it sent to drainscope import", msg)
	}
}
