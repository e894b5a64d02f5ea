// Package export is the server's feed of finished disruptions — a
// rollout, scale-down, eviction or deletion of one workload, from its
// trigger until it has been quiet for a while — each with its failures by
// cause, the kernel evidence of them and the fix, computed from the store
// as the report computes them. Sinks (Kubernetes Events in k8sevents,
// OpenTelemetry logs in otlp) hang off one Feed, and the feed hands each
// disruption to each sink once per server: a sink that recognises what it
// was given before (an Event's name) also gets, after a restart, what
// finished while the server was down.
package export

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// Disruption is one finished disruption of a workload.
type Disruption struct {
	// ID is the disruption's key as the web UI links it:
	// namespace/kind/name/start, each segment path-escaped, "-" when
	// empty. It is the same on every server reading the same store.
	ID        string
	Namespace string
	Kind      string // Deployment, StatefulSet, DaemonSet …; empty when the pods had no known workload
	Name      string
	// UID is the workload's metadata.uid as its last recorded change
	// named it; empty when none was recorded.
	UID string
	// Trigger is what began it: template, scale, deleted (a workload
	// change), eviction, preemption, pod-deleted, oom, restart (what the
	// pods show).
	Trigger  string
	From, To int64 // UTC ns: the trigger (else the first pod's end), the last pod's end
	Replaced []analysis.PodView
	NewPods  int

	// Failures are the client-reported failures on the replaced pods,
	// Inferred those the pods' kernel events alone prove or make likely
	// (Likely of them); each by cause.
	Failures        int
	ByCause         map[analysis.Cause]int
	Inferred        int
	Likely          int
	InferredByCause map[analysis.Cause]int
	// Unattributed failures happened meanwhile but were tied to no pod.
	Unattributed int
	// Causes lists each cause with its counts and its fix, in the rule
	// table's order.
	Causes []CauseCount
	// Explained are the failures with a cause (not unexplained), client
	// reported first, each with its pod and evidence.
	Explained []analysis.AlignedFailure
	// Link is the timeline's URL when Options.BaseURL is set.
	Link string
}

// CauseCount is one cause of a disruption's failures.
type CauseCount struct {
	Cause    analysis.Cause
	Title    string
	Failures int // client-reported
	Inferred int // from kernel evidence alone
	Fix      string
}

// HasFailures tells whether clients reported failures on the replaced
// pods or kernel evidence shows some.
func (d *Disruption) HasFailures() bool { return d.Failures > 0 || d.Inferred > 0 }

// Workload is Kind/Name, or "" when unknown.
func (d *Disruption) Workload() string {
	return event.Workload{Kind: d.Kind, Name: d.Name}.String()
}

// Sink takes finished disruptions.
type Sink interface {
	// Name is for logs and metrics (events, otlp).
	Name() string
	// Deliver hands the sink one disruption. It returns nil once the
	// disruption is delivered, or was before, or is none of the sink's
	// business; ErrDeferred (wrapped or not) to be asked again at a later
	// poll (a rate limit); any other error is logged and retried at later
	// polls until the disruption is older than Options.Backfill.
	Deliver(ctx context.Context, d *Disruption) error
	// Idempotent tells whether a second Deliver of a disruption already
	// delivered (before a restart, or by another server) is harmless and
	// recognised: such a sink is also given the disruptions that finished
	// before the feed started, within Options.Backfill. Others get only
	// those that finish while it runs.
	Idempotent() bool
}

// ErrDeferred says a sink will take the disruption later.
var ErrDeferred = errors.New("deferred")

// Outcomes the feed reports to Options.Observe.
const (
	OutcomeDelivered = "delivered"
	OutcomeDeferred  = "deferred"
	OutcomeFailed    = "failed"
	OutcomeExpired   = "expired" // given up: older than Backfill and still not delivered
)

// Options tune a Feed.
type Options struct {
	// Quiet is how long a disruption must have had no pod ending before it
	// is finished: a later termination within event.RolloutGap still
	// joins it, so the default is that.
	Quiet time.Duration
	// Poll is how often the store is read. Default 15 s.
	Poll time.Duration
	// Backfill is how far back disruptions are looked for, and how long an
	// undelivered one is retried. Default 30 min: under the API server's
	// default event TTL (1 h), so a re-created Event never outlives the
	// first one's expiry.
	Backfill time.Duration
	// BaseURL is where the web UI is reached (https://drainscope.example);
	// each disruption's Link is its timeline there.
	BaseURL string
	// Analysis configures the analysis of each disruption.
	Analysis analysis.Options
	// Now is the clock; default time.Now.
	Now func() time.Time
	Log *slog.Logger
	// Observe, when set, is told each delivery's outcome per sink.
	Observe func(sink, outcome string)
}

// Feed reads the store for finished disruptions and hands them to sinks.
type Feed struct {
	st    store.Store
	sinks []Sink
	o     Options
	start int64
	// done marks each (disruption, sink) delivered; built holds the
	// disruptions some sink still waits for.
	done  map[doneKey]bool
	built map[string]*Disruption
	fails map[doneKey]int
}

type doneKey struct {
	id   string
	sink int
}

// New returns a feed over st; its start (the time sinks that are not
// Idempotent get disruptions from) is now.
func New(st store.Store, sinks []Sink, o Options) *Feed {
	if o.Quiet <= 0 {
		o.Quiet = event.RolloutGap
	}
	if o.Poll <= 0 {
		o.Poll = 15 * time.Second
	}
	if o.Backfill <= 0 {
		o.Backfill = 30 * time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	o.BaseURL = strings.TrimRight(o.BaseURL, "/")
	return &Feed{st: st, sinks: sinks, o: o, start: o.Now().UnixNano(),
		done: map[doneKey]bool{}, built: map[string]*Disruption{}, fails: map[doneKey]int{}}
}

// Run polls until ctx ends; it returns ctx's error.
func (f *Feed) Run(ctx context.Context) error {
	t := time.NewTicker(f.o.Poll)
	defer t.Stop()
	for {
		if err := f.Poll(ctx); err != nil && ctx.Err() == nil {
			f.o.Log.Warn("export: reading the store failed; retrying at the next poll", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Poll reads the store once and delivers what has finished since.
func (f *Feed) Poll(ctx context.Context) error {
	now := f.o.Now().UnixNano()
	horizon := now - int64(f.o.Backfill) - int64(f.o.Quiet)
	rs, err := store.Rollouts(ctx, f.st, store.Query{Window: event.Window{From: max(horizon, 0)}})
	if err != nil {
		return fmt.Errorf("reading disruptions: %w", err)
	}
	live := map[string]bool{}
	for _, r := range rs {
		id := ID(r.Namespace, r.Workload.Kind, r.Workload.Name, r.From)
		live[id] = true
		finished := r.To + int64(f.o.Quiet)
		if finished > now {
			continue
		}
		expired := finished < now-int64(f.o.Backfill)
		var want []int
		for i, s := range f.sinks {
			k := doneKey{id, i}
			if f.done[k] || (!s.Idempotent() && finished < f.start) {
				continue
			}
			if expired {
				f.done[k] = true
				if f.fails[k] > 0 || f.built[id] != nil {
					f.o.Log.Warn("export: giving up on a disruption still not delivered", "sink", s.Name(), "disruption", id, "failed_attempts", f.fails[k])
					f.observe(s.Name(), OutcomeExpired)
				}
				continue
			}
			want = append(want, i)
		}
		if len(want) == 0 {
			delete(f.built, id)
			continue
		}
		d := f.built[id]
		if d == nil {
			if d, err = f.build(ctx, r); err != nil {
				return fmt.Errorf("analysing disruption %s: %w", id, err)
			}
			f.built[id] = d
		}
		pending := false
		for _, i := range want {
			s, k := f.sinks[i], doneKey{id, i}
			err := s.Deliver(ctx, d)
			switch {
			case err == nil:
				f.done[k] = true
				delete(f.fails, k)
				f.observe(s.Name(), OutcomeDelivered)
			case errors.Is(err, ErrDeferred):
				pending = true
				f.observe(s.Name(), OutcomeDeferred)
			default:
				if ctx.Err() != nil {
					return ctx.Err()
				}
				pending = true
				f.fails[k]++
				f.observe(s.Name(), OutcomeFailed)
				// Warn on the first failure and then every tenth.
				if n := f.fails[k]; n == 1 || n%10 == 0 {
					f.o.Log.Warn("export: delivering a disruption failed; retrying at later polls", "sink", s.Name(), "disruption", id, "err", err, "attempts", n)
				}
			}
		}
		if !pending {
			delete(f.built, id)
		}
	}
	// Forget what has left the window: it is not read again.
	for k := range f.done {
		if !live[k.id] {
			delete(f.done, k)
			delete(f.fails, k)
		}
	}
	for id := range f.built {
		if !live[id] {
			delete(f.built, id)
		}
	}
	return nil
}

func (f *Feed) observe(sink, outcome string) {
	if f.o.Observe != nil {
		f.o.Observe(sink, outcome)
	}
}

// analysisPad is how long after a disruption's last pod end its failures
// are still read (as the web timeline reads them).
const analysisPad = 30 * time.Second

// build analyses one disruption as the web UI's summary does: its
// workload's events from analysis.RolloutLead before it to analysisPad
// after, and the analysed rollouts of that workload that overlap it.
func (f *Feed) build(ctx context.Context, r event.Rollout) (*Disruption, error) {
	d := &Disruption{
		ID: ID(r.Namespace, r.Workload.Kind, r.Workload.Name, r.From), Namespace: r.Namespace,
		Kind: r.Workload.Kind, Name: r.Workload.Name, Trigger: r.Trigger, From: r.From, To: r.To,
		ByCause: map[analysis.Cause]int{}, InferredByCause: map[analysis.Cause]int{},
	}
	if f.o.BaseURL != "" {
		d.Link = f.o.BaseURL + "/rollouts/" + d.ID
	}
	q := store.Query{
		Window:    event.Window{From: r.From - int64(analysis.RolloutLead), To: r.To + int64(analysisPad)},
		Namespace: r.Namespace, Workload: r.Workload,
	}
	res, err := analysis.AnalyzeWith(ctx, f.st, q, f.o.Analysis)
	if err != nil {
		return nil, err
	}
	replaced := map[string]bool{}
	for _, ro := range res.Rollouts {
		if ro.Namespace != r.Namespace || ro.Kind != r.Workload.Kind || ro.Name != r.Workload.Name || ro.To < r.From || ro.From > r.To {
			continue
		}
		if d.Trigger == "" {
			d.Trigger = ro.Trigger
		}
		d.To = max(d.To, ro.To)
		d.NewPods += len(ro.NewPods)
		d.Failures += ro.Failures
		d.Inferred += ro.Inferred
		d.Unattributed += ro.Unattributed
		for c, n := range ro.ByCause {
			d.ByCause[c] += n
		}
		for c, n := range ro.InferredByCause {
			d.InferredByCause[c] += n
		}
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
		if af.Inferred && analysis.LikelyProof(af.Proof) {
			d.Likely++
		}
		if af.Cause != analysis.CauseUnexplained {
			d.Explained = append(d.Explained, af)
		}
	}
	fixes := map[analysis.Cause]string{}
	for _, rv := range res.Rules {
		fixes[rv.Cause] = rv.Fix
	}
	// The rendered fix names what was measured (the propagation seen, the
	// longest request); the rule's own when the cause had no summary.
	for _, cs := range append(append([]analysis.CauseSummary(nil), res.InferredCauses...), res.Causes...) {
		if cs.Fix != "" {
			fixes[cs.Cause] = cs.Fix
		}
	}
	for _, rv := range res.Rules {
		c := rv.Cause
		if d.ByCause[c] == 0 && d.InferredByCause[c] == 0 {
			continue
		}
		d.Causes = append(d.Causes, CauseCount{Cause: c, Title: rv.Title, Failures: d.ByCause[c], Inferred: d.InferredByCause[c], Fix: fixes[c]})
	}
	d.UID, err = f.workloadUID(ctx, r)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// workloadUID is the uid the workload's last recorded change before the
// disruption's end named.
func (f *Feed) workloadUID(ctx context.Context, r event.Rollout) (string, error) {
	if r.Workload.IsZero() {
		return "", nil
	}
	uid := ""
	q := store.Query{Window: event.Window{To: r.To + 1}, Kinds: []event.Kind{event.WorkloadChanged}, Namespace: r.Namespace, Workload: r.Workload}
	err := f.st.Scan(ctx, q, func(e *event.Event) error {
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

// ID renders a disruption's key as web.RolloutKey.ID does.
func ID(ns, kind, name string, start int64) string {
	seg := func(s string) string {
		if s == "" {
			return "-"
		}
		return url.PathEscape(s)
	}
	return seg(ns) + "/" + seg(kind) + "/" + seg(name) + "/" + strconv.FormatInt(start, 10)
}

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
