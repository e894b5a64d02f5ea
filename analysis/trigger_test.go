package analysis

import (
	"fmt"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// change is a workload_changed event as the watcher records it.
func (r *rec) change(d int64, wl event.Workload, reason string) {
	r.add(event.Event{Time: r.at(d), Kind: event.WorkloadChanged, Node: r.nodes[0], Source: event.SourceWatcher,
		Pod: event.PodRef{Namespace: "default"}, Workload: wl, Reason: reason})
}

// end is a pod's whole end: deletion, leaving rotation, SIGTERM, exit,
// removal.
func (r *rec) end(p *tpod, d int64) {
	r.deletion(p, d, 30*time.Second)
	r.leave(p, d+5*ms, ms)
	r.signal(p, d+10*ms, 15)
	r.exit(p, d+20*ms, 0, 15)
	r.removed(p, d+40*ms, ms)
}

// surgeRollout records a maxSurge: 1, maxUnavailable: 0 rollout of n pods
// begun by a template change at 0: each new pod is created and ready
// before the old pod it replaces is deleted. It then deletes the
// Deployment at del, ending the new pods.
func surgeRollout(n int, del int64) *rec {
	r := newRec()
	old := make([]*tpod, n)
	for i := range old {
		old[i] = r.pod(fmt.Sprintf("web-old-%d", i), fmt.Sprintf("10.244.0.%d", 10+i))
		r.created(old[i], -time.Hour.Nanoseconds()/2)
		r.ready(old[i], -time.Hour.Nanoseconds()/2+s)
	}
	r.change(0, old[0].wl, event.ChangeTemplate)
	fresh := make([]*tpod, n)
	for i := range fresh {
		step := int64(i) * 3 * s
		fresh[i] = r.pod(fmt.Sprintf("web-new-%d", i), fmt.Sprintf("10.244.0.%d", 50+i))
		r.created(fresh[i], step+10*ms)
		r.ready(fresh[i], step+2*s) // ready 2 s after creation, before the old pod goes
		r.end(old[i], step+2*s+100*ms)
	}
	r.change(del, old[0].wl, event.ChangeDeleted)
	for i, p := range fresh {
		r.end(p, del+10*ms+int64(i)*ms)
	}
	return r
}

func TestRolloutBeginsAtItsTrigger(t *testing.T) {
	r := surgeRollout(4, 20*s)
	res, err := AnalyzeEvents(r.events, store.Query{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Disruptions) != 2 {
		t.Fatalf("rollouts = %d, want 2 (the rollout, then the deletion 8 s after it, inside RolloutGap): %+v", len(res.Disruptions), res.Disruptions)
	}
	ro, del := res.Disruptions[0], res.Disruptions[1]
	if ro.Trigger != event.ChangeTemplate || ro.TriggerAt != r.at(0) || ro.From != r.at(0) {
		t.Errorf("rollout trigger %q at %d, from %d; want template at %d", ro.Trigger, ro.TriggerAt, ro.From, r.at(0))
	}
	if len(ro.Replaced) != 4 || len(ro.NewPods) != 4 {
		t.Errorf("rollout replaced %d, new %d; want 4 and 4", len(ro.Replaced), len(ro.NewPods))
	}
	// It ends when the last old pod is gone (its removal) and every new
	// pod is ready.
	if want := r.at(9*s + 2*s + 100*ms + 40*ms); ro.To != want {
		t.Errorf("rollout to %d, want %d (the last old pod's removal)", ro.To, want)
	}
	if del.Trigger != event.ChangeDeleted || len(del.Replaced) != 4 || len(del.NewPods) != 0 {
		t.Errorf("deletion: trigger %q, replaced %d, new %d; want deleted, 4, 0", del.Trigger, len(del.Replaced), len(del.NewPods))
	}
	// The reports say what began each (textreport's TestDisruptionLines).
	for _, c := range []struct {
		d    Disruption
		want string
	}{{ro, "a pod template change"}, {del, "the workload's deletion"}} {
		if got := c.d.Words().BegunBy; got != c.want {
			t.Errorf("disruption begun by %q: %q in words, want %q", c.d.Trigger, got, c.want)
		}
	}
}

// Without a recorded workload change (an agent that does not watch
// Deployments, or events from before it did), the rollout starts at its
// first pod's end, its trigger is the pods' deletion, and the new pods are
// those ready from RolloutLead before it.
func TestRolloutWithoutTrigger(t *testing.T) {
	r := surgeRollout(4, 20*s)
	var evs []event.Event
	for _, e := range r.events {
		if e.Kind != event.WorkloadChanged {
			evs = append(evs, e)
		}
	}
	res, err := AnalyzeEvents(evs, store.Query{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Disruptions) != 1 {
		t.Fatalf("rollouts = %d, want 1: without triggers the deletion joins the rollout", len(res.Disruptions))
	}
	ro := res.Disruptions[0]
	if ro.Trigger != TriggerPodDeleted || ro.TriggerAt != 0 || ro.From != r.at(2*s+100*ms) {
		t.Errorf("trigger %q at %d from %d; want the pods' own deletion, from the first one %d", ro.Trigger, ro.TriggerAt, ro.From, r.at(2*s+100*ms))
	}
	if len(ro.Replaced) != 8 || len(ro.NewPods) != 0 {
		t.Errorf("replaced %d, new %d; want 8, 0", len(ro.Replaced), len(ro.NewPods))
	}
}

// TestPodTriggers: with no workload change before them, what the pods
// show names the disruption: the API's DisruptionTarget reason on the
// deletion, a plain deletion, or a container's end with the pod kept.
func TestPodTriggers(t *testing.T) {
	for _, tc := range []struct {
		name, disruption, termReason string
		deleted                      bool
		want                         Trigger
	}{
		{"node drain", "EvictionByEvictionAPI", "", true, TriggerEviction},
		{"preemption", "PreemptionByScheduler", "", true, TriggerPreemption},
		{"taint", "DeletionByTaintManager", "", true, TriggerTaint},
		{"node pressure", "TerminationByKubelet", "", true, TriggerNodePressure},
		{"kubectl delete", "", "", true, TriggerPodDeleted},
		{"OOM kill", "", "OOMKilled", false, TriggerOOM},
		{"liveness restart", "", "Error", false, TriggerRestart},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRec()
			p := r.pod("web-1", "10.244.0.11")
			r.created(p, -10*s)
			r.ready(p, -9*s)
			if tc.deleted {
				e := r.podEvent(p, 0, event.PodDeletion)
				e.Duration = int64(30 * time.Second)
				if tc.disruption != "" {
					e.Attrs = map[string]string{event.AttrDisruption: tc.disruption}
				}
				r.add(e)
				r.signal(p, 10*ms, 15)
			} else {
				r.signal(p, 10*ms, 9)
			}
			r.exit(p, 20*ms, 0, 9)
			if tc.termReason != "" {
				e := r.podEvent(p, 30*ms, event.ContainerTerminated)
				e.Reason, e.Code = tc.termReason, 137
				r.add(e)
			}
			res, err := AnalyzeEvents(r.events, store.Query{}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Disruptions) != 1 || res.Disruptions[0].Trigger != tc.want {
				var got []Trigger
				for _, ro := range res.Disruptions {
					got = append(got, ro.Trigger)
				}
				t.Fatalf("triggers %q, want one %q", got, tc.want)
			}
		})
	}
}

// TestBackToBackRollouts: two rollouts of one Deployment 20 s apart (two
// kubectl rollout restart): each counts the pods it brought up, not the
// next one's.
func TestBackToBackRollouts(t *testing.T) {
	r := newRec()
	gen := func(prefix string, ip0 int) []*tpod {
		ps := make([]*tpod, 2)
		for i := range ps {
			ps[i] = r.pod(fmt.Sprintf("web-%s-%d", prefix, i), fmt.Sprintf("10.244.0.%d", ip0+i))
		}
		return ps
	}
	a, b, c := gen("a", 10), gen("b", 20), gen("c", 30)
	for _, p := range a {
		r.created(p, -time.Hour.Nanoseconds()/2)
		r.ready(p, -time.Hour.Nanoseconds()/2+s)
	}
	roll := func(at int64, old, fresh []*tpod) {
		r.change(at, old[0].wl, event.ChangeTemplate)
		for i := range fresh {
			step := at + int64(i)*3*s
			r.created(fresh[i], step+10*ms)
			r.ready(fresh[i], step+2*s)
			r.end(old[i], step+2*s+100*ms)
		}
	}
	roll(0, a, b)
	roll(30*s, b, c)
	res, err := AnalyzeEvents(r.events, store.Query{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Disruptions) != 2 {
		t.Fatalf("%d rollouts, want 2", len(res.Disruptions))
	}
	for i, ro := range res.Disruptions {
		if len(ro.Replaced) != 2 || len(ro.NewPods) != 2 {
			t.Errorf("rollout %d: %d replaced, %d new; want 2 and 2", i, len(ro.Replaced), len(ro.NewPods))
		}
	}
}
