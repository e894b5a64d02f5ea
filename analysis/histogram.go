package analysis

import (
	"sort"
	"time"
)

// hist is a sparse histogram of offsets in 1 ms bins: exact enough for
// medians, bounded by the spread of the offsets rather than their number.
type hist struct {
	bins     map[int64]int
	n        int
	min, max int64
}

const histBin = int64(time.Millisecond)

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func (h *hist) add(ns int64) {
	if h.bins == nil {
		h.bins = map[int64]int{}
		h.min, h.max = ns, ns
	}
	h.bins[floorDiv(ns, histBin)]++
	h.n++
	h.min, h.max = min(h.min, ns), max(h.max, ns)
}

func (h *hist) quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	keys := make([]int64, 0, len(h.bins))
	for k := range h.bins {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	want := int(q * float64(h.n-1))
	seen := 0
	for _, k := range keys {
		seen += h.bins[k]
		if seen > want {
			return min(max(k*histBin, h.min), h.max)
		}
	}
	return h.max
}

// Histogram is offsets binned for plotting; P50 is to the millisecond.
type Histogram struct {
	Count int   `json:"count"`
	BinNS int64 `json:"bin_ns"`
	MinNS int64 `json:"min_ns"`
	P10NS int64 `json:"p10_ns"`
	P50NS int64 `json:"p50_ns"`
	P90NS int64 `json:"p90_ns"`
	MaxNS int64 `json:"max_ns"`
	Bins  []Bin `json:"bins"`
}

// Bin counts the offsets in [Start, Start+BinNS).
type Bin struct {
	Start int64 `json:"start_ns"`
	Count int   `json:"count"`
}

func (h *hist) export(width int64) Histogram {
	out := Histogram{Count: h.n, BinNS: width, Bins: []Bin{}}
	if h.n == 0 {
		return out
	}
	out.MinNS, out.MaxNS = h.min, h.max
	out.P10NS, out.P50NS, out.P90NS = h.quantile(0.1), h.quantile(0.5), h.quantile(0.9)
	m := map[int64]int{}
	for k, n := range h.bins {
		m[floorDiv(k*histBin, width)] += n
	}
	for k, n := range m {
		out.Bins = append(out.Bins, Bin{Start: k * width, Count: n})
	}
	sort.Slice(out.Bins, func(i, j int) bool { return out.Bins[i].Start < out.Bins[j].Start })
	return out
}
