package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/export"
	"github.com/drainscope/drainscope/export/k8sevents"
	"github.com/drainscope/drainscope/export/otlp"
	"github.com/drainscope/drainscope/export/otlp/otlptest"
	"github.com/drainscope/drainscope/internal/eventfile"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/store"
	"github.com/drainscope/drainscope/web"
)

// TestOneAccountEveryReader: over one recorded store, the JSON API's
// rollouts list, the Kubernetes Events sink (on a real kube-apiserver),
// the OTLP feed (to the OpenTelemetry Collector's receiver) and `report
// --format json` give the same disruptions, with the same IDs and the same
// triggers. The store is a lab run (a control run's deletion; a rollout
// and a deletion of the exit run; the graceful run's rollout) and what a
// cluster does after it: one of the new pods OOM-killed 5 min later, its
// sibling evicted 4 min later, each cutting a client's connection. Before
// the one account, the list named both "template" with the rollout's ID,
// and the feed skipped them as delivered.
func TestOneAccountEveryReader(t *testing.T) {
	if _, err := controlplane.CheckBinaries("", "etcd", "kube-apiserver"); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	evs := labRunWithItsAftermath(t)
	first, last := evs[0].Time, evs[0].Time
	for _, e := range evs {
		first, last = min(first, e.Time), max(last, e.Time)
	}
	path := filepath.Join(t.TempDir(), "events.db")
	st, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Append(ctx, evs); err != nil {
		t.Fatal(err)
	}

	type seen = struct{ id, trigger string }
	key := func(s []seen) string {
		out := make([]string, 0, len(s))
		for _, x := range s {
			out = append(out, x.id+" "+x.trigger)
		}
		slices.Sort(out)
		return strings.Join(out, "\n")
	}

	// drainscope report --format json.
	since := time.Unix(0, first).Add(-time.Minute).UTC().Format(time.RFC3339)
	until := time.Unix(0, last).Add(time.Minute).UTC().Format(time.RFC3339)
	code, stdout, stderr := runCLI(t, "report", "--store", path, "--since", since, "--until", until, "--format", "json")
	if code != 0 {
		t.Fatalf("report: exit %d: %s", code, stderr)
	}
	var rep struct {
		Disruptions []struct {
			ID       string `json:"id"`
			Trigger  string `json:"trigger"`
			Failures int    `json:"failures"`
			Inferred int    `json:"inferred"`
		} `json:"disruptions"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("report's JSON: %v", err)
	}
	var report, withFailures []seen
	for _, d := range rep.Disruptions {
		report = append(report, seen{d.ID, d.Trigger})
		if d.Failures > 0 || d.Inferred > 0 { // what the Events sink reports
			withFailures = append(withFailures, seen{d.ID, d.Trigger})
		}
	}
	for _, want := range []string{"template", "deleted", string(analysis.TriggerOOM), string(analysis.TriggerEviction)} {
		if !strings.Contains(key(report), " "+want) {
			t.Errorf("the report names no %q disruption:\n%s", want, key(report))
		}
	}

	// The JSON API's list.
	srv := httptest.NewServer(web.New(web.Options{Store: st, Now: func() time.Time { return time.Unix(0, last).Add(time.Hour) }}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/v1/rollouts?since=all")
	if err != nil {
		t.Fatal(err)
	}
	var list web.Rollouts
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var api []seen
	for _, r := range list.Rollouts {
		api = append(api, seen{r.ID, string(r.Trigger)})
	}
	if key(api) != key(report) {
		t.Errorf("the API lists\n%s\nthe report\n%s", key(api), key(report))
	}

	// The feed, with the Events sink on a real API server and the OTLP
	// sink to a collector, started before the runs and polled once they
	// are all over.
	cp, err := controlplane.Start(ctx, controlplane.Options{NoControllerManager: true})
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	defer cp.Stop()
	if err := cp.EnsureNamespace(ctx, "drainscope-lab"); err != nil {
		t.Fatal(err)
	}
	oaddr, logs, _ := otlptest.Collector(t)
	now := time.Unix(0, first).Add(-time.Minute)
	clock := func() time.Time { return now }
	exp, err := otlp.New(ctx, otlp.Options{Endpoint: oaddr})
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Shutdown(context.Background())
	events := k8sevents.New(k8sevents.Options{Client: cp.Client(), Host: "drainscope-server-0", Now: clock,
		Every: time.Millisecond, Burst: 100, PerWorkload: time.Nanosecond})
	feed := export.New(st, []export.Sink{events, exp.Sink()}, export.Options{Quiet: 20 * time.Second, Now: clock})
	if err := feed.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	// Polled as a server does, a second apart: the sink puts one Event
	// at a time on a workload.
	for i := range 5 {
		now = time.Unix(0, last).Add(time.Minute + time.Duration(i)*time.Second)
		if err := feed.Poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := exp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	el, err := cp.Client().CoreV1().Events("drainscope-lab").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var kube []seen
	for _, e := range el.Items {
		kube = append(kube, seen{e.Annotations["drainscope.dev/disruption"], triggerOfMessage(e)})
	}
	if key(kube) != key(withFailures) {
		t.Errorf("the Events are of\n%s\nthe report's disruptions with failures are\n%s", key(kube), key(withFailures))
	}
	var records []seen
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		records = disruptionRecords(logs.AllLogs())
		if len(records) >= len(report) || time.Now().After(deadline) {
			break
		}
	}
	if key(records) != key(report) {
		t.Errorf("the OTLP records are of\n%s\nthe report's\n%s", key(records), key(report))
	}
}

// triggerOfMessage reads the trigger back from an Event's message, which
// names the disruption by its trigger's noun ("… in the OOM kill of …").
func triggerOfMessage(e corev1.Event) string {
	for _, ti := range analysis.Triggers {
		if strings.Contains(e.Message, " the "+ti.Noun+" of ") {
			return string(ti.Trigger)
		}
	}
	return "?"
}

// labRunWithItsAftermath is the web package's lab recording and what a
// cluster does next: the graceful run's first new pod OOM-killed 5 min
// after its rollout, and its second evicted by a node drain 4 min after,
// each while a client's keep-alive connection was in use.
func labRunWithItsAftermath(t *testing.T) []event.Event {
	t.Helper()
	evs, err := eventfile.Read("../../web/testdata/lab-run.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	// The graceful run's rollout and its first two new pods.
	var rollout int64
	var fresh []event.Event
	addr := map[string]netip.AddrPort{}
	for _, e := range evs {
		if e.Workload.Name != "sample-graceful" {
			continue
		}
		switch {
		case e.Kind == event.WorkloadChanged && e.Reason == event.ChangeTemplate:
			rollout = e.Time
		case e.Kind == event.PodCreated && rollout != 0 && len(fresh) < 2:
			fresh = append(fresh, e)
		case e.Kind.IsEndpoint() && e.Local.IsValid():
			addr[e.Pod.UID] = e.Local
		}
	}
	if rollout == 0 || len(fresh) < 2 || !addr[fresh[0].Pod.UID].IsValid() || !addr[fresh[1].Pod.UID].IsValid() {
		t.Fatalf("the recording lacks the graceful run's rollout and two new pods with endpoints")
	}
	node := fresh[0].Node
	at := func(d time.Duration) int64 { return rollout + int64(d) }
	add := func(e event.Event) {
		if e.Node == "" && e.Kind != event.ClientFailure {
			e.Node = node
		}
		evs = append(evs, e)
	}
	kernel := func(p event.Event, d time.Duration, k event.Kind) event.Event {
		return event.Event{Time: at(d), Kind: k, Source: event.SourceKernel, Pod: p.Pod, Workload: p.Workload, PID: 31000, Comm: "sampleapp"}
	}
	watch := func(p event.Event, d time.Duration, k event.Kind) event.Event {
		return event.Event{Time: at(d), Kind: k, Source: event.SourceWatcher, Pod: p.Pod, Workload: p.Workload}
	}
	cut := func(p event.Event, d time.Duration, client string) {
		c := netip.MustParseAddrPort(client)
		x := kernel(p, d, event.ConnClosed)
		x.Local, x.Remote, x.Reason, x.Flags = addr[p.Pod.UID], c, "local", event.FlagAtExit
		add(x)
		add(event.Event{Time: at(d + 3*time.Millisecond), Kind: event.ClientFailure, Source: event.SourceClient,
			Local: c, Remote: netip.MustParseAddrPort("10.96.0.100:80"), Reason: event.FailEOF,
			Attrs: map[string]string{event.AttrBackend: addr[p.Pod.UID].String()}})
	}
	// The OOM kill, 5 min after the rollout: the pod is kept, the
	// container restarts.
	oom := fresh[0]
	kill := kernel(oom, 5*time.Minute, event.Signal)
	kill.Signal = event.SIGKILL
	add(kill)
	x := kernel(oom, 5*time.Minute+time.Millisecond, event.ProcessExit)
	x.Signal = event.SIGKILL
	add(x)
	cut(oom, 5*time.Minute+2*time.Millisecond, "10.244.0.1:41001")
	term := watch(oom, 5*time.Minute+500*time.Millisecond, event.ContainerTerminated)
	term.Reason, term.Code, term.Pod.Container = "OOMKilled", 137, "app"
	add(term)
	add(watch(oom, 5*time.Minute+2*time.Second, event.ContainerStarted))
	// The eviction of its sibling, 4 min after the rollout.
	ev := fresh[1]
	del := watch(ev, 4*time.Minute, event.PodDeletion)
	del.Duration, del.Attrs = int64(30*time.Second), map[string]string{event.AttrDisruption: "EvictionByEvictionAPI"}
	add(del)
	term15 := kernel(ev, 4*time.Minute+10*time.Millisecond, event.Signal)
	term15.Signal = event.SIGTERM
	add(term15)
	add(kernel(ev, 4*time.Minute+20*time.Millisecond, event.ProcessExit))
	cut(ev, 4*time.Minute+21*time.Millisecond, "10.244.0.1:41002")
	for i := range evs {
		evs[i].Seal()
	}
	slices.SortStableFunc(evs, func(a, b event.Event) int { return int(a.Time - b.Time) })
	return evs
}

// disruptionRecords lists the disruption summary records a collector got.
func disruptionRecords(lds []plog.Logs) []struct{ id, trigger string } {
	var out []struct{ id, trigger string }
	for _, r := range otlptest.Records(lds) {
		if r.EventName() != otlp.EventDisruption {
			continue
		}
		id, _ := r.Attributes().Get(otlp.AttrDisruption)
		tr, _ := r.Attributes().Get(otlp.AttrTrigger)
		out = append(out, struct{ id, trigger string }{id.Str(), tr.Str()})
	}
	return out
}
