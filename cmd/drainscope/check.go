package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/analysis/textreport"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/duration"
	"github.com/drainscope/drainscope/kubectl"
	"github.com/drainscope/drainscope/store"
)

const checkUsage = `usage: drainscope check [TYPE/NAME] [--namespace NS] [--since DURATION|RFC3339]
                        [--format text|json] [--store DSN]

Judges each workload's termination budget before its next rollout: what its
spec gives its pods to stop (the preStop's wait, the grace period) against
what this cluster was measured to need in the window (how long endpoints
took to leave rotation after a deletion, how long its pods took to drain).
A workload whose next rollout will drop requests is listed RISKY with the
reasons and the patch that closes the gap, computed as a report computes
it. TYPE/NAME (deploy/web, sts/db, ds/agent) checks one workload, in
--namespace (default "default"); without it every workload whose pods the
window holds is checked.

Flags:
`

func runCheck(ctx context.Context, fs *flag.FlagSet, args []string) error {
	since := fs.String("since", "24h", "the history to measure over: a duration before now (90m, 2h, 1d) or an RFC 3339 time")
	namespace := fs.String("namespace", "", `the namespace of TYPE/NAME (default "default"), or the only one checked`)
	format := fs.String("format", "text", "output format: text or json")
	dsn := fs.String("store", os.Getenv("DRAINSCOPE_STORE"), "store DSN: postgres://… or a SQLite file path (default: "+store.DefaultPath()+"; env DRAINSCOPE_STORE)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), checkUsage)
		fs.PrintDefaults()
	}
	// The workload may come before the flags, as kubectl takes it.
	var named []string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		named, args = args[:1], args[1:]
	}
	if err := parseFlags(fs, args, true); err != nil {
		return err
	}
	named = append(named, fs.Args()...)
	if *format != "text" && *format != "json" {
		return fmt.Errorf("%w: --format %q: want text or json", errUsage, *format)
	}
	now := time.Now()
	from, err := duration.Before(*since, now)
	if err != nil {
		return fmt.Errorf("%w: --since: %v", errUsage, err)
	}
	q := store.Query{Window: event.Window{From: from.UnixNano(), To: now.UnixNano()}, Namespace: *namespace}
	switch rest := named; len(rest) {
	case 0:
	case 1:
		wl, err := kubectl.ParseWorkload(rest[0])
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, strings.TrimPrefix(err.Error(), "usage: "))
		}
		q.Workload = wl
		if q.Namespace == "" {
			q.Namespace = "default"
		}
	default:
		return fmt.Errorf("%w: check takes at most one workload, TYPE/NAME; got %d arguments", errUsage, len(rest))
	}
	s, err := store.Open(ctx, *dsn)
	if err != nil {
		return err
	}
	defer s.Close()
	oneShotGC()
	checks, res, err := analysis.Check(ctx, s, q, analysis.Options{NoEventViews: true})
	if err != nil {
		return err
	}
	if *format == "json" {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(checkAnswer{From: q.Window.From, To: q.Window.To, Cluster: res.Cluster, Workloads: nonNil(checks)})
	}
	return writeChecks(os.Stdout, checks, res, q)
}

// checkAnswer is check's JSON.
type checkAnswer struct {
	From      int64                    `json:"from_ns"`
	To        int64                    `json:"to_ns"`
	Cluster   *analysis.Cluster        `json:"cluster,omitempty"`
	Workloads []analysis.WorkloadCheck `json:"workloads"`
}

func nonNil(c []analysis.WorkloadCheck) []analysis.WorkloadCheck {
	if c == nil {
		return []analysis.WorkloadCheck{}
	}
	return c
}

// writeChecks prints the checks for a terminal, risky ones first, through
// a display writer: every name came from the cluster.
func writeChecks(out io.Writer, checks []analysis.WorkloadCheck, res *analysis.Result, q store.Query) error {
	d := event.NewDisplayWriter(out, event.MaxDisplayLine)
	var werr error
	p := func(format string, a ...any) {
		if _, err := fmt.Fprintf(d, format+"\n", a...); err != nil && werr == nil {
			werr = err
		}
	}
	p("drainscope check: %s → %s, measured over that history", time.Unix(0, q.Window.From).UTC().Format(time.RFC3339), time.Unix(0, q.Window.To).UTC().Format(time.RFC3339))
	if v, from, ok := res.Cluster.Effective(); ok {
		p("cluster: Kubernetes %s (%s)", v, from)
	} else {
		p("cluster: versions not recorded (no node_info in the window)")
	}
	if len(checks) == 0 {
		p("no workload's pods with a recorded spec in the window")
	}
	risky := 0
	for _, risk := range []bool{true, false} {
		for i := range checks {
			c := &checks[i]
			if c.Risky != risk {
				continue
			}
			label := "ok   "
			if c.Risky {
				label = "RISKY"
				risky++
			}
			p("%s %s %s/%s (container %s)%s", label, c.Namespace, c.Kind, c.Name, c.Container, reasons(c.Reasons))
			for _, w := range c.Why {
				p("      %s", w)
			}
			head, cmd, lines := textreport.PatchLines(c.Patch, res.Rules)
			if head != "" {
				p("      %s", head)
				p("        %s", cmd)
			}
			for _, l := range lines {
				p("      %s", l)
			}
		}
	}
	p("%d of %d workloads will drop requests at their next rollout", risky, len(checks))
	return werr
}

func reasons(r []string) string {
	if len(r) == 0 {
		return ""
	}
	return ": " + strings.Join(r, ", ")
}
