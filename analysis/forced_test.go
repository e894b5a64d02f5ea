package analysis

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

// dangling finds what a template leaves when a value it expected is
// empty: a preposition or article with nothing after it ("a grace period
// of ", "of ;"), or two spaces where a word was. The word stands alone: a
// pod named web-a, before a colon, is no article. (After and before end
// phrases as adverbs: "exited 3 ms before, while".)
var dangling = regexp.MustCompile(`(?i)(^|\s)(of|with|at|on|to|from|by|for|than|in|the|a|an|now)\s*($|[,;:.)])|\S  +\S`)

// checkText checks that text (the what of a failure) says each of want
// and none of not.
func checkText(t *testing.T, what, text string, want, not []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("%s %q lacks %q", what, text, w)
		}
	}
	for _, n := range not {
		if strings.Contains(text, n) {
			t.Errorf("%s %q says %q", what, text, n)
		}
	}
}

// checkProse fails t for each explanation, summary or fix in res that
// ends in, or holds, an empty template value.
func checkProse(t *testing.T, res *Result) {
	t.Helper()
	check := func(what, text string) {
		t.Helper()
		if m := dangling.FindString(text); m != "" {
			t.Errorf("%s %q: dangling %q (an empty template value)", what, text, m)
		}
	}
	for _, f := range res.Failures {
		check("explanation", f.Explanation)
	}
	for _, cs := range append(append([]CauseSummary(nil), res.Causes...), res.InferredCauses...) {
		check(string(cs.Cause)+" summary", cs.Explanation)
		check(string(cs.Cause)+" fix", cs.Fix)
		for _, ex := range cs.Examples {
			check("example", ex.Explanation)
		}
	}
	for _, r := range res.Rules {
		check(string(r.Cause)+" rule's fix", r.Fix)
	}
}

// TestForcedDeletionKill: kubectl delete --force --grace-period=0 (a
// pod_deletion whose grace period is 0) and the SIGKILL at once. The
// cause is SIGKILL, but no grace period ran out, and raising
// terminationGracePeriodSeconds does nothing: the forced deletion
// overrode it. A deletion with a grace period keeps its words.
func TestForcedDeletionKill(t *testing.T) {
	for _, tc := range []struct {
		name   string
		graces []time.Duration // one pod each, deleted with it, then killed
		// noSignal: the capture saw the kill only as the exit by signal 9
		noSignal bool
		// each must be in every failure's explanation (explain), the
		// cause's summary and fix; none of not may be in any of them.
		explain, summary, fix []string
		not                   []string
	}{
		{
			name:    "forced, grace period 0",
			graces:  []time.Duration{0},
			explain: []string{"--grace-period=0 (forced): no grace period, the kill came 5 ms after deletion"},
			summary: []string{"after a deletion with --grace-period=0 (forced): no grace period was given"},
			fix:     []string{"overrode the grace period", "do not force-delete serving pods", "Eviction API"},
			not:     []string{"grace period of", "raise terminationGracePeriodSeconds", "ran out"},
		},
		{
			name:     "forced, the kill seen only as the exit by signal 9",
			graces:   []time.Duration{0},
			noSignal: true,
			explain:  []string{"--grace-period=0 (forced): no grace period"},
			summary:  []string{"--grace-period=0 (forced): no grace period was given"},
			fix:      []string{"do not force-delete serving pods"},
			not:      []string{"grace period of", "raise terminationGracePeriodSeconds"},
		},
		{
			name:    "graceful, grace period 10 s",
			graces:  []time.Duration{10 * time.Second},
			explain: []string{"with a grace period of 10.0 s"},
			summary: []string{"when the grace period of 10.0 s ran out"},
			fix:     []string{"raise terminationGracePeriodSeconds", "(now 10.0 s)"},
			not:     []string{"forced", "--grace-period=0"},
		},
		{
			name:    "one pod forced, one graceful",
			graces:  []time.Duration{0, 10 * time.Second},
			summary: []string{"when the grace period of 10.0 s ran out; 1 of the pods was deleted with --grace-period=0 (forced), with no grace period"},
			fix:     []string{"raise terminationGracePeriodSeconds", "(now 10.0 s)", "do not force-delete serving pods: --grace-period=0 overrode the grace period of 1 of them"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRec()
			for i, grace := range tc.graces {
				p := r.pod(fmt.Sprintf("web-%d", i+1), fmt.Sprintf("10.244.0.%d", 11+i))
				at := int64(i) * 20 * s
				kill := at + int64(grace) + 5*ms
				r.ready(p, -60*s)
				r.deletion(p, at, grace)
				if grace > 0 {
					r.signal(p, at+2*ms, 15)
				}
				if !tc.noSignal {
					r.signal(p, kill, 9)
				}
				r.exit(p, kill+1*ms, 0, 9)
				r.connClosed(p, kill+2*ms, client(i), "local", event.FlagAtExit)
				r.failure(kill+3*ms, client(i), event.FailEOF, backend(p))
				r.leave(p, kill+100*ms, 0)
			}
			res := analyzeAll(t, r)
			checkProse(t, res)
			fs := decided(t, res)
			var sum, fix string
			for _, cs := range res.Causes {
				if cs.Cause == CauseSIGKILL {
					sum, fix = cs.Explanation, cs.Fix
				}
			}
			t.Logf("summary: %s\nfix: %s", sum, fix)
			texts := []struct {
				what, text string
				want       []string
			}{{"summary", sum, tc.summary}, {"fix", fix, tc.fix}}
			for _, f := range fs {
				t.Logf("%s: %s", f.Cause, f.Explanation)
				if f.Cause != CauseSIGKILL {
					t.Errorf("%s on %v: %s, want SIGKILL", f.Failure.Local, f.Pod, f.Cause)
				}
				texts = append(texts, struct {
					what, text string
					want       []string
				}{"explanation", f.Explanation, tc.explain})
			}
			for _, c := range texts {
				checkText(t, c.what, c.text, c.want, tc.not)
			}
		})
	}
}

// TestDanglingCatchesAnEmptyValue: the check above fails on the texts
// an empty value left before.
func TestDanglingCatchesAnEmptyValue(t *testing.T) {
	for _, bad := range []string{
		"eof on default/web-1 at SIGKILL +2 ms; the kill came 5 ms after deletion with a grace period of ",
		"killed by SIGKILL 5 ms after deletion, when the grace period of  ran out",
		"the failures came  the exit (median)",
		"a request of ; cut",
	} {
		if dangling.FindString(bad) == "" {
			t.Errorf("%q passed the check", bad)
		}
	}
	for _, good := range []string{
		"eof on default/web-1 at SIGKILL +2 ms; the kill came 5 ms after deletion with a grace period of 10.0 s",
		"eof on default/web-a: the client's connection went through the container proxy", // a pod's name, not an article
		"raise terminationGracePeriodSeconds above preStop + drain + a margin (now 10.0 s), or shorten preStop and the drain",
	} {
		if m := dangling.FindString(good); m != "" {
			t.Errorf("%q failed the check on %q", good, m)
		}
	}
}

// TestKubeletEvictionKill: the kubelet evicts a pod for node pressure, no
// deletion comes (the pod object stays, Failed, Evicted). A hard
// threshold kills with no SIGTERM; a soft one with SIGTERM, then SIGKILL
// when its evictionMaxPodGracePeriod runs out. The kill is right, the
// OOM killer and the pod's own grace period are not: the fix names the
// kubelet's eviction thresholds.
func TestKubeletEvictionKill(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sigterm   bool
		cause     Cause
		explain   []string
		fix       []string
		not       []string
		disrupted Trigger
	}{
		{"hard threshold", false, CauseKilled,
			[]string{"the kubelet evicted the pod for node pressure and killed it with no SIGTERM"},
			[]string{"eviction threshold", "evictionHard"},
			[]string{"OOM killer", "memory limit"}, TriggerNodePressure},
		{"soft threshold", true, CauseSIGKILL,
			[]string{"the kubelet evicted the pod for node pressure"},
			[]string{"eviction threshold", "evictionMaxPodGracePeriod"},
			[]string{"raise terminationGracePeriodSeconds"}, TriggerNodePressure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRec()
			p := r.running("web-1", "10.244.0.11")
			kill := int64(0)
			if tc.sigterm {
				r.signal(p, 0, 15)
				kill = 2 * s
			}
			r.signal(p, kill, 9)
			r.exit(p, kill+1*ms, 0, 9)
			r.connClosed(p, kill+2*ms, client(1), "local", event.FlagAtExit)
			r.failure(kill+3*ms, client(1), event.FailEOF, backend(p))
			r.finished(p, kill+400*ms, "Evicted", "TerminationByKubelet")
			r.leave(p, kill+500*ms, 0)
			res := analyzeAll(t, r)
			checkProse(t, res)
			fs := decided(t, res)
			if len(fs) != 1 || fs[0].Cause != tc.cause {
				t.Fatalf("%+v, want one %s", fs, tc.cause)
			}
			var fix string
			for _, cs := range res.Causes {
				if cs.Cause == tc.cause {
					fix = cs.Fix
				}
			}
			for _, c := range []struct {
				what, text string
				want       []string
			}{{"explanation", fs[0].Explanation, tc.explain}, {"fix", fix, tc.fix}} {
				checkText(t, c.what, c.text, c.want, tc.not)
			}
			if len(res.Disruptions) != 1 || res.Disruptions[0].Trigger != tc.disrupted {
				t.Errorf("disruptions %+v, want one %s", res.Disruptions, tc.disrupted)
			}
		})
	}
}
