//go:build !nolab

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/analysis/textreport"
	"github.com/drainscope/drainscope/lab/sampleapp"
	"github.com/drainscope/drainscope/lab/scenario"
	"github.com/drainscope/drainscope/lab/simnode"
	"github.com/drainscope/drainscope/store"
)

const labUsage = `usage: drainscope lab [--profile short|seed000|ci] [--runs control,exit,graceful,prestop,drain]
                      [--proxy-mode nftables|iptables|iptables-legacy] [--ingress haproxy]
                      [--store DSN] [--duration D] [--rollout-at D] [--no-kernel]
                      [--serve ADDR] [--keep] [--direct-writes] [-v]
       drainscope lab --profile sidecar --node kubelet [--runs sidecar-exit,sidecar-native,sidecar-drain]
       drainscope lab --profile patch --node kubelet [--runs exit,graceful,execsleep,drain]
       drainscope lab --profile longlived [--node kubelet] [--settle 20m] [--gap 3m] [--min-ready 150s] [--store DSN]
       drainscope lab cleanup
       drainscope lab simulate --nodes 500,1000,2000,5000 --store postgres://… (docs/scale.md)

Runs a real single-node Kubernetes on this machine (etcd, kube-apiserver,
kube-controller-manager and kube-proxy in nftables mode (--proxy-mode iptables:
iptables mode with iptables-nft; iptables-legacy: with the legacy backend), from the binaries
scripts/k8s-binaries.sh builds; a lab node in the kubelet's role running each
pod as a process in its own network namespace and cgroup; with --node kubelet,
a real kubelet with containerd and runc instead), deploys a sample
HTTP service of 4 replicas (maxSurge 1, maxUnavailable 0) behind a ClusterIP
Service, and puts 20 keep-alive HTTP/1.1 clients on it. A control run has no
rollout; each other run rolls the Deployment out while the load runs, with the
service shutting down its own way:

  exit      exits at SIGTERM
  graceful  closes its listener at SIGTERM, exits 3 s later
  prestop   graceful, plus a 5 s preStop sleep in the pod spec
  drain     answers with "Connection: close" while draining, exits when idle (5 s at least)

drainscope records the pods, endpoints, kernel events and the clients'
failures into the store (what an agent records through the server's relay,
as drainscope agent --server does, with the token of an agent pod on the
lab node; --direct-writes: straight), then prints per run the requests, failures by class
and the causes it found, tears the cluster down and serves the web UI over
the recorded runs until interrupted (--serve '' to exit instead). Needs root.

To load the lab with a client of your own: each run prints its Service's
ClusterIP:port and name.ns.svc as the Service is created (the lab has no DNS:
dial the ClusterIP), and the lab prints its admin kubeconfig. With --keep,
after the runs the cluster stays up, still recording, with the Deployment
sample-own (the sample service exiting at SIGTERM) behind its Service, until
Ctrl-C: load its ClusterIP, roll it out with kubectl, then import your
client's log with 'drainscope import'. Everything the lab creates (bridge
dslab0, namespaces dslab-*, cgroup drainscope-lab, kube-proxy's nftables
tables, processes, working files in /run/drainscope-lab) is removed on exit,
on Ctrl-C and by 'drainscope lab cleanup'; only an empty lock file stays. Traffic goes only to loopback, the pod network
10.244.0.0/24 and the Service network 10.96.0.0/24.

With --ingress haproxy each run's Service gets Debian's HAProxy 2.6 in front
of it, on the bridge's address: one backend of server slots that follow the
Service's EndpointSlices through HAProxy's runtime API (set server addr/state,
no reload), as HAProxy's ingress controllers drive it. The load goes through
it; its access log is imported at each run's end (the haproxy format: the
pod is its server address, the mechanism its termination state), its own
server list is recorded as the dataplane events of node "haproxy", and the
report prints its removal lag after the EndpointSlice change beside
kube-proxy's. See docs/ingress-lab.md.

With --profile sidecar (real node only: --node kubelet) every pod holds a
mesh's inbound proxy beside the app: Debian's HAProxy 2.6 in a container
"proxy" on port 15006, to which an init container's iptables rule in the
pod's network namespace redirects the traffic for the app's port 8080 (as
Istio's init container does); it forwards to the app on 127.0.0.1:8080. The
app drains properly in every run (Connection: close while draining, exit
when idle, behind a 5 s preStop sleep); the proxy ends three ways:

  sidecar-exit    a regular container: SIGTERM at the deletion, HAProxy stops at once
  sidecar-native  a native sidecar (init container, restartPolicy Always): its
                  preStop starts its drain, the kubelet stops it after the app
  sidecar-drain   a regular container stopped by SIGUSR1: it keeps serving for 15 s,
                  answering Connection: close, then leaves once idle

See docs/lab.md.

With --profile patch (real node only: --node kubelet) the loop closes: the
runs exit and graceful roll out with no preStop, execsleep with a preStop
that execs sleep, which the app's image (one static binary) lacks, so the
kubelet reports FailedPreStopHook, and drain drains properly (Connection:
close while draining, behind a preStop sleep). Each
run's report prints a patch computed from what it measured and the
cluster's versions; the runs with one then roll out again after the lab
ran exactly the printed kubectl command. See docs/lab.md.

With --profile longlived the lab deploys one Deployment whose pods do what
pods that have run for days do (an exec readiness probe every 2 s, a worker
process replaced every 30 s, a log-shipper container beside the app), behind
two Services, lets them run under the load for --settle, then, --gap apart:
rolls it out, scales it down by one, evicts a pod through the Eviction API,
has one app container OOM-killed (--node kubelet: a 128Mi memory limit and
an allocation past it; the process node sets no limits, so the app crashes
with exit code 3 instead), deletes the second Service, rolls it out with
minReadySeconds --min-ready (its old pods end that far apart), rolls it out
again paused after its first old pod and resumed --gap later, and on
--node kubelet has the kubelet evict a pod whose app wrote past its 20Mi
ephemeral-storage limit. It prints each step's time and drainscope report
over a window that begins after the pods were ready, then tears the cluster
down. See docs/lab.md.

Flags:
`

// labSummary is the lab command's line in drainscope's usage.
const labSummary = "run the local lab: a real single-node Kubernetes that drops requests"

func init() { commands["lab"] = command{labSummary, runLab} }

func runLab(ctx context.Context, fs *flag.FlagSet, args []string) error {
	if len(args) > 0 {
		if handled, err := labSubcommand(ctx, fs, args); handled {
			return err
		}
	}
	f := defineLabFlags(fs)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	p, selected, err := f.profile()
	if err != nil {
		return err
	}
	exe, err := f.preflight(p)
	if err != nil {
		return err
	}
	log := labLogger(f.verbose)
	st, err := store.Open(ctx, f.dsn)
	if err != nil {
		return err
	}
	defer st.Close()

	progress := os.Stderr
	fmt.Fprintf(progress, "drainscope lab: profile %s, runs %s, %s node, recording into %s\n", p.Name, runNames(selected), f.nodeKind, st.Describe())
	started := time.Now()
	c, err := scenario.Up(ctx, f.options(p, exe, st, log, progress))
	if err != nil {
		return err
	}
	fmt.Fprintf(progress, "admin kubeconfig: %s (kubectl: %s)\n", c.CP.Kubeconfig(), filepath.Join(c.CP.BinDir(), "kubectl"))
	down := func() {
		fmt.Fprintln(progress, "tearing the lab down …")
		c.Down()
	}
	defer func() {
		if down != nil {
			down()
		}
	}()
	if p.LongLived() {
		err := labLongLived(ctx, c, p, st, f.dsn, progress)
		fmt.Printf("node: %s\n", c.NodeDescription())
		fmt.Printf("lab time: %s\n", time.Since(started).Round(time.Second))
		if errors.Is(err, context.Canceled) || ctx.Err() != nil {
			return errors.New("interrupted; cleaned up")
		}
		return err
	}
	results, err := scenario.Execute(ctx, c, scenario.Config{Profile: p, Runs: selected, Progress: progress, Log: log,
		Ingress: f.ingressKind, IngressSync: f.ingressSync})
	if len(results) > 0 {
		labReport(ctx, c, st, results, f.dsn, started)
	}
	if err == nil && p.Patch {
		var again []scenario.RunResult
		again, err = labPatchAgain(ctx, c, st, p, results, log, progress)
		if len(again) > 0 {
			labReport(ctx, c, st, again, f.dsn, started)
			results = append(results, again...)
		}
	}
	if errors.Is(err, context.Canceled) || ctx.Err() != nil {
		return errors.New("interrupted; cleaned up")
	}
	if err == nil && f.keep {
		return labKeep(ctx, c, p, f.dsn, exe)
	}
	if err != nil || f.serve == "" || len(results) == 0 {
		return err
	}
	down()
	down = nil
	st.Close()
	return labServe(ctx, f.serve, f.dsn, progress)
}

// labSubcommand runs the lab's subcommands (cleanup, and sampleapp and
// pause, which the lab node runs as this binary); handled is false when
// args[0] names none of them.
func labSubcommand(ctx context.Context, fs *flag.FlagSet, args []string) (handled bool, err error) {
	switch args[0] {
	case "cleanup":
		return true, runLabCleanup(ctx, fs, args[1:])
	case "simulate":
		return true, runLabSimulate(ctx, fs, args[1:])
	case "sampleapp":
		// The lab node runs the sample service as this binary.
		os.Exit(sampleapp.Main(args[1:], os.Stderr))
	case "pause":
		// The real node's sandbox image runs this: it holds the pod's
		// namespaces until the runtime stops it.
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		os.Exit(0)
	}
	return false, nil
}

// labFlags are the values of drainscope lab's flags once parsed.
type labFlags struct {
	profileName, runs, dsn  string
	duration, rolloutAt     time.Duration
	noKernel, wait, verbose bool
	serve                   string
	proxySync               time.Duration
	proxyMode, nodeKind     string
	settle, gap, minReady   time.Duration
	ingressKind             string
	ingressSync             time.Duration
	keep                    bool
	directWrites            bool
}

// defineLabFlags defines drainscope lab's flags and usage on fs.
func defineLabFlags(fs *flag.FlagSet) *labFlags {
	f := &labFlags{}
	fs.StringVar(&f.profileName, "profile", "short", "experiment shape: "+strings.Join(scenario.ProfileNames(), ", ")+" (seed000: 110 s runs, rollout at 25 s)")
	fs.StringVar(&f.runs, "runs", "", "comma-separated runs to do (default all of the profile's): control, exit, graceful, prestop, drain; with --profile sidecar: sidecar-exit, sidecar-native, sidecar-drain; with --profile patch: exit, graceful, execsleep, drain")
	fs.StringVar(&f.dsn, "store", os.Getenv("DRAINSCOPE_STORE"), "store DSN: postgres://… or a SQLite file path (default: "+store.DefaultPath()+"; env DRAINSCOPE_STORE)")
	fs.DurationVar(&f.duration, "duration", 0, "load per run (overrides the profile)")
	fs.DurationVar(&f.rolloutAt, "rollout-at", 0, "rollout start from the start of the load (overrides the profile)")
	fs.BoolVar(&f.noKernel, "no-kernel", false, "do not start the eBPF capture; the lab node records the signals and exits it causes")
	fs.BoolVar(&f.wait, "wait", false, "wait for another lab on this machine to finish instead of failing")
	fs.BoolVar(&f.verbose, "v", false, "log what the lab node and the control plane do")
	fs.StringVar(&f.serve, "serve", "127.0.0.1:8080", "after the runs, serve the web UI on this address until interrupted (empty: exit)")
	fs.DurationVar(&f.proxySync, "proxy-min-sync", 0, "kube-proxy's minimum sync period (its --iptables-min-sync-period, which the nftables mode reads; default kube-proxy's 1s): a longer one shows the dataplane lag growing with it")
	fs.StringVar(&f.proxyMode, "proxy-mode", scenario.ProxyNFTables, "kube-proxy's mode: "+strings.Join(scenario.ProxyModes, ", ")+" (iptables: the nf_tables backend, iptables-nft)")
	fs.StringVar(&f.nodeKind, "node", scenario.NodeProcess, "the lab node: process (each container a process of the lab) or kubelet (a real kubelet with containerd and runc; needs a static binary, CGO_ENABLED=0)")
	fs.DurationVar(&f.settle, "settle", 0, "longlived profile: how long the pods run under the load before the first disruption (default the profile's 20m)")
	fs.DurationVar(&f.gap, "gap", 0, "longlived profile: time between one disruption's end and the next's start (default the profile's 3m)")
	fs.DurationVar(&f.minReady, "min-ready", 0, "longlived profile: the slow rollout's minReadySeconds, whole seconds (default the profile's 2m30s)")
	fs.StringVar(&f.ingressKind, "ingress", "", "put this proxy in front of each run's Service and load the runs through it: "+strings.Join(scenario.Ingresses, ", ")+" (Debian's haproxy; see docs/ingress-lab.md)")
	fs.DurationVar(&f.ingressSync, "ingress-sync", scenario.DefaultIngressSync, "with --ingress: how often the proxy's slots take the EndpointSlice changes seen since the last time, as ingress controllers batch them (0: each change as it comes)")
	fs.BoolVar(&f.directWrites, "direct-writes", false, "store the agent's events (watcher, kernel, dataplane) straight into the store, instead of through the server's relay with the agent pod's token as drainscope agent --server does (for debugging)")
	fs.BoolVar(&f.keep, "keep", false, "after the runs, keep the cluster up and recording, with the Deployment sample-own behind a Service, until Ctrl-C (instead of --serve)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), labUsage)
		fs.PrintDefaults()
	}
	return f
}

// profile checks the flags and returns the profile they shape and the runs
// they select.
func (f *labFlags) profile() (scenario.Profile, []scenario.Run, error) {
	if f.proxySync < 0 {
		return scenario.Profile{}, nil, fmt.Errorf("%w: --proxy-min-sync %v: want a positive duration, e.g. 3s", errUsage, f.proxySync)
	}
	p, ok := scenario.Profiles[f.profileName]
	if !ok {
		return scenario.Profile{}, nil, fmt.Errorf("%w: unknown profile %q (want one of %s)", errUsage, f.profileName, strings.Join(scenario.ProfileNames(), ", "))
	}
	if f.duration > 0 {
		p.Duration = f.duration
		p.Control = 0
	}
	if f.rolloutAt > 0 {
		p.RolloutAt = f.rolloutAt
	}
	if (f.settle != 0 || f.gap != 0 || f.minReady != 0) && !p.LongLived() {
		return scenario.Profile{}, nil, fmt.Errorf("%w: --settle, --gap and --min-ready are for --profile longlived", errUsage)
	}
	if f.settle != 0 {
		p.Settle = f.settle
	}
	if f.gap != 0 {
		p.Gap = f.gap
	}
	if f.minReady != 0 {
		p.MinReady = f.minReady
	}
	if err := p.Validate(); err != nil {
		return scenario.Profile{}, nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	selected, err := scenario.SelectProfileRuns(p, f.runs)
	if err != nil {
		return scenario.Profile{}, nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if p.Patch && f.nodeKind != scenario.NodeKubelet {
		return scenario.Profile{}, nil, fmt.Errorf("%w: --profile %s runs on the real node only: add --node kubelet (its exec preStop fails on the real kubelet)", errUsage, p.Name)
	}
	if p.Patch && f.ingressKind != "" {
		return scenario.Profile{}, nil, fmt.Errorf("%w: --ingress is for the short profiles' runs, not --profile %s", errUsage, p.Name)
	}
	if p.Sidecar && f.nodeKind != scenario.NodeKubelet {
		return scenario.Profile{}, nil, fmt.Errorf("%w: --profile %s runs on the real node only: add --node kubelet (the proxy and its iptables redirect are containers)", errUsage, p.Name)
	}
	if p.Sidecar && f.ingressKind != "" {
		return scenario.Profile{}, nil, fmt.Errorf("%w: --ingress is for the short profiles' runs, not --profile %s", errUsage, p.Name)
	}
	if !slices.Contains(scenario.ProxyModes, f.proxyMode) {
		return scenario.Profile{}, nil, fmt.Errorf("%w: --proxy-mode %q: want one of %s", errUsage, f.proxyMode, strings.Join(scenario.ProxyModes, ", "))
	}
	if f.nodeKind != scenario.NodeProcess && f.nodeKind != scenario.NodeKubelet {
		return scenario.Profile{}, nil, fmt.Errorf("%w: --node %q: want %s or %s", errUsage, f.nodeKind, scenario.NodeProcess, scenario.NodeKubelet)
	}
	if f.ingressSync < 0 {
		return scenario.Profile{}, nil, fmt.Errorf("%w: --ingress-sync %v: want 0 or more", errUsage, f.ingressSync)
	}
	if f.ingressKind != "" {
		if !slices.Contains(scenario.Ingresses, f.ingressKind) {
			return scenario.Profile{}, nil, fmt.Errorf("%w: --ingress %q: want one of %s", errUsage, f.ingressKind, strings.Join(scenario.Ingresses, ", "))
		}
		if p.LongLived() {
			return scenario.Profile{}, nil, fmt.Errorf("%w: --ingress is for the rollout runs, not --profile longlived", errUsage)
		}
		if f.keep {
			return scenario.Profile{}, nil, fmt.Errorf("%w: --ingress is for the rollout runs; --keep's Deployment has none", errUsage)
		}
	}
	return p, selected, nil
}

// preflight checks that this machine can run the lab the flags ask for
// and returns this program's path, which the lab node runs.
func (f *labFlags) preflight(p scenario.Profile) (exe string, err error) {
	if f.ingressKind != "" {
		if err := scenario.PreflightIngress(f.ingressKind); err != nil {
			return "", err
		}
	}
	if p.Sidecar {
		if err := scenario.PreflightSidecar(); err != nil {
			return "", err
		}
	}
	if err := scenario.Preflight(""); err != nil {
		return "", err
	}
	exe, err = os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding this program to run the sample service: %w", err)
	}
	if f.nodeKind == scenario.NodeKubelet {
		if err := scenario.PreflightKubelet("", exe); err != nil {
			return "", err
		}
	}
	return exe, nil
}

// labLogger returns the lab's logger, in the format --log-format chose and
// quieter unless verbose, and routes client-go's klog to it.
func labLogger(verbose bool) *slog.Logger {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	log := slog.New(minLevel{level, slog.Default().Handler()})
	// client-go logs through klog; a watch cancelled during a run's
	// teardown is no news unless asked for.
	if verbose {
		klog.SetSlogLogger(log)
	} else {
		klog.SetSlogLogger(slog.New(slog.DiscardHandler))
	}
	return log
}

// options are the lab cluster's options the flags choose.
func (f *labFlags) options(p scenario.Profile, exe string, st store.Store, log *slog.Logger, progress io.Writer) scenario.Options {
	return scenario.Options{
		Sidecar:      p.Sidecar,
		AppCommand:   []string{exe, "lab", "sampleapp"},
		Images:       map[string]simnode.Image{scenario.ServerImage: {Entrypoint: []string{exe}}}, // --keep's server
		Store:        st,
		NoKernel:     f.noKernel,
		WaitForLock:  f.wait,
		Node:         f.nodeKind,
		Binary:       exe,
		Log:          log,
		Progress:     progress,
		ProxyArgs:    proxyArgs(f.proxySync),
		ProxyMode:    f.proxyMode,
		DirectWrites: f.directWrites,
	}
}

// labPatchAgain prints the patch each run's report printed and rolls the
// runs that have one out again after running exactly that command.
func labPatchAgain(ctx context.Context, c *scenario.Cluster, st store.Store, p scenario.Profile, results []scenario.RunResult, log *slog.Logger, progress io.Writer) ([]scenario.RunResult, error) {
	c.Sync()
	again, found, err := scenario.Patched(ctx, st, results)
	if err != nil {
		return nil, err
	}
	fmt.Println()
	fmt.Println("PATCHES (each run's report, computed from what it measured and the cluster's versions)")
	for _, r := range results {
		d := found[r.Run.Name]
		if d == nil {
			continue
		}
		fmt.Printf("  %s: %s\n", r.Run.Name, d.CountsByCause(false))
		head, cmd, lines := textreport.PatchLines(d.Patch, nil)
		if head != "" {
			fmt.Printf("    %s\n      %s\n", head, cmd)
		}
		for _, l := range lines {
			fmt.Printf("    %s\n", l)
		}
	}
	if len(again) == 0 {
		fmt.Println("  no run printed a patch: nothing to roll out again")
		return nil, nil
	}
	fmt.Fprintf(progress, "rolling out %s again, each after its printed patch\n", runNames(again))
	return scenario.Execute(ctx, c, scenario.Config{Profile: p, Runs: again, Progress: progress, Log: log})
}

// labReport prints the runs' table, the diagnosis and where to read more.
func labReport(ctx context.Context, c *scenario.Cluster, st store.Store, results []scenario.RunResult, dsn string, started time.Time) {
	fmt.Println()
	_ = scenario.WriteTable(os.Stdout, results)
	fmt.Println()
	c.Sync()
	if derr := scenario.Diagnose(context.WithoutCancel(ctx), os.Stdout, st, results); derr != nil {
		fmt.Fprintf(os.Stderr, "drainscope lab: diagnosis: %v\n", derr)
	}
	fmt.Println()
	fmt.Printf("full report: %s\n", scenario.ReportHint(results, dsn))
	if !c.Kernel() {
		fmt.Printf("(kernel capture was off: %v)\n", c.KernelErr)
	}
	fmt.Printf("node: %s\n", c.NodeDescription())
	fmt.Printf("proxy: %s\n", c.ProxyDescription(ctx))
	if rs, ok := c.RelayStats(); ok {
		fmt.Printf("agent events: through the server's relay (pod-bound token, TokenReview): %s\n", rs)
	} else {
		fmt.Printf("agent events: straight to the store (--direct-writes)\n")
	}
	fmt.Printf("lab time: %s\n", time.Since(started).Round(time.Second))
}

// labServe serves the web UI over the recorded runs until interrupted.
func labServe(ctx context.Context, addr, dsn string, progress io.Writer) error {
	fmt.Fprintf(progress, "serving the recorded runs at http://%s/ until interrupted (Ctrl-C)\n", addr)
	sargs := []string{"--listen", addr}
	if dsn != "" {
		sargs = append(sargs, "--store", dsn)
	}
	return runServe(ctx, flag.NewFlagSet("drainscope serve", flag.ContinueOnError), sargs)
}

// labLongLived runs the long-lived sequence, prints its steps' times and
// drainscope report over a window that begins after the pods were ready.
func labLongLived(ctx context.Context, c *scenario.Cluster, p scenario.Profile, st store.Store, dsn string, progress io.Writer) error {
	fmt.Fprintf(progress, "run: %s (%s); settle %v, %v between disruptions, the slow rollout's minReadySeconds %v\n",
		scenario.LongLivedRun.Name, scenario.LongLivedRun.What, p.Settle, p.Gap, p.MinReady)
	res, err := scenario.RunLongLived(ctx, c, scenario.Config{Profile: p, Progress: progress})
	if res.End.IsZero() {
		return err
	}
	fmt.Println()
	scenario.WriteSteps(os.Stdout, res)
	c.Sync()
	w := res.ReportWindow(scenario.ReportLead(p.Settle))
	from, to := time.Unix(0, w.From).UTC(), time.Unix(0, w.To).UTC()
	cmd := "drainscope report --since " + from.Format(time.RFC3339Nano) + " --until " + to.Format(time.RFC3339Nano)
	if dsn != "" {
		cmd += " --store '" + dsn + "'"
	}
	fmt.Printf("\n$ %s\n", cmd)
	r, aerr := analysis.Analyze(context.WithoutCancel(ctx), st, store.Query{Window: w})
	if aerr != nil {
		return errors.Join(err, aerr)
	}
	write, _ := reportWriter("text")
	if werr := write(os.Stdout, r); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// labKeep leaves the cluster up, recording, with a Deployment of the
// sample service for the user's own client, until ctx ends.
func labKeep(ctx context.Context, c *scenario.Cluster, p scenario.Profile, dsn, exe string) error {
	own, err := scenario.Deploy(ctx, c, scenario.Own, p)
	if ctx.Err() != nil {
		return nil // Ctrl-C while deploying: the deferred teardown follows
	}
	if err != nil {
		return fmt.Errorf("deploying %s for --keep: %w", scenario.Own.Name, err)
	}
	// As drainscope serve --events would: a rollout of sample-own that
	// drops requests shows up in kubectl describe, 20 s after its last pod.
	defer c.ExportEvents(ctx, 20*time.Second, nil)()
	// drainscope serve in the cluster, as the chart runs it, for kubectl
	// drainscope to find; it reads the lab's store on either node.
	plugin := fmt.Sprintf("KUBECONFIG=%s kubectl drainscope report deploy/%s -n %s --server-namespace %s\n"+
		"            (kubectl-drainscope on PATH: ln -s %s kubectl-drainscope)", c.CP.Kubeconfig(), own.Deployment, scenario.Namespace, scenario.Namespace, exe)
	if _, err := scenario.DeployServer(ctx, c, dsn); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		plugin = fmt.Sprintf("the server for kubectl drainscope did not start: %v", err)
	}
	kubectl := filepath.Join(c.CP.BinDir(), "kubectl") + " --kubeconfig " + c.CP.Kubeconfig() + " -n " + scenario.Namespace
	storeFlag := ""
	if dsn != "" {
		storeFlag = " --store '" + dsn + "'"
	}
	fmt.Printf(`
the lab stays up and recording until Ctrl-C:
  Service   %s at %s (%s; no DNS in the lab: dial the ClusterIP, from this
            machine: the route to %s uses source %s, which the pods see)
  kubectl   %s get pods,svc
  roll out  %s rollout restart deployment/%s
            (requests dropped? 20 s after the last old pod, describe deployment/%s shows a DroppedRequests Event)
  import    drainscope import --format jsonl%s CLIENT.jsonl   (or vegeta-json, nginx, …)
  report    drainscope report --since 30m%s
  plugin    %s
`, own.Service, own.ClusterIP, own.ServiceName(), c.ServiceCIDR(), c.ClientSource(), kubectl, kubectl, own.Deployment, own.Deployment, storeFlag, storeFlag, plugin)
	<-ctx.Done()
	return nil
}

func runNames(rs []scenario.Run) string {
	var s []string
	for _, r := range rs {
		s = append(s, r.Name)
	}
	return strings.Join(s, ",")
}

func runLabCleanup(ctx context.Context, fs *flag.FlagSet, args []string) error {
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: drainscope lab cleanup\n\nRemoves whatever a lab left behind on this machine (needs root).\n")
	}
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return scenario.ErrNotRoot
	}
	left, err := scenario.Cleanup(ctx, false)
	if left.Empty() && err == nil {
		fmt.Println("nothing to clean up")
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Printf("removed: %s\n", left)
	return nil
}

// minLevel passes on the records of level min and above.
type minLevel struct {
	min slog.Level
	slog.Handler
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.min, h.Handler.WithAttrs(as)}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.min, h.Handler.WithGroup(name)}
}

// proxyArgs are the kube-proxy flags --proxy-min-sync asks for.
func proxyArgs(minSync time.Duration) []string {
	if minSync <= 0 {
		return nil
	}
	return []string{"--iptables-min-sync-period=" + minSync.String()}
}
