package scenario_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/lab/scenario"
	"github.com/drainscope/drainscope/store"
)

// TestLabIngress runs the exit and prestop runs with Debian's HAProxy in
// front of the Service (drainscope lab --ingress haproxy), the load going
// through it, and checks what the proxy's own records give the analysis:
// every 5xx HAProxy logged is attributed to the pod its server address
// names, with a cause its termination state allows (a refused connect,
// SC, or one never answered, sC, is the endpoint race or the ingress's
// lag, never a keep-alive cut; a close during the data phase is never a
// refused connect); each replaced
// pod's removal from HAProxy's server slots is recorded after its
// EndpointSlice change; the report prints that lag beside kube-proxy's;
// and no failure is stored twice (the client's and the proxy's record of
// one request).
func TestLabIngress(t *testing.T) {
	testenv.RequireRoot(t)
	if _, err := controlplane.CheckBinaries(""); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	if err := scenario.Preflight(""); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	if err := scenario.PreflightIngress(scenario.IngressHAProxy); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	if testing.Short() {
		t.Skip("two lab runs take about two minutes")
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
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Down()
	runs, err := scenario.SelectRuns("exit,prestop")
	if err != nil {
		t.Fatal(err)
	}
	results, err := scenario.Execute(ctx, c, scenario.Config{Profile: scenario.Profiles["ci"], Runs: runs,
		Progress: testWriter{t}, Log: log, Ingress: scenario.IngressHAProxy, IngressSync: scenario.DefaultIngressSync})
	if err != nil {
		t.Fatal(err)
	}
	c.Sync()
	var table, diag strings.Builder
	_ = scenario.WriteTable(&table, results)
	if err := scenario.Diagnose(ctx, &diag, st, results); err != nil {
		t.Fatal(err)
	}
	t.Logf("runs:\n%s", table.String())
	t.Logf("diagnosis:\n%s", diag.String())
	// HAProxy's own dataplane records are the proxy's, not the agent's:
	// none of them may reach (and be refused by) the relay.
	requireRelayed(t, ctx, c, st)

	logged5xx := 0
	for _, r := range results {
		ing := r.Ingress
		if ing == nil {
			t.Fatalf("run %s: no ingress result", r.Run.Name)
		}
		if len(r.Replaced) != 4 {
			t.Errorf("run %s: %d pods replaced, want 4", r.Run.Name, len(r.Replaced))
		}
		if ing.SyncErrors > 0 {
			t.Errorf("run %s: %d runtime-API updates failed", r.Run.Name, ing.SyncErrors)
		}
		if ing.Imported.Rejected > 0 {
			t.Errorf("run %s: %d of HAProxy's own lines rejected: %v", r.Run.Name, ing.Imported.Rejected, ing.Imported.Examples)
		}
		if ing.Imported.Successes < 100 {
			t.Errorf("run %s: HAProxy logged %d successes: the load did not go through it", r.Run.Name, ing.Imported.Successes)
		}
		t.Logf("%s: %s", r.Run.Name, ing.Line())
		for _, f := range ing.Failures {
			if f.Status >= 500 {
				logged5xx++
			}
		}
		checkIngressRun(ctx, t, st, r)
	}
	if logged5xx == 0 {
		t.Error("HAProxy logged no 5xx in the exit and prestop runs: nothing was checked against its termination states")
	}

	// The report prints the proxy's removal lag beside kube-proxy's, for
	// each run.
	beside := 0
	for _, l := range strings.Split(diag.String(), "\n") {
		if strings.Contains(l, "endpoint change → proxy rules") && strings.Contains(l, "HAProxy ingress") && strings.Contains(l, "kube-proxy nftables") &&
			strings.Contains(l, "on node "+scenario.IngressNode) && strings.Contains(l, "on node "+scenario.NodeName) {
			beside++
		}
	}
	if beside != len(results) {
		t.Errorf("%d of the report's %d runs print HAProxy's removal lag beside kube-proxy's:\n%s", beside, len(results), diag.String())
	}
}

// checkIngressRun checks one run's proxy failures, their causes and the
// proxy's removals.
func checkIngressRun(ctx context.Context, t *testing.T, st store.Store, r scenario.RunResult) {
	t.Helper()
	ing := r.Ingress
	podAt := map[netip.Addr]string{}
	for _, p := range append(append([]scenario.PodRecord(nil), r.Replaced...), r.New...) {
		podAt[p.IP] = p.Name
	}
	// Stored once: the proxy's failures and the client failures the proxy
	// did not log, no more.
	events, err := store.Events(ctx, st, store.Query{Window: r.Window(), Kinds: []event.Kind{event.ClientFailure}})
	if err != nil {
		t.Fatal(err)
	}
	fromProxy, fromClient := 0, 0
	for _, e := range events {
		if e.Attrs[event.AttrVia] == event.ProxyHAProxy {
			fromProxy++
		} else {
			fromClient++
		}
	}
	if fromProxy != len(ing.Failures) || fromClient != ing.ClientOnly || ing.ClientMatched+ing.ClientOnly != r.Load.FailedTotal() {
		t.Errorf("run %s: stored %d proxy and %d client failures; the proxy logged %d, the client saw %d (%d of them logged by the proxy)",
			r.Run.Name, fromProxy, fromClient, len(ing.Failures), r.Load.FailedTotal(), ing.ClientMatched)
	}

	res, err := analysis.Analyze(ctx, st, store.Query{Window: r.Window()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Truncated {
		t.Fatalf("run %s: the analysis left failures out", r.Run.Name)
	}
	type key struct {
		client string
		ms     int64
	}
	aligned := map[key]*analysis.AlignedFailure{}
	for i := range res.Failures {
		a := &res.Failures[i]
		if a.Inferred || a.Failure.Attrs[event.AttrVia] != event.ProxyHAProxy {
			continue
		}
		aligned[key{a.Failure.Local, a.Failure.Time / 1e6}] = a
	}
	refusedCauses := map[analysis.Cause]bool{analysis.CauseEndpointRace: true, analysis.CauseProxyLag: true, analysis.CauseEndpointRaceLikely: true}
	counts := map[string]int{}
	for _, f := range ing.Failures {
		if f.Status < 500 {
			continue
		}
		desc := fmt.Sprintf("run %s: %d %s at %s from %s to %s", r.Run.Name, f.Status, f.Termination, f.Time.Format("15:04:05.000"), f.Client, f.Backend)
		a := aligned[key{f.Client.String(), f.Time.UnixNano() / 1e6}]
		if a == nil {
			t.Errorf("%s: not among the analysis's failures", desc)
			continue
		}
		counts[fmt.Sprintf("%s→%s", f.Termination[:2], a.Cause)]++
		want, ok := podAt[f.Backend.Addr()]
		switch {
		case !f.Backend.IsValid() || !ok:
			t.Errorf("%s: its server address is none of the run's pods", desc)
		case a.Pod == nil || a.Pod.Name != want:
			t.Errorf("%s: attributed to %+v, want %s, the pod its log names", desc, a.Pod, want)
		}
		switch f.Termination[:2] {
		case "SC", "sC":
			// A connect refused, or never answered (its timeout).
			if !refusedCauses[a.Cause] {
				t.Errorf("%s: HAProxy's failed connect named %s (%s), want the endpoint race or the ingress's lag", desc, a.Cause, a.Explanation)
			}
		case "SD", "SH":
			if refusedCauses[a.Cause] {
				t.Errorf("%s: a close by the server named %s (%s), a refused connect's cause", desc, a.Cause, a.Explanation)
			}
		}
		if a.Cause == analysis.CauseKeepAliveAtExit && f.Termination[0] != 'S' {
			t.Errorf("%s: named a keep-alive cut without a server-side termination", desc)
		}
	}
	t.Logf("run %s: termination state → cause: %v", r.Run.Name, counts)

	// Each replaced pod's removal from HAProxy's slots, after its
	// EndpointSlice change.
	all, err := store.Events(ctx, st, store.Query{Window: r.Window()})
	if err != nil {
		t.Fatal(err)
	}
	_, svc, _ := strings.Cut(r.Service, "/")
	leave := map[netip.Addr]int64{}
	removed := map[netip.Addr]int64{} // by the ingress
	kube := map[netip.Addr]int64{}    // by kube-proxy
	back := backInRotation(r)
	for _, e := range all {
		ip := e.Local.Addr()
		switch {
		case e.Service != svc:
		case (e.Kind == event.EndpointNotReady || e.Kind == event.EndpointTerminating || e.Kind == event.EndpointRemoved) && e.Source != event.SourceDataplane && leave[ip] == 0:
			leave[ip] = e.Time
		case back(&e) && leave[ip] != 0:
			delete(leave, ip)
			delete(removed, ip)
			delete(kube, ip)
		case e.Kind == event.DataplaneEndpointRemoved && e.Node == scenario.IngressNode && removed[ip] == 0 && e.Time > r.RolloutStart.UnixNano():
			removed[ip] = e.Time
			if e.Attrs[event.AttrProxy] != event.ProxyHAProxy {
				t.Errorf("run %s: the ingress's removal of %s has proxy %q", r.Run.Name, ip, e.Attrs[event.AttrProxy])
			}
		case e.Kind == event.DataplaneEndpointRemoved && e.Node == scenario.NodeName && kube[ip] == 0 && leave[ip] != 0:
			kube[ip] = e.Time
		}
	}
	for _, p := range r.Replaced {
		l, h := leave[p.IP], removed[p.IP]
		switch {
		case l == 0:
			t.Errorf("run %s: %s (%s): no EndpointSlice change recorded", r.Run.Name, p.Name, p.IP)
		case h == 0:
			t.Errorf("run %s: %s (%s): no removal by HAProxy after its EndpointSlice change", r.Run.Name, p.Name, p.IP)
		case h < l-int64(250*time.Millisecond):
			// HAProxy's informer may get the change a little before the
			// recorder's watch (the analysis counts that as a lag of 0),
			// never by more than the two watches' jitter.
			t.Errorf("run %s: %s: HAProxy's removal %v before the EndpointSlice change", r.Run.Name, p.Name, time.Duration(l-h))
		default:
			kl := "none recorded"
			if k := kube[p.IP]; k != 0 {
				kl = time.Duration(k - l).Round(time.Millisecond).String()
			}
			t.Logf("run %s: %s (%s): EndpointSlice change %s; HAProxy's slot out %v later, kube-proxy's rule %s",
				r.Run.Name, p.Name, p.IP, time.Unix(0, l).UTC().Format("15:04:05.000"), time.Duration(h-l).Round(time.Millisecond), kl)
		}
	}
	found := false
	for _, l := range res.DataplaneLag {
		if l.Node == scenario.IngressNode && l.Proxy == event.ProxyHAProxy && l.Samples >= len(r.Replaced) {
			found = true
			t.Logf("run %s: analysis: HAProxy's lag p50 %v, p99 %v over %d removals", r.Run.Name, time.Duration(l.P50), time.Duration(l.P99), l.Samples)
		}
	}
	if !found {
		t.Errorf("run %s: the analysis's measured lags %+v have no HAProxy entry with the %d removals", r.Run.Name, res.DataplaneLag, len(r.Replaced))
	}
}
