package textreport

import (
	"fmt"
	"io"
	"strings"

	"github.com/drainscope/drainscope/analysis"
)

// textListed is how many aligned failures the text and markdown reports
// list one by one; JSON carries them all.
const textListed = 20

// WriteText writes the report for a terminal. Everything it writes goes
// through an event.DisplayWriter: no control character from a stored
// name or error reaches the terminal raw, and no line runs past
// event.MaxDisplayLine.
func WriteText(w io.Writer, r *analysis.Result) error {
	lw := newLineWriter(w)
	for _, section := range []func(textLine, *analysis.Result){
		textHeader, textDisruptions, textPodTimelines, textCauses,
		textKernelEvidence, textAttribution, textFailures,
	} {
		section(lw.line, r)
	}
	return lw.close()
}

// textLine writes one line of the text report, its arguments made safe
// for display.
type textLine func(format string, a ...any)

// textHeader writes the report's span and what was recorded where.
func textHeader(p textLine, r *analysis.Result) {
	head := "drainscope report: " + stamp(r.From) + " → " + stamp(r.To)
	if r.Scope != "" {
		head += " (" + r.Scope + ")"
	}
	p("%s", head)
	for _, l := range GapLines(r.RecorderGaps) {
		p("%s", l)
	}
	for _, l := range KernelLines(r.Kernels) {
		p("%s", l)
	}
	for _, l := range ProxyLines(r.Proxies) {
		p("%s", l)
	}
	if l := LagLine(r.DataplaneLag); l != "" {
		p("%s", l)
	}
	p("")
}

// textDisruptions writes the DISRUPTIONS section.
func textDisruptions(p textLine, r *analysis.Result) {
	p("DISRUPTIONS (rollouts, scale-downs, deletions, evictions, restarts: each with what began it)")
	if len(r.Disruptions) == 0 {
		p("  none: no pod was seen terminating")
	}
	for i := range r.Disruptions {
		textRollout(p, &r.Disruptions[i], r.Rules)
	}
	p("")
}

// textRollout writes one disruption: its span, its failures, its worst
// gaps and its new pods.
func textRollout(p textLine, ro *analysis.Disruption, rules []analysis.RuleView) {
	p("  %s %s  %s → %s (%s)%s", ro.Namespace, ro.Workload(), clock(ro.From), clock(ro.To), analysis.FormatDuration(ro.To-ro.From), triggerNote(ro.Trigger))
	for _, l := range GapLines(ro.RecorderGaps) {
		p("    %s", l)
	}
	if steps := changeSteps(ro.Changes); steps != "" {
		p("    %s", steps)
	}
	p("    %s replaced, %s ready; failures: %s", count(len(ro.Replaced), "pod"), count(len(ro.NewPods), "new pod"), causeCounts(ro.ByCause, rules))
	if ro.Inferred > 0 {
		p("    proven by kernel evidence alone: %s", causeCounts(ro.InferredByCause, rules))
	}
	if ro.Unattributed > 0 {
		p("    %d failures with no pod during the rollout", ro.Unattributed)
	}
	var worst []string
	if g := ro.WorstSigtermAfterRotation; g != nil {
		worst = append(worst, "smallest SIGTERM-after-rotation gap "+analysis.FormatOffset(*g))
	}
	if g := ro.LongestExitAfterSigterm; g != nil {
		worst = append(worst, "longest exit after SIGTERM "+analysis.FormatDuration(*g))
	}
	if len(worst) > 0 {
		p("    %s", strings.Join(worst, "; "))
	}
	for _, np := range ro.NewPods {
		s := fmt.Sprintf("    new %s ready %s", np.Pod.String(), clock(np.Ready))
		if np.ReadyAfter > 0 {
			s += fmt.Sprintf(" (%s after creation)", analysis.FormatDuration(np.ReadyAfter))
		}
		p("%s", s)
	}
	head, cmd, lines := PatchLines(ro.Patch, rules)
	if head != "" {
		p("    %s", head)
		p("      %s", cmd)
	}
	for _, l := range lines {
		p("    %s", l)
	}
}

// textPodTimelines writes the POD TIMELINES section: the pods that ended.
func textPodTimelines(p textLine, r *analysis.Result) {
	p("POD TIMELINES (offsets from deletion)")
	n := 0
	for i := range r.Timelines {
		t := &r.Timelines[i]
		if !t.Ended() {
			continue
		}
		n++
		textPodTimeline(p, t, r.Rules)
	}
	if n == 0 {
		p("  none")
	}
	p("")
}

// textPodTimeline writes one pod's landmarks, offset from its deletion,
// and what its connections and failures came to.
func textPodTimeline(p textLine, t *analysis.PodTimeline, rules []analysis.RuleView) {
	meta := []string{}
	if t.Workload != "" {
		meta = append(meta, t.Workload)
	}
	if t.Node != "" {
		meta = append(meta, "node "+t.Node)
	}
	meta = append(meta, t.IPs...)
	p("  %s (%s)", t.Pod.String(), strings.Join(meta, ", "))
	if c := containersPhrase(t); c != "" {
		p("    %s", c)
	}
	ref := t.Deletion
	for _, rw := range timelineRows(t) {
		off := ""
		if ref != 0 {
			off = analysis.FormatOffset(rw.t - ref)
		}
		p("    %s %-9s %s", clock(rw.t), off, rw.text)
	}
	if c := connPhrase(t.Connections); c != "" {
		p("    %s", c)
	}
	if g := gapPhrases(t); len(g) > 0 {
		p("    gaps: %s", strings.Join(g, "; "))
	}
	if len(t.Failures) > 0 {
		p("    failures: %s", causeCounts(t.Failures, rules))
	}
	if len(t.InferredFailures) > 0 {
		p("    inferred from kernel evidence: %s", causeCounts(t.InferredFailures, rules))
	}
}

// textCauses writes the FAILURES BY CAUSE section: the client-reported
// causes, or those inferred from kernel evidence when no client log was
// read.
func textCauses(p textLine, r *analysis.Result) {
	causes, label := r.Causes, "client-reported"
	if len(causes) == 0 && len(r.InferredCauses) > 0 {
		causes, label = r.InferredCauses, "inferred from kernel evidence (no client log)"
	}
	total := 0
	for _, c := range causes {
		total += c.Count
	}
	p("FAILURES BY CAUSE (%d, %s)", total, label)
	if total == 0 {
		p("  none")
	}
	for i := range causes {
		textCause(p, &causes[i])
	}
	p("")
}

// textCause writes one cause: its explanation, fix, offsets, pods and
// evidence.
func textCause(p textLine, c *analysis.CauseSummary) {
	p("  %s: %d", c.Title, c.Count)
	p("    %s", c.Explanation)
	if c.Fix != "" {
		p("    fix: %s", c.Fix)
	}
	var hs []string
	for _, h := range []string{histPhrase("exit", c.FromExit), histPhrase("SIGTERM", c.FromSigterm)} {
		if h != "" {
			hs = append(hs, h)
		}
	}
	if len(hs) > 0 {
		p("    offsets %s", strings.Join(hs, "; "))
	}
	if len(c.Pods) > 0 {
		var ps []string
		for i, pc := range c.Pods {
			if i == 5 {
				ps = append(ps, fmt.Sprintf("%d more", len(c.Pods)-5))
				break
			}
			ps = append(ps, fmt.Sprintf("%s %d", pc.Pod, pc.Count))
		}
		p("    pods: %s", strings.Join(ps, ", "))
	}
	if len(c.Evidence) > 0 {
		p("    evidence: %s", evidencePhrase(c.Evidence))
	}
}

// textKernelEvidence writes the KERNEL EVIDENCE ALONE section.
func textKernelEvidence(p textLine, r *analysis.Result) {
	p("KERNEL EVIDENCE ALONE")
	for _, line := range InferenceLines(r.Inference) {
		p("  %s", line)
	}
	if len(r.Causes) > 0 && len(r.InferredCauses) > 0 {
		var parts []string
		for _, c := range r.InferredCauses {
			parts = append(parts, fmt.Sprintf("%d %s", c.Count, c.Title))
		}
		p("  by cause: %s", strings.Join(parts, ", "))
	}
	p("")
}

// textAttribution writes the ATTRIBUTION section, when clients reported
// failures.
func textAttribution(p textLine, r *analysis.Result) {
	if t := r.Totals; t.ClientFailures > 0 {
		p("ATTRIBUTION")
		p("  %d client failures: %d tied to a pod, %d to a terminating pod, %d with a cause, %d both",
			t.ClientFailures, t.WithPod, t.OnTerminatingPod, t.Explained, t.ExplainedOnTerminatingPod)
		p("")
	}
}

// textFailures writes the FAILURES section: the client-reported failures
// when there are any, else all, the first textListed of them.
func textFailures(p textLine, r *analysis.Result) {
	list := r.Failures
	if len(r.Causes) > 0 {
		list = nil
		for _, f := range r.Failures {
			if !f.Inferred {
				list = append(list, f)
			}
		}
	}
	p("FAILURES")
	if len(list) == 0 {
		p("  none")
	}
	for i, f := range list {
		if i == textListed {
			p("  … %d more (--format json lists them all)", len(list)-textListed)
			break
		}
		p("  %s %s", clock(f.Failure.Time), f.Explanation)
		if f.Cause == analysis.CauseUnexplained {
			for _, m := range f.Missing {
				p("      %s", m)
			}
		}
	}
}
