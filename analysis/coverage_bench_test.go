package analysis

import (
	"fmt"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

// BenchmarkCoverage5000Nodes reads what a report of a rollout reads on a
// 5,000-node cluster: every node's spans at the default 30 s over 40
// minutes (the rollout, the 15-minute lead and the 10-minute margins),
// 400,000 spans, then asks one node's gaps. Run with -benchmem: the
// bytes are what the read holds.
func BenchmarkCoverage5000Nodes(b *testing.B) {
	const nodes, spans = 5000, 80
	evs := make([]event.Event, 0, nodes*spans)
	for i := range spans {
		at := t0 + int64(i)*30*s
		for n := range nodes {
			e := event.Event{Time: at, Kind: event.RecorderCoverage, Node: fmt.Sprintf("node-%04d", n), Source: event.SourceAgent,
				Duration: 30 * s, Reason: event.CoverRunning, Attrs: map[string]string{event.AttrSession: "0123456789abcdef",
					event.AttrInterval: "30s", event.AttrCoverKernel: "on", event.AttrCoverSlices: "true", event.AttrCoverDataplane: "on",
					event.AttrDropped: "0", event.AttrKernelLost: "0"}}
			if i == 0 {
				e.Reason, e.Duration = event.CoverStarted, 0
			}
			evs = append(evs, e)
		}
	}
	b.ResetTimer()
	for range b.N {
		c := NewCoverage()
		for i := range evs {
			c.Add(&evs[i])
		}
		if gs := c.Gaps("node-0042", t0+20*int64(time.Minute), t0+21*int64(time.Minute), true); len(gs) != 0 {
			b.Fatalf("gaps in a covered minute: %v", gs)
		}
	}
}
