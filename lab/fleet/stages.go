package fleet

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Stage is one stage of the agents' batches on the server, from its
// drainscope_agent_batch_stage_seconds histogram: how many batches
// reached it and the bucket bounds its median and 99th percentile fell in.
type Stage struct {
	Name     string
	Batches  uint64
	P50, P99 time.Duration // upper bounds of the buckets; a quantile past the last bound is +Inf, shown as ">30 s"
}

const stageMetric = "drainscope_agent_batch_stage_seconds"

// batchStages scrapes a server's metrics for the stages of the agents'
// batches.
func batchStages(ctx context.Context, url string) ([]Stage, error) {
	b, err := get(ctx, url)
	if err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", url, err)
	}
	fam := fams[stageMetric]
	if fam == nil {
		return nil, fmt.Errorf("%s has no %s", url, stageMetric)
	}
	var out []Stage
	for _, m := range fam.GetMetric() {
		h := m.GetHistogram()
		st := Stage{Batches: h.GetSampleCount()}
		for _, l := range m.GetLabel() {
			if l.GetName() == "stage" {
				st.Name = l.GetValue()
			}
		}
		st.P50, st.P99 = bucketQuantile(h, .5), bucketQuantile(h, .99)
		out = append(out, st)
	}
	order := map[string]int{"review": 0, "slot": 1, "body": 2, "check": 3, "queue": 4, "write": 5}
	sort.Slice(out, func(i, j int) bool { return order[out[i].Name] < order[out[j].Name] })
	return out, nil
}

// bucketQuantile is the upper bound of the bucket the q-quantile of h
// falls in: no finer than the buckets, never below the true value.
func bucketQuantile(h *dto.Histogram, q float64) time.Duration {
	n := h.GetSampleCount()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	for _, b := range h.GetBucket() {
		if b.GetCumulativeCount() >= rank {
			return time.Duration(b.GetUpperBound() * float64(time.Second))
		}
	}
	return time.Duration(math.MaxInt64)
}

// bound formats a quantile's bucket bound.
func (Stage) bound(v time.Duration) string {
	if v == time.Duration(math.MaxInt64) {
		return "> 30 s"
	}
	return fmt.Sprintf("≤ %v", v)
}

func (s Stage) String() string {
	return fmt.Sprintf("%s p50 %s, p99 %s", s.Name, s.bound(s.P50), s.bound(s.P99))
}
