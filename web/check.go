package web

import (
	"context"
	"net/http"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// Checks is the answer of the check API: every workload's termination
// budget against what the window measured (analysis.Check), the risky
// ones with their patch.
type Checks struct {
	From      int64                    `json:"from_ns"`
	To        int64                    `json:"to_ns"`
	Cluster   *analysis.Cluster        `json:"cluster,omitempty"`
	Workloads []analysis.WorkloadCheck `json:"workloads"`
	Rules     []analysis.RuleView      `json:"rules"`
	Risky     int                      `json:"risky"`
}

// defaultCheckSince is the history a check measures over when the
// request names none.
const defaultCheckSince = 6 * time.Hour

// checks judges the workloads of f's namespace (and workload name, when
// set) over its window, 6 hours back when it names no start.
func (s *Server) checks(ctx context.Context, f listFilter) (*Checks, error) {
	now := s.opts.Now()
	q := store.Query{Window: event.Window{From: f.From, To: f.To}, Namespace: f.Namespace}
	if q.Window.From == 0 {
		q.Window.From = now.Add(-defaultCheckSince).UnixNano()
	}
	if q.Window.To == 0 {
		q.Window.To = now.UnixNano()
	}
	o := s.opts.Analysis
	o.NoEventViews = true
	checks, res, err := analysis.Check(ctx, s.st, q, o)
	if err != nil {
		return nil, err
	}
	out := &Checks{From: q.Window.From, To: q.Window.To, Cluster: res.Cluster, Workloads: []analysis.WorkloadCheck{}, Rules: res.Rules}
	for _, c := range checks {
		if f.Workload != "" && f.Workload != c.Name && f.Workload != c.Kind+"/"+c.Name {
			continue
		}
		if c.Risky {
			out.Risky++
		}
		out.Workloads = append(out.Workloads, c)
	}
	return out, nil
}

func (s *Server) apiCheck(w http.ResponseWriter, r *http.Request) {
	f, err := parseListFilter(r.URL.Query(), s.opts.Now())
	if err != nil {
		s.fail(w, r, bad(err))
		return
	}
	out, err := s.checks(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// checkData is the check page.
type checkData struct {
	Filter listFilter
	C      *Checks
	Err    string
}

func (d checkData) Title() string { return "Check" }

func (s *Server) checkPage(w http.ResponseWriter, r *http.Request) {
	f, err := parseListFilter(r.URL.Query(), s.opts.Now())
	d := checkData{Filter: f}
	status := http.StatusOK
	if err != nil {
		d.Err, status = err.Error(), http.StatusBadRequest
	} else if d.C, err = s.checks(r.Context(), f); err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, status, "check.html", d)
}
