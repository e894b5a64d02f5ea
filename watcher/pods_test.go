package watcher

import (
	"net/netip"
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
