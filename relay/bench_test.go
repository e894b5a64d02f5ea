package relay_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/drainscope/drainscope/relay"
)

// BenchmarkThroughServer stores batches of 5,000 events into SQLite
// directly and through the server's endpoint on loopback (JSON, gzip, the
// node check and sealing again), alternating, and reports the rate of each
// and the ratio through÷direct: median and p10–p90 of the pairs. Token
// checks are left out (one TokenReview a minute per agent, cached).
func BenchmarkThroughServer(b *testing.B) {
	const batch, pairs = 5000, 9
	direct, through := sqlite(b), sqlite(b)
	srv := httptest.NewServer(&relay.Handler{Store: through, Auth: nodeToken{}})
	defer srv.Close()
	tok := filepath.Join(b.TempDir(), "token")
	os.WriteFile(tok, []byte("node:a"), 0o600)
	cl, err := relay.NewClient(srv.URL, tok, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	// An agent lives long: its first answer, which tells it the server
	// takes the wire form, is not part of the measure.
	if err := cl.Append(ctx, events("a", time.Now().Add(-50*time.Minute), 10, "web-0")); err != nil {
		b.Fatal(err)
	}
	// Within the hour the server takes; each round's events two minutes
	// on from the last round's, so that none is a duplicate.
	base := time.Now().Add(-45 * time.Minute)
	var ratios, dRates, tRates []float64
	b.ResetTimer()
	for range b.N {
		for p := range pairs {
			evs := events("a", base.Add(time.Duration(p)*10*time.Second), batch, "web-1")
			t0 := time.Now()
			if err := direct.Append(ctx, evs); err != nil {
				b.Fatal(err)
			}
			d := time.Since(t0)
			evs = events("a", base.Add(time.Duration(p)*10*time.Second), batch, "web-1")
			t0 = time.Now()
			if err := cl.Append(ctx, evs); err != nil {
				b.Fatal(err)
			}
			th := time.Since(t0)
			dRates = append(dRates, batch/d.Seconds())
			tRates = append(tRates, batch/th.Seconds())
			ratios = append(ratios, d.Seconds()/th.Seconds())
		}
		base = base.Add(2 * time.Minute)
	}
	q := func(v []float64, f float64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		return s[int(f*float64(len(s)-1))]
	}
	b.ReportMetric(q(dRates, .5), "direct-events/s")
	b.ReportMetric(q(tRates, .5), "through-events/s")
	b.ReportMetric(q(ratios, .5), "through/direct")
	b.Logf("through÷direct rate over %d pairs of %d events: median %.2f (p10–p90 %.2f–%.2f); direct %.0f/s, through the server %.0f/s",
		len(ratios), batch, q(ratios, .5), q(ratios, .1), q(ratios, .9), q(dRates, .5), q(tRates, .5))
}
