package analysis

import (
	"sort"
	"strconv"
	"strings"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// collector turns the aligner's stream of decisions and timelines into a
// Result, keeping counts exact and examples bounded.
type collector struct {
	opts      Options
	q         store.Query
	cover     *Coverage // the recorders' gaps (nil: none read)
	causes    map[Cause]*causeAcc
	inferred  map[Cause]*causeAcc
	timelines map[string]*PodTimeline
	order     []*PodTimeline
	failures  []AlignedFailure
	inferFs   []AlignedFailure
	trunc     bool
	inf       Inference
	totals    Totals
	// unattributed client failures per second, for the rollouts
	unattr map[int64]int
	// likely counts the inferred failures that rest on likely evidence,
	// per pod life (lifeKey), for the disruptions
	likely map[string]int
	// acct is the account of the disruptions in scope: the workload
	// changes and every ended pod life, those of the read's lead too.
	acct                        account
	kernels                     map[string]NodeKernel // by node: the latest kernel_capabilities
	cluster                     Cluster               // the versions the node_info events gave
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
		timelines: map[string]*PodTimeline{}, unattr: map[int64]int{}, likely: map[string]int{},
		inf: Inference{ByProof: map[string]int{}},
	}
}

func podKey(uid, ns, name string) string {
	if uid != "" {
		return uid
	}
	return ns + "/" + name
}

// lifeKey names one life of a pod: its key, and when the life began for
// any but the first (a container restarted in place begins a new one).
func lifeKey(uid, ns, name string, since int64) string {
	if since == 0 {
		return podKey(uid, ns, name)
	}
	return podKey(uid, ns, name) + "@" + strconv.FormatInt(since, 10)
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
	if e.Kind == event.NodeInfo && (c.q.Window.To == 0 || e.Time < c.q.Window.To) {
		c.cluster.see(e)
	}
	if e.Kind == event.WorkloadChanged && c.inScope(e.Pod.Namespace, e.Workload) {
		c.acct.change(e)
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
			if !d.Pod.IsZero() {
				c.likely[lifeKey(d.Pod.UID, d.Pod.Namespace, d.Pod.Name, d.Life)]++
			}
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
		k := lifeKey(d.Pod.UID, d.Pod.Namespace, d.Pod.Name, d.Life)
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
	offsets := d.Offsets()
	if o := offsets.Exit; o.OK {
		acc.fromExit.add(o.NS)
		if d.Inferred {
			c.infFromExit.add(o.NS)
		} else {
			c.fromExit.add(o.NS)
		}
	}
	if o := offsets.Sigterm; o.OK {
		acc.fromSigterm.add(o.NS)
		if d.Inferred {
			c.infFromSigterm.add(o.NS)
		} else {
			c.fromSigterm.add(o.NS)
		}
	}
	if d.Rule.Cause == CauseEndpointRace && offsets.Rotation.OK && -offsets.Rotation.NS > acc.maxRotationLag {
		acc.maxRotationLag = -offsets.Rotation.NS
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
	if t.Ended() {
		// The account needs every ended life, those of the read's lead
		// too: a disruption begun before the window keeps its start.
		e := *t
		e.nEvents, e.events, e.Events = len(t.events), nil, nil
		c.acct.end(&e)
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
	cp.nEvents = len(t.events)
	if len(t.events) > 0 {
		cp.firstEvent = t.events[0].Time
	}
	// The views are built only for the pods reported: a pod out of scope
	// or of the window (the lead history) costs none.
	if !c.opts.NoEventViews {
		cp.Events = make([]EventView, 0, len(t.events))
		for _, e := range t.events {
			cp.Events = append(cp.Events, View(e))
		}
	}
	cp.events = nil
	c.inf.RefusedOutOfRotation += t.RefusedOutOfRotation
	c.timelines[lifeKey(t.Pod.UID, t.Pod.Namespace, t.Pod.Name, t.Since)] = &cp
	c.order = append(c.order, &cp)
}

func (c *collector) result(st Stats) *Result {
	r := &Result{From: c.q.Window.From, To: c.q.Window.To, Stats: st, Truncated: c.trunc}
	r.RecorderGaps = c.cover.InWindow(c.q.Window)
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
	if c.cluster.APIServer != "" || len(c.cluster.Kubelets) > 0 {
		cl := c.cluster
		r.Cluster = &cl
	}
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
	r.DataplaneLag = c.lags
	r.Disruptions = c.disruptions(r)
	for i := range r.Disruptions {
		r.Disruptions[i].RecorderGaps = r.Disruptions[i].gaps(r)
	}
	return r
}

func tlStart(t *PodTimeline) int64 {
	for _, v := range []int64{t.Deletion, t.Created, t.Ready} {
		if v != 0 {
			return v
		}
	}
	return t.firstEvent
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
		sd := summaryData(acc, c.timelines)
		sd.DataplaneLag = LagPhrase(c.lags)
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
