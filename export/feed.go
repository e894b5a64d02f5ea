// Package export is the server's feed of finished disruptions. A disruption is
// a rollout, scale-down, eviction or deletion of one workload, from its
// trigger until it has been quiet for a while; the feed gives each with its
// failures by cause, the kernel evidence of them and the fix, computed from
// the store as the web UI computes them (analysis.AnalyzeDisruption). Sinks
// (Kubernetes Events in k8sevents, OpenTelemetry logs in otlp) hang off one
// Feed, and the feed hands each disruption to each sink once per server: a
// sink that recognises what it was given before (an Event's name) also gets,
// after a restart, what finished while the server was down.
package export

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// Sink takes finished disruptions.
type Sink interface {
	// Name is for logs and metrics (events, otlp).
	Name() string
	// Deliver hands the sink one disruption. It returns nil once the
	// disruption is delivered, or was before, or is none of the sink's
	// business; ErrDeferred (wrapped or not) to be asked again at a later
	// poll (a rate limit); any other error is logged and retried at later
	// polls until the disruption is older than Options.Backfill.
	Deliver(ctx context.Context, d *analysis.Disruption) error
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
	built map[string]*analysis.Disruption
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
		o.Quiet = analysis.RolloutGap
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
		done: map[doneKey]bool{}, built: map[string]*analysis.Disruption{}, fails: map[doneKey]int{}}
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
	rs, err := analysis.FindDisruptions(ctx, f.st, store.Query{Window: event.Window{From: max(horizon, 0)}}, f.o.Analysis)
	if err != nil {
		return fmt.Errorf("reading disruptions: %w", err)
	}
	live := map[string]bool{}
	for _, r := range rs {
		id := r.ID
		live[id] = true
		finished := r.Until + int64(f.o.Quiet)
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

// build analyses one disruption as the web UI's summary does
// (analysis.AnalyzeDisruption), with its workload's uid and its link.
func (f *Feed) build(ctx context.Context, r *analysis.Disruption) (*analysis.Disruption, error) {
	d, _, err := analysis.AnalyzeDisruption(ctx, f.st, r, f.o.Analysis)
	if err != nil {
		return nil, err
	}
	if f.o.BaseURL != "" {
		d.Link = f.o.BaseURL + "/rollouts/" + d.ID
	}
	if d.UID, err = analysis.WorkloadUID(ctx, f.st, r); err != nil {
		return nil, err
	}
	return d, nil
}
