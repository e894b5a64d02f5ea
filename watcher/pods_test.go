package watcher

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drainscope/drainscope/event"
)

func pod(name, rv, ip string, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ns", UID: types.UID("uid-" + name), ResourceVersion: rv,
			Labels: map[string]string{"pod-template-hash": "abc12"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc12", Controller: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{NodeName: "node-a"},
		Status: corev1.PodStatus{
			PodIP:      ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "app", ContainerID: "containerd://c0ffee-" + name,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			}},
		},
	}
}

type podRec struct {
	kind  event.Kind
	e     event.Event
	flags event.Flags
}

func newTestPodTracker(now *time.Time) (*podTracker, *[]podRec) {
	var got []podRec
	w := &Watcher{}
	tr := newPodTracker(func(_ time.Time, k event.Kind, st *podState, fill func(*event.Event), flags event.Flags) {
		e := event.Event{Kind: k, Pod: st.ref, Workload: st.workload, Flags: flags}
		if fill != nil {
			fill(&e)
		}
		got = append(got, podRec{k, e, flags})
	}, w.workload, func() time.Time { return *now }, time.Minute)
	return tr, &got
}

func kinds(rs []podRec) []event.Kind {
	out := make([]event.Kind, len(rs))
	for i, r := range rs {
		out[i] = r.kind
	}
	return out
}

func TestPodTrackerLifecycle(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tr, got := newTestPodTracker(&now)
	tr.replaceAll([]*corev1.Pod{pod("old", "1", "10.244.0.2", true)}, event.FlagRelist, true)
	if len(*got) != 0 {
		t.Fatalf("initial list reported %v", kinds(*got))
	}

	// A new pod: created, later ready.
	tr.apply(pod("new", "2", "", false), 0, false)
	tr.apply(pod("new", "3", "10.244.0.3", true), 0, false)
	tr.apply(pod("new", "3", "10.244.0.3", true), 0, false) // replayed: nothing

	// The old pod is deleted with a 30 s grace period, goes not ready, its
	// container exits, and it is removed.
	del := pod("old", "4", "10.244.0.2", true)
	del.DeletionTimestamp = &metav1.Time{Time: now}
	del.DeletionGracePeriodSeconds = ptr.To(int64(30))
	tr.apply(del, 0, false)
	nr := del.DeepCopy()
	nr.ResourceVersion = "5"
	nr.Status.Conditions[0].Status = corev1.ConditionFalse
	tr.apply(nr, 0, false)
	term := nr.DeepCopy()
	term.ResourceVersion = "6"
	term.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 143, Signal: 15, Reason: "Error", ContainerID: "containerd://c0ffee-old",
		FinishedAt: metav1.Time{Time: now.Add(3 * time.Second)},
	}}
	tr.apply(term, 0, false)
	final := term.DeepCopy()
	final.ResourceVersion = "7"
	tr.remove(string(final.UID), final, 0, false)

	want := []event.Kind{event.PodCreated, event.ContainerStarted, event.PodReady, event.PodDeletion, event.PodNotReady, event.ContainerTerminated}
	if g := kinds(*got); !equalKinds(g, want) {
		t.Fatalf("events %v, want %v", g, want)
	}
	if s := (*got)[1].e; s.Pod.Container != "app" || s.Attrs[AttrContainerID] != "c0ffee-new" || s.Attrs[AttrRestartCount] != "0" || s.Flags != 0 {
		t.Errorf("container start %+v", s)
	}
	d := (*got)[3].e
	if d.Duration != int64(30*time.Second) || d.Attrs[event.AttrDeletionTimestamp] == "" {
		t.Errorf("deletion event: duration %d attrs %v", d.Duration, d.Attrs)
	}
	if d.Workload != (event.Workload{Kind: "Deployment", Name: "web"}) {
		t.Errorf("workload %v, want Deployment/web from the pod-template-hash", d.Workload)
	}
	c := (*got)[5].e
	if c.Code != 143 || c.Signal != 15 || c.Reason != "Error" || c.Pod.Container != "app" ||
		c.Attrs[AttrContainerID] != "c0ffee-old" || c.Attrs[AttrRestartCount] != "0" {
		t.Errorf("termination event %+v", c)
	}
	r := (*got)[2].e
	if r.Local != netip.MustParseAddrPort("10.244.0.3:0") {
		t.Errorf("ready event Local %v", r.Local)
	}

	// The deleted pod stays resolvable for a while, then goes.
	if ref, _, ok := tr.PodByIP(netip.MustParseAddr("10.244.0.2")); !ok || ref.Name != "old" {
		t.Errorf("PodByIP after deletion = %v %v", ref, ok)
	}
	if ref, _, ok := tr.PodByContainerID("containerd://c0ffee-old"); !ok || ref.Container != "app" {
		t.Errorf("PodByContainerID = %v %v", ref, ok)
	}
	now = now.Add(2 * time.Minute)
	tr.remove("uid-nonexistent", nil, 0, false) // any removal expires old entries
	tr.apply(pod("other", "8", "10.244.0.9", false), 0, false)
	tr.remove("uid-other", nil, 0, false)
	if _, _, ok := tr.PodByUID("uid-old"); ok {
		t.Error("deleted pod still resolvable after the linger time")
	}
	if ref, _, ok := tr.PodByUID("uid-new"); !ok || ref.Name != "new" {
		t.Errorf("PodByUID(new) = %v %v", ref, ok)
	}
}

func TestPodTrackerRelist(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tr, got := newTestPodTracker(&now)
	tr.replaceAll([]*corev1.Pod{pod("a", "1", "10.244.0.2", true), pod("b", "1", "10.244.0.3", true)}, event.FlagRelist, true)
	// While the watch was down: a was deleted outright, b's container
	// restarted (the termination is only in lastState), c was created.
	b := pod("b", "9", "10.244.0.3", true)
	b.Status.ContainerStatuses[0].RestartCount = 1
	b.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}
	tr.replaceAll([]*corev1.Pod{b, pod("c", "9", "10.244.0.4", false)}, event.FlagRelist, false)
	want := []event.Kind{event.ContainerTerminated, event.PodCreated, event.ContainerStarted, event.PodDeletion}
	if g := kinds(*got); !equalKinds(g, want) {
		t.Fatalf("events %v, want %v", g, want)
	}
	for _, r := range *got {
		if !r.flags.Has(event.FlagRelist) {
			t.Errorf("%s not flagged relist", r.kind)
		}
	}
	// The same state again (a replayed watch event) reports nothing.
	*got = nil
	b2 := b.DeepCopy()
	b2.ResourceVersion = "10"
	tr.apply(b2, 0, false)
	if len(*got) != 0 {
		t.Errorf("replayed state reported %v", kinds(*got))
	}
}

// TestPodTrackerRestarts: each container instance the kubelet reports
// running is one container_started, and each termination in lastState one
// container_terminated naming the instance that ended.
func TestPodTrackerRestarts(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tr, got := newTestPodTracker(&now)
	p := pod("a", "1", "10.244.0.2", true)
	tr.replaceAll([]*corev1.Pod{p}, event.FlagRelist, true)
	// OOM-killed and restarted between two updates: lastState has the
	// end, the running instance has a new ID and restartCount 1.
	oom := p.DeepCopy()
	oom.ResourceVersion = "2"
	cs := &oom.Status.ContainerStatuses[0]
	cs.RestartCount, cs.ContainerID = 1, "containerd://second"
	cs.State.Running.StartedAt = metav1.Time{Time: now.Add(time.Second)}
	cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{
		ExitCode: 137, Reason: "OOMKilled", ContainerID: "containerd://c0ffee-a",
		StartedAt: metav1.Time{Time: now.Add(-time.Hour)}, FinishedAt: metav1.Time{Time: now}}
	tr.apply(oom, 0, false)
	// Crashing: the container waits to restart (no instance running),
	// then a third instance starts.
	crash := oom.DeepCopy()
	crash.ResourceVersion = "3"
	cs = &crash.Status.ContainerStatuses[0]
	cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	cs.RestartCount = 2
	cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{
		ExitCode: 1, Reason: "Error", ContainerID: "containerd://second", FinishedAt: metav1.Time{Time: now.Add(time.Minute)}}
	tr.apply(crash, 0, false)
	third := crash.DeepCopy()
	third.ResourceVersion = "4"
	cs = &third.Status.ContainerStatuses[0]
	cs.ContainerID = "containerd://third"
	cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	tr.apply(third, 0, false)
	want := []event.Kind{event.ContainerTerminated, event.ContainerStarted, event.ContainerTerminated, event.ContainerStarted}
	if g := kinds(*got); !equalKinds(g, want) {
		t.Fatalf("events %v, want %v", g, want)
	}
	for i, w := range []struct{ id, restarts, reason string }{
		{"c0ffee-a", "0", "OOMKilled"}, {"second", "1", ""}, {"second", "1", "Error"}, {"third", "2", ""},
	} {
		e := (*got)[i].e
		if e.Attrs[AttrContainerID] != w.id || e.Attrs[AttrRestartCount] != w.restarts || e.Reason != w.reason || e.Pod.Container != "app" {
			t.Errorf("event %d %s: attrs %v reason %q, want id %s restart_count %s reason %q", i, e.Kind, e.Attrs, e.Reason, w.id, w.restarts, w.reason)
		}
	}
	if e := (*got)[1].e; e.Attrs[AttrStartedAt] != now.Add(time.Second).UTC().Format(time.RFC3339) {
		t.Errorf("start of the second instance: started_at %q", e.Attrs[AttrStartedAt])
	}
	if e := (*got)[0].e; e.Code != 137 {
		t.Errorf("OOM kill: code %d", e.Code)
	}
}

// TestPodTrackerObserve: a re-observation reports every pod's state as
// it is, flagged observed, whatever was reported before.
func TestPodTrackerObserve(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tr, got := newTestPodTracker(&now)
	ready := pod("a", "1", "10.244.0.2", true)
	ready.Status.Conditions[0].LastTransitionTime = metav1.Time{Time: now.Add(-72 * time.Hour)}
	going := pod("b", "1", "10.244.0.3", false)
	going.DeletionTimestamp = &metav1.Time{Time: now}
	going.DeletionGracePeriodSeconds = ptr.To(int64(45))
	going.Status.Conditions = append(going.Status.Conditions, corev1.PodCondition{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI"})
	going.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	tr.replaceAll([]*corev1.Pod{ready, going}, event.FlagRelist, true)
	if len(*got) != 0 {
		t.Fatalf("the list itself reported %v", kinds(*got))
	}
	for round := 0; round < 2; round++ {
		*got = nil
		tr.observe(now)
		byPod := map[string][]event.Kind{}
		for _, r := range *got {
			if r.flags != event.FlagObserved {
				t.Errorf("%s of %s: flags %b, want observed", r.kind, r.e.Pod.Name, r.flags)
			}
			byPod[r.e.Pod.Name] = append(byPod[r.e.Pod.Name], r.kind)
			switch r.kind {
			case event.PodReady:
				if r.e.Local != netip.MustParseAddrPort("10.244.0.2:0") || r.e.Attrs[AttrTransitionTime] != now.Add(-72*time.Hour).UTC().Format(time.RFC3339) {
					t.Errorf("observed ready %+v", r.e)
				}
			case event.PodDeletion:
				if r.e.Duration != int64(45*time.Second) || r.e.Attrs[event.AttrDisruption] != "EvictionByEvictionAPI" {
					t.Errorf("observed deletion %+v", r.e)
				}
			case event.ContainerStarted:
				if r.e.Attrs[AttrContainerID] != "c0ffee-a" || r.e.Pod.Container != "app" {
					t.Errorf("observed container %+v", r.e)
				}
			}
		}
		if a := byPod["a"]; !equalKinds(a, []event.Kind{event.PodReady, event.ContainerStarted}) {
			t.Errorf("round %d: pod a observed as %v", round, a)
		}
		if b := byPod["b"]; !equalKinds(b, []event.Kind{event.PodNotReady, event.PodDeletion}) {
			t.Errorf("round %d: pod b observed as %v (its container has ended: none running)", round, b)
		}
	}
}

func equalKinds(a, b []event.Kind) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestStaticPods(t *testing.T) {
	s := &StaticPods{Pods: []StaticPod{{
		Ref: event.PodRef{Namespace: "ns", Name: "a", UID: "u1"}, Workload: event.Workload{Kind: "Deployment", Name: "web"},
		IPs: []netip.Addr{netip.MustParseAddr("10.244.0.2")}, ContainerIDs: map[string]string{"abc": "app"},
	}}}
	var l PodLookup = s
	if r, w, ok := l.PodByIP(netip.MustParseAddr("::ffff:10.244.0.2")); !ok || r.Name != "a" || w.Name != "web" {
		t.Errorf("PodByIP: %v %v %v", r, w, ok)
	}
	if r, _, ok := l.PodByContainerID("containerd://abc"); !ok || r.Container != "app" {
		t.Errorf("PodByContainerID: %v %v", r, ok)
	}
	if _, _, ok := l.PodByUID("nope"); ok {
		t.Error("PodByUID found a missing pod")
	}
}

// stripped is p as the informer hands it over.
func stripped(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	s, err := stripPod(p)
	if err != nil {
		t.Fatal(err)
	}
	return s.(*corev1.Pod)
}

// finish returns p at resource version rv ended by the kubelet with no
// deletion: phase, status reason and message, its container ended.
func finish(p *corev1.Pod, rv string, phase corev1.PodPhase, reason, message string) *corev1.Pod {
	p = p.DeepCopy()
	p.ResourceVersion = rv
	p.Status.Phase, p.Status.Reason, p.Status.Message = phase, reason, message
	p.Status.Conditions[0].Status = corev1.ConditionFalse
	p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 137, Reason: "Error", ContainerID: p.Status.ContainerStatuses[0].ContainerID}}
	return p
}

// TestPodTrackerFinished: a pod whose phase turns Failed or Succeeded
// with no deletion (the kubelet's node-pressure eviction, a node's
// shutdown, a pod run to completion) is recorded ended once, with why.
func TestPodTrackerFinished(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tr, got := newTestPodTracker(&now)
	tr.replaceAll([]*corev1.Pod{pod("evicted", "1", "10.244.0.2", true), pod("shutdown", "1", "10.244.0.3", true),
		pod("done", "1", "10.244.0.4", true), pod("deleted", "1", "10.244.0.5", true)}, event.FlagRelist, true)

	// The kubelet evicts a pod for memory pressure: the pod object stays.
	const evictMsg = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi."
	ev := finish(pod("evicted", "2", "10.244.0.2", true), "2", corev1.PodFailed, "Evicted", evictMsg)
	tr.apply(stripped(t, ev), 0, false)
	if g := kinds(*got); !equalKinds(g, []event.Kind{event.PodFinished, event.PodNotReady, event.ContainerTerminated}) {
		t.Fatalf("eviction recorded %v", g)
	}
	if e := (*got)[0].e; e.Reason != "Evicted" || e.Attrs[event.AttrPhase] != "Failed" || e.Attrs[event.AttrMessage] != evictMsg ||
		e.Pod.Name != "evicted" || e.Flags != 0 {
		t.Errorf("eviction: %+v", e)
	} else if d, ok := e.Attrs[event.AttrDisruption]; ok {
		t.Errorf("eviction without a DisruptionTarget condition: disruption %q", d)
	}
	// Later updates of the ended pod report its end no more.
	*got = nil
	again := ev.DeepCopy()
	again.ResourceVersion = "3"
	again.Status.Message += " Container app was using 120Mi."
	tr.apply(stripped(t, again), 0, false)
	if len(*got) != 0 {
		t.Errorf("an update of the ended pod recorded %v", kinds(*got))
	}

	// A node's graceful shutdown: the kubelet marks the pod a disruption
	// target before it fails it.
	*got = nil
	sd := finish(pod("shutdown", "2", "10.244.0.3", true), "2", corev1.PodFailed, "Terminated", "Pod was terminated in response to imminent node shutdown.")
	sd.Status.Conditions = append(sd.Status.Conditions, corev1.PodCondition{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "TerminationByKubelet"})
	tr.apply(stripped(t, sd), 0, false)
	if e := first(podEvents(*got), event.PodFinished); e == nil || e.Reason != "Terminated" || e.Attrs[event.AttrDisruption] != "TerminationByKubelet" {
		t.Errorf("shutdown: %+v", e)
	}

	// Run to completion, no reason given: the phase is the reason.
	*got = nil
	tr.apply(stripped(t, finish(pod("done", "2", "10.244.0.4", true), "2", corev1.PodSucceeded, "", "")), 0, false)
	if e := first(podEvents(*got), event.PodFinished); e == nil || e.Reason != "Succeeded" || e.Attrs[event.AttrPhase] != "Succeeded" {
		t.Errorf("completion: %+v", e)
	} else if _, ok := e.Attrs[event.AttrMessage]; ok {
		t.Errorf("completion with no message: attrs %v", e.Attrs)
	}

	// Deleted, then ended: the deletion is the end recorded.
	*got = nil
	del := pod("deleted", "2", "10.244.0.5", true)
	del.DeletionTimestamp = &metav1.Time{Time: now}
	tr.apply(stripped(t, del), 0, false)
	tr.apply(stripped(t, finish(del, "3", corev1.PodSucceeded, "", "")), 0, false)
	if first(podEvents(*got), event.PodFinished) != nil || first(podEvents(*got), event.PodDeletion) == nil {
		t.Errorf("a deleted pod ending recorded %v, want its deletion only", kinds(*got))
	}

	// Each re-observation records the ended pods ended, and a pod both
	// ended and deleted since ended first, deleted last: its state.
	tr.apply(stripped(t, finish(pod("late", "4", "10.244.0.6", true), "4", corev1.PodFailed, "NodeAffinity", "")), 0, false)
	gone := ev.DeepCopy()
	gone.ResourceVersion = "5"
	gone.DeletionTimestamp = &metav1.Time{Time: now}
	tr.apply(stripped(t, gone), 0, false)
	*got = nil
	tr.observe(now)
	byPod := map[string][]event.Kind{}
	for _, r := range *got {
		if r.kind == event.PodFinished || r.kind == event.PodDeletion {
			byPod[r.e.Pod.Name] = append(byPod[r.e.Pod.Name], r.kind)
			if r.flags != event.FlagObserved {
				t.Errorf("observed %s of %s: flags %b", r.kind, r.e.Pod.Name, r.flags)
			}
		}
	}
	for name, want := range map[string][]event.Kind{
		"evicted":  {event.PodFinished, event.PodDeletion},
		"shutdown": {event.PodFinished},
		"done":     {event.PodFinished},
		"deleted":  {event.PodDeletion},
		"late":     {event.PodFinished},
	} {
		if !equalKinds(byPod[name], want) {
			t.Errorf("observed %s as %v, want %v", name, byPod[name], want)
		}
	}
	if e := first(podEvents(*got), event.PodFinished); e == nil || e.Attrs[event.AttrPhase] == "" {
		t.Errorf("observed end without its phase: %+v", e)
	}
}

// TestPodTrackerFinishedAtList: a pod already ended when the watch
// begins is not reported at the list (its end is not news) but is
// observed; one that ended while the watch was down is recovered.
func TestPodTrackerFinishedAtList(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tr, got := newTestPodTracker(&now)
	old := finish(pod("old", "1", "10.244.0.2", true), "1", corev1.PodFailed, "Evicted", "low on memory")
	tr.replaceAll([]*corev1.Pod{stripped(t, old), pod("a", "1", "10.244.0.3", true)}, event.FlagRelist, true)
	if len(*got) != 0 {
		t.Fatalf("the list reported %v", kinds(*got))
	}
	tr.observe(now)
	if e := first(podEvents(*got), event.PodFinished); e == nil || e.Reason != "Evicted" || e.Flags != event.FlagObserved {
		t.Errorf("observed end at the list: %+v", e)
	}
	*got = nil
	a := finish(pod("a", "2", "10.244.0.3", true), "2", corev1.PodFailed, "Evicted", "low on memory")
	tr.replaceAll([]*corev1.Pod{stripped(t, old), stripped(t, a)}, event.FlagRelist, false)
	if e := first(podEvents(*got), event.PodFinished); e == nil || e.Pod.Name != "a" || e.Flags != event.FlagRelist {
		t.Errorf("end found on a relist: %+v (all %v)", e, kinds(*got))
	}
	if n := len(ofKind(podEvents(*got), event.PodFinished, nil)); n != 1 {
		t.Errorf("relist recorded %d ends, want 1 (the old pod's was known)", n)
	}
}

func podEvents(rs []podRec) []event.Event {
	out := make([]event.Event, len(rs))
	for i, r := range rs {
		out[i] = r.e
		out[i].Flags = r.flags
	}
	return out
}

// withInit returns p with an init container run to completion (migrate)
// and a native sidecar (proxy, restarted Always) running.
func withInit(p *corev1.Pod) *corev1.Pod {
	p = p.DeepCopy()
	p.Spec.InitContainers = []corev1.Container{
		{Name: "migrate", Image: "migrate:1"},
		{Name: "proxy", Image: "proxy:1", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
	}
	p.Spec.Containers = []corev1.Container{{Name: "app", Image: "app:1"}}
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{
		{Name: "migrate", ContainerID: "containerd://migrate-" + p.Name, State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", ContainerID: "containerd://migrate-" + p.Name}}},
		{Name: "proxy", ContainerID: "containerd://proxy-" + p.Name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
	}
	return p
}

// TestPodTrackerInitContainers: init containers' statuses are read as the
// app's are, each event saying which kind of container it is, and a
// sidecar's container ID resolves to its pod.
func TestPodTrackerInitContainers(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tr, got := newTestPodTracker(&now)
	tr.replaceAll(nil, event.FlagRelist, true)
	p := withInit(pod("a", "1", "10.244.0.2", false))
	tr.apply(stripped(t, p), 0, false)
	type seen struct {
		kind            event.Kind
		container, role string
	}
	var evs []seen
	for _, r := range *got {
		if r.kind == event.ContainerStarted || r.kind == event.ContainerTerminated {
			evs = append(evs, seen{r.kind, r.e.Pod.Container, r.e.Attrs[event.AttrContainerRole]})
		}
	}
	want := []seen{
		{event.ContainerTerminated, "migrate", event.ContainerRoleInit},
		{event.ContainerStarted, "proxy", event.ContainerRoleSidecar},
		{event.ContainerStarted, "app", event.ContainerRoleApp},
	}
	if !slices.Equal(evs, want) {
		t.Fatalf("containers recorded %v, want %v", evs, want)
	}
	for _, id := range []string{"proxy-a", "containerd://migrate-a"} {
		if ref, _, ok := tr.PodByContainerID(id); !ok || ref.Name != "a" || ref.Container != strings.Split(strings.TrimPrefix(id, "containerd://"), "-")[0] {
			t.Errorf("PodByContainerID(%s) = %v, %v", id, ref, ok)
		}
	}
	// Re-observed, the sidecar is a running container like the app's.
	*got = nil
	tr.observe(now)
	roles := map[string]string{}
	for _, r := range *got {
		if r.kind == event.ContainerStarted {
			roles[r.e.Pod.Container] = r.e.Attrs[event.AttrContainerRole]
		}
	}
	if !maps.Equal(roles, map[string]string{"proxy": event.ContainerRoleSidecar, "app": event.ContainerRoleApp}) {
		t.Errorf("observed running containers %v", roles)
	}
	// The pod is deleted: the app's container ends, then the sidecar.
	*got = nil
	end := p.DeepCopy()
	end.ResourceVersion = "2"
	end.DeletionTimestamp = &metav1.Time{Time: now}
	end.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, ContainerID: "containerd://c0ffee-a"}}
	tr.apply(stripped(t, end), 0, false)
	end = end.DeepCopy()
	end.ResourceVersion = "3"
	end.Status.InitContainerStatuses[1].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 143, ContainerID: "containerd://proxy-a"}}
	tr.apply(stripped(t, end), 0, false)
	evs = nil
	for _, r := range *got {
		if r.kind == event.ContainerTerminated {
			evs = append(evs, seen{r.kind, r.e.Pod.Container, r.e.Attrs[event.AttrContainerRole]})
		}
	}
	want = []seen{{event.ContainerTerminated, "app", event.ContainerRoleApp}, {event.ContainerTerminated, "proxy", event.ContainerRoleSidecar}}
	if !slices.Equal(evs, want) {
		t.Errorf("terminations %v, want %v (the init container's was reported before, once)", evs, want)
	}
}

// TestPodTrackerContainerPorts: container_started carries the ports the
// container's spec declares, also when re-observed, and none when it
// declares none.
func TestPodTrackerContainerPorts(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tr, got := newTestPodTracker(&now)
	tr.replaceAll(nil, event.FlagRelist, true)
	p := withInit(pod("a", "1", "10.244.0.2", true))
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{
		{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}, {Name: "metrics", ContainerPort: 9090},
		{Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolUDP}}
	p.Spec.InitContainers[1].Ports = []corev1.ContainerPort{{ContainerPort: 15001, Protocol: corev1.ProtocolTCP}}
	p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
		Name: "log", ContainerID: "containerd://log-a", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "log", Image: "log:1"})
	want := map[string]string{"app": "8080/TCP,9090/TCP,5353/UDP", "proxy": "15001/TCP", "log": ""}
	check := func(what string) {
		t.Helper()
		n := 0
		for _, r := range *got {
			if r.kind != event.ContainerStarted {
				continue
			}
			n++
			ports, ok := r.e.Attrs[event.AttrContainerPorts]
			if ports != want[r.e.Pod.Container] || ok && ports == "" {
				t.Errorf("%s: %s ports %q (present %v), want %q", what, r.e.Pod.Container, ports, ok, want[r.e.Pod.Container])
			}
		}
		if n != len(want) {
			t.Errorf("%s: %d containers started, want %d", what, n, len(want))
		}
	}
	tr.apply(stripped(t, p), 0, false)
	check("started")
	// An update that starts nothing keeps them for the re-observation.
	*got = nil
	p2 := p.DeepCopy()
	p2.ResourceVersion = "2"
	p2.Status.Conditions[0].Status = corev1.ConditionFalse
	tr.apply(stripped(t, p2), 0, false)
	*got = nil
	tr.observe(now)
	check("observed")
}
