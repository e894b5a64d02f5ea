package web

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/eventgen"
	"github.com/drainscope/drainscope/internal/pgtest"
	"github.com/drainscope/drainscope/store"
)

var coldRuns = flagInt("cold-runs", 7, "fresh processes per store and shape in BenchmarkTimelineCold")

// BenchmarkTimelineCold times the first answer of the timeline API for a
// rollout of 100,000 events (-events) in a fresh process: the store is
// filled once, then each run drops the kernel's page cache (as root;
// otherwise it says so), restarts Postgres when it knows how
// (DRAINSCOPE_TEST_POSTGRES_DATA, set by scripts/pg-throwaway.sh) so its
// buffers are empty too, and starts this test binary again to open the
// store and ask for the timeline once (cold), then again with the answer
// cached (warm) and with ?refresh=1 (warm store, analysis again). It prints
// the median and the range of each over -cold-runs runs, per store.
//
//	go test ./web -run '^$' -bench TimelineCold -benchtime 1x
func BenchmarkTimelineCold(b *testing.B) {
	start := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	shapes := []struct {
		name string
		gen  func() []event.Event
	}{
		{"wide", func() []event.Event { return eventgen.Rollout(*benchEvents, start, 7, "checkout") }},
		{"dense", func() []event.Event { return denseRollout(*benchEvents, 8, start, 7) }},
	}
	stores := []struct {
		name string
		dsn  func(b *testing.B) string
	}{
		{"sqlite", func(b *testing.B) string { return "sqlite:" + filepath.Join(b.TempDir(), "events.db") }},
		{"postgres", func(b *testing.B) string { return pgtest.Schema(b) }},
	}
	for _, sk := range stores {
		for _, sh := range shapes {
			b.Run(sk.name+"/"+sh.name, func(b *testing.B) {
				dsn := sk.dsn(b)
				evs := sh.gen()
				path := fillForCold(b, dsn, evs, start)
				var open, cold, warm, refresh []time.Duration
				how := ""
				for i := 0; i < *coldRuns; i++ {
					how = dropCaches(b, sk.name == "postgres")
					r := coldChild(b, dsn, path)
					open, cold = append(open, r[0]), append(cold, r[1])
					warm, refresh = append(warm, r[2]), append(refresh, r[3])
				}
				b.ReportMetric(msOf(median(cold)), "cold-ms")
				b.ReportMetric(msOf(median(warm)), "warm-ms")
				b.Logf("%s %s: %d events, %d runs (%s; load average %s): cold first answer median %v (%v–%v), opening the store %v (%v–%v); warm (cached) %v (%v–%v); warm store, analysed again (?refresh=1) %v (%v–%v)",
					sk.name, sh.name, len(evs), *coldRuns, how, loadAvg(),
					median(cold), slices.Min(cold), slices.Max(cold), median(open), slices.Min(open), slices.Max(open),
					median(warm), slices.Min(warm), slices.Max(warm), median(refresh), slices.Min(refresh), slices.Max(refresh))
			})
		}
	}
}

// fillForCold writes evs to the store dsn names and returns the API path of
// the biggest rollout's timeline.
func fillForCold(b *testing.B, dsn string, evs []event.Event, start time.Time) string {
	ctx := context.Background()
	st, err := store.Open(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	for i := 0; i < len(evs); i += 5000 {
		if err := st.Append(ctx, evs[i:min(i+5000, len(evs))]); err != nil {
			b.Fatal(err)
		}
	}
	if strings.HasPrefix(dsn, "postgres") {
		// What autovacuum does within a minute of a bulk insert: the
		// visibility map that lets a count read the index alone. A rollout
		// read cold was written long before.
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "VACUUM (ANALYZE) events"); err != nil {
			b.Fatal(err)
		}
		conn.Close(ctx)
	}
	s := New(Options{Store: st, Now: func() time.Time { return start.Add(48 * time.Hour) },
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer s.Close()
	path := biggest(b, s).Links.API + "/timeline?width=1400"
	// Read it once, as serve does for every rollout it lists, and wait
	// for the digest that keeps it.
	timelineOf(b, s, path)
	waitDigest(b, s, biggest(b, s))
	return path
}

// waitDigest waits until the store holds ro's digest.
func waitDigest(tb testing.TB, s *Server, ro RolloutSummary) {
	tb.Helper()
	seg := strings.Split(ro.ID, "/")
	if len(seg) != 4 {
		tb.Fatalf("rollout id %q", ro.ID)
	}
	k, err := analysis.ParseDisruptionKey(seg[0], seg[1], seg[2], seg[3])
	if err != nil {
		tb.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, ok, err := s.digests.GetDigest(context.Background(), s.digestKey(k), false); err != nil {
			tb.Fatal(err)
		} else if ok {
			return
		}
	}
	tb.Fatalf("no digest of %s was kept", k)
}

// dropCaches empties what a fresh start would find empty and says what it
// could do.
func dropCaches(b *testing.B, postgres bool) string {
	var did []string
	if postgres {
		if data := os.Getenv("DRAINSCOPE_TEST_POSTGRES_DATA"); data != "" {
			if err := restartPostgres(data); err != nil {
				b.Fatalf("restarting Postgres: %v", err)
			}
			did = append(did, "Postgres restarted")
		} else {
			did = append(did, "Postgres buffers warm (DRAINSCOPE_TEST_POSTGRES_DATA unset)")
		}
	}
	exec.Command("sync").Run()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1\n"), 0); err != nil {
		did = append(did, "page cache NOT dropped: "+err.Error())
	} else {
		did = append(did, "page cache dropped")
	}
	return strings.Join(did, ", ")
}

// restartPostgres restarts the throwaway cluster in data as its owner.
func restartPostgres(data string) error {
	bin := os.Getenv("DRAINSCOPE_TEST_POSTGRES_BIN")
	if bin == "" {
		return fmt.Errorf("DRAINSCOPE_TEST_POSTGRES_BIN unset")
	}
	// The server's output goes to its log, not to a pipe of ours: the new
	// postmaster would hold the pipe open and Wait would never return.
	logFile := filepath.Join(filepath.Dir(data), "server.log")
	args := []string{filepath.Join(bin, "pg_ctl"), "-D", data, "-l", logFile, "-w", "-t", "60", "restart", "-m", "fast"}
	if os.Getuid() == 0 {
		args = append([]string{"runuser", "-u", "postgres", "--"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	if err := cmd.Run(); err != nil {
		tail, _ := os.ReadFile(logFile)
		return fmt.Errorf("%v (server log: %s)", err, tail[max(0, len(tail)-500):])
	}
	return nil
}

// coldChild runs TestTimelineColdChild in a new process and returns its
// opening, first, cached and refreshed answer times.
func coldChild(b *testing.B, dsn, path string) [4]time.Duration {
	cmd := exec.Command(os.Args[0], "-test.run=^TestTimelineColdChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DRAINSCOPE_COLD_DSN="+dsn, "DRAINSCOPE_COLD_PATH="+path)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		b.Fatalf("cold child: %v\n%s", err, out.String())
	}
	var r [4]time.Duration
	for _, line := range strings.Split(out.String(), "\n") {
		if f, ok := strings.CutPrefix(line, "cold-result "); ok {
			if !strings.Contains(out.String(), `msg="digest read"`) {
				b.Fatalf("the fresh process did not answer from the rollout's digest:\n%s", out.String())
			}
			for i, s := range strings.Fields(f) {
				n, _ := strconv.ParseInt(s, 10, 64)
				r[i] = time.Duration(n)
			}
			if testing.Verbose() {
				for _, l := range strings.Split(out.String(), "\n") {
					if strings.Contains(l, `msg="digest read"`) {
						b.Log(l)
					}
				}
			}
			return r
		}
	}
	b.Fatalf("cold child printed no result:\n%s", out.String())
	return r
}

// TestTimelineColdChild is BenchmarkTimelineCold's fresh process; it does
// nothing in a normal run.
func TestTimelineColdChild(t *testing.T) {
	dsn, path := os.Getenv("DRAINSCOPE_COLD_DSN"), os.Getenv("DRAINSCOPE_COLD_PATH")
	if dsn == "" {
		t.Skip("run by BenchmarkTimelineCold")
	}
	ctx := context.Background()
	t0 := time.Now()
	st, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	start := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	// The phases of the digest read, on stderr for the benchmark's log.
	s := New(Options{Store: st, Now: func() time.Time { return start.Add(48 * time.Hour) },
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	defer s.Close()
	opened := time.Since(t0)
	get := func(p string) time.Duration {
		t0 := time.Now()
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
		d := time.Since(t0)
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", p, rec.Code, truncate(rec.Body.String(), 300))
		}
		return d
	}
	cold := get(path)
	var warm, refresh []time.Duration
	for range 5 {
		warm = append(warm, get(path))
		refresh = append(refresh, get(path+"&refresh=1"))
	}
	fmt.Printf("cold-result %d %d %d %d\n", opened, cold, median(warm), median(refresh))
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
