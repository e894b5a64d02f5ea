package event

import (
	"testing"
	"time"
)

func TestGroupRolloutsByTrigger(t *testing.T) {
	const s = int64(time.Second)
	web := Workload{Kind: "Deployment", Name: "web"}
	term := func(name string, start int64) Termination {
		return Termination{Pod: PodRef{Namespace: "shop", Name: name, UID: name}, Workload: web, Deletion: start, Exit: start + s}
	}
	change := func(at int64, wl Workload, reason string) Event {
		return Event{Time: at, Kind: WorkloadChanged, Pod: PodRef{Namespace: "shop"}, Workload: wl, Reason: reason}
	}
	ts := []Termination{term("a", 100*s), term("b", 110*s), term("c", 130*s)}
	for _, tc := range []struct {
		name     string
		triggers []Event
		want     []int   // terminations per rollout
		from     []int64 // each rollout's From
		trigger  []string
	}{
		{"none", nil, []int{3}, []int64{100 * s}, []string{""}},
		{"one template change", []Event{change(90*s, web, ChangeTemplate)}, []int{3}, []int64{90 * s}, []string{ChangeTemplate}},
		{"a deletion inside the gap splits", []Event{change(90*s, web, ChangeTemplate), change(125*s, web, ChangeDeleted)},
			[]int{2, 1}, []int64{90 * s, 125 * s}, []string{ChangeTemplate, ChangeDeleted}},
		{"another workload's change is not ours", []Event{change(90*s, Workload{Kind: "Deployment", Name: "api"}, ChangeTemplate)},
			[]int{3}, []int64{100 * s}, []string{""}},
		{"a change too long before is not the trigger", []Event{change(100*s-int64(TriggerLead)-1, web, ChangeTemplate)},
			[]int{3}, []int64{100 * s}, []string{""}},
		{"a creation ends no pod", []Event{change(90*s, web, ChangeCreated)}, []int{3}, []int64{100 * s}, []string{""}},
		{"other kinds are ignored", []Event{{Time: 90 * s, Kind: PodCreated, Pod: PodRef{Namespace: "shop"}, Workload: web}},
			[]int{3}, []int64{100 * s}, []string{""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := GroupRollouts(ts, tc.triggers)
			if len(got) != len(tc.want) {
				t.Fatalf("%d rollouts, want %d: %+v", len(got), len(tc.want), got)
			}
			for i, r := range got {
				if len(r.Terminations) != tc.want[i] || r.From != tc.from[i] || r.Trigger != tc.trigger[i] {
					t.Errorf("rollout %d: %d terminations from %d trigger %q; want %d from %d trigger %q",
						i, len(r.Terminations), r.From, r.Trigger, tc.want[i], tc.from[i], tc.trigger[i])
				}
			}
		})
	}
}
