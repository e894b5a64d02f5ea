package kubectl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/analysis/textreport"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/web"
)

func pluginReport(ctx context.Context, api *apiClient, ns string, ref workloadRef, exists string, from, to time.Time, format string, w io.Writer) error {
	q := windowQuery(from, to)
	q.Set("namespace", ns)
	q.Set("workload", ref.Kind+"/"+ref.Name)
	list, _, err := api.rolloutList(ctx, q)
	if err != nil {
		return err
	}
	if len(list.Rollouts) == 0 && exists == "no" {
		return fmt.Errorf("no %s %q in namespace %s, and drainscope recorded no disruption of one since %s", strings.ToLower(ref.Kind), ref.Name, ns, from.UTC().Format(time.RFC3339))
	}
	var raws []json.RawMessage
	var als []web.Alignment
	for _, r := range list.Rollouts {
		var raw json.RawMessage
		if err := api.get(ctx, r.Links.API+"/alignment", nil, &raw); err != nil {
			return err
		}
		var a web.Alignment
		if err := json.Unmarshal(raw, &a); err != nil {
			return fmt.Errorf("%s's alignment of %s: %w", api.where, r.ID, err)
		}
		if format != "json" {
			event.DisplayFields(&a) // every name came from the cluster or a client's log
		}
		raws, als = append(raws, raw), append(als, a)
	}
	if format == "json" {
		out := struct {
			Namespace   string            `json:"namespace"`
			Kind        string            `json:"workload_kind"`
			Name        string            `json:"workload_name"`
			Exists      string            `json:"exists"` // yes, no, or unknown (--dsn)
			From        time.Time         `json:"from"`
			To          time.Time         `json:"to"`
			Total       int               `json:"total"`
			Disruptions []json.RawMessage `json:"disruptions"`
		}{ns, ref.Kind, ref.Name, exists, from.UTC(), to.UTC(), list.Total, raws}
		if out.Disruptions == nil {
			out.Disruptions = []json.RawMessage{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	fmt.Fprintf(w, "%s %s/%s: %s since %s (from %s)\n", ref.Kind, ns, ref.Name, plural(len(als), "disruption"), from.UTC().Format("2006-01-02 15:04:05 MST"), api.where)
	if exists == "no" {
		fmt.Fprintf(w, "(the %s no longer exists; these are drainscope's records of it)\n", strings.ToLower(ref.Kind))
	}
	if list.Total > len(als) {
		fmt.Fprintf(w, "(the newest %d of %d are shown: narrow --since)\n", len(als), list.Total)
	}
	for _, a := range als {
		writeDisruption(w, a)
	}
	return nil
}

func writeDisruption(w io.Writer, a web.Alignment) {
	s := a.Rollout
	trig := analysis.WordsFor(s.Trigger).Heading
	start := time.Unix(0, s.From).UTC()
	fmt.Fprintf(w, "\n%s at %s", trig, start.Format("2006-01-02 15:04:05.000 MST"))
	if s.To > s.From {
		fmt.Fprintf(w, ", over %s", seconds(s.To-s.From))
	}
	fmt.Fprintf(w, ": %s replaced, %s ready", plural(s.PodsReplaced, "pod"), plural(s.NewPods, "new pod"))
	if s.Live {
		fmt.Fprint(w, " (still going on)")
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  %s reported by clients, %d proven or made likely by the pods' kernel events", plural(s.Failures, "failure"), s.Inferred)
	if s.Unattributed > 0 {
		fmt.Fprintf(w, ", %d not tied to a pod", s.Unattributed)
	}
	fmt.Fprintln(w)
	if s.WorstGap != nil {
		g := *s.WorstGap
		if g < 0 {
			fmt.Fprintf(w, "  worst gap: SIGTERM came %s before the last node stopped routing to the pod (the endpoint race window)\n", seconds(-g))
		} else {
			fmt.Fprintf(w, "  worst gap: SIGTERM came %s after the last node stopped routing to the pod\n", seconds(g))
		}
	}
	if s.LongestExitWait != nil {
		fmt.Fprintf(w, "  longest exit after SIGTERM: %s\n", seconds(*s.LongestExitWait))
	}
	writeCauses(w, "causes of the client failures", s.ByCause, a.Causes, a.Legend)
	writeCauses(w, "causes of the failures the kernel evidence shows", s.InferredByCause, a.InferredCauses, a.Legend)
	if s.Failures+s.Inferred == 0 {
		fmt.Fprintln(w, "  no failures")
	}
	head, cmd, lines := textreport.PatchLines(a.Patch, a.Rules)
	if head != "" {
		fmt.Fprintf(w, "  %s\n    %s\n", head, cmd)
	}
	for _, l := range lines {
		fmt.Fprintf(w, "  %s\n", l)
	}
	fmt.Fprintf(w, "  timeline: %s in drainscope's web UI\n", s.Links.Timeline)
}

// writeCauses prints the disruption's failures by cause. The counts are
// the disruption's own (its summary's); the alignment's causes cover the
// whole window the server analysed, which may hold a neighbouring
// disruption of the same workload, so their explanation (which names
// pods and offsets) is printed only where its count is the disruption's.
func writeCauses(w io.Writer, title string, counts map[analysis.Cause]int, causes []analysis.CauseSummary, legend []web.CauseInfo) {
	type row struct {
		cause analysis.Cause
		n     int
	}
	var rows []row
	for c, n := range counts {
		if n > 0 {
			rows = append(rows, row{c, n})
		}
	}
	if len(rows) == 0 {
		return
	}
	sort.Slice(rows, func(i, j int) bool {
		return rows[i].n > rows[j].n || rows[i].n == rows[j].n && rows[i].cause < rows[j].cause
	})
	fmt.Fprintf(w, "  %s:\n", title)
	for _, r := range rows {
		c := analysis.CauseSummary{Cause: r.cause, Title: string(r.cause)}
		if i := slices.IndexFunc(causes, func(c analysis.CauseSummary) bool { return c.Cause == r.cause }); i >= 0 && causes[i].Count == r.n {
			c = causes[i]
		} else if i := slices.IndexFunc(legend, func(l web.CauseInfo) bool { return l.Cause == string(r.cause) }); i >= 0 {
			c.Title, c.Fix = legend[i].Title, legend[i].Fix
		}
		fmt.Fprintf(w, "    %5d  %s", r.n, c.Title)
		if len(c.Pods) > 0 {
			var ps []string
			for i, p := range c.Pods {
				if i == 3 {
					ps = append(ps, fmt.Sprintf("%d more", len(c.Pods)-i))
					break
				}
				ps = append(ps, fmt.Sprintf("%s %d", p.Pod, p.Count))
			}
			fmt.Fprintf(w, " (%s)", strings.Join(ps, ", "))
		}
		fmt.Fprintln(w)
		if c.Explanation != "" {
			fmt.Fprintf(w, "           %s\n", c.Explanation)
		}
		if c.Fix != "" {
			fmt.Fprintf(w, "           fix: %s\n", c.Fix)
		}
	}
}

// pluginCheck prints the server's check of the workloads' termination
// budgets (GET /api/v1/check), risky ones first, each with its patch.
func pluginCheck(ctx context.Context, api *apiClient, ns string, ref workloadRef, from, to time.Time, format string, w io.Writer) error {
	q := windowQuery(from, to)
	if ns != "" {
		q.Set("namespace", ns)
	}
	if ref.Name != "" {
		q.Set("workload", ref.Kind+"/"+ref.Name)
	}
	var out web.Checks
	if format == "json" {
		var raw json.RawMessage
		if err := api.get(ctx, "/api/v1/check", q, &raw); err != nil {
			return err
		}
		_, err := w.Write(append(raw, '\n'))
		return err
	}
	if err := api.get(ctx, "/api/v1/check", q, &out); err != nil {
		return err
	}
	for _, risky := range []bool{true, false} {
		for _, c := range out.Workloads {
			if c.Risky != risky {
				continue
			}
			label := "ok   "
			if c.Risky {
				label = "RISKY " + strings.Join(c.Reasons, ",")
			}
			fmt.Fprintf(w, "%s %s %s/%s\n", label, c.Namespace, c.Kind, c.Name)
			for _, why := range c.Why {
				fmt.Fprintf(w, "    %s\n", why)
			}
			head, cmd, lines := textreport.PatchLines(c.Patch, out.Rules)
			if head != "" {
				fmt.Fprintf(w, "    %s\n      %s\n", head, cmd)
			}
			for _, l := range lines {
				fmt.Fprintf(w, "    %s\n", l)
			}
		}
	}
	fmt.Fprintf(w, "%d of %d workloads will drop requests at their next rollout (measured since %s, from %s)\n", out.Risky, len(out.Workloads), from.UTC().Format("2006-01-02 15:04:05 MST"), api.where)
	return nil
}

func pluginRollouts(ctx context.Context, api *apiClient, ns string, from, to time.Time, format string, w io.Writer) error {
	q := windowQuery(from, to)
	if ns != "" {
		q.Set("namespace", ns)
	}
	list, raw, err := api.rolloutList(ctx, q)
	if err != nil {
		return err
	}
	if format == "json" {
		_, err := w.Write(append(raw, '\n'))
		return err
	}
	event.DisplayFields(&list) // every name came from the cluster or a client's log
	where := "namespace " + ns
	if ns == "" {
		where = "all namespaces"
	}
	if len(list.Rollouts) == 0 {
		fmt.Fprintf(w, "no disruptions in %s since %s (from %s)\n", where, from.UTC().Format("2006-01-02 15:04:05 MST"), api.where)
		return nil
	}
	fmt.Fprintf(w, "%-16s %-36s %-12s %-20s %5s %8s %8s  %s\n", "NAMESPACE", "WORKLOAD", "TRIGGER", "STARTED (UTC)", "PODS", "FAILURES", "INFERRED", "TOP CAUSE")
	for _, r := range list.Rollouts {
		trig := r.Trigger
		if trig == "" {
			trig = "-"
		}
		top := topCause(r.ByCause)
		if top == "" {
			top = topCause(r.InferredByCause)
		}
		if top == "" {
			top = "-"
		}
		fmt.Fprintf(w, "%-16s %-36s %-12s %-20s %5d %8d %8d  %s\n", r.Namespace, r.WorkloadKind+"/"+r.WorkloadName, trig,
			time.Unix(0, r.From).UTC().Format("2006-01-02 15:04:05"), r.PodsReplaced, r.Failures, r.Inferred, top)
	}
	if list.Total > len(list.Rollouts) {
		fmt.Fprintf(w, "(the newest %d of %d are shown: narrow --since)\n", len(list.Rollouts), list.Total)
	}
	return nil
}

func topCause[K ~string](m map[K]int) string {
	var best K
	n := 0
	for k, v := range m {
		if v > n || v == n && k < best {
			best, n = k, v
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%s (%d)", best, n)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

func seconds(ns int64) string {
	if ns < 1e9 && ns > -1e9 {
		return fmt.Sprintf("%.1f ms", float64(ns)/1e6)
	}
	return fmt.Sprintf("%.2f s", float64(ns)/1e9)
}
