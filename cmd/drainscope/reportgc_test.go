package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drainscope/drainscope/internal/eventgen"
	"github.com/drainscope/drainscope/store"
)

// BenchmarkReportGC runs drainscope report in fresh processes, alternating
// the collector's default (GOGC=100 in the environment, which oneShotGC
// leaves alone; another value in DRAINSCOPE_BENCH_REPORT_BASE_GOGC) with
// the report's own setting (GOGC unset: oneShotGC), and reports the
// per-pair ratio of wall time and of peak RSS, median and spread, and each
// side's page faults.
// The store is 40 rollouts of 5,000 events each in the embedded store, or
// the one DRAINSCOPE_BENCH_REPORT names, with the report's other
// arguments in DRAINSCOPE_BENCH_REPORT_ARGS (e.g. a simulation kept with
// drainscope lab simulate --keep: "--since 2026-12-02T19:49:00Z --until
// 2026-12-02T19:53:00Z --workload shop/Deployment/checkout").
//
//	go test ./cmd/drainscope -run '^$' -bench ReportGC -benchtime 1x
func BenchmarkReportGC(b *testing.B) {
	gogc := os.Getenv("DRAINSCOPE_BENCH_REPORT_BASE_GOGC")
	if gogc == "" {
		gogc = "100"
	}
	base := []string{"GOGC=" + gogc}
	dsn := os.Getenv("DRAINSCOPE_BENCH_REPORT")
	args := strings.Fields(os.Getenv("DRAINSCOPE_BENCH_REPORT_ARGS"))
	if dsn == "" {
		dsn = filepath.Join(b.TempDir(), "events.db")
		st, err := store.OpenSQLite(context.Background(), dsn)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now().Add(-50 * time.Minute)
		for i := range 40 {
			evs := eventgen.Rollout(5000, start.Add(time.Duration(i)*time.Minute), uint64(i+1), fmt.Sprintf("web%d", i))
			if err := st.Append(context.Background(), evs); err != nil {
				b.Fatal(err)
			}
		}
		st.Close()
		args = []string{"--since", start.Add(-time.Minute).Format(time.RFC3339), "--until", start.Add(45 * time.Minute).Format(time.RFC3339)}
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	type result struct {
		took   time.Duration
		rss    int64
		faults int64
		out    string
	}
	// Neither side inherits the benchmark's own GOGC.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GOGC=") })
	run := func(extra []string) result {
		cmd := exec.Command(exe, append([]string{"report", "--store", dsn}, args...)...)
		cmd.Env = append(append(slices.Clip(env), "DRAINSCOPE_TEST_AS_MAIN=1"), extra...)
		t := time.Now()
		out, err := cmd.Output()
		took := time.Since(t)
		if err != nil {
			b.Fatalf("report: %v", err)
		}
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		return result{took, ru.Maxrss, ru.Minflt, string(out)}
	}
	const pairs = 10
	var wall, rss, tOurs, tBase, fOurs, fBase []float64
	for b.Loop() {
		wall, rss, tOurs, tBase, fOurs, fBase = wall[:0], rss[:0], tOurs[:0], tBase[:0], fOurs[:0], fBase[:0]
		run(nil)
		for i := range pairs {
			var rb, ro result
			if i%2 == 0 {
				rb, ro = run(base), run(nil)
			} else {
				ro, rb = run(nil), run(base)
			}
			if rb.out != ro.out {
				b.Fatal("the reports differ")
			}
			wall = append(wall, ro.took.Seconds()/rb.took.Seconds())
			rss = append(rss, float64(ro.rss)/float64(rb.rss))
			tOurs, tBase = append(tOurs, ro.took.Seconds()), append(tBase, rb.took.Seconds())
			fOurs, fBase = append(fOurs, float64(ro.faults)), append(fBase, float64(rb.faults))
		}
	}
	q := func(v []float64) (med, lo, hi float64) {
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2], v[len(v)/10], v[len(v)-1-len(v)/10]
	}
	w, w10, w90 := q(wall)
	r, r10, r90 := q(rss)
	a, _, _ := q(tOurs)
	d, _, _ := q(tBase)
	fo, _, _ := q(fOurs)
	fb, _, _ := q(fBase)
	b.ReportMetric(w, "wall-ratio")
	b.ReportMetric(r, "rss-ratio")
	la, _ := os.ReadFile("/proc/loadavg")
	b.Logf("%d pairs, no collection below %d MiB then GOGC %d ÷ GOGC %s: wall median %.3f (p10–p90 %.3f–%.3f; %.3f s against %.3f s), peak RSS %.3f (%.3f–%.3f), page faults %.0f against %.0f; load %s",
		pairs, oneShotHeap>>20, reportGCPercent, gogc, w, w10, w90, a, d, r, r10, r90, fo, fb, strings.TrimSpace(string(la)))
}
