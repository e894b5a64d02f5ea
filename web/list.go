package web

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// listFilter is what the rollouts list is narrowed by.
type listFilter struct {
	Namespace string // exact
	Workload  string // substring of the name, or Kind/Name exactly
	From, To  int64  // UTC ns; 0 for open
	Since     string // a duration before now, e.g. 24h, instead of From
}

// parseListFilter reads namespace, workload, from, to and since.
func parseListFilter(q url.Values, now time.Time) (listFilter, error) {
	f := listFilter{Namespace: strings.TrimSpace(q.Get("namespace")), Workload: strings.TrimSpace(q.Get("workload"))}
	var err error
	if v := q.Get("from"); v != "" {
		if f.From, err = parseTime(v); err != nil {
			return f, fmt.Errorf("from: %w", err)
		}
	}
	if v := q.Get("to"); v != "" {
		if f.To, err = parseTime(v); err != nil {
			return f, fmt.Errorf("to: %w", err)
		}
	}
	if v := q.Get("since"); v != "" && v != "all" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return f, fmt.Errorf("since %q: want a positive duration such as 1h or 24h", v)
		}
		f.Since = v
		f.From = now.Add(-d).UnixNano()
	}
	if f.To != 0 && f.From >= f.To {
		return f, fmt.Errorf("from must be before to")
	}
	return f, nil
}

// parseTime reads UTC nanoseconds or RFC 3339.
func parseTime(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n <= 0 {
			return 0, fmt.Errorf("%q: not a positive time", s)
		}
		return n, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("%q: want UTC nanoseconds or RFC 3339", s)
	}
	return t.UnixNano(), nil
}

// key is the cache key: Since is resolved to a From rounded to the cache
// period so that repeated requests share an entry.
func (f listFilter) key(period time.Duration) listFilter {
	k := f
	if k.Since != "" {
		k.From -= k.From % int64(period)
	}
	return k
}

func (f listFilter) match(r *analysis.Disruption) bool {
	if f.Namespace != "" && r.Namespace != f.Namespace {
		return false
	}
	if f.Workload != "" {
		if strings.Contains(f.Workload, "/") {
			return r.Workload() == f.Workload
		}
		return strings.Contains(r.Name, f.Workload)
	}
	return true
}

type listEntry struct {
	rollouts []*analysis.Disruption
	at       time.Time
	took     time.Duration
}

// Rollouts is the answer of the list API.
type Rollouts struct {
	Rollouts []RolloutSummary `json:"rollouts"`
	Total    int              `json:"total"`   // matching rollouts; only the newest ListLimit are listed
	Pending  int              `json:"pending"` // listed rollouts whose analysis is still being read
	Version  string           `json:"version"` // changes when anything listed changes
	Now      int64            `json:"now_ns"`
}

// rollouts lists the rollouts matching f, newest first, with the
// summaries the cache has; it queues the missing ones for the background
// worker.
func (s *Server) rollouts(ctx context.Context, f listFilter) (*Rollouts, error) {
	now := s.opts.Now()
	k := f.key(s.opts.ListTTL)
	s.mu.Lock()
	e := s.lists[k]
	if e != nil && now.Sub(e.at) >= max(s.opts.ListTTL, 5*e.took) {
		e = nil
	}
	s.mu.Unlock()
	if e == nil {
		began := time.Now()
		q := store.Query{Namespace: f.Namespace, Window: event.Window{From: f.From, To: f.To}}
		if kind, name, ok := strings.Cut(f.Workload, "/"); ok && f.Namespace != "" {
			q.Workload = event.Workload{Kind: kind, Name: name} // the store's index narrows the read
		}
		rs, err := analysis.FindDisruptions(ctx, s.st, q, s.opts.Analysis)
		if err != nil {
			return nil, err
		}
		e = &listEntry{at: now, took: time.Since(began)}
		for _, r := range rs {
			if f.match(r) {
				e.rollouts = append(e.rollouts, r)
			}
		}
		sort.SliceStable(e.rollouts, func(i, j int) bool { return e.rollouts[i].From > e.rollouts[j].From })
		s.mu.Lock()
		if len(s.lists) > 64 {
			clear(s.lists)
		}
		s.lists[k] = e
		s.mu.Unlock()
	}
	out := &Rollouts{Total: len(e.rollouts), Rollouts: []RolloutSummary{}, Now: now.UnixNano()}
	listed := e.rollouts[:min(len(e.rollouts), s.opts.ListLimit)]
	var missing []*analysis.Disruption
	h := fnv.New64a()
	s.mu.Lock()
	for _, r := range listed {
		live := r.Live(now.UnixNano())
		base := summaryOf(analysis.NewDisruption(r, nil), live)
		ks, ok := s.sums[r.Key()]
		sum := ks.sum
		if !ok || sum.To != base.To || sum.Events != base.Events || (live && !s.freshAt(ks.built, ks.took, true)) {
			if ok {
				// Keep showing the old counts while the new ones are read.
				sum.To, sum.Events, sum.PodsReplaced, sum.Live = base.To, base.Events, base.PodsReplaced, live
				sum.Analysed = false
			} else {
				sum = base
			}
			missing = append(missing, r)
			out.Pending++
		}
		sum.Live = live
		out.Rollouts = append(out.Rollouts, sum)
		fmt.Fprintf(h, "%s|%d|%d|%d|%v\n", sum.ID, sum.To, sum.Events, sum.Failures+sum.Inferred, sum.Analysed)
	}
	s.mu.Unlock()
	out.Version = strconv.FormatUint(h.Sum64(), 36)
	if len(missing) > 0 {
		s.enqueue(missing)
	}
	return out, nil
}
