package scenario

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/analysis/textreport"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/lab/load"
	"github.com/drainscope/drainscope/store"
)

// WriteTable prints one row per run: requests, ok, failed, and the failures
// by class.
func WriteTable(w io.Writer, runs []RunResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"run", "shutdown", "requests", "ok", "failed"}
	head = append(head, load.Classes...)
	head = append(head, "conns", "replaced")
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, r := range runs {
		shutdown := string(r.Run.Behaviour)
		if r.Run.PreStop {
			shutdown += "+preStop"
		}
		if r.Run.Sidecar != "" {
			shutdown += ", proxy " + string(r.Run.Sidecar)
		}
		if !r.Run.Rollout {
			shutdown = "no rollout"
		}
		row := []string{r.Run.Name, shutdown,
			fmt.Sprint(r.Load.Requests), fmt.Sprint(r.Load.OK), fmt.Sprint(r.Load.FailedTotal())}
		for _, c := range load.Classes {
			row = append(row, fmt.Sprint(r.Load.Failed[c]))
		}
		row = append(row, fmt.Sprint(r.Load.Conns), fmt.Sprint(len(r.Replaced)))
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range runs {
		if r.Note != "" {
			fmt.Fprintf(w, "%s: %s\n", r.Run.Name, r.Note)
		}
	}
	return nil
}

// Diagnose runs drainscope's analysis over each run's window and prints,
// per run, the causes it named with their counts and fixes.
func Diagnose(ctx context.Context, w io.Writer, st store.Store, runs []RunResult) error {
	for _, r := range runs {
		q := store.Query{
			Window:    r.Window(),
			Namespace: Namespace,
			Workload:  event.Workload{Kind: "Deployment", Name: r.Deployment},
		}
		res, err := analysis.Analyze(ctx, st, q)
		if err != nil {
			return fmt.Errorf("analysing run %s: %w", r.Run.Name, err)
		}
		fmt.Fprintf(w, "%s (%s): ", r.Run.Name, r.Run.What)
		total := 0
		for _, c := range res.Causes {
			total += c.Count
		}
		if total == 0 {
			fmt.Fprintf(w, "no client failure")
			// The run's rollout, not the teardown's deletion that may
			// begin inside the window's last second.
			for _, ro := range res.Disruptions {
				if ro.Trigger == analysis.TriggerRollout {
					fmt.Fprintf(w, "; %d pods replaced", len(ro.Replaced))
					break
				}
			}
			fmt.Fprintln(w)
		} else {
			fmt.Fprintf(w, "%d client failures\n", total)
		}
		for _, c := range res.Causes {
			if c.Count == 0 {
				continue
			}
			fmt.Fprintf(w, "  %4d  %s", c.Count, c.Title)
			if c.Explanation != "" {
				fmt.Fprintf(w, ": %s", oneLine(c.Explanation))
			}
			fmt.Fprintln(w)
			if c.Fix != "" {
				fmt.Fprintf(w, "        fix: %s\n", oneLine(c.Fix))
			}
		}
		if l := textreport.LagLine(res.DataplaneLag); l != "" {
			fmt.Fprintf(w, "        %s\n", l)
		}
		if r.Ingress != nil {
			fmt.Fprintf(w, "        ingress: %s\n", r.Ingress.Line())
		}
		fmt.Fprintln(w, "        kernel evidence alone:")
		for _, line := range textreport.InferenceLines(res.Inference) {
			fmt.Fprintf(w, "          %s\n", line)
		}
	}
	return nil
}

// ReportHint is the command that prints the full report of the runs.
func ReportHint(runs []RunResult, dsn string) string {
	if len(runs) == 0 {
		return ""
	}
	from := time.Unix(0, runs[0].Window().From).UTC().Format(time.RFC3339)
	to := time.Unix(0, runs[len(runs)-1].Window().To).UTC().Add(time.Second).Format(time.RFC3339)
	s := "drainscope report --since " + from + " --until " + to
	if dsn != "" {
		s += " --store '" + dsn + "'"
	}
	return s
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
