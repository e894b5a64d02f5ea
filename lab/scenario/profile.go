// Package scenario runs the lab's experiment. It makes a control run without a
// rollout, then one run per shutdown behaviour with a rolling update at a set
// time, each under the same keep-alive load through a Service's ClusterIP, on
// a real single-node Kubernetes brought up for the purpose (control plane,
// kube-proxy in nftables mode, the lab node). It records everything into the
// store and returns, per run, what the clients saw.
package scenario

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/lab/sampleapp"
)

// Profile is the shape of an experiment: how long each run lasts, when the
// rollout starts, how many replicas and clients.
type Profile struct {
	Name        string
	Duration    time.Duration // load per run
	Control     time.Duration // load of the control run; Duration when 0
	RolloutAt   time.Duration // from the start of the load
	Replicas    int32
	Clients     int
	Interval    time.Duration // each client's pause between requests
	Timeout     time.Duration // per request; generous, so a busy machine does not fail requests
	ExitDelay   time.Duration // graceful: SIGTERM to exit
	PreStop     time.Duration // the preStop sleep of the graceful+preStop run
	Grace       time.Duration // terminationGracePeriodSeconds
	ProbePeriod time.Duration // readiness probe period
	// Settle, when set, makes the profile a long-lived one (RunLongLived):
	// the pods run this long under the load before the first disruption,
	// and Gap separates the disruptions that follow. Duration, Control and
	// RolloutAt are then unused.
	Settle time.Duration
	Gap    time.Duration
	// MinReady is the long-lived sequence's slow rollout's
	// minReadySeconds: each new pod counts as available, and the next
	// old pod ends, this long after it became ready.
	MinReady time.Duration
	// Sidecar makes the profile the sidecar one: its runs are
	// SidecarRuns (a proxy beside the app), on the real node only.
	Sidecar bool
	// Patch makes the profile the patch one: its runs are PatchRuns, on
	// the real node only (whose kubelet runs the exec hook the image
	// cannot), each rolled out again with the patch its report printed.
	Patch bool
}

// LongLived tells whether the profile runs the long-lived sequence.
func (p Profile) LongLived() bool { return p.Settle > 0 }

// Profiles are the built-in experiment shapes.
var Profiles = map[string]Profile{
	// short finishes in a few minutes: five runs of 30 s.
	"short": {
		Name: "short", Duration: 30 * time.Second, RolloutAt: 5 * time.Second,
		Replicas: 4, Clients: 20, Interval: 110 * time.Millisecond, Timeout: 5 * time.Second,
		ExitDelay: 3 * time.Second, PreStop: 5 * time.Second, Grace: 30 * time.Second, ProbePeriod: time.Second,
	},
	// seed000 is the field report's experiment: 4 replicas, 20 keep-alive
	// clients, about 19,000 requests in 110 s per run, rollout at 25 s,
	// the graceful handler exiting 3 s after SIGTERM, a 5 s preStop sleep.
	"seed000": {
		Name: "seed000", Duration: 110 * time.Second, RolloutAt: 25 * time.Second,
		Replicas: 4, Clients: 20, Interval: 110 * time.Millisecond, Timeout: 5 * time.Second,
		ExitDelay: 3 * time.Second, PreStop: 5 * time.Second, Grace: 30 * time.Second, ProbePeriod: time.Second,
	},
	// longlived lets the pods run 20 minutes under the load, as on a
	// cluster that has run for days (exec probes, a recycled worker, a
	// log shipper beside the app), then rolls the Deployment out and, 3
	// minutes apart, scales it down, evicts a pod, gets a container
	// OOM-killed, deletes one of the pods' two Services, rolls it out
	// slowly, pauses and resumes a rollout and, on the real node, has the
	// kubelet evict a pod (RunLongLived). The slow rollout's old pods end
	// 2.5 minutes apart, more than the quiet gap that once split a
	// rollout in two (analysis.RolloutGap).
	"longlived": {
		Name: "longlived", Duration: 20 * time.Minute, Settle: 20 * time.Minute, Gap: 3 * time.Minute,
		MinReady: analysis.RolloutGap + 30*time.Second,
		Replicas: 4, Clients: 20, Interval: 110 * time.Millisecond, Timeout: 5 * time.Second,
		ExitDelay: 3 * time.Second, PreStop: 5 * time.Second, Grace: 30 * time.Second, ProbePeriod: 2 * time.Second,
	},
	// sidecar rolls out a Deployment whose pods hold a mesh's proxy
	// beside the app, once per way the proxy ends (SidecarRuns); the
	// runs last longer than short's, as a draining proxy outlives its app
	// by ProxyGrace.
	"sidecar": {
		Name: "sidecar", Duration: 40 * time.Second, RolloutAt: 5 * time.Second, Sidecar: true,
		Replicas: 4, Clients: 20, Interval: 110 * time.Millisecond, Timeout: 5 * time.Second,
		ExitDelay: 3 * time.Second, PreStop: 5 * time.Second, Grace: 30 * time.Second, ProbePeriod: time.Second,
	},
	// ci is the end-to-end test's: short runs that still cover a whole
	// rollout and the last pod's exit.
	"patch": {
		Name: "patch", Duration: 30 * time.Second, RolloutAt: 3 * time.Second, Patch: true,
		Replicas: 4, Clients: 20, Interval: 110 * time.Millisecond, Timeout: 5 * time.Second,
		ExitDelay: 3 * time.Second, PreStop: 5 * time.Second, Grace: 30 * time.Second, ProbePeriod: time.Second,
	},
	"ci": {
		Name: "ci", Duration: 20 * time.Second, Control: 8 * time.Second, RolloutAt: 3 * time.Second,
		Replicas: 4, Clients: 20, Interval: 110 * time.Millisecond, Timeout: 5 * time.Second,
		ExitDelay: 3 * time.Second, PreStop: 5 * time.Second, Grace: 30 * time.Second, ProbePeriod: time.Second,
	},
}

// ProfileNames lists the built-in profiles.
func ProfileNames() []string {
	var out []string
	for k := range Profiles {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Validate checks that a profile can work.
func (p Profile) Validate() error {
	switch {
	case p.Duration <= 0 || p.RolloutAt < 0 || p.RolloutAt >= p.Duration:
		return fmt.Errorf("profile %s: the rollout (at %v) must start within the run (%v)", p.Name, p.RolloutAt, p.Duration)
	case p.Replicas < 1 || p.Clients < 1:
		return fmt.Errorf("profile %s: want at least one replica and one client", p.Name)
	case p.Grace < time.Second:
		return fmt.Errorf("profile %s: grace period %v is under a second", p.Name, p.Grace)
	case p.Interval < time.Millisecond:
		return fmt.Errorf("profile %s: client interval %v is too short for a lab", p.Name, p.Interval)
	case p.Settle < 0 || p.Gap < 0 || (p.Settle > 0 && p.Gap == 0):
		return fmt.Errorf("profile %s: settle %v and gap %v: want both positive, or neither", p.Name, p.Settle, p.Gap)
	case p.MinReady < 0 || p.MinReady%time.Second != 0:
		return fmt.Errorf("profile %s: minReadySeconds %v: want whole seconds, 0 or more", p.Name, p.MinReady)
	case p.Patch && (p.Sidecar || p.Settle > 0):
		return fmt.Errorf("profile %s: the patch profile is neither a sidecar nor a long-lived one", p.Name)
	case p.Sidecar && p.Settle > 0:
		return fmt.Errorf("profile %s: a sidecar profile has no settle time", p.Name)
	case p.Sidecar && ProxyGrace(p) >= p.Grace:
		return fmt.Errorf("profile %s: the draining proxy's %v must end within the grace period %v", p.Name, ProxyGrace(p), p.Grace)
	}
	return nil
}

// ControlDuration is how long the control run's load lasts.
func (p Profile) ControlDuration() time.Duration {
	if p.Control > 0 {
		return p.Control
	}
	return p.Duration
}

// Run is one run of the experiment.
type Run struct {
	Name      string // also the Deployment's and Service's suffix
	Behaviour sampleapp.Behaviour
	PreStop   bool // add a preStop sleep to the pod spec
	Rollout   bool // false for the control run
	What      string
	// Sidecar, when set, puts a mesh's proxy beside the app, of that
	// kind (the sidecar profile's runs, SidecarRuns).
	Sidecar SidecarKind
	// PreStopExec makes the preStop an exec of sleep for the profile's
	// PreStop, which the app's image (one static binary, no sleep) cannot
	// run: the kubelet reports FailedPreStopHook and SIGTERM comes at once,
	// as on a distroless image.
	PreStopExec bool
	// PatchCommand, when set, is a kubectl command line (drainscope's
	// printed patch) run against the run's Deployment once it is ready,
	// before the load: the run is its rollout with the patch applied.
	PatchCommand string
}

// Runs are the experiment's runs, in order.
var Runs = []Run{
	{Name: "control", Behaviour: sampleapp.Exit, What: "no rollout: the baseline"},
	{Name: "exit", Behaviour: sampleapp.Exit, Rollout: true, What: "exit at SIGTERM"},
	{Name: "graceful", Behaviour: sampleapp.Graceful, Rollout: true, What: "close the listener, exit after a delay"},
	{Name: "prestop", Behaviour: sampleapp.Graceful, PreStop: true, Rollout: true, What: "graceful plus a preStop sleep"},
	{Name: "drain", Behaviour: sampleapp.Drain, Rollout: true, What: "Connection: close while draining, exit when idle"},
}

// SelectRuns returns the runs named in a comma-separated list, in the
// experiment's order; an empty list selects all.
func SelectRuns(list string) ([]Run, error) { return selectRuns(Runs, list) }

// Runs are the profile's runs: SidecarRuns for the sidecar profile,
// PatchRuns for the patch profile, Runs for the others.
func (p Profile) Runs() []Run {
	switch {
	case p.Sidecar:
		return SidecarRuns
	case p.Patch:
		return PatchRuns
	}
	return Runs
}

// SelectProfileRuns returns the runs of p's named in a comma-separated
// list, in the experiment's order; an empty list selects all.
func SelectProfileRuns(p Profile, list string) ([]Run, error) { return selectRuns(p.Runs(), list) }

func selectRuns(all []Run, list string) ([]Run, error) {
	if strings.TrimSpace(list) == "" {
		return slices.Clone(all), nil
	}
	want := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if !slices.ContainsFunc(all, func(r Run) bool { return r.Name == n }) {
			return nil, fmt.Errorf("unknown run %q (want some of: %s)", n, RunNames(all))
		}
		want[n] = true
	}
	var out []Run
	for _, r := range all {
		if want[r.Name] {
			out = append(out, r)
		}
	}
	return out, nil
}

// RunNames lists the runs' names, comma-separated.
func RunNames(runs []Run) string {
	var s []string
	for _, r := range runs {
		s = append(s, r.Name)
	}
	return strings.Join(s, ",")
}
