package web

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

type apiError struct {
	Error string `json:"error"`
	// RequestID names a 5xx answer in the server's log, which has the
	// details the answer leaves out.
	RequestID string `json:"request_id,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true) // names from the cluster may hold markup
	enc.Encode(v)
}

// fail answers an error with the status it calls for.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, errNoRollout):
		status = http.StatusNotFound
	case errors.Is(err, errBadRequest):
		status = http.StatusBadRequest
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		status = http.StatusServiceUnavailable
	}
	if status < 500 {
		msg := store.Redact(err.Error())
		if isAPI(r) {
			writeJSON(w, status, apiError{Error: msg})
			return
		}
		s.render(w, r, status, "error.html", errorData{Status: status, Message: msg})
		return
	}
	// A server error's text is the store's or the analysis's: it may name
	// the database, its tables or worse. It goes to the log, under an id
	// the client is given instead.
	id := newRequestID()
	s.log.Error("request failed", "request_id", id, "path", r.URL.Path, "status", status, "err", store.Redact(err.Error()))
	msg := "internal error"
	if status == http.StatusServiceUnavailable {
		msg = "the store took too long to answer; retry later"
	}
	msg += "; the server logged it as request " + id
	w.Header().Set("X-Request-Id", id)
	if isAPI(r) {
		writeJSON(w, status, apiError{Error: msg, RequestID: id})
		return
	}
	s.render(w, r, status, "error.html", errorData{Status: status, Message: msg})
}

var errBadRequest = errors.New("bad request")

type badRequest struct{ err error }

func (b badRequest) Error() string        { return b.err.Error() }
func (b badRequest) Is(target error) bool { return target == errBadRequest }
func (b badRequest) Unwrap() error        { return b.err }

func bad(err error) error { return badRequest{err} }

// rolloutKey reads the route's rollout.
func rolloutKey(r *http.Request) (analysis.DisruptionKey, error) {
	k, err := analysis.ParseDisruptionKey(chi.URLParam(r, "ns"), chi.URLParam(r, "kind"), chi.URLParam(r, "name"), chi.URLParam(r, "start"))
	if err != nil {
		return k, bad(err)
	}
	return k, nil
}

// routeModel reads the route's rollout; ?refresh=1 reads it again.
func (s *Server) routeModel(r *http.Request) (*model, error) {
	k, err := rolloutKey(r)
	if err != nil {
		return nil, err
	}
	return s.model(r.Context(), k, r.URL.Query().Get("refresh") == "1")
}

// routeTimeline is routeModel for answers drawn from the timeline alone.
func (s *Server) routeTimeline(r *http.Request) (*model, error) {
	k, err := rolloutKey(r)
	if err != nil {
		return nil, err
	}
	return s.modelFor(r.Context(), k, r.URL.Query().Get("refresh") == "1", true)
}

func (s *Server) apiRollouts(w http.ResponseWriter, r *http.Request) {
	f, err := parseListFilter(r.URL.Query(), s.opts.Now())
	if err != nil {
		s.fail(w, r, bad(err))
		return
	}
	out, err := s.rollouts(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// RolloutDetail is the answer of the rollout API: the summary and the
// pods' timelines as the analysis reads them, paged.
type RolloutDetail struct {
	Rollout   RolloutSummary    `json:"rollout"`
	PodsTotal int               `json:"pods_total"`
	PodOffset int               `json:"pod_offset"`
	Pods      []PodDetail       `json:"pods"`
	NewPods   []analysis.NewPod `json:"new_pods"`
	Stats     analysis.Stats    `json:"analysis_stats"`
	Causes    []CauseInfo       `json:"causes"`
}

// PodDetail is one lane: its role and the analysis's timeline of the pod.
type PodDetail struct {
	Role     string                `json:"role"`
	Timeline *analysis.PodTimeline `json:"timeline,omitempty"`
	Pod      analysis.PodView      `json:"pod"`
}

// detail lists limit pods from offset; their lifecycle events only when
// events is set (up to 512 a pod).
func (m *model) detail(offset, limit int, events bool) RolloutDetail {
	d := RolloutDetail{Rollout: m.summary, Pods: []PodDetail{}, Stats: m.result.Stats, Causes: m.causeInfos()}
	d.PodsTotal = len(m.lanes)
	d.PodOffset = min(offset, len(m.lanes))
	for _, l := range m.lanes[d.PodOffset:min(d.PodOffset+limit, len(m.lanes))] {
		pd := PodDetail{Role: l.role, Timeline: l.tl, Pod: l.pod}
		if l.tl != nil && !events {
			tl := *l.tl
			tl.Events = []analysis.EventView{}
			pd.Timeline = &tl
		}
		d.Pods = append(d.Pods, pd)
	}
	d.NewPods = analysis.NewDisruption(m.rollout, m.result).NewPods
	return d
}

func (s *Server) apiRollout(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	offset, limit := 0, 200
	if err := intParams(q, []intParam{{"pod_offset", &offset, 1 << 30}, {"pod_limit", &limit, 1000}}); err != nil {
		s.fail(w, r, err)
		return
	}
	events, err := boolParam(q, "events")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	m, err := s.routeModel(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, m.detail(offset, limit, events == "true"))
}

// boolParam reads an optional true/false parameter: "", "true" or "false".
func boolParam(q url.Values, name string) (string, error) {
	v := q.Get(name)
	if v != "" && v != "true" && v != "false" {
		return "", bad(errors.New(name + ": want true or false"))
	}
	return v, nil
}

type intParam struct {
	name string
	v    *int
	max  int
}

// intParams reads whole-number parameters within their bounds.
func intParams(q url.Values, ps []intParam) error {
	for _, x := range ps {
		if v := q.Get(x.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > x.max {
				return bad(errors.New(x.name + ": want a whole number from 0 to " + strconv.Itoa(x.max)))
			}
			*x.v = n
		}
	}
	return nil
}

// parseView reads from, to (UTC ns or RFC 3339), width (pixels),
// lane_offset and lane_limit.
func parseView(r *http.Request) (viewParams, error) {
	q := r.URL.Query()
	var p viewParams
	var err error
	if v := q.Get("from"); v != "" {
		if p.from, err = parseTime(v); err != nil {
			return p, bad(err)
		}
	}
	if v := q.Get("to"); v != "" {
		if p.to, err = parseTime(v); err != nil {
			return p, bad(err)
		}
	}
	switch f := q.Get("failures"); f {
	case "", "client", "inferred", "all":
		p.failures = f
	default:
		return p, bad(errors.New("failures: want client, inferred or all"))
	}
	if (p.from == 0) != (p.to == 0) || (p.from != 0 && p.to <= p.from) {
		return p, bad(errors.New("from and to: give both, from before to"))
	}
	err = intParams(q, []intParam{{"width", &p.width, 20000}, {"lane_offset", &p.laneOffset, 1 << 30}, {"lane_limit", &p.laneLimit, 1 << 30}})
	return p, err
}

func (s *Server) apiTimeline(w http.ResponseWriter, r *http.Request) {
	p, err := parseView(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	m, err := s.routeTimeline(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, m.timeline(p, s.limits))
}

// Alignment is the answer of the alignment API.
type Alignment struct {
	Rollout        RolloutSummary          `json:"rollout"`
	FromSigterm    analysis.Histogram      `json:"offsets_from_sigterm"`
	FromExit       analysis.Histogram      `json:"offsets_from_exit"`
	Causes         []analysis.CauseSummary `json:"causes"`
	InferredCauses []analysis.CauseSummary `json:"inferred_causes"`
	Inference      analysis.Inference      `json:"inference"`
	Legend         []CauseInfo             `json:"legend"`
	Rules          []analysis.RuleView     `json:"rules"`
	// Patch is the fix of the rollout's causes as a change to its
	// workload, with numbers from this cluster (analysis.Patch).
	Patch *analysis.Patch `json:"patch,omitempty"`
}

func (m *model) alignment() Alignment {
	res := m.result
	return Alignment{
		Rollout: m.summary, FromSigterm: res.FromSigterm, FromExit: res.FromExit,
		Causes: res.Causes, InferredCauses: res.InferredCauses, Inference: res.Inference,
		Legend: m.causeInfos(), Rules: res.Rules,
		Patch: analysis.NewDisruption(m.rollout, res).Patch,
	}
}

func (s *Server) apiAlignment(w http.ResponseWriter, r *http.Request) {
	m, err := s.routeModel(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, m.alignment())
}

// Failures is the answer of the failures API.
type Failures struct {
	Total     int              `json:"total"` // matching the filter
	Offset    int              `json:"offset"`
	Failures  []IndexedFailure `json:"failures"`
	Truncated bool             `json:"analysis_truncated"` // the analysis kept only the first Options.MaxFailures
}

// IndexedFailure is a failure with its index in the rollout's list.
type IndexedFailure struct {
	I     int    `json:"i"`
	Color string `json:"color"`
	analysis.AlignedFailure
}

func (s *Server) apiFailures(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	offset, limit := 0, 100
	if err := intParams(q, []intParam{{"offset", &offset, 1 << 30}, {"limit", &limit, 1000}}); err != nil {
		s.fail(w, r, err)
		return
	}
	// Every parameter is checked before the rollout is read: a cold read
	// can take seconds.
	inferred, err := boolParam(q, "inferred")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	m, err := s.routeModel(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	cause, pod := q.Get("cause"), q.Get("pod")
	out := Failures{Offset: offset, Failures: []IndexedFailure{}, Truncated: m.result.Truncated}
	for i := range m.result.Failures {
		f := &m.result.Failures[i]
		if cause != "" && string(f.Cause) != cause {
			continue
		}
		if pod != "" && (f.Pod == nil || (f.Pod.Name != pod && f.Pod.UID != pod)) {
			continue
		}
		if inferred != "" && f.Inferred != (inferred == "true") {
			continue
		}
		if out.Total >= offset && len(out.Failures) < limit {
			out.Failures = append(out.Failures, IndexedFailure{I: i, Color: causeColor(f.Cause), AlignedFailure: *f})
		}
		out.Total++
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) apiFailure(w http.ResponseWriter, r *http.Request) {
	i, err := strconv.Atoi(chi.URLParam(r, "i"))
	if err != nil {
		s.fail(w, r, bad(errors.New("failure index: want a whole number")))
		return
	}
	m, err := s.routeModel(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	f, ok := m.failure(i)
	if !ok {
		writeJSON(w, http.StatusNotFound, apiError{Error: "no failure with that index in this rollout"})
		return
	}
	writeJSON(w, http.StatusOK, IndexedFailure{I: i, Color: causeColor(f.Cause), AlignedFailure: *f})
}

// apiEvent answers one stored event by its time and ID.
func (s *Server) apiEvent(w http.ResponseWriter, r *http.Request) {
	t, err := strconv.ParseInt(chi.URLParam(r, "time"), 10, 64)
	if err != nil || t <= 0 {
		s.fail(w, r, bad(errors.New("time: want UTC nanoseconds")))
		return
	}
	id, err := event.ParseID(chi.URLParam(r, "id"))
	if err != nil {
		s.fail(w, r, bad(err))
		return
	}
	var found *analysis.EventView
	err = s.st.Scan(r.Context(), store.Query{Window: event.Window{From: t, To: t + 1}}, func(e *event.Event) error {
		if e.ID == id {
			v := analysis.View(e)
			found = &v
		}
		return nil
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if found == nil {
		writeJSON(w, http.StatusNotFound, apiError{Error: "no event with that time and id"})
		return
	}
	writeJSON(w, http.StatusOK, found)
}

// Causes is the answer of the causes API: the rule table with colours.
type Causes struct {
	Causes []CauseRule `json:"causes"`
}

// CauseRule is one rule of the cause table.
type CauseRule struct {
	CauseInfo
	Requires []string `json:"requires"`
}

func (s *Server) apiCauses(w http.ResponseWriter, r *http.Request) {
	out := Causes{Causes: []CauseRule{}}
	for _, rule := range analysis.Rules {
		cr := CauseRule{CauseInfo: CauseInfo{Cause: string(rule.Cause), Title: rule.Title, Color: causeColor(rule.Cause)}}
		for _, q := range rule.Requires {
			cr.Requires = append(cr.Requires, q.Name)
		}
		if cr.Requires == nil {
			cr.Requires = []string{}
		}
		out.Causes = append(out.Causes, cr)
	}
	writeJSON(w, http.StatusOK, out)
}
