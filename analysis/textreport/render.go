package textreport

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
)

// textListed is how many aligned failures the text and markdown reports
// list one by one; JSON carries them all.
const textListed = 20

func clock(ns int64) string {
	if ns == 0 {
		return "?"
	}
	return time.Unix(0, ns).UTC().Format("15:04:05.000")
}

func stamp(ns int64) string {
	if ns == 0 {
		return "…"
	}
	return time.Unix(0, ns).UTC().Format("2006-01-02 15:04:05.000 UTC")
}

type row struct {
	t    int64
	text string
}

// timelineRows condenses a pod's timeline: per-node endpoint observations
// become one row per transition with their spread.
func timelineRows(t *analysis.PodTimeline) []row {
	var rows []row
	add := func(at int64, format string, a ...any) {
		if at != 0 {
			rows = append(rows, row{at, fmt.Sprintf(format, a...)})
		}
	}
	add(t.Created, "pod created")
	add(t.Ready, "pod ready")
	if t.Deletion != 0 {
		add(t.Deletion, "deletion observed, grace period %s", analysis.FormatDuration(t.GracePeriod))
	}
	add(t.NotReady, "pod not ready")
	for _, sp := range []struct {
		name string
		s    *analysis.Spread
	}{{"endpoint not ready", t.EndpointNotReady}, {"endpoint terminating", t.EndpointTerminating}, {"endpoint removed", t.EndpointRemoved}} {
		if sp.s == nil {
			continue
		}
		if len(sp.s.Nodes) > 1 {
			add(sp.s.First, "%s, seen by %d nodes over %s (last %s)", sp.name, len(sp.s.Nodes), analysis.FormatDuration(sp.s.Spread), clock(sp.s.Last))
		} else {
			add(sp.s.First, "%s (seen on %s)", sp.name, strings.Join(sp.s.Nodes, ","))
		}
	}
	for _, m := range t.Dataplane {
		if m.InRotation {
			add(m.Time, "%s's proxy rules began sending %s to it", analysis.NodeName(m.Node), m.Service)
		} else {
			add(m.Time, "%s's proxy rules stopped sending %s to it", analysis.NodeName(m.Node), m.Service)
		}
	}
	if s := t.Sigterm; s != nil {
		txt := "SIGTERM from " + analysis.ProcName(s.Sender, s.SenderPID) + " to " + analysis.ProcName(s.Target, s.TargetPID)
		if t.PreStop > 0 {
			txt += ", after a " + analysis.FormatDuration(t.PreStop) + " preStop window"
		}
		add(s.Time, "%s", txt)
	}
	add(t.ListenerClosed, "listener closed")
	if x := t.Exit; x != nil {
		how := fmt.Sprintf("with code %d", x.Code)
		if x.Signal != "" {
			how = "by " + x.Signal
		}
		add(x.Time, "%s exited %s", analysis.ProcName(x.Comm, x.PID), how)
	}
	if k := t.Kill; k != nil {
		add(k.Time, "SIGKILL from %s", analysis.ProcName(k.Sender, k.SenderPID))
	}
	if x := t.Terminated; x != nil {
		how := fmt.Sprintf("code %d", x.Code)
		if x.Signal != "" {
			how = "by " + x.Signal
		}
		add(x.Time, "container terminated %s %s", x.Reason, how)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].t < rows[j].t })
	return rows
}

// LagLine states the measured watch → dataplane lag, or "" when no
// node's proxy rules were recorded.
func LagLine(lags []analysis.NodeLag) string {
	if len(lags) == 0 {
		return ""
	}
	var proxies []string
	for _, l := range lags {
		name := l.Proxy
		switch name {
		case event.ProxyNFTables, "":
			name = "kube-proxy nftables"
		case event.ProxyIPTables:
			name = "kube-proxy iptables (nf_tables backend)"
		case event.ProxyIPTablesLegacy:
			name = "kube-proxy iptables (legacy backend)"
		case event.ProxyHAProxy:
			name = "HAProxy ingress (its server slots)"
		}
		if !slices.Contains(proxies, name) {
			proxies = append(proxies, name)
		}
	}
	sort.Strings(proxies)
	return "endpoint change → proxy rules (measured, " + strings.Join(proxies, ", ") + "): " + analysis.LagPhrase(lags)
}

func gapPhrases(t *analysis.PodTimeline) []string {
	var out []string
	g := t.Gaps
	if g.SigtermAfterRotation != nil {
		if *g.SigtermAfterRotation >= 0 {
			out = append(out, "SIGTERM "+analysis.FormatDuration(*g.SigtermAfterRotation)+" after the endpoint left rotation on the last node")
		} else {
			out = append(out, "SIGTERM "+analysis.FormatDuration(-*g.SigtermAfterRotation)+" BEFORE the endpoint left rotation on the last node (race window)")
		}
	} else if t.Sigterm != nil {
		out = append(out, "SIGTERM vs endpoint removal unknown (no endpoint event seen)")
	}
	if g.ExitAfterSigterm != nil {
		out = append(out, "exit "+analysis.FormatDuration(*g.ExitAfterSigterm)+" after SIGTERM")
	} else if t.Sigterm != nil {
		out = append(out, "no exit seen")
	}
	if g.GraceUsed != nil {
		s := "grace used " + analysis.FormatDuration(*g.GraceUsed)
		if t.GracePeriod > 0 {
			s += " of " + analysis.FormatDuration(t.GracePeriod)
		}
		if g.GraceLeft != nil {
			if *g.GraceLeft >= 0 {
				s += " (" + analysis.FormatDuration(*g.GraceLeft) + " left)"
			} else {
				s += " (overran by " + analysis.FormatDuration(-*g.GraceLeft) + ")"
			}
		}
		out = append(out, s)
	}
	return out
}

func connPhrase(c *analysis.ConnSummary) string {
	if c == nil {
		return ""
	}
	var parts []string
	for _, p := range []struct {
		n    int
		name string
	}{{c.ByExit, "closed by exit"}, {c.ByApp, "closed by the app"}, {c.ByPeer, "closed by the peer"}, {c.Reset, "reset"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.name))
		}
	}
	s := fmt.Sprintf("%d connections open at SIGTERM: %s", c.AtSigterm, strings.Join(parts, ", "))
	if c.RacedAfterClose > 0 {
		s += fmt.Sprintf("; %d then reset when the client sent data on them", c.RacedAfterClose)
	}
	if c.AfterSigterm > 0 {
		s += fmt.Sprintf("; %d more ended after SIGTERM while the listener still accepted, opened before or after it", c.AfterSigterm)
	}
	return s
}

func causeCounts(m map[analysis.Cause]int, rules []analysis.RuleView) string {
	if len(m) == 0 {
		return "none"
	}
	title := map[analysis.Cause]string{}
	var order []analysis.Cause
	for _, r := range rules {
		title[r.Cause] = r.Title
		order = append(order, r.Cause)
	}
	var extra []analysis.Cause
	for c := range m {
		if _, ok := title[c]; !ok {
			extra = append(extra, c)
		}
	}
	sort.Slice(extra, func(i, j int) bool { return extra[i] < extra[j] })
	var parts []string
	for _, c := range append(order, extra...) {
		if n := m[c]; n > 0 {
			t := title[c]
			if t == "" {
				t = string(c)
			}
			parts = append(parts, fmt.Sprintf("%d %s", n, t))
		}
	}
	return strings.Join(parts, ", ")
}

func histPhrase(name string, h analysis.Histogram) string {
	if h.Count == 0 {
		return ""
	}
	return fmt.Sprintf("from %s: min %s, median %s, max %s", name, analysis.FormatOffset(h.MinNS), analysis.FormatOffset(h.P50NS), analysis.FormatOffset(h.MaxNS))
}

// proofPhrase lists the proven inferred failures by proof; the likely
// ones go in InferencePhrase's second clause.
func proofPhrase(m map[string]int) string {
	names := map[string][2]string{
		analysis.ProofRefusedSYN:    {"refused SYN", "refused SYNs"},
		analysis.ProofRSTAfterClose: {"reset answering data on a closed connection", "resets answering data on closed connections"},
		analysis.ProofRSTUnread:     {"reset with unread data", "resets with unread data"},
		analysis.ProofStored:        {"stored inferred failure", "stored inferred failures"},
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		if !analysis.LikelyProof(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		n, ok := names[k]
		if !ok {
			n = [2]string{k, k}
		}
		parts = append(parts, fmt.Sprintf("%d %s", m[k], plural(m[k], n[0], n[1])))
	}
	return strings.Join(parts, ", ")
}

// missingPhrases say what a node cannot see, by evidence name (the agent's
// drainscope_kernel_evidence_available labels).
var missingPhrases = map[string]string{
	"refused_connections":   "refused connections cannot be seen on this node's kernel",
	"resets_without_socket": "resets for connections the kernel already forgot cannot be seen",
	"unread_data_resets":    "resets with unread data (in-flight requests cut) cannot be told from others",
}

// KernelLines are the report header's lines for nodes whose kernel cannot
// show some evidence: "kernel of node-a (5.15.0): refused connections
// cannot be seen on this node's kernel; …".
func KernelLines(ks []analysis.NodeKernel) []string {
	var out []string
	for _, k := range ks {
		var ph []string
		for _, m := range k.Missing {
			if s, ok := missingPhrases[m]; ok {
				ph = append(ph, s)
			} else {
				ph = append(ph, strings.ReplaceAll(m, "_", " ")+" cannot be seen on this node's kernel")
			}
		}
		node := k.Node
		if k.Release != "" {
			node += " (" + k.Release + ")"
		}
		out = append(out, "kernel of "+node+": "+strings.Join(ph, "; "))
	}
	return out
}

// proxyNames are the report's names of the proxy modes.
var proxyNames = map[string]string{
	event.ProxyNFTables:       "kube-proxy nftables",
	event.ProxyIPTables:       "kube-proxy iptables (nf_tables backend)",
	event.ProxyIPTablesLegacy: "kube-proxy iptables (legacy backend)",
	"ipvs":                    "kube-proxy IPVS",
	"off":                     "not read (dataplane recording off)",
	"":                        "no kube-proxy rules found",
}

// ProxyLines are the report header's lines on the nodes' proxies: the
// recorded modes with their node counts on one line, then each node whose
// rule changes are not recorded with why, so that a node with no dataplane
// events says why: "proxy of node-b: kube-proxy IPVS, not recorded: …".
func ProxyLines(ps []analysis.NodeProxy) []string {
	counts := map[string]int{}
	var out []string
	for _, p := range ps {
		name, ok := proxyNames[p.Mode]
		if !ok {
			name = p.Mode
		}
		if p.Recorded {
			counts[name]++
			continue
		}
		out = append(out, "proxy of "+p.Node+": "+name+", not recorded: "+p.Evidence)
	}
	if len(counts) == 0 {
		return out
	}
	var rec []string
	for name, n := range counts {
		rec = append(rec, fmt.Sprintf("%s on %s", name, count(n, "node")))
	}
	sort.Strings(rec)
	return append([]string{"proxy rules recorded: " + strings.Join(rec, ", ")}, out...)
}

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

// lineWriter writes a report's lines through an event.DisplayWriter in
// chunks of about lineChunk bytes: a report of a 1,000-pod rollout is
// megabytes, which one buffer would hold twice over (the lines, then the
// display-safe copy) in memory that is fresh and costly to touch.
type lineWriter struct {
	d   *event.DisplayWriter
	b   bytes.Buffer
	err error // the first write error; later lines are dropped
}

// lineChunk is a variable for the tests.
var lineChunk = 64 << 10

func newLineWriter(w io.Writer) *lineWriter {
	return &lineWriter{d: event.NewDisplayWriter(w, event.MaxDisplayLine)}
}

// line writes one line, its arguments made safe for display (a textLine).
func (lw *lineWriter) line(format string, a ...any) {
	fmt.Fprintf(&lw.b, format+"\n", displayArgs(a)...)
	if lw.b.Len() >= lineChunk {
		lw.flush()
	}
}

func (lw *lineWriter) flush() {
	if lw.err == nil {
		_, lw.err = lw.d.Write(lw.b.Bytes())
	}
	lw.b.Reset()
}

// close writes what is left and returns the first error.
func (lw *lineWriter) close() error {
	lw.flush()
	return lw.err
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

func evidencePhrase(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// displayArgs shows each string argument, and each struct that says
// itself (a PodRef, a Workload), through event.Display: a line of the
// report is the renderer's, and a name's newline or escape cannot forge or
// hide one. Lines are bounded by the writer, not here.
func displayArgs(a []any) []any {
	for i, v := range a {
		switch x := v.(type) {
		case string:
			a[i] = event.Display(x, -1)
		case fmt.Stringer:
			if reflect.ValueOf(x).Kind() == reflect.Struct {
				a[i] = event.Display(x.String(), -1)
			}
		}
	}
	return a
}

// mdEscape keeps cluster-supplied names from breaking a table, and shows
// their control characters escaped (event.Display; the writer bounds lines).
func mdEscape(s string) string {
	r := strings.NewReplacer("|", `\|`, "\n", " ", "<", "&lt;", ">", "&gt;")
	return r.Replace(event.Display(s, -1))
}

// WriteMarkdown writes the report as Markdown, for an incident document,
// through an event.DisplayWriter as WriteText does.
func WriteMarkdown(w io.Writer, r *analysis.Result) error {
	lw := newLineWriter(w)
	p := lw.line
	title := "# drainscope report"
	if r.Scope != "" {
		title += ": " + mdEscape(r.Scope)
	}
	p("%s", title)
	p("")
	p("%s → %s", stamp(r.From), stamp(r.To))
	p("")
	if ks := append(KernelLines(r.Kernels), ProxyLines(r.Proxies)...); len(ks) > 0 {
		for _, l := range ks {
			p("- %s", mdEscape(l))
		}
		p("")
	}
	if l := LagLine(r.DataplaneLag); l != "" {
		p("%s", mdEscape(l))
		p("")
	}
	causes, label := r.Causes, "client-reported"
	if len(causes) == 0 && len(r.InferredCauses) > 0 {
		causes, label = r.InferredCauses, "inferred from kernel evidence"
	}
	p("## Failures by cause (%s)", label)
	p("")
	if len(causes) == 0 {
		p("None.")
		p("")
	} else {
		p("| cause | failures | median from exit | median from SIGTERM | fix |")
		p("|---|---:|---:|---:|---|")
		for _, c := range causes {
			fe, fs := "–", "–"
			if c.FromExit.Count > 0 {
				fe = analysis.FormatOffset(c.FromExit.P50NS)
			}
			if c.FromSigterm.Count > 0 {
				fs = analysis.FormatOffset(c.FromSigterm.P50NS)
			}
			p("| %s | %d | %s | %s | %s |", c.Title, c.Count, fe, fs, mdEscape(c.Fix))
		}
		p("")
		for _, c := range causes {
			p("- **%s**: %s.", c.Title, mdEscape(c.Explanation))
		}
		p("")
	}
	p("Kernel evidence alone:")
	p("")
	for _, line := range InferenceLines(r.Inference) {
		p("- %s", mdEscape(line))
	}
	p("")
	p("## Disruptions")
	p("")
	if len(r.Disruptions) == 0 {
		p("None.")
	} else {
		p("| workload | trigger | from | to | replaced | new ready | failures |")
		p("|---|---|---|---|---:|---:|---|")
		for _, ro := range r.Disruptions {
			trigger := string(ro.Trigger)
			if trigger == "" {
				trigger = "—"
			}
			p("| %s/%s | %s | %s | %s | %d | %d | %s |", mdEscape(ro.Namespace), mdEscape(ro.Workload()), trigger, clock(ro.From), clock(ro.To),
				len(ro.Replaced), len(ro.NewPods), causeCounts(ro.ByCause, r.Rules))
		}
	}
	p("")
	p("## Pod timelines")
	for i := range r.Timelines {
		t := &r.Timelines[i]
		if !t.Ended() {
			continue
		}
		p("")
		p("### %s", mdEscape(t.Pod.String()))
		p("")
		p("| time | from deletion | event |")
		p("|---|---:|---|")
		for _, rw := range timelineRows(t) {
			off := ""
			if t.Deletion != 0 {
				off = analysis.FormatOffset(rw.t - t.Deletion)
			}
			p("| %s | %s | %s |", clock(rw.t), off, mdEscape(rw.text))
		}
		p("")
		if c := connPhrase(t.Connections); c != "" {
			p("- %s", c)
		}
		for _, g := range gapPhrases(t) {
			p("- %s", g)
		}
		if len(t.Failures) > 0 {
			p("- failures: %s", causeCounts(t.Failures, r.Rules))
		}
	}
	p("")
	p("## Failures")
	p("")
	n := 0
	for _, f := range r.Failures {
		if f.Inferred && len(r.Causes) > 0 {
			continue
		}
		if n == textListed {
			p("- … more in `--format json`")
			break
		}
		n++
		p("- `%s` %s", clock(f.Failure.Time), mdEscape(f.Explanation))
	}
	if n == 0 {
		p("None.")
	}
	return lw.close()
}

func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// likelyPhrase lists the likely inferred failures by proof.
func likelyPhrase(m map[string]int) string {
	var parts []string
	if n := m[analysis.ProofInUseAtExit]; n > 0 {
		parts = append(parts, fmt.Sprintf("%d keep-alive %s in use that the exit cut", n, plural(n, "connection", "connections")))
	}
	if n := m[analysis.ProofRefusedLagging]; n > 0 {
		parts = append(parts, fmt.Sprintf("%d refused %s within the proxy lag after the endpoint left rotation (a lagging proxy, or a readiness probe)", n, plural(n, "SYN", "SYNs")))
	}
	return strings.Join(parts, ", ")
}

// InferenceLines says what the pod-side kernel evidence shows on its own:
// the failures it proves, those it makes likely, how many client-reported
// failures it recovers, and the refused SYNs it set aside.
func InferenceLines(inf analysis.Inference) []string {
	var out []string
	proven := inf.Inferred - inf.Likely
	line := "proves no failure"
	if proven > 0 {
		line = fmt.Sprintf("proves %d %s: %s", proven, plural(proven, "failure", "failures"), proofPhrase(inf.ByProof))
	}
	if inf.Likely > 0 {
		line += fmt.Sprintf("; makes %d more likely: %s", inf.Likely, likelyPhrase(inf.ByProof))
	}
	out = append(out, line)
	if inf.Ratio != nil {
		line = fmt.Sprintf("recovers %d of %d client-reported failures (%.0f%%", inf.Proven, inf.ClientFailures, *inf.Ratio*100)
		if inf.ProvenLikely > 0 {
			line += fmt.Sprintf("; %d proven, %d likely", inf.Proven-inf.ProvenLikely, inf.ProvenLikely)
		}
		line += fmt.Sprintf("; %d carried a client address to match)", inf.WithClientAddress)
		out = append(out, line)
	}
	if n := inf.RefusedOutOfRotation; n > 0 {
		out = append(out, fmt.Sprintf("set aside %d refused %s that came after the endpoint had left rotation everywhere: the kubelet's probes, or clients that bypass the Service", n, plural(n, "SYN", "SYNs")))
	}
	return out
}

// changeSteps lists what happened to a disruption after the change that
// began it (paused, resumed, rolled back, complete), "" for nothing.
func changeSteps(cs []analysis.Change) string {
	var out []string
	for i, c := range cs {
		if i == 0 {
			continue
		}
		what := c.Reason
		switch {
		case c.Rollback:
			what = "rolled back"
		case c.Reason == "template":
			what = "new template"
		}
		out = append(out, what+" "+clock(c.Time))
	}
	return strings.Join(out, ", ")
}

// triggerNote says what began a rollout, when it was recorded.
func triggerNote(trigger analysis.Trigger) string {
	if trigger == "" {
		return ""
	}
	return ", begun by " + analysis.WordsFor(trigger).BegunBy
}

// plural is one or many, as n says.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
