package analysis

import (
	"reflect"
	"testing"

	"github.com/drainscope/drainscope/event"
)

func TestDisruptionKeyRoundTrip(t *testing.T) {
	for _, k := range []DisruptionKey{
		{Namespace: "shop", Kind: "Deployment", Name: "web", Start: 1_700_000_000_000_000_000},
		{Namespace: "shop", Start: 5}, // pods of no known workload
		{Namespace: "a/b c", Kind: "Deployment", Name: "x%y", Start: 7},
	} {
		id := k.ID()
		var segs [4]string
		n := 0
		for i, j := 0, 0; j <= len(id); j++ {
			if j == len(id) || id[j] == '/' {
				if n < 4 {
					segs[n] = id[i:j]
				}
				n, i = n+1, j+1
			}
		}
		if n != 4 {
			t.Errorf("%v: ID %q has %d segments, want 4", k, id, n)
			continue
		}
		got, err := ParseDisruptionKey(segs[0], segs[1], segs[2], segs[3])
		if err != nil || got != k {
			t.Errorf("ID %q reads back as %v, %v; want %v", id, got, err, k)
		}
	}
	if got := (DisruptionKey{Namespace: "shop", Start: 5}).ID(); got != "shop/-/-/5" {
		t.Errorf("empty segments: %q, want shop/-/-/5", got)
	}
	for _, start := range []string{"0", "-1", "x", ""} {
		if _, err := ParseDisruptionKey("shop", "Deployment", "web", start); err == nil {
			t.Errorf("start %q read without an error", start)
		}
	}
}

// TestTriggerTableComplete checks that every trigger has its row, with
// its words, and that what recognises each is one row's only.
func TestTriggerTableComplete(t *testing.T) {
	all := []Trigger{TriggerRollout, TriggerScale, TriggerDeleted, TriggerEviction, TriggerPreemption, TriggerTaint,
		TriggerNodePressure, TriggerNodeShutdown, TriggerPodDeleted, TriggerOOM, TriggerRestart}
	if len(all) != len(Triggers) {
		t.Errorf("%d triggers, %d rows: each trigger is one row", len(all), len(Triggers))
	}
	seen := map[string]Trigger{}
	for _, trig := range all {
		ti := trig.Info()
		if ti.Trigger != trig || ti.Noun == "" || ti.Noun == "disruption" || ti.Heading == "" || ti.BegunBy == "" {
			t.Errorf("trigger %q has the row %+v: want its own, with all three words", trig, ti)
		}
		for _, r := range append(append([]string{ti.Change}, ti.Disruption...), ti.Finished...) {
			if r == "" {
				continue
			}
			if other, ok := seen[r]; ok {
				t.Errorf("reason %q is %q's and %q's", r, other, trig)
			}
			seen[r] = trig
		}
	}
	for _, c := range []string{event.ChangeTemplate, event.ChangeScale, event.ChangeDeleted} {
		if triggerOfChange(c) == "" {
			t.Errorf("the workload change %q is no trigger", c)
		}
	}
	if w := WordsFor(""); w.Noun != "disruption" || w.Heading != "disruption" || w.BegunBy != "" {
		t.Errorf("no trigger: %+v", w)
	}
	if w := WordsFor("resize"); w.Noun != "disruption" || w.Heading != "resize" || w.BegunBy != "a workload change: resize" {
		t.Errorf("an unknown trigger: %+v", w)
	}
}

// TestNewDisruption checks that a disruption found by the account keeps
// its identity, trigger and pods, and takes what the analysis found on
// those pods: the analysed disruption of the same ID, else those that
// ended any of its pod lives, and only those.
func TestNewDisruption(t *testing.T) {
	gap := func(v int64) *int64 { return &v }
	a, b := PodView{Namespace: "shop", Name: "web-a", UID: "a"}, PodView{Namespace: "shop", Name: "web-b", UID: "b"}
	found := &Disruption{ID: "shop/Deployment/web/100", Namespace: "shop", Kind: "Deployment", Name: "web", From: 100, To: 200, Until: 200,
		Trigger: TriggerPodDeleted, Terminations: 2, Events: 7, Replaced: []PodView{a, b}}
	res := &Result{
		Disruptions: []Disruption{
			{ID: "shop/Deployment/web/90", Namespace: "shop", Kind: "Deployment", Name: "web", From: 90, To: 150, Until: 150, Trigger: TriggerPodDeleted,
				Replaced: []PodView{a}, NewPods: []NewPod{{Ready: 140}}, FailureCounts: FailureCounts{Failures: 3, ByCause: map[Cause]int{CauseEndpointRace: 3},
					Inferred: 2, InferredByCause: map[Cause]int{CauseKeepAliveAtExit: 2}, WorstSigtermAfterRotation: gap(-5), LongestExitAfterSigterm: gap(10)}},
			{ID: "shop/Deployment/web/160", Namespace: "shop", Kind: "Deployment", Name: "web", From: 160, To: 260, Until: 260,
				Replaced: []PodView{b}, FailureCounts: FailureCounts{Failures: 1, ByCause: map[Cause]int{CauseEndpointRace: 1}, Unattributed: 4,
					WorstSigtermAfterRotation: gap(-9), LongestExitAfterSigterm: gap(7)}},
			// Another workload, and the same pod's next life: not this disruption's.
			{ID: "shop/Deployment/api/100", Namespace: "shop", Kind: "Deployment", Name: "api", From: 100, To: 200, FailureCounts: FailureCounts{Failures: 50, ByCause: map[Cause]int{CauseEndpointRace: 50}}},
			{ID: "shop/Deployment/web/300", Namespace: "shop", Kind: "Deployment", Name: "web", From: 300, To: 400, Replaced: []PodView{{Namespace: "shop", Name: "web-a", UID: "a", Life: 250}},
				FailureCounts: FailureCounts{Failures: 60, ByCause: map[Cause]int{CauseEndpointRace: 60}}},
		},
		Failures: []AlignedFailure{
			{Pod: &a, Cause: CauseEndpointRace},
			{Pod: &a, Cause: CauseUnexplained},
			{Pod: &b, Cause: CauseKeepAliveAtExit, Inferred: true, Proof: ProofInUseAtExit},
			{Pod: &PodView{Namespace: "shop", Name: "web-a", UID: "a", Life: 250}, Cause: CauseEndpointRace},
			{Pod: &PodView{Namespace: "shop", Name: "api-x", UID: "x"}, Cause: CauseEndpointRace},
		},
		Rules: []RuleView{
			{Cause: CauseEndpointRace, Title: "endpoint removal race", Fix: "a preStop delay"},
			{Cause: CauseKeepAliveAtExit, Title: "keep-alive connection cut at exit", Fix: "Connection: close"},
		},
		Causes: []CauseSummary{{Cause: CauseEndpointRace, Fix: "a preStop delay over 1.2 s"}},
	}

	base := NewDisruption(found, nil)
	if base.Analysed || base.ID != "shop/Deployment/web/100" || base.Terminations != 2 || base.Events != 7 || base.Until != 200 || base.Failures != 0 {
		t.Errorf("as found: %+v", base)
	}
	d := NewDisruption(found, res)
	want := &Disruption{
		ID: "shop/Deployment/web/100", Namespace: "shop", Kind: "Deployment", Name: "web",
		From: 100, To: 200, Until: 260, Trigger: TriggerPodDeleted, Terminations: 2, Events: 7, Analysed: true,
		Replaced: []PodView{a, b}, NewPods: []NewPod{{Ready: 140}},
		FailureCounts: FailureCounts{Failures: 4, ByCause: map[Cause]int{CauseEndpointRace: 4}, Inferred: 2,
			InferredByCause: map[Cause]int{CauseKeepAliveAtExit: 2}, Unattributed: 4,
			WorstSigtermAfterRotation: gap(-9), LongestExitAfterSigterm: gap(10)},
		Likely: 1,
		Causes: []DisruptionCause{
			{Cause: CauseEndpointRace, Title: "endpoint removal race", Failures: 4, Fix: "a preStop delay over 1.2 s"},
			{Cause: CauseKeepAliveAtExit, Title: "keep-alive connection cut at exit", Inferred: 2, Fix: "Connection: close"},
		},
		Explained: []AlignedFailure{res.Failures[0], res.Failures[2]},
		// No timeline names the app's container: nothing to patch; the
		// keep-alive cut is the code's.
		Patch: &Patch{Namespace: "shop", Kind: "Deployment", Name: "web", NeedsCode: []Cause{CauseKeepAliveAtExit},
			Notes: []string{"which container is the app was not recorded (no container_started with the Service's port)"}},
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("disruption\n got %+v\nwant %+v", d, want)
	}
	if got := d.CountsByCause(false); got != "4 endpoint removal race" {
		t.Errorf("client counts by cause: %q", got)
	}
	if got := d.CountsByCause(true); got != "2 keep-alive connection cut at exit" {
		t.Errorf("inferred counts by cause: %q", got)
	}
	if d.Words().Noun != "pod deletion" || d.Key() != found.Key() || d.Workload() != "Deployment/web" || !d.HasFailures() {
		t.Errorf("words %+v, key %v, workload %q", d.Words(), d.Key(), d.Workload())
	}
	if w := found.Window(); w.From != 100-int64(RolloutLead) || w.To != 200+int64(DisruptionPad) {
		t.Errorf("window %+v", w)
	}
	// An analysed disruption of the same ID is the one taken.
	res.Disruptions = append(res.Disruptions, Disruption{ID: found.ID, Namespace: "shop", Kind: "Deployment", Name: "web", From: 100, To: 200, Until: 210,
		FailureCounts: FailureCounts{Failures: 7, ByCause: map[Cause]int{CauseEndpointRace: 7}}})
	if d := NewDisruption(found, res); d.Failures != 7 || d.Until != 210 {
		t.Errorf("with an analysed disruption of its ID: failures %d, until %d; want 7, 210", d.Failures, d.Until)
	}
}
