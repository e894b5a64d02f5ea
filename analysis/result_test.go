package analysis

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// The streamed compact JSON is byte for byte what json.Encoder writes:
// for a result with every list filled (the synthetic stream's rollouts,
// timelines and failures, and the node lists), for one with empty and nil
// lists, and for the zero result.
func TestWriteJSONStreamsEncodersBytes(t *testing.T) {
	var evs []event.Event
	newSynth(40).each(func(e *event.Event) { evs = append(evs, e.Clone()) })
	full, err := AnalyzeEvents(evs, store.Query{}, Options{MaxFailures: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(full.Timelines) == 0 || len(full.Failures) == 0 || len(full.Disruptions) == 0 {
		t.Fatalf("the synthetic stream gave %d timelines, %d failures, %d rollouts: want some of each",
			len(full.Timelines), len(full.Failures), len(full.Disruptions))
	}
	full.Kernels = []NodeKernel{{Node: "n1", Release: "6.1.0", Missing: []string{"refused_connections"}}, {Node: "n<2>"}}
	full.DataplaneLag = []NodeLag{{Node: "n1", Proxy: "nftables", Samples: 3, P50: 1, P99: 2, Max: 3}}
	full.Proxies = []NodeProxy{{Node: "n1", Mode: "nftables", Recorded: true}}
	empty := &Result{From: 1, Disruptions: []Disruption{}, Kernels: []NodeKernel{}, Scope: "a&b"}
	for name, r := range map[string]*Result{"full": full, "empty lists": empty, "zero": {}} {
		var got bytes.Buffer
		if err := WriteJSON(&got, r, false); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(r); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			i := 0
			for i < min(got.Len(), want.Len()) && got.Bytes()[i] == want.Bytes()[i] {
				i++
			}
			from := max(0, i-80)
			t.Fatalf("%s: %d bytes, json.Encoder's %d; first difference at %d:\n got …%s\nwant …%s", name, got.Len(), want.Len(), i,
				got.Bytes()[from:min(got.Len(), i+80)], want.Bytes()[from:min(want.Len(), i+80)])
		}
	}
}
