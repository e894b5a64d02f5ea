package main

import (
	"context"
	"flag"
	"io"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/export/otlp/otlptest"
	"github.com/drainscope/drainscope/store"
)

// TestServeExportsOTLP runs drainscope serve with --otlp-endpoint (and no
// --metrics-listen) against the OpenTelemetry Collector's OTLP receiver:
// a pod's end the agents stored reaches it as the rollout signals and, once
// the disruption is quiet, as its summary record.
func TestServeExportsOTLP(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	oaddr, logs, mets := otlptest.Collector(t)

	db := filepath.Join(t.TempDir(), "e.db")
	done := make(chan error, 1)
	go func() {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		done <- runServe(ctx, fs, []string{"--listen", freeAddr(t), "--store", db, "--otlp-endpoint", oaddr,
			"--otlp-interval", "200ms", "--signals-delay", "500ms", "--signals-after", "1s",
			"--export-quiet", "1s", "--export-poll", "200ms"})
	}()
	time.Sleep(300 * time.Millisecond) // the signals read from their start on
	st, err := store.OpenSQLite(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	base := time.Now().Add(200 * time.Millisecond).UnixNano()
	pod := event.PodRef{Namespace: "shop", Name: "web-b1", UID: "uid-b1"}
	wl := event.Workload{Kind: "Deployment", Name: "web"}
	var batch []event.Event
	for _, x := range []struct {
		ms   int64
		kind event.Kind
	}{{0, event.PodDeletion}, {50, event.Signal}, {61, event.ProcessExit}, {300, event.EndpointNotReady}, {1000, event.EndpointRemoved}} {
		e := event.Event{Time: base + x.ms*int64(time.Millisecond), Kind: x.kind, Node: "node-a", Source: event.SourceWatcher, Pod: pod, Workload: wl}
		switch {
		case x.kind.IsKernel():
			e.Source, e.PID = event.SourceKernel, 42
			if x.kind == event.Signal {
				e.Signal = 15
			}
		case x.kind.IsEndpoint():
			e.Local, e.Service, e.Slice = netip.MustParseAddrPort("10.244.1.11:8080"), "web", "web-abcde"
		case x.kind == event.PodDeletion:
			e.Duration = int64(30 * time.Second)
		}
		e.Seal()
		batch = append(batch, e)
	}
	if err := st.Append(ctx, batch); err != nil {
		t.Fatal(err)
	}
	terminations := func() int64 {
		n := int64(0)
		for _, md := range mets.AllMetrics() {
			rms := md.ResourceMetrics()
			for i := 0; i < rms.Len(); i++ {
				sms := rms.At(i).ScopeMetrics()
				for j := 0; j < sms.Len(); j++ {
					ms := sms.At(j).Metrics()
					for k := 0; k < ms.Len(); k++ {
						if m := ms.At(k); m.Name() == "drainscope.rollout.pod_terminations" && m.Type() == pmetric.MetricTypeSum {
							for p := 0; p < m.Sum().DataPoints().Len(); p++ {
								dp := m.Sum().DataPoints().At(p)
								if v, ok := dp.Attributes().Get("drainscope.workload"); ok && v.Str() == "Deployment/web" {
									n = max(n, dp.IntValue()) // cumulative
								}
							}
						}
					}
				}
			}
		}
		return n
	}
	summary := func() bool {
		for _, r := range otlptest.Records(logs.AllLogs()) {
			ns, _ := r.Attributes().Get("k8s.namespace.name")
			dep, _ := r.Attributes().Get("k8s.deployment.name")
			if r.EventName() == "drainscope.disruption" && ns.Str() == "shop" && dep.Str() == "web" {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(30 * time.Second); terminations() != 1 || !summary(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the collector got %d terminations of Deployment/web (want 1) and a summary: %v", terminations(), summary())
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve returned %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop")
	}
}
