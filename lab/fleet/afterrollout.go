package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drainscope/drainscope/analysis"
)

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
