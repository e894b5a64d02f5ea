package deploy_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/drainscope/drainscope/agent"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/metrics"
	"github.com/drainscope/drainscope/store"
)

const dashboardFile = "helm/drainscope/files/dashboard.json"

type dashPanel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource any         `json:"datasource"`
	Panels     []dashPanel `json:"panels"`
	Targets    []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

type dashboard struct {
	UID        string      `json:"uid"`
	Title      string      `json:"title"`
	Panels     []dashPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

func readDashboard(t *testing.T) (dashboard, []byte) {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d, b
}

// queries lists every PromQL expression of the dashboard, by where it is.
func (d dashboard) queries() map[string]string {
	out := map[string]string{}
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out[p.Title+" ("+tg.RefID+")"] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			out["variable $"+v.Name] = q["query"].(string)
		}
	}
	return out
}

var (
	promStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promRanges    = regexp.MustCompile(`\[[^\]]*\]`)
	promGroupings = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent     = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promKeywords  = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true}
)

// metricNames returns the metric names a PromQL expression (or a Grafana
// label_values query) selects: identifiers outside strings, label
// matchers, ranges and groupings that are not functions or keywords.
func metricNames(expr string) []string {
	e := promStrings.ReplaceAllString(expr, `""`)
	e = promMatchers.ReplaceAllString(e, " ")
	e = promRanges.ReplaceAllString(e, " ")
	e = promGroupings.ReplaceAllString(e, " ")
	if rest, ok := strings.CutPrefix(strings.TrimSpace(e), "label_values("); ok {
		e, _, _ = strings.Cut(rest, ",") // label_values(METRIC, LABEL)
	}
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(e, -1) {
		name := e[loc[0]:loc[1]]
		rest := strings.TrimLeft(e[loc[1]:], " \t\n")
		if strings.HasPrefix(rest, "(") || promKeywords[strings.ToLower(name)] || (loc[0] > 0 && strings.ContainsAny(e[loc[0]-1:loc[0]], "$0123456789.")) {
			continue // a function, a keyword, a variable or the exponent of a number
		}
		out = append(out, name)
	}
	return out
}

func TestPromQLMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`histogram_quantile(0.99, sum by (le, outcome) (rate(a_bucket{outcome="error", x=~"$ns"}[$__rate_interval])))`: {"a_bucket"},
		`max by (pod) (b / c) > 0.5`:                            {"b", "c"},
		`(time() - max(d > 0)) / 3600 and on (pod) e`:           {"d", "e"},
		`label_values(f{namespace=~"$namespace"}, workload)`:    {"f"},
		`min by (pod, evidence) (g) * 1e3 + count(h offset 5m)`: {"g", "h"},
		`label_replace(i, "node", "$1", "pod", "(.*)")`:         {"i"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%s) = %v, want %v", expr, got, want)
		}
	}
}

// TestGrafanaDashboard: the dashboard is valid JSON with unique panel ids,
// every panel queries the chosen Prometheus, every variable it uses is
// defined; the chart ships it unchanged in a ConfigMap carrying the
// sidecar's label (configurable), only when asked.
func TestGrafanaDashboard(t *testing.T) {
	d, raw := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q", d.UID, d.Title)
	}
	ids := map[int]string{}
	var walk func([]dashPanel)
	queried := 0
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			if prev, dup := ids[p.ID]; dup || p.ID == 0 {
				t.Errorf("panel %q: id %d (also %q)", p.Title, p.ID, prev)
			}
			ids[p.ID] = p.Title
			if p.Type != "row" {
				ds, _ := p.Datasource.(map[string]any)
				if ds["uid"] != "${datasource}" || len(p.Targets) == 0 {
					t.Errorf("panel %q: datasource %v, %d queries", p.Title, p.Datasource, len(p.Targets))
				}
				queried++
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	vars := map[string]bool{"__range": true, "__rate_interval": true, "__interval": true}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	for _, m := range regexp.MustCompile(`\$\{?(\w+)`).FindAllStringSubmatch(string(raw), -1) {
		if !vars[m[1]] && m[1] != "1" {
			t.Errorf("the dashboard uses $%s, which it does not define", m[1])
		}
	}
	t.Logf("%d panels with queries, %d queries", queried, len(d.queries()))

	helm := tool(t, "helm")
	if m := parseConfigMaps(t, render(t, helm, variant{})); len(m) != 0 {
		t.Errorf("defaults render ConfigMaps %v", m)
	}
	cms := parseConfigMaps(t, render(t, helm, variant{set: []string{"metrics.grafanaDashboard.enabled=true"}}))
	cm, ok := cms["drainscope/drainscope-dashboard"]
	if !ok {
		t.Fatalf("no dashboard ConfigMap in %v", cms)
	}
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("labels %v lack grafana_dashboard: \"1\"", cm.Labels)
	}
	var shipped, file any
	json.Unmarshal(raw, &file)
	if err := json.Unmarshal([]byte(cm.Data["drainscope.json"]), &shipped); err != nil || !jsonEqual(shipped, file) {
		t.Errorf("the ConfigMap's drainscope.json is not files/dashboard.json (%v)", err)
	}
	cms = parseConfigMaps(t, render(t, helm, variant{set: []string{"metrics.grafanaDashboard.enabled=true",
		"metrics.grafanaDashboard.label=dashboards", "metrics.grafanaDashboard.labelValue=drainscope",
		"metrics.grafanaDashboard.namespace=monitoring", "metrics.grafanaDashboard.annotations.grafana_folder=SRE"}}))
	cm, ok = cms["monitoring/drainscope-dashboard"]
	if !ok || cm.Labels["dashboards"] != "drainscope" || cm.Labels["grafana_dashboard"] != "" || cm.Annotations["grafana_folder"] != "SRE" {
		t.Errorf("a configured label, namespace and folder: %v", cms)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func parseConfigMaps(t *testing.T, b []byte) map[string]corev1.ConfigMap {
	t.Helper()
	out := map[string]corev1.ConfigMap{}
	for _, doc := range docs(b) {
		var meta struct {
			Kind string `json:"kind"`
		}
		yaml.Unmarshal(doc, &meta)
		if meta.Kind == "ConfigMap" {
			var cm corev1.ConfigMap
			if err := yaml.UnmarshalStrict(doc, &cm); err != nil {
				t.Fatal(err)
			}
			out[cm.Namespace+"/"+cm.Name] = cm
		}
	}
	return out
}

// families scrapes /metrics over HTTP and returns each metric family's
// name with its type, from the exposition's TYPE lines.
func families(t *testing.T, h http.Handler) map[string]string {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	res, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	out := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			out[f[2]] = f[3]
		}
	}
	return out
}

// TestGrafanaDashboardMetricsExist: every metric a panel queries is on a
// real /metrics: a real agent's, with the kernel capture loaded (so the
// kernel's families are there), after it stored its first event; and the server's
// registry as drainscope serve builds it (the store wrapped, HTTP
// instrumented, retention watched), after its rollout signals computed a
// rollout. A histogram's _bucket, _sum and _count are its family.
func TestGrafanaDashboardMetricsExist(t *testing.T) {
	testenv.RequireRoot(t)
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		testenv.Unavailable(t, "no kernel BTF (/sys/kernel/btf/vmlinux) for the agent's kernel capture")
	}
	d, _ := readDashboard(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The agent.
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	stored := make(chan event.Event, 1000)
	a, err := agent.New(agent.Config{
		Node: "node-a", Client: fake.NewClientset(), Store: st,
		Writer: store.WriterOptions{Interval: 50 * time.Millisecond},
		Kernel: agent.KernelConfig{CgroupRoots: []string{filepath.Join(t.TempDir(), "no-pods-here")}, NetNSDir: "-", Rescan: time.Minute},
		Sink:   func(e event.Event) { stored <- e },
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	actx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(actx) }()
	defer func() { stop(); <-done }()
	// The kernel capture's first event, once its programs are loaded, is
	// what this node's kernel can see.
	for caps := false; !caps; {
		select {
		case e := <-stored:
			caps = e.Kind == event.KernelCapabilities
		case <-ctx.Done():
			t.Fatal("the agent recorded no kernel_capabilities event")
		}
	}
	for a.Stats().Writer.Written == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the agent stored nothing")
		case <-time.After(50 * time.Millisecond):
		}
	}
	have := families(t, a.Handler())

	// The server, wired as drainscope serve wires it, after a rollout.
	m := metrics.New("serve", "test")
	ws := m.WrapStore(st)
	m.WatchRetention((&store.Retention{Store: st, Keep: 336 * time.Hour}).Stats)
	web := m.InstrumentHTTP("web", http.NotFoundHandler())
	web.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	base := time.Now().Add(-time.Hour).UnixNano()
	evs := append(leaderModeRollout(base, "web-a0", "node-a", false), leaderModeRollout(base+int64(time.Minute), "web-b1", "node-b", true)...)
	if err := ws.Append(ctx, evs); err != nil {
		t.Fatal(err)
	}
	r := m.NewRollouts(metrics.RolloutOptions{})
	for i := range evs {
		r.Add(&evs[i])
	}
	r.Flush()
	for name, typ := range families(t, m.Handler()) {
		have[name] = typ
	}

	checked := map[string]bool{}
	for where, expr := range d.queries() {
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", where, expr)
		}
		for _, name := range names {
			family := name
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(name, suf); ok && (have[base] == "histogram" || have[base] == "summary") {
					family = base
				}
			}
			if have[family] == "" {
				t.Errorf("%s queries %s, which neither the agent's nor the server's /metrics has", where, name)
			}
			checked[name] = true
		}
	}
	t.Logf("%d metrics the dashboard queries checked against %d families scraped", len(checked), len(have))
}
