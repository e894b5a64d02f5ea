// Package fleet simulates a cluster's agents writing through the server. It
// has N agents (goroutines, each with its own HTTP connection, relay.Client
// and store.Writer, the agent's real write path with batching and
// back-pressure) write into a real drainscope serve process, a real Postgres
// and, for their tokens, a real kube-apiserver, and measures where it breaks:
// events/s offered and stored, drops, the server's CPU and memory, Postgres
// connections, write latency, 429s, token reviews, and the time for a report
// and a cold timeline of a 1,000-pod rollout afterwards. drainscope lab
// simulate runs it; docs/scale.md has its table.
package fleet

import (
	"io"
	"os/exec"
	"time"

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
