package analysis

import (
	"cmp"
	"net/netip"
	"slices"
	"testing"

	"github.com/drainscope/drainscope/event"
)

// The connections counted open at SIGTERM are those that were: a
// connection that ends after SIGTERM while the listener still accepts may
// be a new one, and counts apart unless it carried data before SIGTERM.
func TestConnectionsOpenAtSigterm(t *testing.T) {
	pod := event.PodRef{Namespace: "default", Name: "web-1", UID: "uid-web-1"}
	wl := event.Workload{Kind: "Deployment", Name: "web"}
	srv := netip.MustParseAddrPort("10.244.0.11:8080")
	type conn struct {
		port     uint16 // the client's
		end      int64  // ms after SIGTERM
		kind     event.Kind
		idleMS   int64 // conn_closed's idle time; 0 unknown
		atExit   bool
		byClient bool
	}
	for _, tc := range []struct {
		name string
		// listener closes this long after SIGTERM; -1: never seen
		listener int64
		conns    []conn
		want     ConnSummary
	}{
		{"listener closed at SIGTERM: every later ending was open then", 0,
			[]conn{{port: 1, end: 500, kind: event.ConnClosed}, {port: 2, end: 3000, kind: event.ConnClosed, atExit: true}, {port: 3, end: 700, kind: event.ConnClosed, byClient: true}},
			ConnSummary{AtSigterm: 3, ByApp: 1, ByExit: 1, ByPeer: 1}},
		{"exit at SIGTERM closes the listener within the slack", 2,
			[]conn{{port: 1, end: 2, kind: event.ConnClosed, atExit: true}, {port: 2, end: 3, kind: event.RSTSent}},
			ConnSummary{AtSigterm: 2, ByExit: 1, Reset: 1}},
		{"draining with the listener open: new connections are not open at SIGTERM", 3000,
			[]conn{
				{port: 1, end: 400, kind: event.ConnClosed, idleMS: 2000}, // idle since before SIGTERM: open then
				{port: 2, end: 500, kind: event.ConnClosed, idleMS: 10},   // served after SIGTERM: maybe new
				{port: 3, end: 900, kind: event.ConnClosed},               // idle unknown
				{port: 4, end: 1200, kind: event.RSTReceived},             // a reset tells no age
				{port: 5, end: 3000, kind: event.ConnClosed, idleMS: 3500, atExit: true},
			},
			ConnSummary{AtSigterm: 2, ByApp: 1, ByExit: 1, AfterSigterm: 3}},
		{"no listener close seen: nothing says new ones were accepted", -1,
			[]conn{{port: 1, end: 500, kind: event.ConnClosed, idleMS: 10}, {port: 2, end: 600, kind: event.ConnClosed}},
			ConnSummary{AtSigterm: 2, ByApp: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sigterm := t0 + 100*ms
			var evs []event.Event
			add := func(at int64, k event.Kind, f func(*event.Event)) {
				e := event.Event{Time: at, Kind: k, Source: event.SourceKernel, Node: "node-a", Pod: pod, Workload: wl}
				if f != nil {
					f(&e)
				}
				e.Seal()
				evs = append(evs, e)
			}
			add(t0, event.PodDeletion, func(e *event.Event) { e.Source, e.Duration = event.SourceWatcher, 30*s })
			add(sigterm, event.Signal, func(e *event.Event) { e.Signal, e.PID = 15, 42 })
			if tc.listener >= 0 {
				add(sigterm+tc.listener*ms, event.ListenerClosed, func(e *event.Event) { e.PID, e.Local = 42, srv })
			}
			for _, c := range tc.conns {
				add(sigterm+c.end*ms, c.kind, func(e *event.Event) {
					e.PID, e.Local, e.Remote = 42, srv, netip.AddrPortFrom(netip.MustParseAddr("10.244.0.200"), 40000+c.port)
					e.Duration = c.idleMS * ms
					e.Reason = "local"
					if c.byClient {
						e.Reason = "peer"
					}
					if c.atExit {
						e.Flags |= event.FlagAtExit
					}
				})
			}
			add(sigterm+3000*ms, event.ProcessExit, func(e *event.Event) { e.PID = 42 })
			slices.SortStableFunc(evs, func(a, b event.Event) int { return cmp.Compare(a.Time, b.Time) })
			var got *ConnSummary
			al := NewAligner(Options{}, func(*Decision) {}, func(tl *PodTimeline) {
				if tl.Pod.UID == pod.UID {
					got = tl.Connections
				}
			})
			for i := range evs {
				if err := al.Add(&evs[i]); err != nil {
					t.Fatal(err)
				}
			}
			al.Flush()
			if got == nil {
				t.Fatal("no connection summary")
			}
			if *got != tc.want {
				t.Errorf("got %+v, want %+v", *got, tc.want)
			}
		})
	}
}
