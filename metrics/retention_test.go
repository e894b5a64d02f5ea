package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/store"
)

func TestRetentionMetrics(t *testing.T) {
	m := New("test", "dev")
	if body := scrape(t, m); strings.Contains(body, "drainscope_store_prune") {
		t.Errorf("prune metrics before any Retention is watched:\n%s", body)
	}
	m.WatchRetention(func() store.RetentionStats {
		return store.RetentionStats{Keep: 336 * time.Hour, Runs: 3, Failures: 1, Events: 1234, Partitions: 2,
			LastSuccess: time.Unix(1_800_000_000, 0)}
	})
	body := scrape(t, m)
	for _, want := range []string{
		`drainscope_store_retention_seconds 1.2096e+06`,
		`drainscope_store_prune_last_success_timestamp_seconds 1.8e+09`,
		`drainscope_store_prune_runs_total 3`,
		`drainscope_store_prune_failures_total 1`,
		`drainscope_store_pruned_events_total 1234`,
		`drainscope_store_pruned_partitions_total 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	names := strings.Join(m.Catalog(), " ")
	if !strings.Contains(names, "drainscope_store_pruned_events_total") {
		t.Errorf("catalog lacks the prune metrics: %s", names)
	}
}
