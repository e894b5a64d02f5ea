package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/analysis/textreport"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/duration"
	"github.com/drainscope/drainscope/store"
)

const reportUsage = `usage: drainscope report [--since DURATION|RFC3339] [--until DURATION|RFC3339]
                         [--workload NS/NAME] [--format text|json|markdown] [--store DSN]

Reads the events of the window from the store and prints the rollouts, each
terminated pod's timeline with the gaps that matter (SIGTERM versus endpoint
removal, exit versus SIGTERM, grace used), every client failure aligned to
the pod that served it with its cause named, and the fix per cause. Where no
client log was imported, the failures the pods' kernel events prove on their
own are reported as inferred.

Flags:
`

func runReport(ctx context.Context, fs *flag.FlagSet, args []string) error {
	since := fs.String("since", "1h", "start of the window: a duration before now (90m, 2h, 1d) or an RFC 3339 time")
	until := fs.String("until", "", "end of the window: a duration before now or an RFC 3339 time (default: now)")
	workload := fs.String("workload", "", "only this workload: NAMESPACE/NAME or NAMESPACE/KIND/NAME (e.g. default/web, default/Deployment/web)")
	format := fs.String("format", "text", "output format: text, json (indented on a terminal, compact otherwise) or markdown")
	dsn := fs.String("store", os.Getenv("DRAINSCOPE_STORE"), "store DSN: postgres://… or a SQLite file path (default: "+store.DefaultPath()+"; env DRAINSCOPE_STORE)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), reportUsage)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	write, err := reportWriter(*format)
	if err != nil {
		return err
	}
	now := time.Now()
	from, err := duration.Before(*since, now)
	if err != nil {
		return fmt.Errorf("%w: --since: %v", errUsage, err)
	}
	to := now
	if *until != "" {
		if to, err = duration.Before(*until, now); err != nil {
			return fmt.Errorf("%w: --until: %v", errUsage, err)
		}
	}
	if !to.After(from) {
		return fmt.Errorf("%w: the window is empty: --since %s is not before --until %s", errUsage, from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	q := store.Query{Window: event.Window{From: from.UnixNano(), To: to.UnixNano()}}
	if *workload != "" {
		if q.Namespace, q.Workload, err = parseWorkload(*workload); err != nil {
			return fmt.Errorf("%w: --workload: %v", errUsage, err)
		}
	}
	s, err := store.Open(ctx, *dsn)
	if err != nil {
		return err
	}
	defer s.Close()
	oneShotGC()
	// Only the JSON report prints each timeline's events.
	res, err := analysis.AnalyzeWith(ctx, s, q, analysis.Options{NoEventViews: *format != "json"})
	if err != nil {
		return err
	}
	return write(os.Stdout, res)
}

// reportGCPercent is the collector's target for a report once its heap
// has passed oneShotHeap: the heap grows by four times what is live before
// a cycle, not by once.
const reportGCPercent = 400

// oneShotHeap is how large a report's memory grows before its first
// collection: a report's heap only grows (the aligner's window, then the
// results), so a cycle below it would find almost nothing to free and
// scan everything live for nothing (a 5,000-node rollout's report
// allocates 0.7 GB and frees a tenth of it).
const oneShotHeap = 1 << 30

// oneShotGC sets the collector for a command that reads, analyses and
// exits: no collection until the process's memory reaches oneShotHeap (or
// half of its cgroup's memory limit or of the machine's memory, if lower),
// then collections at reportGCPercent. GOGC or GOMEMLIMIT, when set, wins.
// BenchmarkReportGC in reportgc_test.go measures it.
func oneShotGC() {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	limit := int64(oneShotHeap)
	for _, m := range []int64{cgroupMemoryMax(), memTotal()} {
		if m > 0 && m/2 < limit {
			limit = m / 2
		}
	}
	collectFrom(limit)
}

// memTotal is the machine's memory (/proc/meminfo's MemTotal), or 0.
func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			kb, _ := strconv.ParseInt(f[1], 10, 64) // 0 when it does not parse
			return kb << 10
		}
	}
	return 0
}

// collectFrom turns the collector off until the memory reaches limit; the
// first cycle then takes the limit away and sets the proportional target,
// reportGCPercent. Called again in the same process (the tests' reports),
// the last call's setting holds: an earlier one's first cycle changes
// nothing.
func collectFrom(limit int64) {
	gen := collectGen.Add(1)
	before := debug.SetMemoryLimit(limit)
	debug.SetGCPercent(-1)
	sentinel := new([64]byte) // unreachable at once: the first cycle finds it
	runtime.AddCleanup(sentinel, func(before int64) {
		if collectGen.Load() != gen {
			return
		}
		debug.SetMemoryLimit(before)
		debug.SetGCPercent(reportGCPercent) // last: once it shows, the limit is back
	}, before)
}

// collectGen counts collectFrom's calls.
var collectGen atomic.Int64

// cgroupMemoryMax is the lowest memory limit of the process's cgroup and
// its parents (cgroup v2's memory.max, or v1's memory.limit_in_bytes), or
// 0 when there is none or it cannot be read.
func cgroupMemoryMax() int64 {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0
	}
	return cgroupMemoryMaxIn("/sys/fs/cgroup", string(b))
}

// cgroupMemoryMaxIn is cgroupMemoryMax with the cgroup file system at sys
// and /proc/self/cgroup's text in self.
func cgroupMemoryMaxIn(sys, self string) int64 {
	var low int64
	for _, line := range strings.Split(self, "\n") {
		root, file := sys, "memory.max"
		path, ok := strings.CutPrefix(line, "0::")
		if !ok {
			_, rest, _ := strings.Cut(line, ":")
			if path, ok = strings.CutPrefix(rest, "memory:"); !ok {
				continue
			}
			root, file = filepath.Join(sys, "memory"), "memory.limit_in_bytes"
		}
		for dir := filepath.Join(root, path); ; dir = filepath.Dir(dir) {
			// v2's "max" (no limit) does not parse; v1's no limit is a
			// number past any memory.
			b, err := os.ReadFile(filepath.Join(dir, file))
			if n, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && perr == nil && (low == 0 || n < low) {
				low = n
			}
			if dir == root || !strings.HasPrefix(dir, root) {
				break
			}
		}
	}
	return low
}

func reportWriter(format string) (func(w *os.File, r *analysis.Result) error, error) {
	switch format {
	case "text", "":
		return func(w *os.File, r *analysis.Result) error { return textreport.WriteText(w, r) }, nil
	case "json":
		// Indented for a terminal; compact for a program or a file.
		return func(w *os.File, r *analysis.Result) error {
			return analysis.WriteJSON(w, r, isatty.IsTerminal(w.Fd()))
		}, nil
	case "markdown", "md":
		return func(w *os.File, r *analysis.Result) error { return textreport.WriteMarkdown(w, r) }, nil
	}
	return nil, fmt.Errorf("%w: --format %q: want text, json or markdown", errUsage, format)
}

// parseWorkload reads NAMESPACE/NAME or NAMESPACE/KIND/NAME.
func parseWorkload(s string) (string, event.Workload, error) {
	parts := strings.Split(s, "/")
	for _, p := range parts {
		if p == "" {
			return "", event.Workload{}, fmt.Errorf("%q: want NAMESPACE/NAME or NAMESPACE/KIND/NAME", s)
		}
	}
	switch len(parts) {
	case 2:
		return parts[0], event.Workload{Name: parts[1]}, nil
	case 3:
		return parts[0], event.Workload{Kind: parts[1], Name: parts[2]}, nil
	}
	return "", event.Workload{}, fmt.Errorf("%q: want NAMESPACE/NAME or NAMESPACE/KIND/NAME", s)
}
