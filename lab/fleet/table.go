package fleet

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteTable prints rows, one per node count, in two tables: the writes,
// then the reads after the rollout.
func WriteTable(w io.Writer, rows []Row) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/1e6) }
	fmt.Fprintln(w, "| nodes | events/s offered (steady) | events/s stored | produced | stored (Postgres) | dropped | POSTs/s (steady) | 429s | p99 POST | p99 produced→stored | server CPU (peak 5 s) | server RSS | Postgres conns | Postgres CPU | apiserver+etcd CPU | TokenReviews/s | generator CPU | load avg |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %d | %.0f (%.0f) | %.0f | %d | %d | %d | %.0f | %d | %s | %s | %.2f (%.2f) | %d MiB | %d | %.2f | %.2f | %.1f | %.2f | %s |\n",
			r.Nodes, r.Offered, r.SteadyOffered, r.Stored, r.Produced, r.InPostgres, r.Dropped+r.Rejected+r.Unwritten,
			r.SteadyPosts, r.Status429, ms(r.PostP99), ms(r.AgeP99), r.ServerCPU, r.ServerCPUPeak, r.ServerRSS>>20, r.PGConns,
			r.PGCPU, r.APICPU, r.Reviews, r.GenCPU, r.Load)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| nodes | rollout pods | rollout events | listed analysed after | report of the rollout, median (range) | report of the whole run | cold timeline right after (no digest) | first read once ended | cold timeline once ended (digest), median (range) | produced = stored + dropped | events under a wrong node |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		ok := "yes"
		if r.Produced != r.InPostgres+r.Dropped+r.Rejected+r.Unwritten || r.Written != r.InPostgres {
			ok = fmt.Sprintf("NO: %d ≠ %d + %d", r.Produced, r.InPostgres, r.Dropped+r.Rejected+r.Unwritten)
		}
		fmt.Fprintf(w, "| %d | %d | %d | %s | %s | %s | %s | %s | %s | %s | %d |\n", r.Nodes, r.RolloutPods, r.RolloutEvents,
			ms(r.Analysed), spreadOf(r.Report), spreadOf(r.ReportAll), ms(r.ColdLive), ms(r.FirstRead), spreadOf(r.Cold), ok, r.WrongNode)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| nodes | stage of an agent's batch on the server | batches | p50 | p99 |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, r := range rows {
		for _, st := range r.Stages {
			fmt.Fprintf(w, "| %d | %s | %d | %s | %s |\n", r.Nodes, st.Name, st.Batches, st.bound(st.P50), st.bound(st.P99))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| nodes | the server's live heap once the writes ended | held by (the drainscope function that allocated it) |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, r := range rows {
		var by []string
		for _, s := range r.HeapSites[:min(len(r.HeapSites), 6)] {
			by = append(by, fmt.Sprintf("%s %d MiB", s.Func, s.Bytes>>20))
		}
		fmt.Fprintf(w, "| %d | %d MiB | %s |\n", r.Nodes, r.HeapInuse>>20, strings.Join(by, "; "))
	}
	for _, r := range rows {
		for _, e := range r.Errors {
			fmt.Fprintf(w, "\n%d nodes: %s", r.Nodes, e)
		}
	}
}
