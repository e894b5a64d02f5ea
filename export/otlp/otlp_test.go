package otlp_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"

	dto "github.com/prometheus/client_model/go"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/export"
	"github.com/drainscope/drainscope/export/otlp"
	"github.com/drainscope/drainscope/export/otlp/otlptest"
	"github.com/drainscope/drainscope/internal/eventfile"
	"github.com/drainscope/drainscope/metrics"
	"github.com/drainscope/drainscope/store"
)

// The recorded lab run the web package keeps: the exit run's rollout of
// drainscope-lab/Deployment/sample-exit dropped requests.
const fixture = "../../web/testdata/lab-run.jsonl"

func fixtureEvents(t *testing.T) []event.Event {
	t.Helper()
	evs, err := eventfile.Read(fixture)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// keep is a sink that remembers what the feed handed out.
type keep struct{ got []*analysis.Disruption }

func (k *keep) Name() string     { return "keep" }
func (k *keep) Idempotent() bool { return false }
func (k *keep) Deliver(_ context.Context, d *analysis.Disruption) error {
	k.got = append(k.got, d)
	return nil
}

func attrs(m pcommon.Map) map[string]string {
	out := map[string]string{}
	m.Range(func(k string, v pcommon.Value) bool {
		out[k] = v.AsString()
		return true
	})
	return out
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLogsReachACollector sends the recorded exit run's disruptions
// through the feed to a real OTLP receiver and checks each record against
// what the feed computed: one per explained failure, with its workload,
// cause, pod and time, and one summary per disruption.
func TestLogsReachACollector(t *testing.T) {
	endpoint, logs, _ := otlptest.Collector(t)
	ctx := context.Background()
	evs := fixtureEvents(t)
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Append(ctx, evs); err != nil {
		t.Fatal(err)
	}
	last := int64(0)
	for _, e := range evs {
		last = max(last, e.Time)
	}
	now := time.Unix(0, evs[0].Time).Add(-time.Minute) // the server was up before the runs
	clock := func() time.Time { return now }
	exp, err := otlp.New(ctx, otlp.Options{Endpoint: endpoint, Version: "test", Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Shutdown(ctx)
	k := &keep{}
	feed := export.New(st, []export.Sink{exp.Sink(), k}, export.Options{Quiet: 20 * time.Second, Now: clock, BaseURL: "https://drainscope.example"})
	now = time.Unix(0, last).Add(time.Minute)
	if err := feed.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := exp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var exit *analysis.Disruption
	wantRecords := 0
	for _, d := range k.got {
		wantRecords += len(d.Explained) + 1
		if d.Name == "sample-exit" && d.Trigger == event.ChangeTemplate {
			exit = d
		}
	}
	if exit == nil || len(exit.Explained) == 0 {
		t.Fatalf("the feed has no exit rollout with explained failures: %+v", k.got)
	}
	waitFor(t, fmt.Sprintf("%d log records", wantRecords), func() bool { return logs.LogRecordCount() >= wantRecords })

	type rec struct {
		name  string
		t     time.Time
		sev   plog.SeverityNumber
		body  string
		attrs map[string]string
		raw   pcommon.Map
		res   map[string]string
	}
	var recs []rec
	for _, ld := range logs.AllLogs() {
		for i := 0; i < ld.ResourceLogs().Len(); i++ {
			rl := ld.ResourceLogs().At(i)
			for j := 0; j < rl.ScopeLogs().Len(); j++ {
				lrs := rl.ScopeLogs().At(j).LogRecords()
				for n := 0; n < lrs.Len(); n++ {
					lr := lrs.At(n)
					recs = append(recs, rec{lr.EventName(), lr.Timestamp().AsTime(), lr.SeverityNumber(), lr.Body().AsString(), attrs(lr.Attributes()), lr.Attributes(), attrs(rl.Resource().Attributes())})
				}
			}
		}
	}
	if len(recs) != wantRecords {
		t.Errorf("%d records received, want %d", len(recs), wantRecords)
	}
	// Every explained failure of the exit rollout arrived once, as it is.
	want := map[string]string{} // pod@time → cause
	for _, af := range exit.Explained {
		want[fmt.Sprintf("%s@%d", af.Pod.Name, af.Failure.Time)] = string(af.Cause)
	}
	got := map[string]string{}
	var summary *rec
	for i := range recs {
		r := &recs[i]
		if r.attrs[otlp.AttrDisruption] != exit.ID {
			continue
		}
		if r.res["service.name"] != "drainscope" || r.res["service.version"] != "test" {
			t.Errorf("resource %v", r.res)
		}
		if r.attrs["k8s.namespace.name"] != "drainscope-lab" || r.attrs["k8s.deployment.name"] != "sample-exit" ||
			r.attrs[otlp.AttrWorkload] != "Deployment/sample-exit" || r.attrs[otlp.AttrTimeline] != "https://drainscope.example/rollouts/"+exit.ID {
			t.Errorf("record %s: workload attributes %v", r.name, r.attrs)
		}
		switch r.name {
		case otlp.EventDisruption:
			summary = r
		case otlp.EventFailure:
			key := fmt.Sprintf("%s@%d", r.attrs["k8s.pod.name"], r.t.UnixNano())
			if _, dup := got[key]; dup {
				t.Errorf("failure %s received twice", key)
			}
			got[key] = r.attrs[otlp.AttrCause]
			if r.sev != plog.SeverityNumberWarn || r.attrs["k8s.pod.uid"] == "" || r.attrs[otlp.AttrFix] == "" || !strings.Contains(r.body, ": ") {
				t.Errorf("failure record %s: severity %v, attributes %v, body %q", key, r.sev, r.attrs, r.body)
			}
		default:
			t.Errorf("record with event name %q", r.name)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d failure records of the exit rollout, want %d", len(got), len(want))
	}
	for k, c := range want {
		if got[k] != c {
			t.Errorf("failure %s: received cause %q, want %q", k, got[k], c)
		}
	}
	if summary == nil {
		t.Fatal("no summary record of the exit rollout")
	}
	if summary.attrs[otlp.AttrFailures] != fmt.Sprint(exit.Failures) || summary.attrs[otlp.AttrInferredN] != fmt.Sprint(exit.Inferred) ||
		summary.attrs[otlp.AttrReplaced] != "4" || summary.attrs[otlp.AttrTrigger] != "template" ||
		summary.attrs[otlp.AttrStart] != time.Unix(0, exit.From).UTC().Format(time.RFC3339Nano) || summary.t.UnixNano() != exit.To {
		t.Errorf("summary: %v at %v; the disruption: %d failures, %d inferred, from %d to %d", summary.attrs, summary.t, exit.Failures, exit.Inferred, exit.From, exit.To)
	}
	bc, ok := summary.raw.Get(otlp.AttrByCause)
	if !ok || bc.Type() != pcommon.ValueTypeMap {
		t.Fatalf("summary: %s is not a map: %v", otlp.AttrByCause, summary.attrs)
	}
	for c, n := range exit.ByCause {
		if v, ok := bc.Map().Get(string(c)); !ok || v.Int() != int64(n) {
			t.Errorf("summary: %s.%s = %v, want %d", otlp.AttrByCause, c, v.AsString(), n)
		}
	}
}

// TestRolloutSignalsReachACollector computes the rollout signals of the
// recorded run and checks that the collector received the values
// Prometheus shows.
func TestRolloutSignalsReachACollector(t *testing.T) {
	endpoint, _, mets := otlptest.Collector(t)
	ctx := context.Background()
	exp, err := otlp.New(ctx, otlp.Options{Endpoint: endpoint, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Shutdown(ctx)
	m := metrics.New("serve", "test")
	r := m.NewRollouts(metrics.RolloutOptions{Observer: exp.RolloutObserver()})
	for _, e := range fixtureEvents(t) {
		r.Add(&e)
	}
	r.Flush()
	if err := exp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Prometheus's view of the same signals.
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	prom := map[string]float64{}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			l := labels(mt)
			switch f.GetName() {
			case "drainscope_rollout_pod_terminations_total", "drainscope_rollout_connections_cut_at_exit_total":
				prom[f.GetName()+"|"+l["workload"]] = mt.GetCounter().GetValue()
			case "drainscope_rollout_inferred_failures_total":
				if v := mt.GetCounter().GetValue(); v > 0 {
					prom[f.GetName()+"|"+l["workload"]+"|"+l["cause"]+"|"+l["evidence"]] = v
				}
			case "drainscope_rollout_sigterm_minus_endpoint_removal_seconds":
				prom[f.GetName()+"|"+l["workload"]] = float64(mt.GetHistogram().GetSampleCount())
			}
		}
	}
	if prom["drainscope_rollout_pod_terminations_total|Deployment/sample-exit"] == 0 {
		t.Fatalf("the recording shows no termination of sample-exit: %v", prom)
	}
	waitFor(t, "metrics", func() bool { return mets.DataPointCount() > 0 })
	got := map[string]float64{}
	for _, md := range mets.AllMetrics() {
		for i := 0; i < md.ResourceMetrics().Len(); i++ {
			sms := md.ResourceMetrics().At(i).ScopeMetrics()
			for j := 0; j < sms.Len(); j++ {
				ms := sms.At(j).Metrics()
				for n := 0; n < ms.Len(); n++ {
					mt := ms.At(n)
					switch mt.Type() {
					case pmetric.MetricTypeSum:
						for p := 0; p < mt.Sum().DataPoints().Len(); p++ {
							dp := mt.Sum().DataPoints().At(p)
							a := attrs(dp.Attributes())
							if a["k8s.namespace.name"] != "drainscope-lab" {
								t.Errorf("%s: attributes %v", mt.Name(), a)
							}
							if !mt.Sum().IsMonotonic() {
								t.Errorf("%s is not monotonic", mt.Name())
							}
							k := mt.Name() + "|" + a[otlp.AttrWorkload]
							if mt.Name() == "drainscope.rollout.inferred_failures" {
								k += "|" + a[otlp.AttrCause] + "|" + a["drainscope.evidence"]
							}
							got[k] = float64(dp.IntValue())
						}
					case pmetric.MetricTypeHistogram:
						for p := 0; p < mt.Histogram().DataPoints().Len(); p++ {
							dp := mt.Histogram().DataPoints().At(p)
							got[mt.Name()+"|"+attrs(dp.Attributes())[otlp.AttrWorkload]] = float64(dp.Count())
							if dp.ExplicitBounds().Len() != len(metrics.GapBuckets) {
								t.Errorf("%s: %d bounds, want Prometheus's %d", mt.Name(), dp.ExplicitBounds().Len(), len(metrics.GapBuckets))
							}
						}
					}
				}
			}
		}
	}
	names := map[string]string{
		"drainscope_rollout_pod_terminations_total":                 "drainscope.rollout.pod_terminations",
		"drainscope_rollout_connections_cut_at_exit_total":          "drainscope.rollout.connections_cut_at_exit",
		"drainscope_rollout_inferred_failures_total":                "drainscope.rollout.inferred_failures",
		"drainscope_rollout_sigterm_minus_endpoint_removal_seconds": "drainscope.rollout.sigterm_minus_endpoint_removal",
	}
	for k, v := range prom {
		if v == 0 {
			continue
		}
		name, rest, _ := strings.Cut(k, "|")
		if g := got[names[name]+"|"+rest]; g != v {
			t.Errorf("%s{%s}: the collector received %v, Prometheus shows %v", names[name], rest, g, v)
		}
	}
	if got["drainscope.rollout.inferred_failures|Deployment/sample-exit|keepalive_at_exit|proven"]+got["drainscope.rollout.inferred_failures|Deployment/sample-exit|keepalive_at_exit|likely"] == 0 {
		t.Errorf("no keep-alive cut inferred for sample-exit: %v", got)
	}
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// The same runs with every name and text of the cluster's carrying escape
// sequences, a C1 control and a newline: what reaches the collector, body
// and attributes, holds no byte below 0x20 other than newline and tab, and
// shows the escapes.
func TestLogsHostileNames(t *testing.T) {
	const hostile = "\x1b]0;owned\x07\x1b[2J\u009b31m\r\nFORGED"
	endpoint, logs, _ := otlptest.Collector(t)
	ctx := context.Background()
	evs := fixtureEvents(t)
	h := func(s string) string {
		if s == "" {
			return s
		}
		return s + hostile
	}
	for i := range evs {
		e := &evs[i]
		for _, p := range []*string{&e.Node, &e.Pod.Namespace, &e.Pod.Name, &e.Workload.Name, &e.Service, &e.Comm} {
			*p = h(*p)
		}
		if e.Attrs != nil {
			a := map[string]string{}
			for k, v := range e.Attrs {
				a[k] = h(v)
			}
			e.Attrs = a
		}
		e.Seal()
	}
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Append(ctx, evs); err != nil {
		t.Fatal(err)
	}
	last := int64(0)
	for _, e := range evs {
		last = max(last, e.Time)
	}
	now := time.Unix(0, evs[0].Time).Add(-time.Minute)
	clock := func() time.Time { return now }
	exp, err := otlp.New(ctx, otlp.Options{Endpoint: endpoint, Version: "test", Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Shutdown(ctx)
	k := &keep{}
	feed := export.New(st, []export.Sink{exp.Sink(), k}, export.Options{Quiet: 20 * time.Second, Now: clock, BaseURL: "https://drainscope.example"})
	now = time.Unix(0, last).Add(time.Minute)
	if err := feed.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := exp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, d := range k.got {
		want += len(d.Explained) + 1
	}
	if want == 0 {
		t.Fatal("the feed handed out nothing")
	}
	waitFor(t, fmt.Sprintf("%d log records", want), func() bool { return logs.LogRecordCount() >= want })
	bad := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if c := s[i]; (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
				return true
			}
		}
		return strings.Contains(s, "\u009b")
	}
	shown := 0
	for _, ld := range logs.AllLogs() {
		for i := 0; i < ld.ResourceLogs().Len(); i++ {
			rl := ld.ResourceLogs().At(i)
			for j := 0; j < rl.ScopeLogs().Len(); j++ {
				lrs := rl.ScopeLogs().At(j).LogRecords()
				for n := 0; n < lrs.Len(); n++ {
					lr := lrs.At(n)
					texts := []string{lr.Body().AsString()}
					for k, v := range attrs(lr.Attributes()) {
						texts = append(texts, k, v)
					}
					for _, s := range texts {
						if bad(s) {
							t.Errorf("%s record: a control character reached the collector: %q", lr.EventName(), s)
						}
						if strings.Contains(s, `\x1b]0;owned`) {
							shown++
						}
					}
				}
			}
		}
	}
	if shown == 0 {
		t.Error("no record shows the hostile names escaped")
	}
}
