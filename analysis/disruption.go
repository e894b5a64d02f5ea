package analysis

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// A disruption is the end of some pods of one workload that belong
// together — a rollout, a scale-down, a deletion, an eviction — as the
// account groups them (account.go). Disruption is the one report of it:
// FindDisruptions lists them, the analysis fills them in, and the web
// API, the export sinks, the kubectl plugin and the report read it.

// DisruptionKey identifies a disruption: its workload and its start (the
// trigger, else its first pod's end). The start does not move while a
// disruption goes on (later pod ends only extend it), so links to it stay
// valid.
type DisruptionKey struct {
	Namespace string
	Kind      string
	Name      string
	Start     int64 // UTC ns
}

// Workload is the key's workload.
func (k DisruptionKey) Workload() event.Workload { return event.Workload{Kind: k.Kind, Name: k.Name} }

// ID is the key as four escaped path segments, ns/kind/name/start, "-"
// for an empty one: the same on every server reading the same store, and
// the tail of the web UI's links to the disruption.
func (k DisruptionKey) ID() string {
	return seg(k.Namespace) + "/" + seg(k.Kind) + "/" + seg(k.Name) + "/" + strconv.FormatInt(k.Start, 10)
}

// String is for logs.
func (k DisruptionKey) String() string {
	return fmt.Sprintf("%s/%s/%s@%d", k.Namespace, k.Kind, k.Name, k.Start)
}

// ParseDisruptionKey reads the four segments of an ID (escaped, as a
// router hands them over).
func ParseDisruptionKey(ns, kind, name, start string) (DisruptionKey, error) {
	var k DisruptionKey
	var err error
	if k.Namespace, err = unseg(ns); err != nil {
		return k, fmt.Errorf("namespace: %w", err)
	}
	if k.Kind, err = unseg(kind); err != nil {
		return k, fmt.Errorf("workload kind: %w", err)
	}
	if k.Name, err = unseg(name); err != nil {
		return k, fmt.Errorf("workload name: %w", err)
	}
	if k.Start, err = strconv.ParseInt(start, 10, 64); err != nil || k.Start <= 0 {
		return k, fmt.Errorf("start %q: want UTC nanoseconds", start)
	}
	return k, nil
}

// seg renders one path segment; "-" stands for an empty one (no
// Kubernetes name can be "-": names start with a letter or digit).
func seg(s string) string {
	if s == "" {
		return "-"
	}
	return url.PathEscape(s)
}

func unseg(s string) (string, error) {
	if s == "-" {
		return "", nil
	}
	return url.PathUnescape(s)
}

// DisruptionPad is how long after a disruption's last pod end its window
// is still read: late endpoint removals, late client failures.
const DisruptionPad = 30 * time.Second

// Window is the window d is analysed over: from RolloutLead before it
// (its new pods' readiness) to DisruptionPad after its end.
func (d *Disruption) Window() event.Window {
	return event.Window{From: d.From - int64(RolloutLead), To: max(d.To, d.Until) + int64(DisruptionPad)}
}

// Query is the read that analyses d: its workload's events over Window.
func (d *Disruption) Query() store.Query {
	return store.Query{Window: d.Window(), Namespace: d.Namespace, Workload: event.Workload{Kind: d.Kind, Name: d.Name}}
}

// Disruption is one disruption of a workload as the account groups it
// (FindDisruptions) and, once Analysed, what the analysis found on its
// pods.
type Disruption struct {
	// ID is Key().ID(): unique, and the same however much of the
	// disruption has been recorded or read, since its start is its
	// trigger's time (else its first pod's end).
	ID        string `json:"id"`
	Namespace string `json:"namespace"`
	Kind      string `json:"workload_kind"` // Deployment, StatefulSet …; empty when the pods had no known workload
	Name      string `json:"workload_name"`
	// From is its start: the workload change that began it, else its
	// first pod's end. To is its last pod's end. Until is To, or later:
	// a rollout's recorded completion, a new pod ready after its last
	// old pod ended.
	From  int64 `json:"from_ns"`
	To    int64 `json:"to_ns"`
	Until int64 `json:"until_ns"`
	// Trigger is what began it (a row of Triggers); Words says it for
	// people. TriggerAt is the workload change's time, which is From, and
	// 0 for a trigger the pods show.
	Trigger   Trigger `json:"trigger"`
	TriggerAt int64   `json:"trigger_ns,omitempty"`
	// Changes are the workload's changes that belong to it, in time order:
	// the one that began it, then pauses, resumes, rollbacks and its
	// completion.
	Changes []Change `json:"changes,omitempty"`
	// InProgress: a rollout that the workload's recorded status had not
	// reported complete by the end of what was read.
	InProgress bool `json:"in_progress,omitempty"`
	// Terminations counts the pod lives it ended, Events the lifecycle
	// events of those lives.
	Terminations int `json:"terminations"`
	Events       int `json:"events"`

	// Replaced are the pods it ended (a pod restarted in place and later
	// deleted ends two lives, each in its own disruption: Life tells
	// them apart).
	Replaced []PodView `json:"replaced"`
	// Analysed tells whether the rest was filled in from an analysis.
	Analysed bool     `json:"analysed"`
	NewPods  []NewPod `json:"new_pods"`
	// The failures on the replaced pods; Likely of the Inferred ones rest
	// on evidence that makes a failure likely, not on a packet that
	// proves it.
	FailureCounts
	Likely int `json:"likely"`
	// Causes lists each cause of its failures with its counts and its fix,
	// in the rule table's order.
	Causes []DisruptionCause `json:"causes"`
	// Explained are the failures on the replaced pods with a cause (not
	// unexplained), client-reported first, each with its evidence; filled
	// in by NewDisruption (a Result's disruptions leave them in
	// Result.Failures).
	Explained []AlignedFailure `json:"explained"`
	// Patch is the fix of its causes as a change to its workload, with
	// numbers from this cluster (planPatch); nil when no failure of it
	// has a cause.
	Patch *Patch `json:"patch,omitempty"`
	// RecorderGaps are the gaps of the record (Result.RecorderGaps)
	// during it on its pods' nodes, or of the EndpointSlices': what it
	// says nothing about.
	RecorderGaps []RecorderGap `json:"recorder_gaps,omitempty"`

	// UID is the workload's metadata.uid as its last recorded change
	// named it (WorkloadUID), and Link where a web UI shows the
	// disruption: filled in by those who need them.
	UID  string `json:"workload_uid,omitempty"`
	Link string `json:"link,omitempty"`

	// next is the workload's first change after this disruption's own
	// (0: none): the pods created from then on are that change's.
	next int64
}

// has reports whether d ended the life of pv: the same pod (by UID, else
// by namespace and name) and the same life.
func (d *Disruption) has(pv PodView) bool {
	k := podKey(pv.UID, pv.Namespace, pv.Name)
	for _, p := range d.Replaced {
		if p.Life == pv.Life && podKey(p.UID, p.Namespace, p.Name) == k {
			return true
		}
	}
	return false
}

// FailureCounts are the failures of some pods (an analysed Rollout's
// replaced pods, a Disruption's) by cause, and the worst gaps among them.
type FailureCounts struct {
	// Failures were reported by clients, Inferred proven or made likely
	// by the pods' kernel events alone.
	Failures        int           `json:"failures"`
	ByCause         map[Cause]int `json:"by_cause"`
	Inferred        int           `json:"inferred"`
	InferredByCause map[Cause]int `json:"inferred_by_cause"`
	// Unattributed counts failures no pod was found for that happened
	// meanwhile (they may belong to another workload).
	Unattributed int `json:"unattributed"`

	// The worst gaps among the pods.
	WorstSigtermAfterRotation *int64 `json:"worst_sigterm_after_rotation_ns,omitempty"`
	LongestExitAfterSigterm   *int64 `json:"longest_exit_after_sigterm_ns,omitempty"`
}

func newFailureCounts() FailureCounts {
	return FailureCounts{ByCause: map[Cause]int{}, InferredByCause: map[Cause]int{}}
}

// add adds o's counts to c's and keeps the worse of each gap.
func (c *FailureCounts) add(o *FailureCounts) {
	c.Failures += o.Failures
	c.Inferred += o.Inferred
	c.Unattributed += o.Unattributed
	for k, n := range o.ByCause {
		c.ByCause[k] += n
	}
	for k, n := range o.InferredByCause {
		c.InferredByCause[k] += n
	}
	c.keepWorst(o.WorstSigtermAfterRotation, o.LongestExitAfterSigterm)
}

// keepWorst keeps the most negative SIGTERM-after-rotation gap and the
// longest exit after SIGTERM; nil is no measure.
func (c *FailureCounts) keepWorst(sigtermAfterRotation, exitAfterSigterm *int64) {
	if g := sigtermAfterRotation; g != nil && (c.WorstSigtermAfterRotation == nil || *g < *c.WorstSigtermAfterRotation) {
		c.WorstSigtermAfterRotation = ptr(*g)
	}
	if g := exitAfterSigterm; g != nil && (c.LongestExitAfterSigterm == nil || *g > *c.LongestExitAfterSigterm) {
		c.LongestExitAfterSigterm = ptr(*g)
	}
}

// DisruptionCause is one cause of a disruption's failures.
type DisruptionCause struct {
	Cause    Cause  `json:"cause"`
	Title    string `json:"title"`
	Failures int    `json:"failures"` // client-reported
	Inferred int    `json:"inferred"` // from kernel evidence alone
	Fix      string `json:"fix,omitempty"`
}

// Key is the disruption's key.
func (d *Disruption) Key() DisruptionKey {
	return DisruptionKey{Namespace: d.Namespace, Kind: d.Kind, Name: d.Name, Start: d.From}
}

// Words says what began the disruption.
func (d *Disruption) Words() TriggerWords { return WordsFor(d.Trigger) }

// Workload is Kind/Name, or "" when unknown.
func (d *Disruption) Workload() string {
	return event.Workload{Kind: d.Kind, Name: d.Name}.String()
}

// HasFailures tells whether clients reported failures on the replaced
// pods or kernel evidence shows some.
func (d *Disruption) HasFailures() bool { return d.Failures > 0 || d.Inferred > 0 }

// CountsByCause is one line of counts by cause in the rule table's order,
// "32 keep-alive connection cut at exit, 5 endpoint removal race": the
// client-reported counts, or with inferred the kernel evidence's.
func (d *Disruption) CountsByCause(inferred bool) string {
	var parts []string
	for _, c := range d.Causes {
		n := c.Failures
		if inferred {
			n = c.Inferred
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, c.Title))
		}
	}
	return strings.Join(parts, ", ")
}

// AnalyzeDisruption analyses found (as FindDisruptions gave it) over its
// Window with opts and reports it.
func AnalyzeDisruption(ctx context.Context, st store.Store, found *Disruption, opts Options) (*Disruption, *Result, error) {
	res, err := AnalyzeWith(ctx, st, found.Query(), opts)
	if err != nil {
		return nil, nil, err
	}
	return NewDisruption(found, res), res, nil
}

// NewDisruption reports found (as FindDisruptions gave it) from res, an
// analysis of (at least) its Window; with res nil, as found. Its
// identity, trigger and pods stay found's: the analysis adds what it
// found on those pods.
func NewDisruption(found *Disruption, res *Result) *Disruption {
	d := *found
	d.Replaced = slices.Clone(found.Replaced)
	d.Changes = slices.Clone(found.Changes)
	d.FailureCounts = newFailureCounts()
	d.NewPods, d.Causes, d.Explained = []NewPod{}, []DisruptionCause{}, []AlignedFailure{}
	d.Analysed, d.Likely = false, 0
	if d.Replaced == nil {
		d.Replaced = []PodView{}
	}
	if res != nil {
		d.analysed(res)
	}
	return &d
}

// analysed fills in what res found on d's pods: the analysed disruption
// with d's ID, else those that ended any of d's pod lives.
func (d *Disruption) analysed(res *Result) {
	d.Analysed = true
	var same []*Disruption
	for i := range res.Disruptions {
		if res.Disruptions[i].ID == d.ID {
			same = append(same, &res.Disruptions[i])
		}
	}
	if len(same) == 0 {
		for i := range res.Disruptions {
			a := &res.Disruptions[i]
			for _, p := range d.Replaced {
				if a.has(p) {
					same = append(same, a)
					break
				}
			}
		}
	}
	for _, a := range same {
		d.Until = max(d.Until, a.Until)
		d.NewPods = append(d.NewPods, a.NewPods...)
		d.add(&a.FailureCounts)
	}
	for _, af := range res.Failures {
		if af.Pod == nil || !d.has(*af.Pod) {
			continue
		}
		if af.Inferred && LikelyProof(af.Proof) {
			d.Likely++
		}
		if af.Cause != CauseUnexplained {
			d.Explained = append(d.Explained, af)
		}
	}
	d.Causes = disruptionCauses(&d.FailureCounts, res)
	d.Patch = d.plan(res)
	d.RecorderGaps = d.gaps(res)
}

// gaps are res's recorder gaps that overlap d on the nodes of its pods,
// and the EndpointSlices'.
func (d *Disruption) gaps(res *Result) []RecorderGap {
	if len(res.RecorderGaps) == 0 {
		return nil
	}
	nodes := map[string]bool{"": true}
	for i := range res.Timelines {
		tl := &res.Timelines[i]
		if d.has(tl.Pod) {
			nodes[tl.Node] = true
		}
	}
	var out []RecorderGap
	for _, g := range res.RecorderGaps {
		if nodes[g.Node] && g.From <= d.Until && g.To >= d.From {
			out = append(out, g)
		}
	}
	return out
}

// disruptionCauses lists each cause counted in fc, in the rule table's order,
// with its fix as res rendered it (naming what was measured: the
// propagation seen, the longest request), else the rule's own.
func disruptionCauses(fc *FailureCounts, res *Result) []DisruptionCause {
	fixes := map[Cause]string{}
	for _, rv := range res.Rules {
		fixes[rv.Cause] = rv.Fix
	}
	for _, cs := range append(append([]CauseSummary(nil), res.InferredCauses...), res.Causes...) {
		if cs.Fix != "" {
			fixes[cs.Cause] = cs.Fix
		}
	}
	out := []DisruptionCause{}
	for _, rv := range res.Rules {
		c := rv.Cause
		if fc.ByCause[c] == 0 && fc.InferredByCause[c] == 0 {
			continue
		}
		out = append(out, DisruptionCause{Cause: c, Title: rv.Title, Failures: fc.ByCause[c], Inferred: fc.InferredByCause[c], Fix: fixes[c]})
	}
	return out
}

// WorkloadUID is the uid the last recorded change of d's workload before
// its end named; "" when none was recorded.
func WorkloadUID(ctx context.Context, st store.Store, d *Disruption) (string, error) {
	wl := event.Workload{Kind: d.Kind, Name: d.Name}
	if wl.IsZero() {
		return "", nil
	}
	uid := ""
	q := store.Query{Window: event.Window{To: d.To + 1}, Kinds: []event.Kind{event.WorkloadChanged}, Namespace: d.Namespace, Workload: wl}
	err := st.Scan(ctx, q, func(e *event.Event) error {
		if v := e.Attrs[event.AttrWorkloadUID]; v != "" && e.Workload == wl {
			uid = v
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("reading the workload's changes: %w", err)
	}
	return uid, nil
}
