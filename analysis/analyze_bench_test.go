package analysis

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/pgtest"
	"github.com/drainscope/drainscope/store"
)

// BenchmarkAnalyzeStore analyses the synthetic stream of 300 pods (30,000
// events and 30,000 client failures) read back from a real Postgres,
// alternating the read as Analyze does it (store.ScanAhead: rows decoded
// on a goroutine of its own) with a plain Scan on the caller's goroutine,
// and reports the per-pair ratio ahead ÷ plain: median and spread. Both
// must give the same result.
//
//	go test ./analysis -run '^$' -bench AnalyzeStore -benchtime 1x
func BenchmarkAnalyzeStore(b *testing.B) {
	ctx := context.Background()
	st, err := store.OpenPostgres(ctx, pgtest.Schema(b))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	var batch []event.Event
	var win event.Window
	flush := func() {
		if err := st.Append(ctx, batch); err != nil {
			b.Fatal(err)
		}
		batch = batch[:0]
	}
	newSynth(300).each(func(e *event.Event) {
		c := e.Clone()
		c.Seal()
		batch = append(batch, c)
		if win.From == 0 {
			win.From = e.Time
		}
		win.To = e.Time
		if len(batch) == 5000 {
			flush()
		}
	})
	flush()
	plain := func(ctx context.Context, s store.Store, q store.Query, fn func(*event.Event) error) error {
		return s.Scan(ctx, q, fn)
	}
	defer func() { scanEvents = store.ScanAhead }()
	run := func(scan func(context.Context, store.Store, store.Query, func(*event.Event) error) error) (time.Duration, string) {
		scanEvents = scan
		start := time.Now()
		res, err := Analyze(ctx, st, store.Query{Window: win})
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(start), fmt.Sprint(res.Stats, len(res.Failures), len(res.Timelines))
	}
	const pairs = 20
	var ratios, ahead, base []float64
	for b.Loop() {
		ratios, ahead, base = ratios[:0], ahead[:0], base[:0]
		run(store.ScanAhead) // warm the database's buffers
		for i := range pairs {
			var ta, tp time.Duration
			var ra, rp string
			if i%2 == 0 {
				tp, rp = run(plain)
				ta, ra = run(store.ScanAhead)
			} else {
				ta, ra = run(store.ScanAhead)
				tp, rp = run(plain)
			}
			if ra != rp {
				b.Fatalf("the results differ:\n ahead %s\n plain %s", ra, rp)
			}
			ratios = append(ratios, ta.Seconds()/tp.Seconds())
			ahead, base = append(ahead, ta.Seconds()), append(base, tp.Seconds())
		}
	}
	med := func(v []float64) (float64, float64, float64) {
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2], v[len(v)/10], v[len(v)-1-len(v)/10]
	}
	r, r10, r90 := med(ratios)
	a, _, _ := med(ahead)
	p, _, _ := med(base)
	b.ReportMetric(r, "ahead/plain")
	la, _ := os.ReadFile("/proc/loadavg")
	b.Logf("%d pairs: ahead ÷ plain median %.3f (p10–p90 %.3f–%.3f); Analyze median %.3f s ahead, %.3f s plain; load %s",
		pairs, r, r10, r90, a, p, la)
}
