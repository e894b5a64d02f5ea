package main

import (
	"cmp"
	"fmt"
	"strings"
	"testing"

	"github.com/drainscope/drainscope/watcher"
)

func TestAgentRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--endpoints-mode=some-nodes"}, "want auto, all-nodes or leader"},
		{[]string{"--leader-above-nodes=0"}, "want a positive number of nodes"},
		{[]string{"--sample-nodes=0"}, "want 1 or more"},
		{[]string{"--buffer-events=0"}, "must be positive"},
		{[]string{"--flight-lead=0s"}, "--flight-lead and --flight-calm must be positive"},
		{[]string{"--coverage-interval=10m"}, "--coverage-interval 10m0s: want more than 0 and at most 5m0s"},
		{[]string{"--coverage-interval=0s"}, "--coverage-interval 0s: want more than 0"},
		{[]string{"--metrics-listen=9090"}, "want host:port"},
		{[]string{"--node="}, "--node is empty"},
		{[]string{"stray"}, "unexpected argument"},
		{[]string{"--dataplane=ipvs"}, "want auto or off"},
		{[]string{"--kernel-without=no_socket_reset"}, "unknown feature"},
		{[]string{"--server=http://127.0.0.1:8080", "--store=/tmp/x.db"}, "choose one"},
		{[]string{"--server=http://127.0.0.1:8080", "--retention=1d"}, "drainscope serve prunes"},
		{[]string{"--server=127.0.0.1:8080"}, "want http(s)://host"},
		{[]string{"--server=http://127.0.0.1:8080", "--all-pods"}, "only this node's pods' events"},
	} {
		code, _, stderr := runCLI(t, append([]string{"agent"}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("agent %v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}

// Outside a pod and without a kubeconfig the agent says what it lacks.
func TestAgentWithoutACluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBECONFIG", t.TempDir()+"/none")
	t.Setenv("HOME", t.TempDir())
	code, _, stderr := runCLI(t, "agent", "--node=n1", "--no-kernel", "--metrics-listen=")
	if code != 1 || !strings.Contains(stderr, "no Kubernetes configuration") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

// chooseScope: which nodes store every endpoint's rule changes and the
// observed state, by mode, cluster size and sample.
func TestChooseScope(t *testing.T) {
	// A name in the sample of 5 of 5,000 nodes, and one outside it.
	in, out := "", ""
	for i := 0; in == "" || out == ""; i++ {
		name := fmt.Sprintf("node-%d", i)
		if watcher.SampledNode(name, 5000, 5) {
			in = cmp.Or(in, name)
		} else {
			out = cmp.Or(out, name)
		}
	}
	// A name outside the lease's candidates at 5,000 nodes (the sample of 5
	// is inside them: the same hash against a lower bound).
	far := ""
	for i := 0; far == ""; i++ {
		if name := fmt.Sprintf("node-%d", i); !watcher.SampledNode(name, 5000, leaseCandidates) {
			far = name
		}
	}
	for _, tc := range []struct {
		name                       string
		mode                       watcher.Mode
		nodes, k                   int
		node                       string
		sampled, noObsv, candidate bool
	}{
		{"small cluster: all in the sample", watcher.EveryNode, 3, 5, out, true, false, true},
		{"all-nodes, big, in", watcher.EveryNode, 5000, 5, in, true, false, true},
		{"all-nodes, big, outside: no shared observation", watcher.EveryNode, 5000, 5, out, false, true, true},
		{"all-nodes, uncounted: as before the sample", watcher.EveryNode, 0, 5, out, true, false, true},
		{"leader, big, outside: the leader observes", watcher.Leader, 5000, 5, out, false, false, watcher.SampledNode(out, 5000, leaseCandidates)},
		{"leader, big, far from the lease", watcher.Leader, 5000, 5, far, false, false, false},
		{"leader, big, in: a candidate", watcher.Leader, 5000, 5, in, true, false, true},
		{"leader, uncounted: drawn as in 5,000 nodes, every node a candidate", watcher.Leader, 0, 5, far, false, false, true},
		{"leader, uncounted, in", watcher.Leader, 0, 5, in, true, false, true},
	} {
		sc := chooseScope(watcher.ModeChoice{Mode: tc.mode, Nodes: tc.nodes}, tc.node, tc.k)
		if sc.sampled != tc.sampled || sc.noSharedObserve != tc.noObsv || sc.candidate != tc.candidate {
			t.Errorf("%s: sampled %v, no shared observation %v, lease candidate %v; want %v, %v, %v", tc.name,
				sc.sampled, sc.noSharedObserve, sc.candidate, tc.sampled, tc.noObsv, tc.candidate)
		}
	}
}
