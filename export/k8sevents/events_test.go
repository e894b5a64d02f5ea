package k8sevents_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/export"
	"github.com/drainscope/drainscope/export/k8sevents"
	"github.com/drainscope/drainscope/internal/eventfile"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/store"
)

// The recorded lab run the web package keeps: the exit run's rollout of
// drainscope-lab/Deployment/sample-exit dropped requests.
const fixture = "../../web/testdata/lab-run.jsonl"

func TestMessage(t *testing.T) {
	d := &analysis.Disruption{
		ID: "shop/Deployment/web/1", Namespace: "shop", Kind: "Deployment", Name: "web", Trigger: "template",
		Replaced: make([]analysis.PodView, 4), FailureCounts: analysis.FailureCounts{Failures: 37, Inferred: 32}, Likely: 14,
		Causes: []analysis.DisruptionCause{
			{Cause: analysis.CauseKeepAliveAtExit, Title: "keep-alive connection cut at exit", Failures: 32, Inferred: 30, Fix: "answer with Connection: close while draining"},
			{Cause: analysis.CauseEndpointRace, Title: "endpoint removal race", Failures: 5, Inferred: 2, Fix: "a preStop delay longer than the propagation."},
		},
		Link: "https://drainscope.example/rollouts/shop/Deployment/web/1",
	}
	got := k8sevents.Message(d)
	want := "37 requests failed in the rollout of Deployment/web (4 pods replaced): 32 keep-alive connection cut at exit, 5 endpoint removal race." +
		" The pods' kernel events alone show 32 (14 of them likely). Fix for keep-alive connection cut at exit: answer with Connection: close while draining." +
		" Fix for endpoint removal race: a preStop delay longer than the propagation. Timeline: https://drainscope.example/rollouts/shop/Deployment/web/1"
	if got != want {
		t.Errorf("message\n got %s\nwant %s", got, want)
	}
	d.Failures = 0
	if got := k8sevents.Message(d); !strings.HasPrefix(got, "Kernel evidence shows 32 failed requests (14 likely) in the rollout of Deployment/web (4 pods replaced): 30 keep-alive connection cut at exit, 2 endpoint removal race.") {
		t.Errorf("kernel evidence alone: %s", got)
	}
	d.Causes[0].Fix = strings.Repeat("é", 2000)
	if got := k8sevents.Message(d); len(got) > k8sevents.MaxMessage || !utf8.ValidString(got) || !strings.HasSuffix(got, " Timeline: "+d.Link) {
		t.Errorf("a long message: %d bytes (max %d), valid UTF-8 %v, ends %q", len(got), k8sevents.MaxMessage, utf8.ValidString(got), got[max(0, len(got)-80):])
	}
	long := &analysis.Disruption{ID: "a/Deployment/x/1", Name: strings.Repeat("x", 253)}
	if n := k8sevents.Name(long); len(n) > 253 || !strings.HasSuffix(n, k8sevents.Name(&analysis.Disruption{ID: "a/Deployment/x/1", Name: "x"})[1:]) {
		t.Errorf("name of a long workload: %q (%d)", n, len(n))
	}
	if k8sevents.Name(d) == k8sevents.Name(&analysis.Disruption{ID: "shop/Deployment/web/2", Name: "web"}) {
		t.Error("two disruptions of one workload share an Event name")
	}
}

// TestEventsOnRealAPIServer puts the recorded exit run's Event on a real
// Deployment of a real API server through the feed, reads it back with the
// real kubectl describe, and checks that a restarted server, and a second
// server, create no second Event.
func TestEventsOnRealAPIServer(t *testing.T) {
	if _, err := controlplane.CheckBinaries("", "etcd", "kube-apiserver", "kubectl"); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{NoControllerManager: true})
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	defer cp.Stop()
	const ns = "drainscope-lab"
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	two := int32(2)
	labels := map[string]string{"app": "sample"}
	dep, err := cp.Client().AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "sample-exit", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "drainscope.invalid/sample"}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	st, last := fixtureStore(t)
	// The watcher records the workload's uid with each change; the
	// recording predates that, so record one as it would, for this
	// Deployment.
	uidEv := event.Event{Time: last - int64(time.Minute), Kind: event.WorkloadChanged, Node: "n", Source: event.SourceWatcher,
		Pod: event.PodRef{Namespace: ns}, Workload: event.Workload{Kind: "Deployment", Name: "sample-exit"},
		Reason: event.ChangeCreated, Attrs: map[string]string{event.AttrWorkloadUID: string(dep.UID)}}
	uidEv.Seal()
	if err := st.Append(ctx, []event.Event{uidEv}); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, last).Add(time.Minute)
	clock := func() time.Time { return now }
	newFeed := func() *export.Feed {
		sink := k8sevents.New(k8sevents.Options{Client: cp.Client(), Host: "drainscope-server-0", Now: clock})
		return export.New(st, []export.Sink{sink}, export.Options{Quiet: 20 * time.Second, Now: clock, BaseURL: "https://drainscope.example"})
	}
	if err := newFeed().Poll(ctx); err != nil {
		t.Fatal(err)
	}
	list := func() []corev1.Event {
		t.Helper()
		l, err := cp.Client().CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	evs := list()
	var mine []corev1.Event
	for _, e := range evs {
		if e.InvolvedObject.Name == "sample-exit" {
			mine = append(mine, e)
		}
	}
	// The rollout dropped requests; the Deployment's deletion right after
	// it, in the recording, is a disruption of its own.
	if len(mine) == 0 {
		t.Fatalf("no Event on the Deployment; events: %+v", evs)
	}
	var ev *corev1.Event
	for i := range mine {
		if strings.Contains(mine[i].Message, "in the rollout of") {
			ev = &mine[i]
		}
	}
	if ev == nil {
		t.Fatalf("no Event for the rollout: %+v", mine)
	}
	if ev.Reason != k8sevents.Reason || ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.Kind != "Deployment" ||
		ev.InvolvedObject.APIVersion != "apps/v1" || ev.InvolvedObject.UID != dep.UID || ev.Source.Component != "drainscope" || ev.Count != 1 {
		t.Errorf("event %+v", ev)
	}
	for _, s := range []string{"keep-alive connection cut at exit", "Fix for keep-alive connection cut at exit:", "Timeline: https://drainscope.example/rollouts/drainscope-lab/Deployment/sample-exit/"} {
		if !strings.Contains(ev.Message, s) {
			t.Errorf("message lacks %q: %s", s, ev.Message)
		}
	}

	// The real kubectl shows it where an SRE looks.
	cmd, err := cp.Kubectl(ctx, "describe", "deployment", "-n", ns, "sample-exit")
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl describe: %v\n%s", err, out)
	}
	t.Logf("kubectl describe deployment sample-exit:\n%s", out)
	if !strings.Contains(string(out), "Warning  DroppedRequests") || !strings.Contains(string(out), "drainscope") {
		t.Errorf("kubectl describe does not show the Event:\n%s", out)
	}

	// A restarted server, and a second one, find the Events made.
	if err := newFeed().Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := newFeed().Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if again := list(); len(again) != len(evs) {
		t.Errorf("%d Events after two restarts, %d before", len(again), len(evs))
	}
}

// TestRateLimit creates Events for made-up disruptions on a real API server
// faster than the limits allow.
func TestRateLimit(t *testing.T) {
	if _, err := controlplane.CheckBinaries("", "etcd", "kube-apiserver"); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{NoControllerManager: true})
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	defer cp.Stop()
	if err := cp.EnsureNamespace(ctx, "rl"); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	s := k8sevents.New(k8sevents.Options{Client: cp.Client(), Every: time.Minute, Burst: 2, PerWorkload: 10 * time.Minute, Now: func() time.Time { return now }})
	dis := func(name string, start int64) *analysis.Disruption {
		return &analysis.Disruption{ID: analysis.DisruptionKey{Namespace: "rl", Kind: "Deployment", Name: name, Start: start}.ID(), Namespace: "rl", Kind: "Deployment", Name: name,
			From: start, To: start + 1e9, Until: start + 1e9, FailureCounts: analysis.FailureCounts{Failures: 1}, Causes: []analysis.DisruptionCause{{Cause: analysis.CauseEndpointRace, Title: "endpoint removal race", Failures: 1}}}
	}
	if err := s.Deliver(ctx, dis("a", 1)); err != nil {
		t.Fatal(err)
	}
	// The same workload again within PerWorkload waits.
	if err := s.Deliver(ctx, dis("a", 2)); !errors.Is(err, export.ErrDeferred) {
		t.Errorf("a second Event on one workload at once: %v, want deferred", err)
	}
	if err := s.Deliver(ctx, dis("b", 1)); err != nil {
		t.Fatal(err)
	}
	// Two made, the burst is spent.
	if err := s.Deliver(ctx, dis("c", 1)); !errors.Is(err, export.ErrDeferred) {
		t.Errorf("a third Event with a burst of 2: %v, want deferred", err)
	}
	now = now.Add(time.Minute)
	if err := s.Deliver(ctx, dis("c", 1)); err != nil {
		t.Errorf("a minute later: %v", err)
	}
	// A disruption without failures makes none; one already made is none.
	if err := s.Deliver(ctx, &analysis.Disruption{ID: "rl/Deployment/d/1", Namespace: "rl", Kind: "Deployment", Name: "d"}); err != nil {
		t.Error(err)
	}
	now = now.Add(time.Hour)
	if err := s.Deliver(ctx, dis("b", 1)); err != nil {
		t.Errorf("an Event made before: %v, want nil (AlreadyExists)", err)
	}
	l, err := cp.Client().CoreV1().Events("rl").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range l.Items {
		names = append(names, e.InvolvedObject.Name)
	}
	if strings.Join(names, ",") != "a,b,c" {
		t.Errorf("Events on %v, want a, b, c", names)
	}
}

func fixtureStore(t *testing.T) (store.Store, int64) {
	t.Helper()
	evs, err := eventfile.Read(fixture)
	if err != nil {
		t.Fatal(err)
	}
	last := int64(0)
	for _, e := range evs {
		last = max(last, e.Time)
	}
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Append(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	return st, last
}

// An Event's message names the workload and the causes: a name with escape
// sequences or a newline is shown escaped, never raw.
func TestMessageHostileNames(t *testing.T) {
	const hostile = "\x1b]0;owned\x07\x1b[2J\u009b31m\r\nFORGED"
	d := &analysis.Disruption{
		ID: "shop/Deployment/web/1", Namespace: "shop" + hostile, Kind: "Deployment", Name: "web" + hostile, Trigger: "template",
		Replaced: make([]analysis.PodView, 1), FailureCounts: analysis.FailureCounts{Failures: 3},
		Causes: []analysis.DisruptionCause{{Cause: analysis.CauseEndpointRace, Title: "endpoint removal race" + hostile, Failures: 3, Fix: "wait" + hostile}},
		Link:   "https://drainscope.example/rollouts/shop/Deployment/web/1",
	}
	got := k8sevents.Message(d)
	for i := 0; i < len(got); i++ {
		if c := got[i]; c < 0x20 || c == 0x7f {
			t.Fatalf("byte %#x reached the message: %q", c, got)
		}
	}
	if strings.Contains(got, "\u009b") || !strings.Contains(got, `\x1b]0;owned`) {
		t.Errorf("message %q", got)
	}
}
