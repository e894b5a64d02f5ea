//go:build !nolab

package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/lab/fleet"
	"github.com/drainscope/drainscope/store"
)

// TestLabSimulate runs the simulation at CI size: 50 agents with pod-bound
// tokens writing through a real drainscope serve process into a real
// Postgres for a few seconds, then a 50-pod rollout, on a store holding an
// hour-old history of the running pods. Every event produced
// must be stored or counted as dropped, each node must hold exactly what
// its own agent wrote, and the report and the cold timeline must answer
// (not the timeline from the digest: that waits for the rollout to end,
// event.RolloutGap, 2 min).
func TestLabSimulate(t *testing.T) {
	if _, err := controlplane.CheckBinaries("", "etcd", "kube-apiserver"); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	dsn := testenv.Env(t, "DRAINSCOPE_TEST_POSTGRES", "DSN of a throwaway Postgres")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, err := fleet.StartCluster(ctx, 50, t.TempDir(), t.Output())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	m := fleet.DefaultModel()
	m.Rollout, m.RolloutOver = 50, 2*time.Second
	m.History = time.Hour // a cluster that ran before: its pods' state precedes every window read
	o := fleet.Options{Model: m, Steady: 3 * time.Second, Drain: time.Minute, Postgres: dsn, NoDigestWait: true, Dir: t.TempDir(), Progress: t.Output(), Seed: 1,
		Server: func(args ...string) *exec.Cmd {
			cmd := exec.Command(exe, args...)
			cmd.Env = append(os.Environ(), "DRAINSCOPE_TEST_AS_MAIN=1", "KUBERNETES_SERVICE_HOST=")
			return cmd
		},
		Writer: store.WriterOptions{Interval: 200 * time.Millisecond}}
	r, err := fleet.Run(ctx, cl, 50, o)
	if err != nil {
		t.Fatal(err)
	}
	var tbl strings.Builder
	fleet.WriteTable(&tbl, []fleet.Row{r})
	t.Logf("\n%s", tbl.String())
	if r.Produced == 0 || r.Written == 0 {
		t.Fatalf("nothing produced or written: %+v", r)
	}
	if lost := r.Dropped + r.Rejected + r.Unwritten; r.Produced != r.InPostgres+lost || r.Written != r.InPostgres {
		t.Errorf("produced %d, written %d, in Postgres %d, dropped/rejected/unwritten %d: want produced = stored + dropped and written = stored",
			r.Produced, r.Written, r.InPostgres, lost)
	}
	if r.WrongNode != 0 {
		t.Errorf("%d events stored under another node than their agent's (or missing from it)", r.WrongNode)
	}
	if r.Reviews <= 0 {
		t.Errorf("no TokenReview reached the API server: the agents were not authenticated for real")
	}
	// The server timed every stage of the agents' batches.
	stages := map[string]uint64{}
	for _, st := range r.Stages {
		stages[st.Name] = st.Batches
	}
	for _, name := range []string{"review", "body", "check", "queue", "write"} {
		if stages[name] == 0 {
			t.Errorf("no batch reported its %s stage on the server's metrics (stages: %+v)", name, r.Stages)
		}
	}
	// The server's heap profile was read, and some of it is drainscope's.
	if r.HeapInuse == 0 || len(r.HeapSites) == 0 {
		t.Errorf("no heap profile read from the server (--pprof): %d bytes, sites %v", r.HeapInuse, r.HeapSites)
	}
	if len(r.Errors) > 0 || len(r.Report) == 0 || r.ColdLive == 0 {
		t.Errorf("after the rollout: report %v, cold timeline %v, errors %q", r.Report, r.ColdLive, r.Errors)
	}
}

// A model past its address ranges is refused with the flag that set it,
// before anything starts.
func TestLabSimulateUsage(t *testing.T) {
	dsn := "postgres://nobody@127.0.0.1:1/none"
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--nodes", "10000", "--pods-per-node", "30"}, "--nodes 10000 × --pods-per-node 30: 300000 pods, at most 262144"},
		{[]string{"--rollout", "70000"}, "--rollout 70000: at most 65536"},
		{[]string{"--history", "30s"}, "--history 30s"},
	} {
		args := append([]string{"lab", "simulate", "--store", dsn}, c.args...)
		if code, _, stderr := runCLI(t, args...); code != 2 || !strings.Contains(stderr, c.says) {
			t.Errorf("%q: exit %d, stderr %q; want a usage error saying %q", c.args, code, stderr, c.says)
		}
	}
}
