package watcher

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/drainscope/drainscope/event"
)

// kubeletEvent is an Event as the kubelet's recorder writes it about a
// pod's container (container "" for the pod itself).
func kubeletEvent(name, reason, pod, uid, container, host string, count int32, last time.Time) *corev1.Event {
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "ns", Name: pod,
			UID: types.UID(uid)},
		Reason: reason, Message: reason + " of " + pod, Type: corev1.EventTypeWarning,
		Source: corev1.EventSource{Component: "kubelet", Host: host},
		Count:  count, FirstTimestamp: metav1.Time{Time: last}, LastTimestamp: metav1.Time{Time: last},
	}
	if container != "" {
		ev.InvolvedObject.FieldPath = "spec.containers{" + container + "}"
	}
	return ev
}

// waitWatches waits until the fake clientset has been asked for n watches
// of resource.
func waitWatches(t *testing.T, cs *fake.Clientset, resource string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := 0
		for _, a := range cs.Actions() {
			if a.GetVerb() == "watch" && a.GetResource().Resource == resource {
				got++
			}
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d watches of %s, want %d", got, resource, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ofKindOnly(evs []event.Event, k event.Kind) []event.Event {
	var out []event.Event
	for _, e := range evs {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// TestKubeletEvents: an agent records the kubelet's FailedPreStopHook and
// FailedKillPod Events about its node's pods: those found at the list as
// observed, a new one, and an update only when the Event's count grew;
// about a pod it does not know, only one its own node's kubelet wrote.
// Each watch asks the API server for its one reason about pods.
func TestKubeletEvents(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base := time.Date(2027, 1, 15, 10, 0, 0, 0, time.UTC)
	web := pod("web", "1", "10.244.0.2", true) // node-a's; its ReplicaSet's hash names Deployment web
	listed := kubeletEvent("web.1", event.KubeletFailedKillPod, "web", "uid-web", "", "node-a", 3, base)
	cs := fake.NewClientset(web, listed)
	c := newCollector()
	w, err := New(cs, Options{Node: "node-a", Sink: c.sink, PodNode: "node-a", NoSlices: true})
	if err != nil {
		t.Fatal(err)
	}
	go w.Run(ctx)
	if err := w.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	waitWatches(t, cs, "events", len(kubeletReasons))
	selectors := map[string]bool{}
	for _, a := range cs.Actions() {
		if l, ok := a.(k8stesting.ListAction); ok && a.GetResource().Resource == "events" {
			selectors[l.GetListRestrictions().Fields.String()] = true
		}
	}
	if want := map[string]bool{"involvedObject.kind=Pod,reason=FailedPreStopHook": true,
		"involvedObject.kind=Pod,reason=FailedKillPod": true}; !maps.Equal(selectors, want) {
		t.Errorf("Event lists select %v, want %v", selectors, want)
	}

	evs := cs.CoreV1().Events("ns")
	create := func(ev *corev1.Event) {
		t.Helper()
		if _, err := evs.Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	update := func(ev *corev1.Event) {
		t.Helper()
		if _, err := evs.Update(ctx, ev, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	hook := kubeletEvent("web.2", event.KubeletFailedPreStopHook, "web", "uid-web", "app", "node-a", 1, base.Add(time.Minute))
	hook.Message = strings.Repeat("é", 1000) // 2,000 bytes
	create(hook)
	// Not recorded: a pod of another node (another node's kubelet wrote
	// it), another reason (the fake clientset does not select), an
	// update that repeats nothing.
	create(kubeletEvent("other.1", event.KubeletFailedPreStopHook, "other", "uid-other", "app", "node-b", 1, base))
	create(kubeletEvent("web.3", "Killing", "web", "uid-web", "app", "node-a", 1, base))
	hook.Labels = map[string]string{"touched": "yes"}
	update(hook)
	hook = hook.DeepCopy()
	hook.Count, hook.LastTimestamp = 2, metav1.Time{Time: base.Add(2 * time.Minute)}
	update(hook)
	// A pod not known (gone from the tracker): placed by the kubelet that
	// wrote it, this node's.
	create(kubeletEvent("gone.1", event.KubeletFailedPreStopHook, "gone", "uid-gone", "app", "node-a", 1, base))
	got := c.waitFor(t, 5*time.Second, "four kubelet events", func(evs []event.Event) bool {
		return len(ofKindOnly(evs, event.KubeletEvent)) >= 4
	})
	got = ofKindOnly(got, event.KubeletEvent)
	type rec struct {
		pod, uid, container, reason, count, last string
		flags                                    event.Flags
	}
	want := []rec{
		{"web", "uid-web", "", event.KubeletFailedKillPod, "3", base.Format(time.RFC3339Nano), event.FlagObserved},
		{"web", "uid-web", "app", event.KubeletFailedPreStopHook, "1", base.Add(time.Minute).Format(time.RFC3339Nano), 0},
		{"web", "uid-web", "app", event.KubeletFailedPreStopHook, "2", base.Add(2 * time.Minute).Format(time.RFC3339Nano), 0},
		{"gone", "uid-gone", "app", event.KubeletFailedPreStopHook, "1", base.Format(time.RFC3339Nano), 0},
	}
	// The two reasons are two watches: order within each.
	byReason := func(rs []rec) map[string][]rec {
		m := map[string][]rec{}
		for _, r := range rs {
			m[r.reason] = append(m[r.reason], r)
		}
		return m
	}
	var have []rec
	for _, e := range got {
		have = append(have, rec{e.Pod.Name, e.Pod.UID, e.Pod.Container, e.Reason, e.Attrs[event.AttrCount], e.Attrs[event.AttrLastTimestamp], e.Flags})
		if e.Node != "node-a" || e.Pod.Namespace != "ns" || e.Source != event.SourceWatcher {
			t.Errorf("%s of %s: node %q namespace %q source %q", e.Kind, e.Pod.Name, e.Node, e.Pod.Namespace, e.Source)
		}
		if err := e.Validate(); err != nil {
			t.Error(err)
		}
		wantWl := event.Workload{}
		if e.Pod.Name == "web" {
			wantWl = event.Workload{Kind: "Deployment", Name: "web"}
		}
		if e.Workload != wantWl {
			t.Errorf("%s of %s: workload %v, want %v", e.Reason, e.Pod.Name, e.Workload, wantWl)
		}
	}
	h, wnt := byReason(have), byReason(want)
	for reason := range wnt {
		if len(h[reason]) != len(wnt[reason]) {
			t.Errorf("%s: recorded %+v, want %+v", reason, h[reason], wnt[reason])
			continue
		}
		for i := range wnt[reason] {
			if h[reason][i] != wnt[reason][i] {
				t.Errorf("%s %d: recorded %+v, want %+v", reason, i, h[reason][i], wnt[reason][i])
			}
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d kubelet events, want %d:\n%s", len(got), len(want), describe(got))
	}
	for _, e := range got {
		if e.Reason == event.KubeletFailedPreStopHook && e.Pod.Name == "web" {
			m := e.Attrs[event.AttrMessage]
			if len(m) > maxKubeletMessage || !strings.HasSuffix(m, "…") || !strings.HasPrefix(m, "éé") || !utf8.ValidString(m) {
				t.Errorf("a 2,000-byte message recorded as %d bytes: %.20q…", len(m), m)
			}
		}
	}
}

// TestKubeletEventsClusterWide: with no PodNode every Event is recorded,
// whichever node's kubelet wrote it, its pod named by the reference alone
// when the tracker does not know it; without a UID the pod is found by
// name.
func TestKubeletEventsClusterWide(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base := time.Date(2027, 1, 15, 10, 0, 0, 0, time.UTC)
	noUID := kubeletEvent("web.1", event.KubeletFailedPreStopHook, "web", "", "app", "node-a", 1, base)
	noUID.InvolvedObject.FieldPath = "spec.initContainers{proxy}"
	cs := fake.NewClientset(pod("web", "1", "10.244.0.2", true), noUID,
		kubeletEvent("other.1", event.KubeletFailedPreStopHook, "other", "uid-other", "app", "node-b", 1, base))
	c := newCollector()
	w, err := New(cs, Options{Node: "node-a", Sink: c.sink, NoSlices: true})
	if err != nil {
		t.Fatal(err)
	}
	go w.Run(ctx)
	got := ofKindOnly(c.waitFor(t, 5*time.Second, "both Events", func(evs []event.Event) bool {
		return len(ofKindOnly(evs, event.KubeletEvent)) >= 2
	}), event.KubeletEvent)
	byPod := map[string]event.Event{}
	for _, e := range got {
		byPod[e.Pod.Name] = e
	}
	if e := byPod["web"]; e.Pod.UID != "uid-web" || e.Pod.Container != "proxy" || e.Workload.Name != "web" || e.Flags != event.FlagObserved {
		t.Errorf("web: %+v", e)
	}
	if e := byPod["other"]; e.Pod.UID != "uid-other" || !e.Workload.IsZero() || e.Flags != event.FlagObserved {
		t.Errorf("other: %+v", e)
	}
}

func TestContainerOfFieldPath(t *testing.T) {
	for fp, want := range map[string]string{
		"spec.containers{app}":              "app",
		"spec.initContainers{proxy}":        "proxy",
		"spec.ephemeralContainers{dbg}":     "dbg",
		"":                                  "",
		"spec.containers[0]":                "",
		"spec.containers{app":               "",
		"implicitly required container POD": "",
	} {
		if got := containerOfFieldPath(fp); got != want {
			t.Errorf("%q: %q, want %q", fp, got, want)
		}
	}
}

// syncLog is a log buffer safe for the watcher's goroutines.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestNodeInfo: node_info carries the API server's version and the
// agent's Node's, once the watches synced and every ObserveInterval,
// delivered also by a standby in Leader mode (it is the node's own, not a
// cluster-wide watch's). A read that fails leaves its attributes out,
// logged once, and with nothing read nothing is recorded.
func TestNodeInfo(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{
		KubeletVersion: "v1.37.2", ContainerRuntimeVersion: "containerd://2.1.4"}}}
	start := func(t *testing.T, forbid ...string) (*Watcher, *collector, *syncLog, func()) {
		t.Helper()
		cs := fake.NewClientset(node)
		cs.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: "v1.37.2"}
		for _, res := range forbid {
			cs.PrependReactor("get", res, func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: res}, "", errors.New("RBAC: not allowed"))
			})
		}
		c := newCollector()
		logs := &syncLog{}
		w, err := New(cs, Options{Node: "node-a", Sink: c.sink, PodNode: "node-a", ObserveInterval: 50 * time.Millisecond,
			Mode: Leader, NoSlices: true, Logger: slog.New(slog.NewTextHandler(logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); w.Run(ctx) }()
		if w.Stats().Leader {
			t.Error("a Leader-mode watcher with no election leads")
		}
		return w, c, logs, func() { cancel(); <-done }
	}
	infos := func(c *collector, n int) []event.Event {
		return ofKindOnly(c.waitFor(t, 5*time.Second, "node_info", func(evs []event.Event) bool {
			return len(ofKindOnly(evs, event.NodeInfo)) >= n
		}), event.NodeInfo)
	}

	_, c, _, stop := start(t)
	for _, e := range infos(c, 3) {
		want := map[string]string{event.AttrAPIServerVersion: "v1.37.2", event.AttrKubeletVersion: "v1.37.2",
			event.AttrContainerRuntime: "containerd://2.1.4"}
		if !maps.Equal(e.Attrs, want) || e.Reason != event.ChangeObserved || e.Flags != event.FlagObserved || e.Node != "node-a" || !e.Pod.IsZero() {
			t.Errorf("node_info %+v, want attrs %v", e, want)
		}
	}
	stop()

	_, c, logs, stop := start(t, "nodes")
	for _, e := range infos(c, 3) {
		if !maps.Equal(e.Attrs, map[string]string{event.AttrAPIServerVersion: "v1.37.2"}) {
			t.Errorf("node get forbidden: node_info attrs %v", e.Attrs)
		}
	}
	stop()
	if n := strings.Count(logs.String(), "node_info"); n != 1 {
		t.Errorf("the forbidden read logged %d times in three observations, want once:\n%s", n, logs)
	}

	w, c, _, stop := start(t, "nodes", "version")
	if err := w.WaitForSync(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // six intervals
	stop()
	if n := len(ofKindOnly(c.snapshot(), event.NodeInfo)); n != 0 {
		t.Errorf("nothing readable, yet %d node_info recorded", n)
	}
}
