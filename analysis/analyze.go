package analysis

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// Result is everything the report and the web UI show about a window.
type Result struct {
	From int64 `json:"from_ns"`
	To   int64 `json:"to_ns"` // 0: open-ended
	// Scope repeats the namespace/workload filter, empty for everything.
	Scope string `json:"scope,omitempty"`

	Rollouts  []Rollout     `json:"rollouts"`
	Timelines []PodTimeline `json:"timelines"`

	// Causes groups the client-reported failures, InferredCauses the
	// failures kernel evidence alone proves; both in rule order.
	Causes         []CauseSummary `json:"causes"`
	InferredCauses []CauseSummary `json:"inferred_causes"`
	Inference      Inference      `json:"inference"`

	// Failures lists aligned failures, client-reported first, up to
	// Options.MaxFailures; Truncated says some were left out (the counts
	// above still include them).
	Failures  []AlignedFailure `json:"failures"`
	Truncated bool             `json:"truncated"`

	// Offsets of client failures (inferred ones when there are none) from
	// their pod's SIGTERM and exit, in 50 ms bins.
	FromSigterm Histogram `json:"offsets_from_sigterm"`
	FromExit    Histogram `json:"offsets_from_exit"`

	Totals Totals     `json:"totals"`
	Rules  []RuleView `json:"rules"`
	Stats  Stats      `json:"stats"`

	// Kernels lists the nodes whose kernel keeps some kernel evidence
	// from them (their agents' latest kernel_capabilities event), so that
	// a failure no kernel event explains there is not read as unproven.
	Kernels []NodeKernel `json:"kernel_limits,omitempty"`

	// DataplaneLag is, per node whose proxy's rules were recorded, how long
	// after the watch saw an endpoint leave rotation that node's proxy
	// stopped sending to it: the time a preStop sleep must exceed.
	DataplaneLag []NodeLag `json:"dataplane_lag,omitempty"`

	// Proxies lists each node's proxy mode as its agent detected it (its
	// latest kernel_capabilities event), so that a node without dataplane
	// events says why.
	Proxies []NodeProxy `json:"proxies,omitempty"`
}

// NodeProxy is how one node's Services are proxied and whether
// drainscope records its rule changes.
type NodeProxy struct {
	Node     string `json:"node"`
	Mode     string `json:"mode"` // nftables, iptables, iptables-legacy, ipvs, off, "" (none found)
	Recorded bool   `json:"recorded"`
	Evidence string `json:"evidence,omitempty"`
}

// NodeKernel is what one node's kernel cannot show.
type NodeKernel struct {
	Node    string   `json:"node"`
	Release string   `json:"kernel_release,omitempty"`
	Missing []string `json:"missing_evidence"` // e.g. refused_connections
}

// Totals are exact counts over the window's client-reported failures, for
// experiment runners that assert on them (every failure of a rollout
// attributed to a terminating pod and a cause, …).
type Totals struct {
	ClientFailures int `json:"client_failures"`
	// WithPod were tied to a pod; OnTerminatingPod to one that was
	// terminating; Explained got a cause other than unexplained.
	WithPod          int `json:"with_pod"`
	OnTerminatingPod int `json:"on_terminating_pod"`
	Explained        int `json:"explained"`
	// ExplainedOnTerminatingPod have both.
	ExplainedOnTerminatingPod int `json:"explained_on_terminating_pod"`
}

// RuleView is a rule as results list it.
type RuleView struct {
	Cause    Cause    `json:"cause"`
	Title    string   `json:"title"`
	Requires []string `json:"requires"`
	Fix      string   `json:"fix,omitempty"`
}

// CauseSummary is the failures of one cause.
type CauseSummary struct {
	Cause       Cause            `json:"cause"`
	Title       string           `json:"title"`
	Count       int              `json:"count"`
	Pods        []PodCount       `json:"pods"`
	Explanation string           `json:"explanation"`
	Fix         string           `json:"fix,omitempty"`
	Evidence    map[string]int   `json:"evidence"` // role → failures it supported
	FromSigterm Histogram        `json:"offsets_from_sigterm"`
	FromExit    Histogram        `json:"offsets_from_exit"`
	Examples    []AlignedFailure `json:"examples"`
}

// PodCount is the failures of one pod.
type PodCount struct {
	Pod   string `json:"pod"`
	Count int    `json:"count"`
}

// Inference compares what kernel evidence alone proves with what clients
// reported.
type Inference struct {
	Inferred int `json:"inferred"`
	// Likely of Inferred rest on evidence that makes a failure likely
	// (LikelyProof), not on a packet that proves it.
	Likely  int            `json:"likely"`
	ByProof map[string]int `json:"by_proof"`
	// ClientFailures with a client address can be matched to kernel
	// evidence; Proven of them were, ProvenLikely of those only by a
	// likely inferred failure.
	ClientFailures    int      `json:"client_failures"`
	WithClientAddress int      `json:"with_client_address"`
	Proven            int      `json:"proven"`
	ProvenLikely      int      `json:"proven_likely"`
	Ratio             *float64 `json:"ratio,omitempty"` // Proven / ClientFailures
	// RefusedOutOfRotation counts refused SYNs that came after the pod's
	// endpoint had left rotation everywhere: probes or clients bypassing
	// the Service, not counted as failures.
	RefusedOutOfRotation int `json:"refused_out_of_rotation"`
}

// Rollout is the terminations of one workload that belong together, with
// the pods that replaced them.
type Rollout struct {
	Namespace string `json:"namespace"`
	Workload  string `json:"workload"`
	Kind      string `json:"workload_kind,omitempty"`
	Name      string `json:"workload_name,omitempty"`
	From      int64  `json:"from_ns"`
	To        int64  `json:"to_ns"`
	// Trigger is the workload change that began the rollout (template,
	// scale, deleted) and TriggerAt its time, which is then From; empty
	// when none was recorded, and From is the first pod's end.
	Trigger   string    `json:"trigger,omitempty"`
	TriggerAt int64     `json:"trigger_ns,omitempty"`
	Replaced  []PodView `json:"replaced"`
	NewPods   []NewPod  `json:"new_pods"`

	FailureCounts
}

// NewPod is a pod of the workload created since the rollout's trigger (or,
// with none recorded, that became ready from RolloutLead before its first
// termination) and ready by its end.
type NewPod struct {
	Pod     PodView `json:"pod"`
	Created int64   `json:"created_ns,omitempty"`
	Ready   int64   `json:"ready_ns"`
	// ReadyAfter is Ready minus Created.
	ReadyAfter int64 `json:"ready_after_ns,omitempty"`
}

// RolloutLead is how long before a rollout's first termination a new pod of
// the workload may have become ready and still belong to it, when no
// trigger was recorded: with maxSurge the replacement is ready just before
// the old pod is deleted.
const RolloutLead = time.Minute

// Analyze reads the events of q's window from st (with Options.Lead of
// history before it and the lookahead after it) and analyses them with the
// default options. q's Namespace and Workload narrow the results, not the
// read: client failures carry no workload until they are aligned.
func Analyze(ctx context.Context, st store.Store, q store.Query) (*Result, error) {
	return AnalyzeWith(ctx, st, q, Options{})
}

// AnalyzeWith is Analyze with options.
func AnalyzeWith(ctx context.Context, st store.Store, q store.Query, opts Options) (*Result, error) {
	o := opts.WithDefaults()
	c := newCollector(o, q)
	al := NewAligner(o, c.failure, c.pod)
	scan := store.Query{Window: event.Window{From: q.Window.From - int64(o.Lead)}}
	if scan.Window.From < 0 {
		scan.Window.From = 0
	}
	// The state at the read's start, however old: a pod ready for a week,
	// an endpoint, the workload's last change.
	if scan.Window.From > 0 {
		seed, err := st.StateAt(ctx, scan.Window.From-1, "")
		if err != nil {
			return nil, fmt.Errorf("reading the state at the window's start from %s: %w", st.Describe(), err)
		}
		sort.SliceStable(seed, func(i, j int) bool { return seed[i].Time < seed[j].Time })
		for i := range seed {
			c.see(&seed[i])
			if err := al.Add(&seed[i]); err != nil {
				return nil, err
			}
		}
	}
	if q.Window.To != 0 {
		scan.Window.To = q.Window.To + int64(o.Lookahead) + 1
	}
	n := 0
	err := st.Scan(ctx, scan, func(e *event.Event) error {
		n++
		if n%65536 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		c.see(e)
		return al.Add(e)
	})
	if err != nil {
		return nil, fmt.Errorf("reading events from %s: %w", st.Describe(), err)
	}
	al.Flush()
	c.lags = al.DataplaneLags(q.Window)
	return c.result(al.Stats()), nil
}

// AnalyzeEvents analyses events held in memory (in any order; the slice is
// not modified), limited to q's window, namespace and workload.
func AnalyzeEvents(events []event.Event, q store.Query, opts Options) (*Result, error) {
	o := opts.WithDefaults()
	idx := make([]int32, len(events))
	for i := range idx {
		idx[i] = int32(i)
	}
	sort.SliceStable(idx, func(i, j int) bool { return events[idx[i]].Time < events[idx[j]].Time })
	c := newCollector(o, q)
	al := NewAligner(o, c.failure, c.pod)
	for _, i := range idx {
		c.see(&events[i])
		if err := al.Add(&events[i]); err != nil {
			return nil, err
		}
	}
	al.Flush()
	c.lags = al.DataplaneLags(q.Window)
	return c.result(al.Stats()), nil
}

// collector turns the aligner's stream of decisions and timelines into a
// Result, keeping counts exact and examples bounded.
type collector struct {
	opts     Options
	q        store.Query
	causes   map[Cause]*causeAcc
	inferred map[Cause]*causeAcc
	tls      map[string]*PodTimeline
	order    []*PodTimeline
	failures []AlignedFailure
	inferFs  []AlignedFailure
	trunc    bool
	inf      Inference
	totals   Totals
	// unattributed client failures per second, for the rollouts
	unattr map[int64]int
	// triggers are the workload changes in scope, for the rollouts
	triggers                    []event.Event
	kernels                     map[string]NodeKernel // by node: the latest kernel_capabilities
	proxies                     map[string]NodeProxy  // by node: the proxy mode of the latest kernel_capabilities
	fromSigterm, fromExit       hist
	infFromSigterm, infFromExit hist
	lags                        []NodeLag
}

type causeAcc struct {
	rule           *Rule
	count          int
	pods           map[string]int
	podNames       map[string]string
	evidence       map[string]int
	fromExit       hist
	fromSigterm    hist
	maxRotationLag int64
	examples       []AlignedFailure
}

func newCollector(o Options, q store.Query) *collector {
	return &collector{
		opts: o, q: q,
		causes: map[Cause]*causeAcc{}, inferred: map[Cause]*causeAcc{},
		tls: map[string]*PodTimeline{}, unattr: map[int64]int{},
		inf: Inference{ByProof: map[string]int{}},
	}
}

func podKey(uid, ns, name string) string {
	if uid != "" {
		return uid
	}
	return ns + "/" + name
}

// inScope applies the namespace and workload filter to a pod.
func (c *collector) inScope(ns string, wl event.Workload) bool {
	if c.q.Namespace != "" && ns != c.q.Namespace {
		return false
	}
	if !c.q.Workload.IsZero() {
		if wl.Name != c.q.Workload.Name || (c.q.Workload.Kind != "" && wl.Kind != c.q.Workload.Kind) {
			return false
		}
	}
	return true
}

// see keeps what the collector needs of the raw stream, beside what the
// aligner reports: the workload changes that begin rollouts.
func (c *collector) see(e *event.Event) {
	if e.Kind == event.KernelCapabilities && (c.q.Window.To == 0 || e.Time < c.q.Window.To) {
		if c.kernels == nil {
			c.kernels = map[string]NodeKernel{}
		}
		nk := NodeKernel{Node: e.Node, Release: e.Attrs[event.AttrKernelRelease]}
		if e.Reason != "" {
			nk.Missing = strings.Split(e.Reason, ",")
		}
		c.kernels[e.Node] = nk
		if mode, ok := e.Attrs[event.AttrProxyMode]; ok {
			if c.proxies == nil {
				c.proxies = map[string]NodeProxy{}
			}
			c.proxies[e.Node] = NodeProxy{Node: e.Node, Mode: mode, Recorded: e.Attrs[event.AttrProxyRecorded] == "true",
				Evidence: e.Attrs[event.AttrProxyEvidence]}
		}
	}
	if e.Kind == event.WorkloadChanged && c.inScope(e.Pod.Namespace, e.Workload) {
		c.triggers = append(c.triggers, e.Clone())
	}
}

func (c *collector) scoped() bool { return c.q.Namespace != "" || !c.q.Workload.IsZero() }

func (c *collector) failure(d *Decision) {
	t := d.Failure.Time
	if !c.q.Window.Contains(t) {
		return
	}
	if d.Pod.IsZero() {
		if c.scoped() {
			return
		}
	} else if !c.inScope(d.Pod.Namespace, d.Workload) {
		return
	}
	accs := c.causes
	if d.Inferred {
		accs = c.inferred
		c.inf.Inferred++
		c.inf.ByProof[d.Proof]++
		if LikelyProof(d.Proof) {
			c.inf.Likely++
		}
	} else {
		c.inf.ClientFailures++
		c.totals.ClientFailures++
		explained := d.Rule.Cause != CauseUnexplained
		if !d.Pod.IsZero() {
			c.totals.WithPod++
		}
		if d.Terminating {
			c.totals.OnTerminatingPod++
		}
		if explained {
			c.totals.Explained++
		}
		if explained && d.Terminating {
			c.totals.ExplainedOnTerminatingPod++
		}
		if d.Failure.Local.IsValid() {
			c.inf.WithClientAddress++
		}
		if d.Proven {
			c.inf.Proven++
		}
		if d.Likely {
			c.inf.ProvenLikely++
		}
		if d.Pod.IsZero() {
			c.unattr[t/1e9]++
		}
	}
	acc := accs[d.Rule.Cause]
	if acc == nil {
		acc = &causeAcc{rule: d.Rule, pods: map[string]int{}, podNames: map[string]string{}, evidence: map[string]int{}}
		accs[d.Rule.Cause] = acc
	}
	acc.count++
	if !d.Pod.IsZero() {
		k := podKey(d.Pod.UID, d.Pod.Namespace, d.Pod.Name)
		acc.pods[k]++
		acc.podNames[k] = d.Pod.String()
	}
	roles := map[string]bool{}
	for _, p := range d.Evidence {
		if !roles[p.Role] {
			roles[p.Role] = true
			acc.evidence[p.Role]++
		}
	}
	if o := d.Offsets.Exit; o.OK {
		acc.fromExit.add(o.NS)
		if d.Inferred {
			c.infFromExit.add(o.NS)
		} else {
			c.fromExit.add(o.NS)
		}
	}
	if o := d.Offsets.Sigterm; o.OK {
		acc.fromSigterm.add(o.NS)
		if d.Inferred {
			c.infFromSigterm.add(o.NS)
		} else {
			c.fromSigterm.add(o.NS)
		}
	}
	if d.Rule.Cause == CauseEndpointRace && d.Offsets.Rotation.OK && -d.Offsets.Rotation.NS > acc.maxRotationLag {
		acc.maxRotationLag = -d.Offsets.Rotation.NS
	}
	keep := len(acc.examples) < c.opts.Examples
	list := &c.failures
	if d.Inferred {
		list = &c.inferFs
	}
	keepList := c.opts.MaxFailures < 0 || len(c.failures)+len(c.inferFs) < c.opts.MaxFailures
	if !keepList {
		c.trunc = true
	}
	if keep || keepList {
		af := d.Aligned()
		if keep {
			acc.examples = append(acc.examples, af)
		}
		if keepList {
			*list = append(*list, af)
		}
	}
}

func (c *collector) pod(t *PodTimeline) {
	if !c.inScope(t.Pod.Namespace, event.Workload{Kind: t.Kind, Name: t.Name}) {
		return
	}
	in := false
	for _, e := range t.events {
		if c.q.Window.Contains(e.Time) {
			in = true
			break
		}
	}
	if !in {
		return
	}
	cp := *t
	// The views are built only for the pods reported: a pod out of scope
	// or of the window (the lead history) costs none.
	cp.Events = make([]EventView, 0, len(t.events))
	for i := range t.events {
		cp.Events = append(cp.Events, View(&t.events[i]))
	}
	cp.events = nil
	c.inf.RefusedOutOfRotation += t.RefusedOutOfRotation
	c.tls[podKey(t.Pod.UID, t.Pod.Namespace, t.Pod.Name)] = &cp
	c.order = append(c.order, &cp)
}

func (c *collector) result(st Stats) *Result {
	r := &Result{From: c.q.Window.From, To: c.q.Window.To, Stats: st, Truncated: c.trunc}
	for _, nk := range c.kernels {
		if len(nk.Missing) > 0 {
			r.Kernels = append(r.Kernels, nk)
		}
	}
	sort.Slice(r.Kernels, func(i, j int) bool { return r.Kernels[i].Node < r.Kernels[j].Node })
	for _, np := range c.proxies {
		r.Proxies = append(r.Proxies, np)
	}
	sort.Slice(r.Proxies, func(i, j int) bool { return r.Proxies[i].Node < r.Proxies[j].Node })
	if c.q.Namespace != "" || !c.q.Workload.IsZero() {
		r.Scope = c.q.Namespace
		if w := c.q.Workload; !w.IsZero() {
			if w.Kind != "" {
				r.Scope += "/" + w.Kind
			}
			r.Scope += "/" + w.Name
		}
	}
	sort.SliceStable(c.order, func(i, j int) bool { return tlStart(c.order[i]) < tlStart(c.order[j]) })
	for _, t := range c.order {
		r.Timelines = append(r.Timelines, *t)
	}
	for i := range c.opts.Rules {
		rule := &c.opts.Rules[i]
		rv := RuleView{Cause: rule.Cause, Title: rule.Title, Fix: render(rule.Fix, SummaryData{})}
		for _, q := range rule.Requires {
			rv.Requires = append(rv.Requires, q.Name)
		}
		r.Rules = append(r.Rules, rv)
	}
	r.Causes = c.summaries(c.causes)
	r.InferredCauses = c.summaries(c.inferred)
	r.Failures = append(c.failures, c.inferFs...)
	if r.Failures == nil {
		r.Failures = []AlignedFailure{}
	}
	r.Inference = c.inf
	r.Totals = c.totals
	if c.inf.ClientFailures > 0 {
		v := float64(c.inf.Proven) / float64(c.inf.ClientFailures)
		r.Inference.Ratio = &v
	}
	if c.inf.ClientFailures > 0 {
		r.FromSigterm, r.FromExit = c.fromSigterm.export(50e6), c.fromExit.export(50e6)
	} else {
		r.FromSigterm, r.FromExit = c.infFromSigterm.export(50e6), c.infFromExit.export(50e6)
	}
	r.Rollouts = c.rollouts()
	r.DataplaneLag = c.lags
	return r
}

func tlStart(t *PodTimeline) int64 {
	for _, v := range []int64{t.Deletion, t.Created, t.Ready} {
		if v != 0 {
			return v
		}
	}
	if len(t.Events) > 0 {
		return t.Events[0].Time
	}
	return 0
}

func (c *collector) summaries(accs map[Cause]*causeAcc) []CauseSummary {
	out := []CauseSummary{}
	seen := map[Cause]bool{}
	emit := func(acc *causeAcc) {
		cs := CauseSummary{
			Cause: acc.rule.Cause, Title: acc.rule.Title, Count: acc.count,
			Evidence: acc.evidence, Examples: acc.examples,
			FromSigterm: acc.fromSigterm.export(50e6), FromExit: acc.fromExit.export(50e6),
		}
		for k, n := range acc.pods {
			cs.Pods = append(cs.Pods, PodCount{Pod: acc.podNames[k], Count: n})
		}
		sort.Slice(cs.Pods, func(i, j int) bool {
			if cs.Pods[i].Count != cs.Pods[j].Count {
				return cs.Pods[i].Count > cs.Pods[j].Count
			}
			return cs.Pods[i].Pod < cs.Pods[j].Pod
		})
		sd := summaryData(acc, c.tls)
		sd.DataplaneLag = lagPhrase(c.lags)
		cs.Explanation = render(acc.rule.Summary, sd)
		cs.Fix = render(acc.rule.Fix, sd)
		out = append(out, cs)
	}
	for i := range c.opts.Rules {
		cause := c.opts.Rules[i].Cause
		if acc := accs[cause]; acc != nil && !seen[cause] {
			seen[cause] = true
			emit(acc)
		}
	}
	var rest []Cause
	for k := range accs {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i] < rest[j] })
	for _, k := range rest {
		emit(accs[k])
	}
	return out
}

func (c *collector) rollouts() []Rollout {
	var terms []event.Termination
	for _, t := range c.order {
		if t.Ended() {
			tm := t.Termination()
			tm.Reason, tm.Created = podReason(t), t.Created
			terms = append(terms, tm)
		}
	}
	groups := event.GroupRollouts(terms, c.triggers)
	out := make([]Rollout, 0, len(groups))
	for _, g := range groups {
		r := Rollout{
			Namespace: g.Namespace, Workload: g.Workload.String(), Kind: g.Workload.Kind, Name: g.Workload.Name,
			From: g.From, To: g.To, Trigger: g.Trigger, TriggerAt: g.TriggerAt,
			FailureCounts: newFailureCounts(), Replaced: []PodView{}, NewPods: []NewPod{},
		}
		if r.Trigger == "" {
			r.Trigger = podTrigger(g, c.tls)
		}
		replaced := map[string]bool{}
		for _, t := range g.Terminations {
			k := podKey(t.Pod.UID, t.Pod.Namespace, t.Pod.Name)
			replaced[k] = true
			tl := c.tls[k]
			if tl == nil {
				continue
			}
			r.Replaced = append(r.Replaced, tl.Pod)
			for cause, n := range tl.Failures {
				r.ByCause[cause] += n
				r.Failures += n
			}
			for cause, n := range tl.InferredFailures {
				r.InferredByCause[cause] += n
				r.Inferred += n
			}
			r.keepWorst(tl.Gaps.SigtermAfterRotation, tl.Gaps.ExitAfterSigterm)
		}
		for _, tl := range c.order {
			k := podKey(tl.Pod.UID, tl.Pod.Namespace, tl.Pod.Name)
			if replaced[k] || tl.Pod.Namespace != g.Namespace || tl.Kind != g.Workload.Kind || tl.Name != g.Workload.Name {
				continue
			}
			if !newPodOf(g, tl, c.nextChange(g)) {
				continue
			}
			np := NewPod{Pod: tl.Pod, Created: tl.Created, Ready: tl.Ready}
			if tl.Created != 0 && tl.Ready >= tl.Created {
				np.ReadyAfter = tl.Ready - tl.Created
			}
			r.NewPods = append(r.NewPods, np)
			// The rollout ends when its last new pod is ready too.
			r.To = max(r.To, tl.Ready)
		}
		for sec, n := range c.unattr {
			if sec*1e9 >= g.From-1e9 && sec*1e9 <= g.To+int64(c.opts.ExitAfter) {
				r.Unattributed += n
			}
		}
		out = append(out, r)
	}
	return out
}

// Triggers the pods themselves show, when no workload change was recorded
// before them (Rollout.Trigger).
const (
	TriggerEviction     = "eviction"   // the Eviction API: a node drain, kubectl evict
	TriggerPreemption   = "preemption" // the scheduler made room for another pod
	TriggerTaint        = "taint"      // the taint manager: a NoExecute taint
	TriggerNodePressure = "node-pressure"
	TriggerPodDeleted   = "pod-deleted" // deleted with no reason given: kubectl delete, or a controller whose change was not recorded
	TriggerOOM          = "oom"         // a container killed for memory, the pod kept
	TriggerRestart      = "restart"     // a container ended and restarted, the pod kept: a failed liveness probe, a crash
)

// podReason is what the pod itself shows ended it (event.Termination's
// Reason): the API's reason for its deletion, or, with no deletion, its
// container's end (an OOM kill, a restart); "" for a deletion without a
// reason, which a workload change may explain.
func podReason(tl *PodTimeline) string {
	switch tl.Disruption {
	case "EvictionByEvictionAPI":
		return TriggerEviction
	case "PreemptionByScheduler":
		return TriggerPreemption
	case "DeletionByTaintManager":
		return TriggerTaint
	case "TerminationByKubelet":
		return TriggerNodePressure
	}
	if tl.Deletion != 0 {
		return ""
	}
	if tl.Terminated != nil && tl.Terminated.Reason == "OOMKilled" {
		return TriggerOOM
	}
	if tl.Terminated != nil || tl.Exit != nil || tl.Kill != nil || tl.Sigterm != nil {
		return TriggerRestart
	}
	return ""
}

// podTrigger says what ended the pods of g when no workload change did: the
// API's reason for a disruption, a plain deletion, or a container's end
// without one (an OOM kill, a restart).
func podTrigger(g event.Rollout, tls map[string]*PodTimeline) string {
	deleted, oom := false, false
	for _, t := range g.Terminations {
		tl := tls[podKey(t.Pod.UID, t.Pod.Namespace, t.Pod.Name)]
		if tl == nil {
			continue
		}
		switch tl.Disruption {
		case "EvictionByEvictionAPI":
			return TriggerEviction
		case "PreemptionByScheduler":
			return TriggerPreemption
		case "DeletionByTaintManager":
			return TriggerTaint
		case "TerminationByKubelet":
			return TriggerNodePressure
		}
		deleted = deleted || tl.Deletion != 0
		oom = oom || (tl.Terminated != nil && tl.Terminated.Reason == "OOMKilled")
	}
	switch {
	case deleted:
		return TriggerPodDeleted
	case oom:
		return TriggerOOM
	}
	return TriggerRestart
}

// nextChange is the time of the first change of g's workload after its
// trigger (0 when none): the pods created from then on are that change's.
func (c *collector) nextChange(g event.Rollout) int64 {
	if g.TriggerAt == 0 {
		return 0
	}
	next := int64(0)
	for i := range c.triggers {
		e := &c.triggers[i]
		if e.Time > g.TriggerAt && e.Reason != event.ChangeCreated && e.Pod.Namespace == g.Namespace &&
			e.Workload == g.Workload && (next == 0 || e.Time < next) {
			next = e.Time
		}
	}
	return next
}

// triggerSlack allows for the clocks of the nodes that saw a workload change
// and a pod's creation: the pod cannot be older than the change that made it.
const triggerSlack = int64(time.Second)

// newPodOf tells whether tl is a pod that rollout g brought up: created
// since its trigger, before the workload's next change (next, 0 for none)
// and before RolloutLead after its last old pod ended (a
// pod the watch saw only once running counts by its readiness), or without a recorded trigger, ready from RolloutLead before
// the first termination. A new pod that was never ready does not count.
func newPodOf(g event.Rollout, tl *PodTimeline, next int64) bool {
	if tl.Ready == 0 {
		return false
	}
	if next != 0 && tl.Created >= next {
		return false // the next change's pod
	}
	if g.TriggerAt == 0 {
		return tl.Ready >= g.From-int64(RolloutLead) && tl.Ready <= g.To
	}
	born := tl.Created
	if born == 0 {
		born = tl.Ready
	}
	return born >= g.TriggerAt-triggerSlack && born <= g.To+int64(RolloutLead)
}

// hist is a sparse histogram of offsets in 1 ms bins: exact enough for
// medians, bounded by the spread of the offsets rather than their number.
type hist struct {
	bins     map[int64]int
	n        int
	min, max int64
}

const histBin = int64(time.Millisecond)

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func (h *hist) add(ns int64) {
	if h.bins == nil {
		h.bins = map[int64]int{}
		h.min, h.max = ns, ns
	}
	h.bins[floorDiv(ns, histBin)]++
	h.n++
	h.min, h.max = min(h.min, ns), max(h.max, ns)
}

func (h *hist) quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	keys := make([]int64, 0, len(h.bins))
	for k := range h.bins {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	want := int(q * float64(h.n-1))
	seen := 0
	for _, k := range keys {
		seen += h.bins[k]
		if seen > want {
			return min(max(k*histBin, h.min), h.max)
		}
	}
	return h.max
}

// Histogram is offsets binned for plotting; P50 is to the millisecond.
type Histogram struct {
	Count int   `json:"count"`
	BinNS int64 `json:"bin_ns"`
	MinNS int64 `json:"min_ns"`
	P10NS int64 `json:"p10_ns"`
	P50NS int64 `json:"p50_ns"`
	P90NS int64 `json:"p90_ns"`
	MaxNS int64 `json:"max_ns"`
	Bins  []Bin `json:"bins"`
}

// Bin counts the offsets in [Start, Start+BinNS).
type Bin struct {
	Start int64 `json:"start_ns"`
	Count int   `json:"count"`
}

func (h *hist) export(width int64) Histogram {
	out := Histogram{Count: h.n, BinNS: width, Bins: []Bin{}}
	if h.n == 0 {
		return out
	}
	out.MinNS, out.MaxNS = h.min, h.max
	out.P10NS, out.P50NS, out.P90NS = h.quantile(0.1), h.quantile(0.5), h.quantile(0.9)
	m := map[int64]int{}
	for k, n := range h.bins {
		m[floorDiv(k*histBin, width)] += n
	}
	for k, n := range m {
		out.Bins = append(out.Bins, Bin{Start: k * width, Count: n})
	}
	sort.Slice(out.Bins, func(i, j int) bool { return out.Bins[i].Start < out.Bins[j].Start })
	return out
}
