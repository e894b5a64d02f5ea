// Package fleet simulates a cluster's agents writing through the server:
// N agents (goroutines, each with its own HTTP connection, relay.Client and
// store.Writer, the agent's real write path with batching and
// back-pressure) into a real drainscope serve process, a real Postgres and,
// for their tokens, a real kube-apiserver, and measures where it breaks:
// events/s offered and stored, drops, the server's CPU and memory,
// Postgres connections, write latency, 429s, token reviews, and the time
// for a report and a cold timeline of a 1,000-pod rollout afterwards.
// drainscope lab simulate runs it; docs/scale.md has its table.
package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/relay"
	"github.com/drainscope/drainscope/store"
)

// Options configure one simulation.
type Options struct {
	Model  Model
	Steady time.Duration // steady state before the rollout
	// Drain bounds the wait for the agents' buffers to empty at the end.
	Drain time.Duration
	// Postgres is a DSN of a throwaway Postgres: each run gets a database
	// of its own there, dropped afterwards unless Keep.
	Postgres string
	Keep     bool
	// NoDigestWait skips the wait for the rollout to end (analysis.RolloutGap)
	// and the cold timeline from its digest.
	NoDigestWait bool
	// Server makes the command of drainscope with args (a separate
	// process, so that its CPU and memory are its own).
	Server func(args ...string) *exec.Cmd
	// ServerArgs are added to drainscope serve's (e.g. --agent-concurrency).
	ServerArgs []string
	Writer     store.WriterOptions // the agents' writers; zero: the agent's defaults
	Dir        string              // working files: logs
	Progress   io.Writer
	Seed       uint64
}

// Row is one simulation's measurements.
type Row struct {
	Nodes                         int
	Offered, Stored               float64 // events/s over the whole run
	SteadyOffered, SteadyPosts    float64 // events/s and POSTs/s in the steady state
	Produced                      int64   // events handed to the writers
	Written, Dropped, Rejected    int64   // the writers' counters
	Unwritten                     int64   // left in buffers when Drain ran out
	InPostgres                    int64   // count(*) of events
	WrongNode                     int64   // events stored under another node than the agent's, or not the agent's count
	Posts, Status429, StatusOther int64
	PostP50, PostP99              time.Duration // a batch's POST round trip
	AgeP99                        time.Duration // oldest event of a batch: produced → stored
	ServerCPU, ServerCPUPeak      float64       // cores: over the run, and the busiest 5 s
	ServerRSS                     int64         // peak of the 1 s samples
	PGConns                       int           // most connections of the run's database (pg_stat_activity)
	PGCPU, APICPU, GenCPU         float64       // cores over the run: Postgres, etcd+kube-apiserver, this process
	Reviews                       float64       // TokenReviews/s the API server served
	Analysed                      time.Duration // after the rollout: until the server listed it analysed
	// drainscope report, the rollout's workload and the whole run: every
	// run's time (timedRuns fresh processes one after another).
	Report, ReportAll          []time.Duration
	FirstRead                  time.Duration   // the ended rollout's first read by a fresh server, no digest yet
	ColdLive                   time.Duration   // first timeline request to a fresh server right after the rollout
	Cold                       []time.Duration // the same once the rollout ended and a server kept its digest, from timedRuns fresh servers
	RolloutPods, RolloutEvents int
	Stages                     []Stage // the server's time per stage of the agents' batches, over the run
	// The server's live heap once the writes ended (its --pprof heap
	// profile), in all and by the drainscope function that allocated it.
	HeapInuse int64
	HeapSites []HeapSite
	Load      string
	Duration  time.Duration
	Errors    []string
}

// agentSim is one simulated agent.
type agentSim struct {
	w  *store.Writer
	tr *http.Transport
}

// counters are the POSTs' outcomes, all agents together.
type counters struct {
	posts, s429, other atomic.Int64
	post, age          samples
	mu                 sync.Mutex
	others             map[string]int64 // what the other answers were
}

func (c *counters) otherAnswer(what string) {
	c.other.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.others == nil {
		c.others = map[string]int64{}
	}
	if len(c.others) < 20 {
		c.others[what]++
	} else {
		c.others["(others)"]++
	}
}

func (c *counters) otherAnswers() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for k, v := range c.others {
		out = append(out, fmt.Sprintf("%d× %s", v, k))
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// timed is an agent's relay.Client with its POSTs timed.
type timed struct {
	store.Store
	c *counters
}

func (t timed) Append(ctx context.Context, b []event.Event) error {
	t0 := time.Now()
	err := t.Store.Append(ctx, b)
	now := time.Now()
	t.c.post.add(now.Sub(t0))
	if err == nil && len(b) > 0 {
		oldest := b[0].Time
		for i := range b {
			oldest = min(oldest, b[i].Time)
		}
		t.c.age.add(now.Sub(time.Unix(0, oldest)))
	}
	return err
}

// statusCounter counts the server's answers by status.
type statusCounter struct {
	rt http.RoundTripper
	c  *counters
}

func (s statusCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.rt.RoundTrip(r)
	s.c.posts.Add(1)
	switch {
	case err != nil:
		msg := err.Error()
		if i := strings.LastIndex(msg, ": "); i >= 0 {
			msg = msg[i+2:] // the cause, not the URL
		}
		s.c.otherAnswer(msg)
	case resp.StatusCode == http.StatusTooManyRequests:
		s.c.s429.Add(1)
	case resp.StatusCode != http.StatusOK:
		s.c.otherAnswer(resp.Status)
	}
	return resp, err
}

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

// afterRollout times what a user does after the rollout: the report, and
// a cold timeline from a freshly started server.
func afterRollout(ctx context.Context, o Options, cl *Cluster, srv *server, dsn string, start time.Time, row *Row, logf func(string, ...any)) error {
	t0 := time.Now()
	var ro struct {
		ID       string `json:"id"`
		To       int64  `json:"to_ns"`
		Pods     int    `json:"pods_replaced"`
		Events   int    `json:"events"`
		Analysed bool   `json:"analysed"`
	}
	for {
		var list struct {
			Rollouts []struct {
				ID       string `json:"id"`
				To       int64  `json:"to_ns"`
				Pods     int    `json:"pods_replaced"`
				Events   int    `json:"events"`
				Analysed bool   `json:"analysed"`
			} `json:"rollouts"`
		}
		if err := getJSON(ctx, srv.url+"/api/v1/rollouts?namespace=shop&workload=Deployment/checkout&since=all", &list); err != nil {
			return err
		}
		if len(list.Rollouts) > 0 {
			r := list.Rollouts[0]
			ro.ID, ro.To, ro.Pods, ro.Events, ro.Analysed = r.ID, r.To, r.Pods, r.Events, r.Analysed
		}
		if ro.Analysed {
			break
		}
		if time.Since(t0) > 5*time.Minute {
			return fmt.Errorf("the rollout was not analysed within 5 min (listed: %+v)", ro)
		}
		time.Sleep(200 * time.Millisecond)
	}
	row.Analysed = time.Since(t0)
	logf("  rollout %s: %d pods, %d events, listed analysed after %v", ro.ID, ro.Pods, ro.Events, row.Analysed.Round(time.Millisecond))

	// A fresh server right away: the rollout is still live (its last pod
	// ended less than analysis.RolloutGap ago), so no digest is kept yet and
	// the first timeline analyses the events.
	srv.stop()
	fresh, err := startServer(ctx, o, cl, dsn, fmt.Sprintf("serve-%d-cold-live", row.Nodes))
	if err != nil {
		return err
	}
	defer func() { fresh.stop() }()
	if row.ColdLive, err = timeline(ctx, fresh.url, ro.ID); err != nil {
		return fmt.Errorf("cold timeline: %w", err)
	}
	logf("  cold timeline, right after the rollout (no digest): %v", row.ColdLive.Round(time.Millisecond))

	since := time.Since(start).Round(time.Second) + time.Minute
	for _, r := range []struct {
		name string
		d    *[]time.Duration
		args []string
	}{
		{"report of the rollout", &row.Report, []string{"report", "--store", dsn, "--since", since.String(), "--workload", "shop/Deployment/checkout"}},
		{"report of the whole run", &row.ReportAll, []string{"report", "--store", dsn, "--since", since.String()}},
	} {
		for range timedRuns {
			cmd := o.Server(r.args...)
			out, err := os.Create(filepath.Join(o.Dir, fmt.Sprintf("report-%d-%d.txt", row.Nodes, len(r.args))))
			if err != nil {
				return err
			}
			cmd.Stdout, cmd.Stderr = out, out
			m := meter(fresh.pid(), cl)
			t := time.Now()
			err = cmd.Run()
			took := time.Since(t)
			*r.d = append(*r.d, took)
			out.Close()
			if err != nil {
				return fmt.Errorf("%s: %v (output in %s)", strings.Join(r.args[:1], " "), err, out.Name())
			}
			ps := cmd.ProcessState
			logf("    %s: %v; its own CPU %v (system %v); CPU meanwhile besides it: %s",
				r.name, took.Round(time.Millisecond), (ps.UserTime() + ps.SystemTime()).Round(time.Millisecond),
				ps.SystemTime().Round(time.Millisecond), m)
		}
	}
	logf("  report of the rollout %s; of the whole run %s", spreadOf(row.Report), spreadOf(row.ReportAll))
	if o.NoDigestWait {
		return nil
	}

	// As a user meets it later: the rollout has ended, a server has read
	// it once and kept its digest, and a fresh server is asked for it.
	wait := time.Until(time.Unix(0, ro.To).Add(analysis.RolloutGap + 5*time.Second))
	logf("  waiting %v for the rollout to end (%v quiet) and its digest", wait.Round(time.Second), analysis.RolloutGap)
	select {
	case <-time.After(wait):
	case <-ctx.Done():
		return ctx.Err()
	}
	fresh.stop()
	if fresh, err = startServer(ctx, o, cl, dsn, fmt.Sprintf("serve-%d-digest", row.Nodes)); err != nil {
		return err
	}
	// The first reader of the ended rollout analyses it and keeps its
	// digest (the rollouts list would too, but it reads the newest of the
	// thousands of disruptions the churn made first).
	if row.FirstRead, err = timeline(ctx, fresh.url, ro.ID); err != nil {
		return fmt.Errorf("first read of the ended rollout: %w", err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for t0 := time.Now(); ; time.Sleep(250 * time.Millisecond) {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM digests WHERE key LIKE 'shop/Deployment/checkout@%'").Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			break
		}
		if time.Since(t0) > 2*time.Minute {
			return errors.New("no digest of the rollout was kept within 2 min of its first read")
		}
	}
	for i := range timedRuns {
		fresh.stop()
		if fresh, err = startServer(ctx, o, cl, dsn, fmt.Sprintf("serve-%d-cold-%d", row.Nodes, i+1)); err != nil {
			return err
		}
		// A ready server (startServer): its start, the list of the
		// cluster's pods for the agents' checks, is behind it, as it is
		// for a UI request that reaches it through a Service. What else
		// ran meanwhile, on the same cores: kube-apiserver and etcd,
		// Postgres.
		m := meter(fresh.pid(), cl)
		d, err := timeline(ctx, fresh.url, ro.ID)
		if err != nil {
			return fmt.Errorf("cold timeline: %w", err)
		}
		logf("    fresh server %d: %v (the server's start before it: %v CPU); CPU during it: %s",
			i+1, d.Round(time.Millisecond), m.t0[0].Round(time.Millisecond), m)
		row.Cold = append(row.Cold, d)
	}
	logf("  cold timeline of the ended rollout (from its digest, %d fresh servers): %s", timedRuns, spreadOf(row.Cold))
	return nil
}

// timedRuns is how many times the report and the cold timeline are timed,
// each in a fresh process: the table gives their median and range.
const timedRuns = 3

// spreadOf formats runs as their median and range, in milliseconds.
func spreadOf(runs []time.Duration) string {
	if len(runs) == 0 {
		return "—"
	}
	v := slices.Clone(runs)
	slices.Sort(v)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	if len(v) == 1 {
		return fmt.Sprintf("%.0f ms", ms(v[0]))
	}
	return fmt.Sprintf("%.0f ms (%.0f–%.0f)", ms(v[len(v)/2]), ms(v[0]), ms(v[len(v)-1]))
}

// cpuMeter reads what the processes beside a timed step used of the
// machine's cores meanwhile: a server, kube-apiserver with etcd, Postgres
// and the simulation itself; and how long the cores sat idle.
type cpuMeter struct {
	cpu   [4]func() time.Duration
	t0    [4]time.Duration
	idle0 time.Duration
}

func meter(server int, cl *Cluster) *cpuMeter {
	api, self := cl.apiPIDs(), os.Getpid()
	m := &cpuMeter{cpu: [4]func() time.Duration{
		func() time.Duration { return cpuOf(server) },
		func() time.Duration { return cpuOf(api...) },
		postgresCPU,
		func() time.Duration { return cpuOf(self) },
	}}
	for i, c := range m.cpu {
		m.t0[i] = c()
	}
	m.idle0, _ = machineIdle()
	return m
}

func (m *cpuMeter) String() string {
	var d [4]time.Duration
	for i, c := range m.cpu {
		d[i] = (c() - m.t0[i]).Round(time.Millisecond)
	}
	idle, cpus := machineIdle()
	return fmt.Sprintf("the server %v, kube-apiserver and etcd %v, Postgres %v, the simulation %v; the %d CPUs idle %v",
		d[0], d[1], d[2], d[3], cpus, (idle - m.idle0).Round(time.Millisecond))
}

// timeline times the first request for rollout id's timeline.
func timeline(ctx context.Context, base, id string) (time.Duration, error) {
	t := time.Now()
	var tl json.RawMessage
	err := getJSON(ctx, base+"/api/v1/rollouts/"+id+"/timeline?width=1400", &tl)
	return time.Since(t), err
}

func getJSON(ctx context.Context, u string, v any) error {
	b, err := get(ctx, u)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// get reads u's body; an answer other than 200 is an error that quotes it.
func get(ctx context.Context, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", u, resp.Status, strings.TrimSpace(string(b)))
	}
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	return b, nil
}

// server is a drainscope serve process.
type server struct {
	cmd     *exec.Cmd
	url     string
	metrics string // its Prometheus endpoint
	pprof   string // its runtime profiles (--pprof)
	done    chan error
	once    sync.Once
}

func (s *server) pid() int { return s.cmd.Process.Pid }

func (s *server) alive() error {
	select {
	case err := <-s.done:
		s.done <- err
		return fmt.Errorf("the server exited: %v", err)
	default:
		return nil
	}
}

func (s *server) stop() {
	s.once.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	})
}

func startServer(ctx context.Context, o Options, cl *Cluster, dsn, name string) (*server, error) {
	var addrs [2]string // the UI's and the metrics'
	var lns [2]net.Listener
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addrs[i], lns[i] = ln.Addr().String(), ln // held until both are chosen, so they differ
	}
	for _, ln := range lns {
		ln.Close()
	}
	addr := addrs[0]
	args := append([]string{"serve", "--listen", addr, "--metrics-listen", addrs[1], "--pprof", "--store", dsn, "--kubeconfig", cl.Kubeconfig(),
		"--agent-service-account", AgentNamespace + "/" + AgentServiceAccount, "--retention", "0"}, o.ServerArgs...)
	cmd := o.Server(args...)
	logf, err := os.Create(filepath.Join(o.Dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting drainscope serve: %w", err)
	}
	s := &server{cmd: cmd, url: "http://" + addr, metrics: "http://" + addrs[1] + "/metrics", pprof: "http://" + addrs[1] + "/debug/pprof/", done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait(); logf.Close() }()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err := s.alive(); err != nil {
			return nil, fmt.Errorf("%w (log: %s)", err, logf.Name())
		}
		// Ready: its pod index has listed the cluster's pods, as a
		// Kubernetes Service would wait for before sending it anything.
		if resp, err := http.Get(s.url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.stop()
			return nil, fmt.Errorf("drainscope serve was not ready (/readyz) within 60 s (log: %s)", logf.Name())
		}
	}
}

// freshDatabase creates database name beside the one base names and
// returns its DSN and a function that drops it.
func freshDatabase(ctx context.Context, base, name string) (string, func(), error) {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", nil, fmt.Errorf("connecting to Postgres: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("creating database %s: %w", name, err)
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	drop := func() {
		c, err := pgx.Connect(context.Background(), base)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	}
	return u.String(), drop, nil
}

func dbOf(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}

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
