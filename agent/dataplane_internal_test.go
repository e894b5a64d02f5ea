package agent

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/metrics"
	"github.com/drainscope/drainscope/store"
	"github.com/drainscope/drainscope/watcher"
)

// newGateAgent builds an agent, not run, whose own pods are one pod at
// 10.244.1.5.
func newGateAgent(t *testing.T, ownPodsOnly bool) *Agent {
	t.Helper()
	st, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "e.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	a, err := New(Config{Node: "node-b", Client: fake.NewClientset(), Store: st,
		Dataplane: DataplaneConfig{OwnPodsOnly: ownPodsOnly}, Metrics: metrics.New("agent", "test"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	a.ownPods = &watcher.StaticPods{Pods: []watcher.StaticPod{{
		Ref: event.PodRef{Namespace: "shop", Name: "web-1", UID: "u1"}, IPs: []netip.Addr{netip.MustParseAddr("10.244.1.5")}}}}
	return a
}

func dpEvent(k event.Kind, addr string, at time.Time) event.Event {
	e := event.Event{Time: at.UnixNano(), Kind: k, Node: "node-b", Source: event.SourceDataplane,
		Pod: event.PodRef{Namespace: "shop"}, Service: "web", Local: netip.MustParseAddrPort(addr)}
	e.Seal()
	return e
}

// A node of the sample stores every endpoint's rule changes; one outside
// it stores its own pods' only. Every removal is measured either way.
func TestDataplaneGate(t *testing.T) {
	base := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name        string
		ownPodsOnly bool
		kind        event.Kind
		addr        string
		stored      bool
	}{
		{"sample: another node's pod removed", false, event.DataplaneEndpointRemoved, "10.244.7.9:8080", true},
		{"sample: another node's pod added", false, event.DataplaneEndpointAdded, "10.244.7.9:8080", true},
		{"sample: own pod removed", false, event.DataplaneEndpointRemoved, "10.244.1.5:8080", true},
		{"outside: another node's pod removed", true, event.DataplaneEndpointRemoved, "10.244.7.9:8080", false},
		{"outside: another node's pod added", true, event.DataplaneEndpointAdded, "10.244.7.9:8080", false},
		{"outside: own pod removed", true, event.DataplaneEndpointRemoved, "10.244.1.5:8080", true},
		{"outside: own pod added", true, event.DataplaneEndpointAdded, "10.244.1.5:8080", true},
		{"outside: own pod by IPv4-mapped address", true, event.DataplaneEndpointRemoved, "[::ffff:10.244.1.5]:8080", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newGateAgent(t, tc.ownPodsOnly)
			// This node's watch saw the endpoint leave 300 ms before its
			// proxy dropped it (a tap: recorded or not).
			leave := event.Event{Time: base.UnixNano(), Kind: event.EndpointNotReady, Pod: event.PodRef{Namespace: "shop"},
				Service: "web", Local: netip.MustParseAddrPort(tc.addr)}
			a.tap(&leave)
			e := dpEvent(tc.kind, tc.addr, base.Add(300*time.Millisecond))
			if got := a.admitDataplane(&e); got != tc.stored {
				t.Errorf("stored = %v, want %v", got, tc.stored)
			}
			s := a.Stats()
			if s.DataplaneSeen != 1 || s.DataplaneStored != map[bool]uint64{false: 0, true: 1}[tc.stored] {
				t.Errorf("stats seen %d stored %d", s.DataplaneSeen, s.DataplaneStored)
			}
			wantLag := tc.kind == event.DataplaneEndpointRemoved
			if got := lagCount(t, a.m); got != map[bool]int{false: 0, true: 1}[wantLag] {
				t.Errorf("lag histogram holds %d samples, want %d (removal: %v)", got, map[bool]int{false: 0, true: 1}[wantLag], wantLag)
			}
		})
	}
}

// lagCount reads drainscope_dataplane_lag_seconds_count for node-b.
func lagCount(t *testing.T, m *metrics.Metrics) int {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, l := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(l, "drainscope_dataplane_lag_seconds_count{") && strings.Contains(l, `node="node-b"`) {
			f := strings.Fields(l)
			if len(f) == 2 && f[1] == "1" {
				return 1
			}
			return -1
		}
	}
	return 0
}
