package analysis

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// A disruption is the end of some pods of one workload that belong
// together — a rollout, a scale-down, a deletion, an eviction — as the
// store groups them (event.Rollout), with what the analysis of its window
// found in it. Disruption is the one report of it that the web API, the
// export sinks and the kubectl plugin read; event.Rollout (the store's
// grouping) and Rollout (the analysis's, over any window) are what it is
// built from.

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

// KeyOf is r's key.
func KeyOf(r event.Rollout) DisruptionKey {
	return DisruptionKey{Namespace: r.Namespace, Kind: r.Workload.Kind, Name: r.Workload.Name, Start: r.From}
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

// DisruptionWindow is the window a disruption is analysed over: from
// RolloutLead before it (its new pods' readiness) to DisruptionPad after.
func DisruptionWindow(r event.Rollout) event.Window {
	return event.Window{From: r.From - int64(RolloutLead), To: r.To + int64(DisruptionPad)}
}

// DisruptionQuery is the read that analyses r: its workload's events over
// DisruptionWindow.
func DisruptionQuery(r event.Rollout) store.Query {
	return store.Query{Window: DisruptionWindow(r), Namespace: r.Namespace, Workload: r.Workload}
}

// TriggerWords say what began a disruption, for people.
type TriggerWords struct {
	// Noun names the disruption in a sentence: "the rollout of
	// Deployment/web"; "disruption" when the trigger is not known.
	Noun string `json:"noun"`
	// Heading names it with its detail, to head a report of it.
	Heading string `json:"heading"`
	// BegunBy is what began it: "begun by a pod template change".
	BegunBy string `json:"begun_by,omitempty"`
}

// triggerWords are the words of each trigger: a workload change's
// (event.Change*) or what the pods show (Trigger*).
var triggerWords = map[string]TriggerWords{
	event.ChangeTemplate: {"rollout", "rollout (new pod template)", "a pod template change"},
	event.ChangeScale:    {"scale-down", "scale-down (change of replicas)", "a change of replicas"},
	event.ChangeDeleted:  {"deletion", "deletion of the workload", "the workload's deletion"},
	TriggerEviction:      {"eviction", "eviction", "an eviction (a node drain, or the Eviction API)"},
	TriggerPreemption:    {"preemption", "preemption", "the scheduler's preemption"},
	TriggerTaint:         {"taint eviction", "taint eviction", "a NoExecute taint"},
	TriggerNodePressure:  {"node-pressure eviction", "node-pressure eviction", "the kubelet's node-pressure eviction"},
	TriggerPodDeleted:    {"pod deletion", "pod deletion", "the pods' deletion (kubectl delete, or a controller)"},
	TriggerOOM:           {"OOM kill", "OOM kill", "an OOM kill"},
	TriggerRestart:       {"container restart", "container restart", "a container's end and restart (a failed liveness probe, a crash)"},
}

// WordsFor is what trigger (Rollout.Trigger, Disruption.Trigger) says in
// words; an unknown one is a "disruption" headed by its own name.
func WordsFor(trigger string) TriggerWords {
	if w, ok := triggerWords[trigger]; ok {
		return w
	}
	if trigger == "" {
		return TriggerWords{Noun: "disruption", Heading: "disruption"}
	}
	return TriggerWords{Noun: "disruption", Heading: trigger, BegunBy: "a workload change: " + trigger}
}

// Disruption is one disruption of a workload: the store's grouping of its
// pods' ends and, once Analysed, what the analysis of DisruptionWindow
// found on the pods it replaced — the analysed rollouts of the same
// workload that overlap it (the analysis groups from its own timelines,
// so its boundaries may differ slightly).
type Disruption struct {
	// ID is Key().ID().
	ID        string `json:"id"`
	Namespace string `json:"namespace"`
	Kind      string `json:"workload_kind"` // Deployment, StatefulSet …; empty when the pods had no known workload
	Name      string `json:"workload_name"`
	// From and To are the disruption as the store groups it: its trigger
	// (else its first pod's end) and its last pod's end. Until is To, or
	// later when the analysis saw a new pod become ready after that.
	From  int64 `json:"from_ns"`
	To    int64 `json:"to_ns"`
	Until int64 `json:"until_ns"`
	// Trigger is what began it: template, scale, deleted (a workload
	// change) or what the pods show (eviction, preemption, pod-deleted,
	// oom, restart …); empty when neither says. Words says it for people.
	Trigger string `json:"trigger,omitempty"`
	// Terminations are the pod ends the store grouped into it, Events the
	// events of those pods as the store counts them.
	Terminations int `json:"terminations"`
	Events       int `json:"events"`

	// Analysed tells whether the rest was filled in from an analysis.
	Analysed bool      `json:"analysed"`
	Replaced []PodView `json:"replaced"`
	NewPods  []NewPod  `json:"new_pods"`
	// The failures on the replaced pods, the sum of the analysed
	// rollouts'; Likely of the Inferred ones rest on evidence that makes
	// a failure likely, not on a packet that proves it.
	FailureCounts
	Likely int `json:"likely"`
	// Causes lists each cause of its failures with its counts and its fix,
	// in the rule table's order.
	Causes []DisruptionCause `json:"causes"`
	// Explained are the failures on the replaced pods with a cause (not
	// unexplained), client-reported first, each with its evidence.
	Explained []AlignedFailure `json:"explained"`

	// UID is the workload's metadata.uid as its last recorded change
	// named it (WorkloadUID), and Link where a web UI shows the
	// disruption: filled in by those who need them.
	UID  string `json:"workload_uid,omitempty"`
	Link string `json:"link,omitempty"`
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

// AnalyzeDisruption analyses r over DisruptionWindow with opts and
// reports it.
func AnalyzeDisruption(ctx context.Context, st store.Store, r event.Rollout, opts Options) (*Disruption, *Result, error) {
	res, err := AnalyzeWith(ctx, st, DisruptionQuery(r), opts)
	if err != nil {
		return nil, nil, err
	}
	return NewDisruption(r, res), res, nil
}

// NewDisruption reports r from res, an analysis of (at least) its
// DisruptionWindow; with res nil, from the store's grouping alone.
func NewDisruption(r event.Rollout, res *Result) *Disruption {
	k := KeyOf(r)
	d := &Disruption{
		ID: k.ID(), Namespace: r.Namespace, Kind: r.Workload.Kind, Name: r.Workload.Name,
		From: r.From, To: r.To, Until: r.To, Trigger: r.Trigger, Terminations: len(r.Terminations),
		FailureCounts: newFailureCounts(), Replaced: []PodView{}, NewPods: []NewPod{}, Causes: []DisruptionCause{}, Explained: []AlignedFailure{},
	}
	for _, t := range r.Terminations {
		d.Events += t.Events
	}
	if res != nil {
		d.analysed(res)
	}
	return d
}

// analysed fills in what res found on d's pods.
func (d *Disruption) analysed(res *Result) {
	d.Analysed = true
	replaced := map[string]bool{}
	for i := range res.Rollouts {
		ro := &res.Rollouts[i]
		if ro.Namespace != d.Namespace || ro.Kind != d.Kind || ro.Name != d.Name || ro.To < d.From || ro.From > d.To {
			continue
		}
		if d.Trigger == "" {
			d.Trigger = ro.Trigger // what the pods show, when no workload change was recorded
		}
		d.Until = max(d.Until, ro.To)
		d.NewPods = append(d.NewPods, ro.NewPods...)
		d.add(&ro.FailureCounts)
		for _, p := range ro.Replaced {
			if !replaced[p.UID] {
				replaced[p.UID] = true
				d.Replaced = append(d.Replaced, p)
			}
		}
	}
	for _, af := range res.Failures {
		if af.Pod == nil || !replaced[af.Pod.UID] {
			continue
		}
		if af.Inferred && LikelyProof(af.Proof) {
			d.Likely++
		}
		if af.Cause != CauseUnexplained {
			d.Explained = append(d.Explained, af)
		}
	}
	fixes := map[Cause]string{}
	for _, rv := range res.Rules {
		fixes[rv.Cause] = rv.Fix
	}
	// The rendered fix names what was measured (the propagation seen, the
	// longest request); the rule's own when the cause had no summary.
	for _, cs := range append(append([]CauseSummary(nil), res.InferredCauses...), res.Causes...) {
		if cs.Fix != "" {
			fixes[cs.Cause] = cs.Fix
		}
	}
	for _, rv := range res.Rules {
		c := rv.Cause
		if d.ByCause[c] == 0 && d.InferredByCause[c] == 0 {
			continue
		}
		d.Causes = append(d.Causes, DisruptionCause{Cause: c, Title: rv.Title, Failures: d.ByCause[c], Inferred: d.InferredByCause[c], Fix: fixes[c]})
	}
}

// WorkloadUID is the uid the last recorded change of r's workload before
// its end named; "" when none was recorded.
func WorkloadUID(ctx context.Context, st store.Store, r event.Rollout) (string, error) {
	if r.Workload.IsZero() {
		return "", nil
	}
	uid := ""
	q := store.Query{Window: event.Window{To: r.To + 1}, Kinds: []event.Kind{event.WorkloadChanged}, Namespace: r.Namespace, Workload: r.Workload}
	err := st.Scan(ctx, q, func(e *event.Event) error {
		if v := e.Attrs[event.AttrWorkloadUID]; v != "" && e.Workload == r.Workload {
			uid = v
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("reading the workload's changes: %w", err)
	}
	return uid, nil
}
