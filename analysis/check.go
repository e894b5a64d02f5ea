package analysis

import (
	"context"
	"fmt"
	"sort"

	"github.com/drainscope/drainscope/store"
)

// A rollout's risk is known before it: each workload's termination budget
// (what its spec gives its pods to stop) against what this cluster was
// measured to need (how long endpoints took to leave rotation after a
// deletion, how long the workload's pods took to drain). Check reads a
// window of history, as a report does, and judges every workload whose
// pods it saw, with the patch that report would print.

// Reasons a workload's next rollout will drop requests (WorkloadCheck.Reasons).
const (
	// RiskRace: its preStop waits less than endpoints took to leave
	// rotation: new connections reach pods that got SIGTERM.
	RiskRace = "endpoint_race"
	// RiskHook: its preStop failed at its last stop (FailedPreStopHook).
	RiskHook = "prestop_failed"
	// RiskGrace: its grace period is shorter than its preStop and the
	// drain its pods were seen to need: SIGKILL cuts the drain.
	RiskGrace = "sigkill"
)

// WorkloadCheck is one workload's termination budget against what this
// cluster needs, and the patch that closes the gap.
type WorkloadCheck struct {
	Namespace string `json:"namespace"`
	Kind      string `json:"workload_kind"`
	Name      string `json:"workload_name"`
	Container string `json:"container,omitempty"`
	// Risky: its next rollout will drop requests, for Reasons (Risk*),
	// each said in Why.
	Risky   bool     `json:"risky"`
	Reasons []string `json:"reasons,omitempty"`
	Why     []string `json:"why"`
	// Wait is what its preStop waits (seconds; nil: not known), Grace its
	// terminationGracePeriodSeconds; Lag and Drain what was measured (ns,
	// -1: not measured), with where from.
	Wait      *int64 `json:"prestop_wait_s,omitempty"`
	Grace     *int64 `json:"grace_period_s,omitempty"`
	Lag       int64  `json:"lag_ns"`
	LagFrom   string `json:"lag_from,omitempty"`
	Drain     int64  `json:"drain_ns"`
	DrainFrom string `json:"drain_from,omitempty"`
	Patch     *Patch `json:"patch,omitempty"`
}

// Check analyses q's window of st and judges each workload (of q's
// namespace and workload, when set) whose app container's spec it saw.
func Check(ctx context.Context, st store.Store, q store.Query, opts Options) ([]WorkloadCheck, *Result, error) {
	res, err := AnalyzeWith(ctx, st, q, opts)
	if err != nil {
		return nil, nil, err
	}
	return CheckResult(res), res, nil
}

// CheckResult judges each workload whose pods res holds. A workload whose
// own pods' endpoints were not seen leaving rotation is judged by the
// lag of the cluster's (every pod res saw deleted).
func CheckResult(res *Result) []WorkloadCheck {
	type key struct{ ns, kind, name string }
	seen := map[key]bool{}
	var keys []key
	for i := range res.Timelines {
		tl := &res.Timelines[i]
		k := key{tl.Pod.Namespace, tl.Kind, tl.Name}
		if tl.Kind == "" || tl.Name == "" || seen[k] {
			continue
		}
		seen[k] = true
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.ns != b.ns {
			return a.ns < b.ns
		}
		if a.kind != b.kind {
			return a.kind < b.kind
		}
		return a.name < b.name
	})
	cluster := clusterLag(res)
	var out []WorkloadCheck
	for _, k := range keys {
		b := workloadBudget(res, k.ns, k.kind, k.name, nil)
		if b.Stop == nil || !b.Stop.Recorded {
			continue // its app's spec was not recorded: nothing to judge
		}
		if b.Lag < 0 && cluster.Lag >= 0 {
			b.Lag, b.LagFrom = cluster.Lag, "every workload's: "+cluster.LagFrom
		}
		out = append(out, judge(b))
	}
	return out
}

// clusterLag is the lag of every pod res saw deleted, whatever its
// workload.
func clusterLag(res *Result) *budget {
	return budgetOf(res, func(*PodTimeline) bool { return true }, func(*PodTimeline) bool { return false })
}

// judge says what b's next rollout risks and the patch for it.
func judge(b *budget) WorkloadCheck {
	s := b.Stop
	c := WorkloadCheck{Namespace: b.Namespace, Kind: b.Kind, Name: b.Name, Container: s.Container,
		Lag: b.Lag, LagFrom: b.LagFrom, Drain: b.Drain, DrainFrom: b.DrainFrom, Grace: s.GracePeriod, Why: []string{}}
	var wait int64 = -1
	switch {
	case s.HookFailed != 0:
		wait = 0
		c.Reasons = append(c.Reasons, RiskHook)
		c.Why = append(c.Why, "its preStop failed at its last stop (the kubelet's FailedPreStopHook): SIGTERM comes at once")
	case s.PreStopSleep != nil:
		wait = *s.PreStopSleep
	case s.PreStop == "":
		wait = 0
	}
	if wait >= 0 {
		c.Wait = ptr(wait)
	}
	switch {
	case b.Lag < 0:
		c.Why = append(c.Why, "no endpoint was seen leaving rotation after a deletion in the window: the preStop cannot be judged")
	case wait < 0:
		c.Why = append(c.Why, fmt.Sprintf("its preStop is a %s hook whose wait is not in its spec: endpoints took %s to leave rotation (%s)", s.PreStop, fmtDur(b.Lag), b.LagFrom))
	case wait*1e9 < b.Lag:
		c.Reasons = append(c.Reasons, RiskRace)
		c.Why = append(c.Why, fmt.Sprintf("its preStop waits %d s, and endpoints took %s to leave rotation (%s): connections routed meanwhile reach a pod that got SIGTERM, refused unless the app keeps accepting", wait, fmtDur(b.Lag), b.LagFrom))
	default:
		c.Why = append(c.Why, fmt.Sprintf("its preStop waits %d s, longer than the %s endpoints took to leave rotation (%s)", wait, fmtDur(b.Lag), b.LagFrom))
	}
	grace := int64(30)
	if s.GracePeriod != nil {
		grace = *s.GracePeriod
	}
	switch {
	case b.Drain < 0:
		c.Why = append(c.Why, "none of its pods was seen exiting by itself after SIGTERM: its drain cannot be judged")
	case grace*1e9 < max(wait, 0)*1e9+b.Drain:
		c.Reasons = append(c.Reasons, RiskGrace)
		c.Why = append(c.Why, fmt.Sprintf("its grace period, %d s, is shorter than its preStop (%d s) and the drain its pods needed, %s (%s): SIGKILL cuts the drain", grace, max(wait, 0), fmtDur(b.Drain), b.DrainFrom))
	default:
		c.Why = append(c.Why, fmt.Sprintf("its grace period, %d s, holds its preStop and the drain its pods needed, %s", grace, fmtDur(b.Drain)))
	}
	c.Risky = len(c.Reasons) > 0
	if c.Risky {
		for _, r := range c.Reasons {
			switch r {
			case RiskHook:
				b.Causes = append(b.Causes, CausePreStopFailed)
			case RiskRace:
				b.Causes = append(b.Causes, CauseEndpointRace)
			case RiskGrace:
				b.Causes = append(b.Causes, CauseSIGKILL)
			}
		}
		c.Patch = planPatch(b)
	}
	return c
}
