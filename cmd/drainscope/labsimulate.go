//go:build !nolab

package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/drainscope/drainscope/lab/fleet"
	"github.com/drainscope/drainscope/store"
)

const labSimulateUsage = `usage: drainscope lab simulate [--nodes 500,1000,2000,5000] --store postgres://…
                               [--steady 60s] [--churn 20] [--rollout 1000] [--rollout-over 60s] ...

Simulates a cluster's agents writing through the server, and measures
where it breaks (docs/scale.md). It starts a real etcd and kube-apiserver
(DRAINSCOPE_K8S_BIN), registers the largest --nodes count of Nodes, each
with an agent pod bound to it and that pod's token, then for each count N:
a fresh database in the Postgres --store names, drainscope serve as a
separate process with --agent-service-account, and N agents (goroutines,
each with its own connection, relay client and store writer, as
drainscope agent --server writes) emitting the model's events for --steady,
then a --rollout-replica rollout over --rollout-over. It prints progress,
checks that every event produced was stored or counted as dropped, times
drainscope report and a cold timeline of the rollout, and prints a table.

--store must be a throwaway Postgres (scripts/pg-throwaway.sh's pg_start
gives one): a database is created and dropped there per run.

Flags:
`

func runLabSimulate(ctx context.Context, fs *flag.FlagSet, args []string) error {
	m := fleet.DefaultModel()
	nodes := fs.String("nodes", "500,1000,2000,5000", "comma-separated simulated node counts, one run each")
	dsn := fs.String("store", os.Getenv("DRAINSCOPE_TEST_POSTGRES"), "DSN of a throwaway Postgres (env DRAINSCOPE_TEST_POSTGRES)")
	steady := fs.Duration("steady", 60*time.Second, "steady state before the rollout, per run")
	drain := fs.Duration("drain", 2*time.Minute, "longest wait for the agents' buffers to empty at the end of a run")
	fs.IntVar(&m.PodsPerNode, "pods-per-node", m.PodsPerNode, "pods per node")
	fs.Float64Var(&m.Churn, "churn", m.Churn, "pods ending per second, cluster-wide, in steady state")
	fs.IntVar(&m.ConnsMin, "conns-min", m.ConnsMin, "fewest conn_closed events stored per ending pod (the flight recorder's window)")
	fs.IntVar(&m.ConnsMax, "conns-max", m.ConnsMax, "most conn_closed events stored per ending pod")
	fs.IntVar(&m.RSTsMax, "rsts-max", m.RSTsMax, "most resets per ending pod (uniform from 0)")
	fs.Float64Var(&m.Background, "background", m.Background, "resets and refusals per running pod per minute, stored always")
	fs.IntVar(&m.DataplaneNodes, "dataplane-nodes", m.DataplaneNodes, "nodes that record dataplane rule events")
	fs.IntVar(&m.DataplanePerChange, "dataplane-per-change", m.DataplanePerChange, "rule events each of those records per endpoint change")
	fs.IntVar(&m.Rollout, "rollout", m.Rollout, "replicas of the rolled-out Deployment, spread over the nodes")
	fs.DurationVar(&m.RolloutOver, "rollout-over", m.RolloutOver, "how long the rollout takes")
	fs.DurationVar(&m.ObserveEvery, "observe-interval", m.ObserveEvery, "how often the watcher records the running pods' state again, as the agent's --observe-interval (0: never)")
	fs.DurationVar(&m.History, "history", 0, "record every running pod's creation, start, readiness and endpoint this long before the run, as a cluster that has run a while holds them (at least 1m; 0: none)")
	agentConc := fs.Int("agent-concurrency", 0, "drainscope serve --agent-concurrency (0: its default)")
	serveArgs := fs.String("serve-args", "", "more arguments for drainscope serve, space-separated")
	batch := fs.Int("batch-size", 5000, "the agents' --batch-size")
	flush := fs.Duration("flush-interval", 200*time.Millisecond, "the agents' --flush-interval")
	keep := fs.Bool("keep", false, "keep each run's database")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), labSimulateUsage)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if b, _, _ := store.Backend(*dsn); b != store.BackendPostgres {
		return fmt.Errorf("%w: --store: want the DSN of a throwaway Postgres (postgres://…), got %q", errUsage, store.Redact(*dsn))
	}
	if m.History != 0 && m.History < time.Minute {
		return fmt.Errorf("%w: --history %v: want 0 (none) or at least 1m, before the run's first event", errUsage, m.History)
	}
	if m.Rollout > fleet.MaxRollout {
		return fmt.Errorf("%w: --rollout %d: at most %d, the pods the model has addresses for", errUsage, m.Rollout, fleet.MaxRollout)
	}
	var counts []int
	for _, s := range strings.Split(*nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("%w: --nodes %q: want positive counts, comma-separated", errUsage, *nodes)
		}
		if n*m.PodsPerNode > fleet.MaxRunningPods {
			return fmt.Errorf("%w: --nodes %d × --pods-per-node %d: %d pods, at most %d, the pods the model has addresses for",
				errUsage, n, m.PodsPerNode, n*m.PodsPerNode, fleet.MaxRunningPods)
		}
		counts = append(counts, n)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	o := fleet.Options{Model: m, Steady: *steady, Drain: *drain, Postgres: *dsn, Keep: *keep,
		Server:   func(args ...string) *exec.Cmd { return exec.Command(exe, args...) },
		Writer:   store.WriterOptions{Batch: *batch, Interval: *flush},
		Progress: os.Stderr, Seed: 1}
	if *agentConc > 0 {
		o.ServerArgs = append(o.ServerArgs, "--agent-concurrency", strconv.Itoa(*agentConc))
	}
	o.ServerArgs = append(o.ServerArgs, strings.Fields(*serveArgs)...)
	return simulate(ctx, counts, o, os.Stdout)
}

// simulate runs fleet.Run for each count on one cluster of the largest and
// prints the table.
func simulate(ctx context.Context, counts []int, o fleet.Options, out *os.File) error {
	raiseFileLimit(o.Progress)
	maxN := 0
	for _, n := range counts {
		maxN = max(maxN, n)
	}
	dir, err := os.MkdirTemp("", "drainscope-simulate-")
	if err != nil {
		return err
	}
	if o.Dir == "" {
		o.Dir = dir
	}
	fmt.Fprintf(o.Progress, "drainscope lab simulate: %v nodes; model: %s; steady %v; agents' batch %d, flush %v; server logs and reports in %s; load average %s\n",
		counts, o.Model.Describe(maxN), o.Steady, o.Writer.Batch, o.Writer.Interval, o.Dir, loadAverage())
	// The tokens are valid for 6 hours against a cluster that is gone
	// when this returns; removed all the same.
	tokens, err := os.MkdirTemp("", "drainscope-simulate-tokens-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tokens)
	cl, err := fleet.StartCluster(ctx, maxN, tokens, o.Progress)
	if err != nil {
		return err
	}
	defer cl.Stop()
	var rows []fleet.Row
	for _, n := range counts {
		fmt.Fprintf(o.Progress, "%d nodes (%s):\n", n, o.Model.Describe(n))
		r, err := fleet.Run(ctx, cl, n, o)
		if err != nil {
			fleet.WriteTable(out, rows)
			return fmt.Errorf("%d nodes: %w", n, err)
		}
		rows = append(rows, r)
	}
	fleet.WriteTable(out, rows)
	return nil
}

// raiseFileLimit lifts the soft limit on open files to the hard one: each
// simulated agent holds a connection, and the server (which inherits the
// limit) holds the other end.
func raiseFileLimit(progress interface{ Write([]byte) (int, error) }) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			fmt.Fprintf(progress, "raising the open-file limit to %d: %v\n", l.Max, err)
		}
	}
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
