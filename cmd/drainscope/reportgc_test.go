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
// the report's own setting (GOGC unset), and reports the per-pair ratio of
// wall time and of peak RSS: median and spread.
// The store is 40 rollouts of 5,000 events each in the embedded store, or
// the one DRAINSCOPE_BENCH_REPORT names, with the report's other
// arguments in DRAINSCOPE_BENCH_REPORT_ARGS (e.g. a simulation kept with
// drainscope lab simulate --keep: "--since 2026-12-02T19:49:00Z --until
// 2026-12-02T19:53:00Z --workload shop/Deployment/checkout").
//
//	go test ./cmd/drainscope -run '^$' -bench ReportGC -benchtime 1x
func BenchmarkReportGC(b *testing.B) {
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
	base := os.Getenv("DRAINSCOPE_BENCH_REPORT_BASE_GOGC")
	if base == "" {
		base = "100"
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	run := func(gogc string) (time.Duration, int64, string) {
		cmd := exec.Command(exe, append([]string{"report", "--store", dsn}, args...)...)
		cmd.Env = append(os.Environ(), "DRAINSCOPE_TEST_AS_MAIN=1", "GOGC="+gogc)
		if gogc == "" {
			cmd.Env = slices.DeleteFunc(cmd.Env, func(kv string) bool { return strings.HasPrefix(kv, "GOGC=") })
		}
		t := time.Now()
		out, err := cmd.Output()
		took := time.Since(t)
		if err != nil {
			b.Fatalf("report: %v", err)
		}
		return took, cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss, string(out)
	}
	const pairs = 10
	var wall, rss []float64
	var tOne, tDef []float64
	for b.Loop() {
		wall, rss, tOne, tDef = wall[:0], rss[:0], tOne[:0], tDef[:0]
		run("")
		for i := range pairs {
			var td, to time.Duration
			var rd, ro int64
			var od, oo string
			if i%2 == 0 {
				td, rd, od = run(base)
				to, ro, oo = run("")
			} else {
				to, ro, oo = run("")
				td, rd, od = run(base)
			}
			if od != oo {
				b.Fatal("the reports differ")
			}
			wall = append(wall, to.Seconds()/td.Seconds())
			rss = append(rss, float64(ro)/float64(rd))
			tOne, tDef = append(tOne, to.Seconds()), append(tDef, td.Seconds())
		}
	}
	q := func(v []float64) (med, lo, hi float64) {
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2], v[len(v)/10], v[len(v)-1-len(v)/10]
	}
	w, w10, w90 := q(wall)
	r, r10, r90 := q(rss)
	a, _, _ := q(tOne)
	d, _, _ := q(tDef)
	b.ReportMetric(w, "wall-ratio")
	b.ReportMetric(r, "rss-ratio")
	la, _ := os.ReadFile("/proc/loadavg")
	b.Logf("%d pairs, no collection below %d MiB then GOGC %d ÷ GOGC %s: wall median %.3f (p10–p90 %.3f–%.3f; %.3f s against %.3f s), peak RSS %.3f (%.3f–%.3f); load %s",
		pairs, oneShotHeap>>20, reportGCPercent, base, w, w10, w90, a, d, r, r10, r90, strings.TrimSpace(string(la)))
}
