package analysis

import (
	"fmt"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

// BenchmarkServiceSnapshots feeds the aligner what a 15-minute window holds
// of a cluster's Services: each of 5,000 observed at two watch snapshots
// (every 10 minutes) and once at the watch's start.
func BenchmarkServiceSnapshots(b *testing.B) {
	const services = 5000
	var evs []event.Event
	for snap := range 3 {
		at := t0 + int64(snap)*int64(10*time.Minute)
		for i := range services {
			evs = append(evs, event.Event{Time: at + int64(i), Kind: event.ServiceChanged, Node: "lab", Source: event.SourceWatcher,
				Pod: event.PodRef{Namespace: "default"}, Service: fmt.Sprintf("svc-%d", i), Reason: event.ChangeObserved,
				Attrs: map[string]string{event.AttrClusterIPs: fmt.Sprintf("10.96.%d.%d", i/250, i%250)}})
		}
	}
	b.ResetTimer()
	for range b.N {
		al := NewAligner(Options{}, nil, nil)
		for i := range evs {
			if err := al.Add(&evs[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(len(evs)), "events/op")
}
