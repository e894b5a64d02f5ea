package dataplane

import (
	"net/netip"
	"sync"
	"time"

	"github.com/drainscope/drainscope/event"
)

// LagMeter pairs each dataplane removal with the watch event that took the
// endpoint out of rotation (not ready, terminating or removed, whichever
// came first since it was last ready) and returns the lag between them:
// how long the node's proxy kept sending new connections after the API
// said stop. It sees the events an agent records; in leader mode an agent
// that does not record EndpointSlices has no watch events to pair with.
type LagMeter struct {
	mu   sync.Mutex
	left map[lagKey]int64 // first leave since ready, UTC ns
}

type lagKey struct {
	ns, svc string
	ip      netip.Addr
}

// maxLeft bounds the pending leaves; beyond it those older than keepLeft
// go first.
const (
	maxLeft  = 65536
	keepLeft = int64(10 * time.Minute)
)

// NewLagMeter returns an empty meter.
func NewLagMeter() *LagMeter { return &LagMeter{left: map[lagKey]int64{}} }

// Observe takes one recorded event; for a dataplane removal paired with a
// leave it returns the removal's node and lag.
func (m *LagMeter) Observe(e *event.Event) (node string, lag time.Duration, ok bool) {
	k := lagKey{e.Pod.Namespace, e.Service, e.Local.Addr().Unmap()}
	switch e.Kind {
	case event.EndpointReady:
		m.mu.Lock()
		delete(m.left, k)
		m.mu.Unlock()
	case event.EndpointNotReady, event.EndpointTerminating, event.EndpointRemoved:
		m.mu.Lock()
		if _, seen := m.left[k]; !seen {
			if len(m.left) >= maxLeft {
				m.sweep(e.Time)
			}
			m.left[k] = e.Time
		}
		m.mu.Unlock()
	case event.DataplaneEndpointRemoved:
		m.mu.Lock()
		t, seen := m.left[k]
		m.mu.Unlock()
		if seen && e.Time >= t && e.Time-t < keepLeft {
			return e.Node, time.Duration(e.Time - t), true
		}
	}
	return "", 0, false
}

func (m *LagMeter) sweep(now int64) {
	for k, t := range m.left {
		if now-t > keepLeft {
			delete(m.left, k)
		}
	}
	if len(m.left) >= maxLeft {
		clear(m.left)
	}
}
