package web

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
)

type pageTemplates struct {
	pages map[string]*template.Template
}

var templateFuncs = template.FuncMap{
	"clock":    clock,
	"date":     date,
	"dur":      analysis.FormatDuration,
	"offset":   analysis.FormatOffset,
	"color":    func(c analysis.Cause) string { return causeColor(c) },
	"causeStr": func(c analysis.Cause) string { return string(c) },
	"deref":    func(p *int64) int64 { return *p },
	"span":     func(from, to int64) string { return analysis.FormatDuration(to - from) },
	"causes":   orderedCauses,
	"add":      func(a, b int) int { return a + b },
	"causeTitle": func(rules []analysis.RuleView, c analysis.Cause) string {
		for _, r := range rules {
			if r.Cause == c {
				return r.Title
			}
		}
		return string(c)
	},
	"sortedRoles": func(m map[string]int) []roleCount {
		var out []roleCount
		for k, v := range m {
			out = append(out, roleCount{k, v})
		}
		sort.Slice(out, func(i, j int) bool {
			if out[i].N != out[j].N {
				return out[i].N > out[j].N
			}
			return out[i].Role < out[j].Role
		})
		return out
	},
}

// causeCount is one cause's count, for templates.
type causeCount struct {
	Cause string
	Title string
	N     int
}

// orderedCauses lists a count map in rule order, with titles.
func orderedCauses(m map[analysis.Cause]int) []causeCount {
	var out []causeCount
	seen := map[analysis.Cause]bool{}
	for _, r := range analysis.Rules {
		seen[r.Cause] = true
		if n := m[r.Cause]; n > 0 {
			out = append(out, causeCount{string(r.Cause), r.Title, n})
		}
	}
	var rest []string
	for c, n := range m {
		if !seen[c] && n > 0 {
			rest = append(rest, string(c))
		}
	}
	sort.Strings(rest)
	for _, c := range rest {
		out = append(out, causeCount{c, c, m[analysis.Cause(c)]})
	}
	return out
}

type roleCount struct {
	Role string
	N    int
}

func mustTemplates(static func(string) string) *pageTemplates {
	layout, err := fs.ReadFile(assets, "templates/layout.html")
	if err != nil {
		panic(err)
	}
	pt := &pageTemplates{pages: map[string]*template.Template{}}
	entries, err := fs.ReadDir(assets, "templates")
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		if e.Name() == "layout.html" {
			continue
		}
		body, err := fs.ReadFile(assets, "templates/"+e.Name())
		if err != nil {
			panic(err)
		}
		t := template.New("layout").Funcs(templateFuncs).Funcs(template.FuncMap{"static": static})
		template.Must(t.Parse(string(layout)))
		template.Must(t.New(e.Name()).Parse(string(body)))
		pt.pages[e.Name()] = t
	}
	return pt
}

// render executes a page into a buffer first, so that an error does not
// leave half a page behind.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	t, ok := s.pages.pages[name]
	if !ok {
		http.Error(w, "no template "+name, http.StatusInternalServerError)
		return
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", data); err != nil {
		s.log.Error("rendering page", "page", name, "err", err)
		http.Error(w, "rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	// Names on the page came from the cluster and clients' logs: their
	// control characters are shown escaped, as in every text output.
	event.NewDisplayWriter(w, 0).Write(buf.Bytes())
}

type errorData struct {
	Status  int
	Message string
}

func (e errorData) Title() string { return strconv.Itoa(e.Status) + " " + http.StatusText(e.Status) }

// rolloutsData is the rollouts page.
type rolloutsData struct {
	Filter   listFilter
	SinceSel string
	Sinces   []string
	List     *Rollouts
	Legend   []CauseInfo
	APIQuery string
	Err      string
}

func (d rolloutsData) Title() string { return "Rollouts" }

func legend() []CauseInfo {
	var out []CauseInfo
	for _, r := range analysis.Rules {
		out = append(out, CauseInfo{Cause: string(r.Cause), Title: r.Title, Color: causeColor(r.Cause)})
	}
	return out
}

func (s *Server) rolloutsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := rolloutsData{Sinces: []string{"1h", "6h", "24h", "168h", "all"}, SinceSel: q.Get("since"), Legend: legend()}
	if d.SinceSel == "" {
		d.SinceSel = "all"
	}
	f, err := parseListFilter(q, s.opts.Now())
	d.Filter = f
	status := http.StatusOK
	if err != nil {
		d.Err, status = err.Error(), http.StatusBadRequest
	} else if d.List, err = s.rollouts(r.Context(), f); err != nil {
		s.fail(w, r, err)
		return
	}
	api := url.Values{}
	for _, k := range []string{"namespace", "workload", "from", "to", "since"} {
		if v := q.Get(k); v != "" {
			api.Set(k, v)
		}
	}
	d.APIQuery = api.Encode()
	s.render(w, r, status, "rollouts.html", d)
}

// timelineData is the timeline page; the script draws from the API, the
// table is there for reading without it.
type timelineData struct {
	S          RolloutSummary
	Legend     []CauseInfo
	Pods       []laneRow
	More       int
	APIBase    string
	From, To   string // deep-link view, absolute ns
	Sel        string
	Updates    string
	Unanalysed bool
}

func (d timelineData) Title() string { return workloadTitle(d.S) + " " + d.S.What }

type laneRow struct {
	Name, Namespace, Role, Node string
	Deletion, Sigterm, Exit     string
	Sigkill                     string
	Failures, Inferred          int
}

func workloadTitle(s RolloutSummary) string {
	if s.WorkloadName == "" {
		return s.Namespace + " (no workload)"
	}
	return s.Namespace + "/" + s.WorkloadName
}

// maxTableRows bounds the server-rendered pod table; the timeline pages
// through the rest.
const maxTableRows = 300

func (s *Server) timelinePage(w http.ResponseWriter, r *http.Request) {
	m, err := s.routeModel(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	d := timelineData{S: m.summary, Legend: m.causeInfos(), APIBase: "/api/v1/rollouts/" + m.key.ID(), Sel: q.Get("sel")}
	if p, err := parseView(r); err == nil && p.from != 0 {
		d.From, d.To = strconv.FormatInt(p.from, 10), strconv.FormatInt(p.to, 10)
	}
	u := url.Values{}
	u.Set("namespace", m.key.Namespace)
	if m.key.Name != "" {
		u.Set("workload", m.key.Kind+"/"+m.key.Name)
	}
	d.Updates = "/api/v1/updates?" + u.Encode()
	for i, l := range m.lanes {
		if i == maxTableRows {
			d.More = len(m.lanes) - i
			break
		}
		row := laneRow{Name: l.pod.Name, Namespace: l.pod.Namespace, Role: l.role, Node: l.node, Failures: len(l.fails), Inferred: len(l.inferred)}
		if tl := l.tl; tl != nil {
			row.Deletion = clockOpt(tl.Deletion)
			if tl.Sigterm != nil {
				row.Sigterm = clockOpt(tl.Sigterm.Time)
			}
			if tl.Exit != nil {
				row.Exit = clockOpt(tl.Exit.Time)
			}
			if tl.Kill != nil {
				row.Sigkill = clockOpt(tl.Kill.Time)
			}
		}
		d.Pods = append(d.Pods, row)
	}
	s.render(w, r, http.StatusOK, "timeline.html", d)
}

// alignmentData is the alignment page.
type alignmentData struct {
	S        RolloutSummary
	A        Alignment
	Sigterm  histSVG
	Exit     histSVG
	Legend   []CauseInfo
	Timeline string
	RatioPct string
}

func (d alignmentData) Title() string { return workloadTitle(d.S) + " alignment" }

func (s *Server) alignmentPage(w http.ResponseWriter, r *http.Request) {
	m, err := s.routeModel(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	a := m.alignment()
	d := alignmentData{S: m.summary, A: a, Legend: a.Legend, Timeline: "/rollouts/" + m.key.ID()}
	causes := a.Causes
	if len(causes) == 0 {
		causes = a.InferredCauses // the overall histograms fall back to these too
	}
	d.Sigterm = buildHist("SIGTERM", a.FromSigterm, causes, func(c analysis.CauseSummary) analysis.Histogram { return c.FromSigterm })
	d.Exit = buildHist("exit", a.FromExit, causes, func(c analysis.CauseSummary) analysis.Histogram { return c.FromExit })
	if a.Inference.Ratio != nil {
		d.RatioPct = strconv.FormatFloat(*a.Inference.Ratio*100, 'f', 0, 64) + "%"
	}
	s.render(w, r, http.StatusOK, "alignment.html", d)
}

// histSVG is a histogram laid out for the template: bars stacked by cause.
type histSVG struct {
	Ref              string
	Count            int
	Width, Height    int
	PlotTop, PlotBot int
	Bars             []histBar
	Ticks            []histTick
	YTicks           []histTick
	ZeroX            float64
	P50X             float64
	P50              string
	HasZero          bool
	BinLabel         string
}

type histBar struct {
	X, Y, W, H float64
	Color      string
	Title      string
}

type histTick struct {
	X, Y  float64
	Label string
}

// maxHistBars bounds the bars of one histogram: wider ranges merge bins.
const maxHistBars = 400

func buildHist(ref string, total analysis.Histogram, causes []analysis.CauseSummary, pick func(analysis.CauseSummary) analysis.Histogram) histSVG {
	h := histSVG{Ref: ref, Count: total.Count, Width: 880, Height: 220, PlotTop: 12, PlotBot: 186}
	if total.Count == 0 || len(total.Bins) == 0 || total.BinNS <= 0 {
		return h
	}
	bin := total.BinNS
	lo, hi := total.Bins[0].Start, total.Bins[len(total.Bins)-1].Start+bin
	lo, hi = min(lo, 0), max(hi, bin) // always show the reference at 0
	for (hi-lo)/bin > maxHistBars {
		bin *= 2
	}
	pad := max((hi-lo)/40, bin) // room for the bars at the edges
	lo, hi = lo-pad, hi+pad
	lo = floorTo(lo, bin)
	hi = floorTo(hi+bin-1, bin)
	n := int((hi - lo) / bin)
	h.BinLabel = analysis.FormatDuration(bin)
	type stack struct{ counts []int }
	stacks := make([]map[string]int, n)
	var order []string
	colors := map[string]string{}
	add := func(name, color string, hs analysis.Histogram) {
		if _, ok := colors[name]; !ok {
			order = append(order, name)
			colors[name] = color
		}
		for _, b := range hs.Bins {
			i := int((floorTo(b.Start, bin) - lo) / bin)
			if i < 0 || i >= n {
				continue
			}
			if stacks[i] == nil {
				stacks[i] = map[string]int{}
			}
			stacks[i][name] += b.Count
		}
	}
	sum := 0
	for _, c := range causes {
		hs := pick(c)
		sum += hs.Count
		add(c.Title, causeColor(c.Cause), hs)
	}
	if sum == 0 { // no per-cause split: one colour
		add("failures", "#555555", total)
	}
	peak := 1
	for _, st := range stacks {
		t := 0
		for _, v := range st {
			t += v
		}
		peak = max(peak, t)
	}
	left, right := 44.0, float64(h.Width-12)
	plotH := float64(h.PlotBot - h.PlotTop)
	x := func(ns int64) float64 { return left + (right-left)*float64(ns-lo)/float64(hi-lo) }
	bw := (right - left) / float64(n)
	for i, st := range stacks {
		if st == nil {
			continue
		}
		y := float64(h.PlotBot)
		for _, name := range order {
			c := st[name]
			if c == 0 {
				continue
			}
			bh := plotH * float64(c) / float64(peak)
			y -= bh
			start := lo + int64(i)*bin
			h.Bars = append(h.Bars, histBar{
				X: round1(x(start)), Y: round1(y), W: round1(math.Max(bw-0.5, 0.8)), H: round1(bh), Color: colors[name],
				Title: fmt.Sprintf("%s: %d failure%s at %s to %s from %s", name, c, plural(c), analysis.FormatOffset(start), analysis.FormatOffset(start+bin), ref),
			})
		}
	}
	h.ZeroX, h.HasZero = round1(x(0)), true
	h.P50X, h.P50 = round1(x(total.P50NS)), analysis.FormatOffset(total.P50NS)
	step := niceStep(hi-lo, 8)
	for t := floorTo(lo, step); t <= hi; t += step {
		if t < lo {
			continue
		}
		h.Ticks = append(h.Ticks, histTick{X: round1(x(t)), Y: float64(h.PlotBot + 16), Label: analysis.FormatOffset(t)})
	}
	ys := niceCount(peak)
	for v := 0; v <= peak; v += ys {
		h.YTicks = append(h.YTicks, histTick{X: left - 6, Y: round1(float64(h.PlotBot) - plotH*float64(v)/float64(peak)), Label: strconv.Itoa(v)})
	}
	return h
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

func floorTo(v, step int64) int64 {
	q := v / step
	if v%step != 0 && v < 0 {
		q--
	}
	return q * step
}

// niceStep picks 1, 2 or 5 × 10^k nanoseconds giving about n ticks.
func niceStep(span int64, n int) int64 {
	raw := float64(span) / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return max(int64(m*p), 1)
		}
	}
	return max(int64(10*p), 1)
}

func niceCount(peak int) int {
	for _, s := range []int{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000} {
		if peak/s <= 5 {
			return s
		}
	}
	return max(peak/5, 1)
}

func clock(ns int64) string { return time.Unix(0, ns).UTC().Format("15:04:05.000") }

func clockOpt(ns int64) string {
	if ns == 0 {
		return ""
	}
	return clock(ns)
}

func date(ns int64) string { return time.Unix(0, ns).UTC().Format("2006-01-02 15:04:05 UTC") }
