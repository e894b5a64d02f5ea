package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/relay"
	"github.com/drainscope/drainscope/store"
)

// Run simulates nodes agents of cl (nodes ≤ its nodes) for o.Steady, then
// the rollout, and measures.
func Run(ctx context.Context, cl *Cluster, nodes int, o Options) (row Row, err error) {
	if nodes > len(cl.TokenFiles) {
		return row, fmt.Errorf("%d nodes asked, the cluster has %d", nodes, len(cl.TokenFiles))
	}
	row.Nodes = nodes
	logf := func(format string, a ...any) { fmt.Fprintf(o.Progress, format+"\n", a...) }
	dsn, dropDB, err := freshDatabase(ctx, o.Postgres, fmt.Sprintf("drainscope_sim_%d_%d", nodes, time.Now().Unix()))
	if err != nil {
		return row, err
	}
	if !o.Keep {
		defer dropDB()
	}
	// The watcher's ticks are counted from origin, before the history
	// and the run alike; those between the two (the history's writing,
	// the server's start) are a gap, as a restart would leave.
	origin := time.Now()
	if o.Model.History > 0 {
		n, err := writeHistory(ctx, dsn, nodes, o.Model, origin.Add(-o.Model.History), origin, logf)
		if err != nil {
			return row, err
		}
		logf("  history: %d events, %v before the run", n, o.Model.History)
	}
	srv, err := startServer(ctx, o, cl, dsn, fmt.Sprintf("serve-%d", nodes))
	if err != nil {
		return row, err
	}
	defer func() { srv.stop() }()

	var c counters
	agents := make([]agentSim, nodes)
	wopt := o.Writer
	wopt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := range agents {
		tr := &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true, IdleConnTimeout: 90 * time.Second}
		cli, err := relay.NewClient(srv.url, cl.TokenFiles[i], &http.Client{Timeout: 30 * time.Second, Transport: statusCounter{tr, &c}})
		if err != nil {
			return row, err
		}
		agents[i] = agentSim{w: store.NewWriter(timed{cli, &c}, wopt), tr: tr}
	}
	closeAgents := func(d time.Duration) {
		cctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		var wg sync.WaitGroup
		for i := range agents {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var ue *store.UnwrittenError
				if err := agents[i].w.Close(cctx); errors.As(err, &ue) {
					atomic.AddInt64(&row.Unwritten, int64(ue.Events))
				}
				agents[i].tr.CloseIdleConnections()
			}()
		}
		wg.Wait()
	}
	defer func() {
		if agents != nil {
			closeAgents(time.Second)
		}
	}()

	tf := newTraffic(o.Model, nodes, o.Seed+uint64(nodes))
	apiPIDs := cl.apiPIDs()
	self := os.Getpid()
	rev0, err := cl.tokenReviews(ctx)
	if err != nil {
		return row, err
	}
	cpu0 := [4]time.Duration{cpuOf(srv.pid()), postgresCPU(), cpuOf(apiPIDs...), cpuOf(self)}
	pgConn, err := pgx.Connect(ctx, o.Postgres)
	if err != nil {
		return row, fmt.Errorf("connecting to Postgres for pg_stat_activity: %w", err)
	}
	defer pgConn.Close(context.Background())
	dbName := dbOf(dsn)

	const tick = 50 * time.Millisecond
	start := time.Now()
	rolloutAt := start.Add(o.Steady)
	tf.rolloutAt = rolloutAt
	genEnd := rolloutAt.Add(o.Model.RolloutOver + 5*time.Second)
	var produced int64
	var steadyProduced, steadyPosts0, steadyPosts int64
	rolledOut := false
	batch := map[int][]event.Event{}
	lastSample, lastCPU, lastPrint := start, cpuOf(srv.pid()), start
	written := func() (w, p int64) {
		for i := range agents {
			s := agents[i].w.Stats()
			w += s.Written
			p += int64(s.Pending)
		}
		return
	}
	tk := time.NewTicker(tick)
	defer tk.Stop()
	prev := start
	for now := start; ; now = <-tk.C {
		if ctx.Err() != nil {
			return row, ctx.Err()
		}
		if err := srv.alive(); err != nil {
			return row, err
		}
		gen := now.Before(genEnd)
		if gen {
			tf.background(prev, now.Sub(prev)+tick)
			tf.observe(origin, prev, now.Sub(prev)+tick)
			tf.churn(prev, now.Sub(prev)+tick)
		}
		prev = now.Add(tick)
		if !rolledOut && !now.Before(rolloutAt) {
			rolledOut = true
			steadyProduced, steadyPosts = produced, c.posts.Load()-steadyPosts0
			before := tf.pending()
			tf.rollout(now)
			row.RolloutPods, row.RolloutEvents = o.Model.Rollout, tf.pending()-before
			logf("  %5ds  rollout of %d pods begins (%d events scheduled for it)", int(now.Sub(start).Seconds()), row.RolloutPods, row.RolloutEvents)
		}
		clear(batch)
		n := tf.pop(now, batch)
		for a, evs := range batch {
			agents[a].w.Add(evs...)
		}
		produced += int64(n)
		if now.Sub(lastSample) >= time.Second {
			lastSample = now
			row.ServerRSS = max(row.ServerRSS, rssOf(srv.pid()))
			var conns int
			if err := pgConn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", dbName).Scan(&conns); err == nil {
				row.PGConns = max(row.PGConns, conns)
			}
		}
		if now.Sub(lastPrint) >= 5*time.Second {
			sc := cpuOf(srv.pid())
			cores := (sc - lastCPU).Seconds() / now.Sub(lastPrint).Seconds()
			row.ServerCPUPeak = max(row.ServerCPUPeak, cores)
			lastCPU, lastPrint = sc, now
			w, p := written()
			logf("  %5ds  produced %d  stored %d  buffered %d  POSTs %d (429: %d, other: %d)  server %.2f cores %d MiB  pg conns %d  load %s",
				int(now.Sub(start).Seconds()), produced, w, p, c.posts.Load(), c.s429.Load(), c.other.Load(), cores, rssOf(srv.pid())>>20, row.PGConns, loadAvg())
		}
		if !gen && tf.pending() == 0 {
			break
		}
	}
	// Everything is handed over; the writers flush what they hold.
	closeAgents(o.Drain)
	end := time.Now()
	if row.Stages, err = batchStages(ctx, srv.metrics); err != nil {
		row.Errors = append(row.Errors, fmt.Sprintf("reading the server's batch stages: %v", err))
	}
	if err := serverHeap(ctx, srv, filepath.Join(o.Dir, fmt.Sprintf("server-heap-%d.pb.gz", row.Nodes)), &row, logf); err != nil {
		row.Errors = append(row.Errors, fmt.Sprintf("reading the server's heap profile: %v", err))
	}
	perNode := make(map[string]int64, len(agents))
	for i := range agents {
		s := agents[i].w.Stats()
		perNode[nodeName(i)] = s.Written
		row.Produced += s.Received
		row.Written += s.Written
		row.Dropped += s.Dropped
		row.Rejected += s.Rejected
	}
	agents = nil
	el := end.Sub(start).Seconds()
	row.Duration = end.Sub(start)
	cpu1 := [4]time.Duration{cpuOf(srv.pid()), postgresCPU(), cpuOf(apiPIDs...), cpuOf(self)}
	row.ServerCPU = (cpu1[0] - cpu0[0]).Seconds() / el
	row.PGCPU = (cpu1[1] - cpu0[1]).Seconds() / el
	row.APICPU = (cpu1[2] - cpu0[2]).Seconds() / el
	row.GenCPU = (cpu1[3] - cpu0[3]).Seconds() / el
	rev1, _ := cl.tokenReviews(ctx)
	row.Reviews = (rev1 - rev0) / el
	row.Offered = float64(row.Produced) / el
	row.Stored = float64(row.Written) / el
	if o.Steady > 0 {
		row.SteadyOffered = float64(steadyProduced) / o.Steady.Seconds()
		row.SteadyPosts = float64(steadyPosts) / o.Steady.Seconds()
	}
	row.Posts, row.Status429, row.StatusOther = c.posts.Load(), c.s429.Load(), c.other.Load()
	if row.StatusOther > 0 {
		row.Errors = append(row.Errors, fmt.Sprintf("%d POSTs failed otherwise than 429 (kept and retried by the writers): %s", row.StatusOther, c.otherAnswers()))
	}
	row.PostP50, row.PostP99, row.AgeP99 = c.post.quantile(.5), c.post.quantile(.99), c.age.quantile(.99)
	row.Load = loadAvg()
	if produced != row.Produced {
		row.Errors = append(row.Errors, fmt.Sprintf("the generator handed %d events, the writers received %d", produced, row.Produced))
	}

	// What Postgres holds, node by node, against each agent's count.
	if err := checkStored(ctx, dsn, start, perNode, &row); err != nil {
		return row, err
	}
	logf("  stored: produced %d = written %d + dropped %d + rejected %d + unwritten %d; Postgres holds %d",
		row.Produced, row.Written, row.Dropped, row.Rejected, row.Unwritten, row.InPostgres)
	for _, st := range row.Stages {
		logf("  batches' %s on the server (%d batches)", st, st.Batches)
	}

	if err := afterRollout(ctx, o, cl, srv, dsn, start, &row, logf); err != nil {
		row.Errors = append(row.Errors, err.Error())
	}
	return row, nil
}

// checkStored counts the events in Postgres since the run's start (not
// its history), in all and per node: each node must hold exactly what its
// agent's writer wrote (each agent sends only its own node's events), else
// the difference is counted in WrongNode.
func checkStored(ctx context.Context, dsn string, start time.Time, written map[string]int64, row *Row) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT node, count(*) FROM events WHERE ts >= $1 GROUP BY node", start.UnixNano())
	if err != nil {
		return fmt.Errorf("counting stored events: %w", err)
	}
	per, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (nodeCount, error) {
		var n nodeCount
		return n, r.Scan(&n.node, &n.count)
	})
	if err != nil {
		return fmt.Errorf("counting stored events: %w", err)
	}
	row.InPostgres = 0
	seen := map[string]bool{}
	for _, n := range per {
		row.InPostgres += n.count
		seen[n.node] = true
		row.WrongNode += absDiff(n.count, written[n.node])
	}
	for node, w := range written {
		if !seen[node] {
			row.WrongNode += w
		}
	}
	return nil
}

func absDiff(a, b int64) int64 {
	if a > b {
		return a - b
	}
	return b - a
}

type nodeCount struct {
	node  string
	count int64
}
