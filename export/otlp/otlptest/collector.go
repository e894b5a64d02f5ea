// Package otlptest runs the OpenTelemetry Collector's own OTLP receiver
// for tests: what an exporter sends is checked as a real collector reads
// it.
package otlptest

import (
	"context"
	"net"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configgrpc"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

// Collector starts the receiver on a loopback port, over HTTP only,
// feeding the collector's test sinks, until the test ends. It returns the
// endpoint to export to (http://127.0.0.1:PORT).
func Collector(t testing.TB) (endpoint string, logs *consumertest.LogsSink, mets *consumertest.MetricsSink) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	f := otlpreceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*otlpreceiver.Config)
	cfg.Protocols.GRPC = configoptional.None[configgrpc.ServerConfig]()
	cfg.Protocols.HTTP.GetOrInsertDefault().ServerConfig.NetAddr.Endpoint = addr
	logs, mets = new(consumertest.LogsSink), new(consumertest.MetricsSink)
	ctx := context.Background()
	lr, err := f.CreateLogs(ctx, receivertest.NewNopSettings(f.Type()), cfg, logs)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := f.CreateMetrics(ctx, receivertest.NewNopSettings(f.Type()), cfg, mets)
	if err != nil {
		t.Fatal(err)
	}
	if err := lr.Start(ctx, componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lr.Shutdown(context.Background()) })
	if err := mr.Start(ctx, componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mr.Shutdown(context.Background()) })
	return "http://" + addr, logs, mets
}

// Records flattens what the collector got into its log records.
func Records(lds []plog.Logs) []plog.LogRecord {
	var out []plog.LogRecord
	for _, ld := range lds {
		rls := ld.ResourceLogs()
		for i := 0; i < rls.Len(); i++ {
			sls := rls.At(i).ScopeLogs()
			for j := 0; j < sls.Len(); j++ {
				lrs := sls.At(j).LogRecords()
				for k := 0; k < lrs.Len(); k++ {
					out = append(out, lrs.At(k))
				}
			}
		}
	}
	return out
}
