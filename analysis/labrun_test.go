package analysis

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// TestLabRuns checks runs recorded by the lab against what the analysis
// must show on them. It needs a store and the runs' windows:
//
//	DRAINSCOPE_LAB_STORE=/tmp/lab/events.db \
//	DRAINSCOPE_LAB_RUNS='exit=2026-03-14T12:00:00Z/2026-03-14T12:02:00Z,graceful-prestop=…/…' \
//	go test ./analysis -run TestLabRuns -v
//
// Every run prints its attribution totals, its causes with their offsets
// from the exit, and the share of client failures the kernel evidence
// recovers on its own. A run named exit must have every client failure
// tied to a terminating pod and a cause; a run whose name holds "prestop"
// must be mostly keep-alive cuts at exit, clustered at the exit.
func TestLabRuns(t *testing.T) {
	dsn, runs := os.Getenv("DRAINSCOPE_LAB_STORE"), os.Getenv("DRAINSCOPE_LAB_RUNS")
	if dsn == "" || runs == "" {
		t.Skip("no lab run to check: set DRAINSCOPE_LAB_STORE and DRAINSCOPE_LAB_RUNS (see the test's comment)")
	}
	st, err := store.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, run := range strings.Split(runs, ",") {
		name, span, ok := strings.Cut(run, "=")
		from, to, ok2 := strings.Cut(span, "/")
		if !ok || !ok2 {
			t.Fatalf("run %q: want NAME=FROM/TO with RFC 3339 times", run)
		}
		f, err1 := time.Parse(time.RFC3339Nano, from)
		u, err2 := time.Parse(time.RFC3339Nano, to)
		if err1 != nil || err2 != nil {
			t.Fatalf("run %q: %v %v", run, err1, err2)
		}
		t.Run(name, func(t *testing.T) {
			res, err := Analyze(t.Context(), st, store.Query{Window: event.Window{From: f.UnixNano(), To: u.UnixNano()}})
			if err != nil {
				t.Fatal(err)
			}
			tot := res.Totals
			t.Logf("%d client failures: %d tied to a pod, %d to a terminating pod, %d with a cause, %d both",
				tot.ClientFailures, tot.WithPod, tot.OnTerminatingPod, tot.Explained, tot.ExplainedOnTerminatingPod)
			for _, c := range res.Causes {
				t.Logf("%s: %d; from exit p10 %s p50 %s p90 %s", c.Title, c.Count,
					fmtOffset(c.FromExit.P10NS), fmtOffset(c.FromExit.P50NS), fmtOffset(c.FromExit.P90NS))
			}
			if r := res.Inference.Ratio; r != nil {
				t.Logf("kernel evidence alone recovers %d of %d client failures: ratio %.2f (%d inferred in all)",
					res.Inference.Proven, res.Inference.ClientFailures, *r, res.Inference.Inferred)
			}
			switch {
			case name == "exit":
				if tot.ClientFailures == 0 || tot.ExplainedOnTerminatingPod != tot.ClientFailures {
					t.Errorf("exit run: %d of %d failures tied to a terminating pod and a cause", tot.ExplainedOnTerminatingPod, tot.ClientFailures)
				}
			case strings.Contains(name, "prestop"):
				if len(res.Causes) == 0 || res.Causes[0].Cause != CauseKeepAliveAtExit && !hasMajority(res.Causes, CauseKeepAliveAtExit) {
					t.Errorf("preStop run: keep-alive cut at exit is not the main cause: %+v", res.Causes)
				}
				for _, c := range res.Causes {
					if c.Cause == CauseKeepAliveAtExit && c.FromExit.P90NS-c.FromExit.P10NS > int64(250*time.Millisecond) {
						t.Errorf("preStop run: keep-alive failures not clustered at the exit: p10 %s, p90 %s",
							fmtOffset(c.FromExit.P10NS), fmtOffset(c.FromExit.P90NS))
					}
				}
			}
		})
	}
}

func hasMajority(cs []CauseSummary, c Cause) bool {
	total, n := 0, 0
	for _, x := range cs {
		total += x.Count
		if x.Cause == c {
			n = x.Count
		}
	}
	return n*2 > total
}
