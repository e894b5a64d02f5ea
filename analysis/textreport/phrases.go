package textreport

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
)

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
	// The rows above are the app's; the other containers' ends are
	// their own, each named, so the report says which container did what.
	for _, c := range t.Containers {
		if c.App {
			continue
		}
		name := containerPhrase(c)
		add(c.Sigterm, "SIGTERM to %s", name)
		if x := c.Exit; x != nil {
			how := fmt.Sprintf("with code %d", x.Code)
			if x.Signal != "" {
				how = "by " + x.Signal
			}
			add(x.Time, "%s exited %s", name, how)
		}
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

// maxGapLines bounds the recorder gaps a report's header lists (an
// agent DaemonSet rolled over 5,000 nodes leaves one per node); the JSON
// lists them all.
const maxGapLines = 20

// GapLines says the recorder gaps (analysis.Result.RecorderGaps): the
// times a node's record is incomplete, where no failure gets a cause.
func GapLines(gs []analysis.RecorderGap) []string {
	var out []string
	for i, g := range gs {
		if i == maxGapLines {
			out = append(out, fmt.Sprintf("record incomplete: %d more gaps (the JSON report lists them all)", len(gs)-i))
			break
		}
		out = append(out, "record incomplete: "+g.String())
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

// containerPhrase names a container of a pod of several and what it was:
// "container proxy (the inbound proxy)", "container istio-proxy (native
// sidecar, the inbound proxy)".
func containerPhrase(c analysis.ContainerView) string {
	name := c.Name
	if name == "" {
		name = c.ID[:min(len(c.ID), 12)]
	}
	var what []string
	switch {
	case c.App:
		what = append(what, "the app: serves the Service's port")
	case c.Role == event.ContainerRoleSidecar:
		what = append(what, "native sidecar")
	case c.Role == event.ContainerRoleInit:
		what = append(what, "init container")
	}
	if c.Inbound {
		what = append(what, "the inbound proxy")
	}
	if len(what) == 0 {
		return "container " + name
	}
	return "container " + name + " (" + strings.Join(what, ", ") + ")"
}

// containersPhrase lists a pod's containers when it has several, or "".
func containersPhrase(t *analysis.PodTimeline) string {
	if len(t.Containers) == 0 {
		return ""
	}
	names := make([]string, len(t.Containers))
	for i, c := range t.Containers {
		names[i] = strings.TrimPrefix(containerPhrase(c), "container ")
	}
	return "containers: " + strings.Join(names, "; ") + "; the SIGTERM, exit and kill without a container named are the app's"
}

// PatchLines says a disruption's patch: what it covers, the command, each
// value with where it came from, the causes that need code and what could
// not be patched. Nil for no patch.
func PatchLines(pt *analysis.Patch, rules []analysis.RuleView) (head, command string, lines []string) {
	if pt == nil {
		return "", "", nil
	}
	title := map[analysis.Cause]string{}
	for _, r := range rules {
		title[r.Cause] = r.Title
	}
	titles := func(cs []analysis.Cause) string {
		var out []string
		for _, c := range cs {
			out = append(out, cmpOr(title[c], string(c)))
		}
		return strings.Join(out, ", ")
	}
	if pt.Command != "" {
		var what []string
		if len(pt.Covers) > 0 {
			what = append(what, "prevents: "+titles(pt.Covers))
		}
		if len(pt.Guards) > 0 {
			what = append(what, "guards against: "+titles(pt.Guards)+", which its settings leave open though none of these failures was one")
		}
		head = fmt.Sprintf("patch for %s/%s, container %s, computed from this cluster (%s):", pt.Kind, pt.Name, pt.Container, cmpOr(strings.Join(what, "; "), "a setting the causes need"))
		command = pt.Command
	}
	for _, v := range pt.Values {
		lines = append(lines, fmt.Sprintf("%s = %s: %s", v.Field, v.Value, v.From))
	}
	if len(pt.NeedsCode) > 0 {
		lines = append(lines, "needs a change of the app's code, not of its settings (its fix above): "+titles(pt.NeedsCode))
	}
	for _, n := range pt.Notes {
		lines = append(lines, "note: "+n)
	}
	return head, command, lines
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
