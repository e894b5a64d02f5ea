package analysis

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/template"

	"github.com/drainscope/drainscope/event"
)

// ExplainData is what a rule's Explain template sees about one failure.
// Offsets are signed ("+4 ms": the failure came after), durations plain;
// empty when unknown.
type ExplainData struct {
	Class, Pod, Service, Via string
	FromExit, FromSigterm    string
	FromKill, FromDeletion   string
	ExitAfterSigterm         string
	KillAfterDeletion, Grace string
	Duration                 string
	Terminating              string // what showed the pod terminating, e.g. "its listener closed 0.3 s before"
	Rotation                 string // e.g. "node-b still routed to it until 0.2 s later"
	Nearest                  string
	// Unjudged says why no rule was tried (Decision.Unjudged).
	Unjudged string
	// Forced: the pod was deleted with a grace period of 0 (kubectl
	// delete --force --grace-period=0), so Grace is empty.
	Forced bool
	// Evicted: the kubelet evicted the pod for node pressure (its status
	// Evicted, or a deletion it made): its eviction threshold, not the
	// pod's grace period, decided the kill.
	Evicted bool
	// Candidates names the pods a likely cause may have reached, e.g.
	// "default/web-1 and default/web-2"; CandidateCount counts them.
	Candidates     string
	CandidateCount int
	// Proxy names the container beside the app that held the client's
	// connection and exited first (CauseSidecarExit); ProxyExitAfterSigterm
	// is its exit after its SIGTERM, AppExitAfterProxy how much longer the
	// app ran.
	Proxy, ProxyExitAfterSigterm, AppExitAfterProxy string
}

// SummaryData is what a rule's Summary and Fix templates see about all the
// failures of one cause. Per-pod figures are medians over the pods
// involved, except ConnsAtExit and ConnsAtSigterm (sums) and Propagation
// and RotationLag (maxima).
type SummaryData struct {
	Count, PodCount      int
	PodsPhrase           string
	ExitAfterSigterm     string
	ConnsAtExit          int
	ConnsAtSigterm       int
	OffsetFromExit       string // e.g. "4 ms after"
	OffsetFromSigterm    string
	KillAfterDeletion    string
	Grace                string // median over the pods deleted with a grace period
	RotationLag          string
	SigtermAfterRotation string // e.g. "0.5 s before"
	Propagation          string
	// DataplaneLag is the measured watch → dataplane lag per node, e.g.
	// "p50 12 ms, p99 3.0 s on node-a (40 removals)"; empty when no
	// node's proxy rules were recorded.
	DataplaneLag string
	// Forced counts the pods deleted with a grace period of 0 (kubectl
	// delete --force --grace-period=0): none is in Grace.
	Forced int
	// Evicted counts the pods the kubelet evicted for node pressure.
	Evicted int
	// Proxies names the containers beside the apps that carried their
	// inbound connections (CauseSidecarExit); ProxyExitAfterSigterm and
	// AppExitAfterProxy are medians over the pods. Mesh is the mesh their
	// names show ("istio", "linkerd", "" for another proxy), NativeSidecar
	// whether one was a native sidecar already.
	Proxies                                  string
	ProxyExitAfterSigterm, AppExitAfterProxy string
	Mesh                                     string
	NativeSidecar                            bool
}

var (
	tmplMu    sync.Mutex
	tmplCache = map[string]*template.Template{}
	tmplFuncs = template.FuncMap{
		"plural": plural,
	}
)

// render executes a rule template; a broken template renders its error,
// so a bad custom rule shows up in the report instead of hiding a cause.
func render(text string, data any) string {
	if text == "" {
		return ""
	}
	tmplMu.Lock()
	t, ok := tmplCache[text]
	if !ok {
		var err error
		t, err = template.New("rule").Funcs(tmplFuncs).Option("missingkey=zero").Parse(text)
		if err != nil {
			tmplMu.Unlock()
			return "(template error: " + err.Error() + ")"
		}
		tmplCache[text] = t
	}
	tmplMu.Unlock()
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "(template error: " + err.Error() + ")"
	}
	return b.String()
}

// rel renders a signed offset as words: "4 ms after", "0.5 s before".
func rel(ns int64) string {
	if ns < 0 {
		return fmtDur(-ns) + " before"
	}
	return fmtDur(ns) + " after"
}

// AlignedFailure is one failure with its pod, cause and evidence, ready for
// JSON.
type AlignedFailure struct {
	Failure     EventView        `json:"failure"`
	Inferred    bool             `json:"inferred"`
	Proof       string           `json:"proof,omitempty"`
	Pod         *PodView         `json:"pod,omitempty"`
	Workload    string           `json:"workload,omitempty"`
	Via         string           `json:"via,omitempty"`
	Cause       Cause            `json:"cause"`
	Title       string           `json:"title"`
	Explanation string           `json:"explanation"`
	Evidence    []EvidenceView   `json:"evidence"`
	Missing     []string         `json:"missing,omitempty"`
	Before      *Neighbor        `json:"before,omitempty"`
	After       *Neighbor        `json:"after,omitempty"`
	Offsets     map[string]int64 `json:"offsets_ns,omitempty"`
	// Likely: the cause is likely, not proven, because no record names
	// the pod; Candidates are the pods it may have reached.
	Likely     bool      `json:"likely,omitempty"`
	Candidates []PodView `json:"candidates,omitempty"`
}

// EvidenceView is one piece of evidence; Offset is the event's time minus
// the failure's.
type EvidenceView struct {
	Role   string    `json:"role"`
	Offset int64     `json:"offset_ns"`
	Event  EventView `json:"event"`
}

// Neighbor is a nearby event; Offset is its time minus the failure's.
type Neighbor struct {
	Offset int64     `json:"offset_ns"`
	Event  EventView `json:"event"`
}

// Aligned copies the decision into a self-contained result, rendering the
// explanation.
func (d *Decision) Aligned() AlignedFailure {
	f := d.Failure
	out := AlignedFailure{
		Failure: View(f), Inferred: d.Inferred, Via: d.Via,
		Cause: d.Rule.Cause, Title: d.Rule.Title,
		Pod: podView(d.Pod), Workload: d.Workload.String(),
	}
	if out.Pod != nil {
		out.Pod.Life = d.Life
	}
	if d.Inferred {
		out.Proof = d.Proof
	}
	seen := map[*event.Event]bool{}
	for _, p := range d.Evidence {
		if seen[p.Event] {
			continue
		}
		seen[p.Event] = true
		out.Evidence = append(out.Evidence, EvidenceView{Role: p.Role, Offset: p.Event.Time - f.Time, Event: View(p.Event)})
	}
	if d.Unjudged.Missing != "" {
		out.Missing = append(out.Missing, d.Unjudged.Missing)
	}
	for _, m := range d.Missing {
		out.Missing = append(out.Missing, m.Rule.Title+": no evidence that "+m.Requirement.Name)
	}
	before, after := d.Nearest()
	if before != nil {
		out.Before = &Neighbor{Offset: before.Time - f.Time, Event: View(before)}
	}
	if after != nil {
		out.After = &Neighbor{Offset: after.Time - f.Time, Event: View(after)}
	}
	offs := d.Offsets()
	for name, o := range map[string]Offset{
		"from_sigterm": offs.Sigterm, "from_exit": offs.Exit, "from_kill": offs.Kill,
		"from_deletion": offs.Deletion, "from_rotation_exit": offs.Rotation,
	} {
		if o.OK {
			if out.Offsets == nil {
				out.Offsets = map[string]int64{}
			}
			out.Offsets[name] = o.NS
		}
	}
	out.Likely = d.Rule.Likely
	for _, p := range d.Evidence {
		if p.Role == candidateRole {
			out.Candidates = append(out.Candidates, PodView{Namespace: p.Event.Pod.Namespace, Name: p.Event.Pod.Name, UID: p.Event.Pod.UID})
		}
	}
	out.Explanation = render(d.Rule.Explain, d.explainData(offs, before, after))
	return out
}

func (d *Decision) explainData(o Offsets, before, after *event.Event) ExplainData {
	f := d.Failure
	x := ExplainData{Class: f.Reason, Service: f.Service, Via: d.Via, Unjudged: d.Unjudged.Why}
	if f.Reason == event.FailStatus {
		x.Class = fmt.Sprintf("HTTP %d", f.Code)
	}
	if d.Inferred {
		x.Class = "inferred " + x.Class
	}
	if f.Duration > 0 {
		x.Duration = fmtDur(f.Duration)
	}
	if !d.Pod.IsZero() {
		x.Pod = d.Pod.String()
	}
	if o.Exit.OK {
		x.FromExit = fmtOffset(o.Exit.NS)
	}
	if o.Sigterm.OK {
		x.FromSigterm = fmtOffset(o.Sigterm.NS)
	}
	if o.Kill.OK {
		x.FromKill = fmtOffset(o.Kill.NS)
	}
	if o.Deletion.OK {
		x.FromDeletion = fmtOffset(o.Deletion.NS)
	}
	if o.Exit.OK && o.Sigterm.OK && o.Sigterm.NS >= o.Exit.NS {
		x.ExitAfterSigterm = fmtDur(o.Sigterm.NS - o.Exit.NS)
	}
	if o.Kill.OK && o.Deletion.OK {
		x.KillAfterDeletion = fmtDur(o.Deletion.NS - o.Kill.NS)
	}
	fx := d.facts
	if p := fx.pod; p != nil {
		if p.lifeEvents().deletion.Duration > 0 {
			x.Grace = fmtDur(p.lifeEvents().deletion.Duration)
		}
		x.Forced = p.lifeEvents().deletion.Time != 0 && p.lifeEvents().deletion.Duration == 0
		x.Evicted = p.evictedByKubelet()
		t := fx.Start // a connection is routed when it is made
		switch {
		case p.lifeEvents().listener.Time != 0 && p.lifeEvents().listener.Time <= t:
			x.Terminating = "its listener had closed " + fmtDur(t-p.lifeEvents().listener.Time) + " before"
		case p.lastMainExit() != nil && p.lastMainExit().Time <= t:
			x.Terminating = "its process had exited " + fmtDur(t-p.lastMainExit().Time) + " before"
		case p.lifeEvents().sigterm.Time != 0 && p.lifeEvents().sigterm.Time <= t:
			x.Terminating = "it had received SIGTERM " + fmtDur(t-p.lifeEvents().sigterm.Time) + " before"
		case p.lifeEvents().deletion.Time != 0 && p.lifeEvents().deletion.Time <= t:
			x.Terminating = "it had been deleted " + fmtDur(t-p.lifeEvents().deletion.Time) + " before"
		}
		r := p.rotationAt(t, fx.svcs)
		switch {
		case r.in && r.leftAfter != nil:
			x.Rotation = fmt.Sprintf("%s still routed to it until %s later", NodeName(r.leftAfter.ev.Node), fmtDur(r.leftAfter.t-t))
		case r.in:
			x.Rotation = "its endpoint was still ready"
		case r.lastLeave != nil:
			x.Rotation = fmt.Sprintf("%s had taken it out only %s before (the proxy rules lag the API)", NodeName(r.lastLeave.ev.Node), fmtDur(t-r.lastLeave.t))
		}
	}
	var cands []string
	for _, p := range d.Evidence {
		switch p.Role {
		case candidateRole:
			cands = append(cands, p.Event.Pod.String())
		case roleProxyExit:
			x.proxyExit(d.facts.pod, p.Event)
		case roleAppExitLater:
			if px := proxyExitIn(d.Evidence); px != nil {
				x.AppExitAfterProxy = fmtDur(p.Event.Time - px.Time)
			}
		}
	}
	x.CandidateCount = len(cands)
	x.Candidates = joinAnd(cands)
	var near []string
	if before != nil {
		near = append(near, Describe(before)+" "+fmtOffset(before.Time-f.Time))
	}
	if after != nil {
		near = append(near, Describe(after)+" "+fmtOffset(after.Time-f.Time))
	}
	x.Nearest = strings.Join(near, "; ")
	return x
}

// joinAnd joins words as prose: "a", "a and b", "a, b and c".
func joinAnd(ws []string) string {
	switch len(ws) {
	case 0:
		return ""
	case 1:
		return ws[0]
	}
	return strings.Join(ws[:len(ws)-1], ", ") + " and " + ws[len(ws)-1]
}

// NodeName is "node n", or "a node" when n is empty.
func NodeName(n string) string {
	if n == "" {
		return "a node"
	}
	return "node " + n
}

// summaryData gathers the per-cause figures from the pods involved.
// The roles of ProxyExitedFirst's evidence.
const (
	roleProxyExit    = "the proxy container exited while the app ran"
	roleAppExitLater = "the app exited later"
)

// proxyExit fills in the proxy that exited first, from its exit.
func (x *ExplainData) proxyExit(p *podState, exit *event.Event) {
	if p == nil {
		return
	}
	c := p.container(exit, false)
	if c == nil {
		return
	}
	x.Proxy = c.proxyName()
	if c.sigterm != nil && c.sigterm.Time <= exit.Time {
		x.ProxyExitAfterSigterm = fmtDur(exit.Time - c.sigterm.Time)
	}
}

func proxyExitIn(ev []Piece) *event.Event {
	for _, p := range ev {
		if p.Role == roleProxyExit {
			return p.Event
		}
	}
	return nil
}

// meshOf names the mesh a proxy container's name shows: Istio's and
// Linkerd's inject theirs under these names.
func meshOf(name string) string {
	switch name {
	case "istio-proxy":
		return "istio"
	case "linkerd-proxy":
		return "linkerd"
	}
	return ""
}

func summaryData(c *causeAcc, timelines map[string]*PodTimeline) SummaryData {
	s := SummaryData{Count: c.count, PodCount: len(c.pods)}
	keys := make([]string, 0, len(c.pods))
	for k := range c.pods {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var exitGaps, kills, graces, rot, proxyGaps, appGaps []int64
	var proxies []string
	var prop int64 = -1
	wls := map[string]bool{}
	var names []string
	for _, k := range keys {
		tl := timelines[k]
		if tl == nil {
			continue
		}
		names = append(names, tl.Pod.Namespace+"/"+tl.Pod.Name)
		wls[tl.Pod.Namespace+"/"+tl.Workload] = true
		if g := tl.Gaps.ExitAfterSigterm; g != nil {
			exitGaps = append(exitGaps, *g)
		}
		if tl.Connections != nil {
			s.ConnsAtExit += tl.Connections.ByExit
			s.ConnsAtSigterm += tl.Connections.AtSigterm
		}
		if tl.Kill != nil && tl.Deletion != 0 {
			kills = append(kills, tl.Kill.Time-tl.Deletion)
		}
		if tl.GracePeriod > 0 {
			graces = append(graces, tl.GracePeriod)
		} else if tl.Deletion != 0 {
			s.Forced++
		}
		if ownTrigger(tl) == TriggerNodePressure {
			s.Evicted++
		}
		if g := tl.Gaps.SigtermAfterRotation; g != nil {
			rot = append(rot, *g)
		}
		for _, cv := range tl.Containers {
			if !cv.Inbound || cv.App {
				continue
			}
			if !slices.Contains(proxies, cv.Name) {
				proxies = append(proxies, cv.Name)
			}
			if m := meshOf(cv.Name); m != "" {
				s.Mesh = m
			}
			s.NativeSidecar = s.NativeSidecar || cv.Role == event.ContainerRoleSidecar
			if cv.Exit != nil && cv.Sigterm != 0 && cv.Exit.Time >= cv.Sigterm {
				proxyGaps = append(proxyGaps, cv.Exit.Time-cv.Sigterm)
			}
			if cv.Exit != nil && tl.Exit != nil && tl.Exit.Time > cv.Exit.Time {
				appGaps = append(appGaps, tl.Exit.Time-cv.Exit.Time)
			}
		}
		if g := tl.Gaps.Propagation; g != nil && *g > prop {
			prop = *g
		}
	}
	switch {
	case len(names) == 1:
		s.PodsPhrase = names[0]
	case len(names) > 1 && len(wls) == 1:
		for w := range wls {
			s.PodsPhrase = fmt.Sprintf("%d pods of %s", len(names), strings.TrimSuffix(w, "/"))
		}
	case len(names) > 1:
		s.PodsPhrase = fmt.Sprintf("%d pods", len(names))
	default:
		s.PodsPhrase = "pods not identified"
	}
	if m, ok := median(exitGaps); ok {
		s.ExitAfterSigterm = fmtDur(m)
	}
	s.Proxies = joinAnd(proxies)
	if m, ok := median(proxyGaps); ok {
		s.ProxyExitAfterSigterm = fmtDur(m)
	}
	if m, ok := median(appGaps); ok {
		s.AppExitAfterProxy = fmtDur(m)
	}
	if m, ok := median(kills); ok {
		s.KillAfterDeletion = fmtDur(m)
	}
	if m, ok := median(graces); ok {
		s.Grace = fmtDur(m)
	}
	if m, ok := median(rot); ok {
		s.SigtermAfterRotation = rel(m)
	}
	if prop >= 0 {
		s.Propagation = fmtDur(prop)
	}
	if c.fromExit.n > 0 {
		s.OffsetFromExit = rel(c.fromExit.quantile(0.5))
	}
	if c.fromSigterm.n > 0 {
		s.OffsetFromSigterm = rel(c.fromSigterm.quantile(0.5))
	}
	if c.maxRotationLag > 0 {
		s.RotationLag = fmtDur(c.maxRotationLag)
	}
	return s
}

// LagPhrase renders the measured lags, the slowest node first.
func LagPhrase(lags []NodeLag) string {
	ls := append([]NodeLag(nil), lags...)
	sort.SliceStable(ls, func(i, j int) bool { return ls[i].P99 > ls[j].P99 })
	var parts []string
	for _, l := range ls {
		parts = append(parts, fmt.Sprintf("p50 %s, p99 %s on %s (%d %s)", fmtDur(l.P50), fmtDur(l.P99), NodeName(l.Node), l.Samples, plural(l.Samples, "removal", "removals")))
	}
	return strings.Join(parts, "; ")
}

func median(v []int64) (int64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	return v[len(v)/2], true
}

// plural picks one or many by n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
