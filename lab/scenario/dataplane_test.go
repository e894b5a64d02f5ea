package scenario_test

import (
	"context"
	"flag"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/dataplane"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/lab/scenario"
	"github.com/drainscope/drainscope/store"
)

var (
	proxyMinSync = flag.Duration("proxy-min-sync", 3*time.Second, "TestLabDataplane: kube-proxy's minimum sync period")
	proxyModes   = flag.String("proxy-modes", strings.Join(scenario.ProxyModes, ","), "TestLabDataplane: kube-proxy's modes, one exit run each on one cluster")
)

// TestLabDataplane runs the exit run with kube-proxy syncing no more often
// than every 3 s (its default is 1 s), once per kube-proxy mode (nftables,
// iptables on iptables-nft, iptables on iptables-legacy) on one cluster,
// kube-proxy restarted in the next mode between them, and checks the
// dataplane record on the real rules of each: every replaced pod's endpoint is dropped from the
// Service's chain after the EndpointSlice change, and the lag (printed)
// is what the analysis quotes; every new connection the load saw fail on
// a replaced pod was routed there before that pod's dataplane removal, so
// the failures line up with the rules, not the EndpointSlice.
func TestLabDataplane(t *testing.T) {
	testenv.RequireRoot(t)
	if _, err := controlplane.CheckBinaries(""); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	if err := scenario.Preflight(""); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	if testing.Short() {
		t.Skip("a lab run takes about a minute")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := scenario.Up(ctx, scenario.Options{
		AppCommand: []string{os.Args[0]}, AppEnv: []string{"DRAINSCOPE_LAB_SAMPLEAPP=1"},
		Store: st, WaitForLock: true, Log: log, Progress: testWriter{t},
		ProxyArgs: []string{"--iptables-min-sync-period=" + proxyMinSync.String()},
		ProxyMode: strings.Split(*proxyModes, ",")[0],
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Down()
	for _, mode := range strings.Split(*proxyModes, ",") {
		ok := t.Run(mode, func(t *testing.T) {
			if mode != c.ProxyMode() {
				if err := c.SwitchProxy(ctx, mode); err != nil {
					t.Fatal(err)
				}
			}
			labDataplaneRun(ctx, t, c, st, log, mode)
			// The node's own detection, as the agent reports it in
			// kernel_capabilities, names the mode.
			m := dataplane.DetectMode(ctx, dataplane.ModeOptions{Metrics: c.CP.ProxyMetrics(scenario.NodeName)})
			t.Logf("proxy: %s", c.ProxyDescription(ctx))
			if m.Proxy != mode || !m.Recorded {
				t.Errorf("detected proxy mode %q (recorded %v), want %q: %s", m.Proxy, m.Recorded, mode, m.Evidence)
			}
		})
		if !ok {
			break
		}
	}
}

func labDataplaneRun(ctx context.Context, t *testing.T, c *scenario.Cluster, st store.Store, log *slog.Logger, mode string) {
	runs, err := scenario.SelectRuns("exit")
	if err != nil {
		t.Fatal(err)
	}
	results, err := scenario.Execute(ctx, c, scenario.Config{Profile: scenario.Profiles["ci"], Runs: runs, Progress: testWriter{t}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	c.Sync()
	requireRelayed(t, ctx, c, st)
	exit := results[0]
	if len(exit.Replaced) != 4 {
		t.Fatalf("exit run replaced %d pods, want 4", len(exit.Replaced))
	}
	// This run's events: the cluster ran other modes' runs before, on
	// the same Service name and, maybe, the same pod addresses.
	events, err := store.Events(ctx, st, store.Query{Window: exit.Window()})
	if err != nil {
		t.Fatal(err)
	}
	_, svc, _ := strings.Cut(exit.Service, "/")
	leave := map[netip.Addr]int64{}   // first watch event taking the endpoint out
	removed := map[netip.Addr]int64{} // the lab node's proxy dropping it
	back := backInRotation(exit)
	for _, e := range events {
		ip := e.Local.Addr()
		switch {
		case e.Service != svc:
		case (e.Kind == event.EndpointNotReady || e.Kind == event.EndpointTerminating || e.Kind == event.EndpointRemoved) && leave[ip] == 0:
			leave[ip] = e.Time
		case back(&e) && leave[ip] != 0:
			delete(leave, ip)
			delete(removed, ip)
		case e.Kind == event.DataplaneEndpointRemoved && removed[ip] == 0 && leave[ip] != 0:
			removed[ip] = e.Time
			if e.Node != scenario.NodeName || e.Attrs[event.AttrProxy] != mode {
				t.Errorf("dataplane removal of %s: node %q, proxy %q", ip, e.Node, e.Attrs[event.AttrProxy])
			}
		}
	}
	var lags []time.Duration
	for _, p := range exit.Replaced {
		l, r := leave[p.IP], removed[p.IP]
		switch {
		case l == 0:
			t.Errorf("%s (%s): no EndpointSlice change recorded", p.Name, p.IP)
		case r == 0:
			t.Errorf("%s (%s): no dataplane removal after its EndpointSlice change", p.Name, p.IP)
		default:
			lags = append(lags, time.Duration(r-l))
			t.Logf("%s (%s): EndpointSlice change %s, kube-proxy's rules dropped it %v later", p.Name, p.IP,
				time.Unix(0, l).UTC().Format("15:04:05.000"), time.Duration(r-l).Round(time.Millisecond))
		}
	}
	// kube-proxy cannot program a change before the watch has it.
	for _, l := range lags {
		if l < 0 {
			t.Errorf("a dataplane removal before its EndpointSlice change: %v", l)
		}
	}

	// Every new connection that failed on a replaced pod was routed there
	// before the rules dropped it (within the analysis's slack); those
	// after the EndpointSlice change plus the assumed 1 s are the ones
	// the fixed lag got wrong.
	slack := analysis.DefaultOptions().DataplaneSlack
	late := map[string]int{}
	for _, f := range exit.Load.Failures {
		if f.Reused || !f.Backend.IsValid() || (f.Class != event.FailRefused && f.Class != event.FailTimeout) {
			continue
		}
		r, l := removed[f.Backend.Addr()], leave[f.Backend.Addr()]
		if r == 0 {
			continue
		}
		if start := f.Start.UnixNano(); start > r+int64(slack) {
			t.Errorf("%s at %s to %s, %v after kube-proxy's rules had dropped it", f.Class, f.Start.Format("15:04:05.000"), f.Backend, time.Duration(start-r))
		} else if start > l+int64(time.Second) {
			late[f.Class]++
		}
	}
	t.Logf("new connections that failed more than 1 s after their pod's EndpointSlice change, before the rules dropped it: %v", late)

	res, err := analysis.Analyze(ctx, st, store.Query{Window: exit.Window()})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.DataplaneLag) != 1 || res.DataplaneLag[0].Node != scenario.NodeName || res.DataplaneLag[0].Samples < len(lags) {
		t.Errorf("the analysis's measured lag %+v, want the lab node's with at least %d removals", res.DataplaneLag, len(lags))
	} else {
		l := res.DataplaneLag[0]
		t.Logf("analysis: watch → dataplane lag on %s (%s): p50 %v, p99 %v, max %v over %d removals (--iptables-min-sync-period %v)",
			l.Node, l.Proxy, time.Duration(l.P50), time.Duration(l.P99), time.Duration(l.Max), l.Samples, *proxyMinSync)
		if l.Proxy != mode {
			t.Errorf("the measured lag is of proxy %q, want %q", l.Proxy, mode)
		}
	}
	for _, cs := range res.Causes {
		if cs.Cause == analysis.CauseEndpointRace && !strings.Contains(cs.Fix, "measured lag") {
			t.Errorf("the endpoint race's fix does not quote the measured lag: %s", cs.Fix)
		}
	}
	// The same run analysed as without the dataplane record: the assumed
	// 1 s lag in its place.
	all, err := store.Events(ctx, st, store.Query{})
	if err != nil {
		t.Fatal(err)
	}
	var without []event.Event
	for _, e := range all {
		if !e.Kind.IsDataplane() {
			without = append(without, e)
		}
	}
	res1, err := analysis.AnalyzeEvents(without, store.Query{Window: exit.Window()}, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	count := func(r *analysis.Result) (race, aside int) {
		for _, cs := range r.Causes {
			if cs.Cause == analysis.CauseEndpointRace {
				race = cs.Count
			}
		}
		return race, r.Inference.RefusedOutOfRotation
	}
	r2, a2 := count(res)
	r1, a1 := count(res1)
	t.Logf("client failures named endpoint race: %d with the dataplane record, %d with the assumed 1 s; refused SYNs set aside: %d and %d", r2, r1, a2, a1)
	if r2 < r1 {
		t.Errorf("the dataplane record named fewer endpoint races (%d) than the assumed lag (%d)", r2, r1)
	}
}
