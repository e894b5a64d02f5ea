package agent

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/drainscope/drainscope/dataplane"
	"github.com/drainscope/drainscope/event"
)

// proxyModeEvery is how often the node's proxy mode is detected again: a
// kube-proxy may start after the agent, or be reconfigured.
const proxyModeEvery = time.Minute

// followProxyMode detects the node's proxy mode now and every
// proxyModeEvery, keeps it for the kernel_capabilities event (recorded
// again when it changes), and starts following the legacy iptables
// backend, which the netlink watcher cannot see, once the node runs it.
func (a *Agent) followProxyMode(ctx context.Context, wg *sync.WaitGroup) {
	t := time.NewTicker(proxyModeEvery)
	defer t.Stop()
	legacy := false
	for {
		m := dataplane.DetectMode(ctx, dataplane.ModeOptions{Metrics: a.cfg.Dataplane.KubeProxyMetrics})
		if ctx.Err() != nil {
			return
		}
		prev := a.proxyMode.Swap(&m)
		if prev == nil || prev.Proxy != m.Proxy || prev.Recorded != m.Recorded {
			a.log.Info("node proxy mode", "mode", m.Proxy, "recorded", m.Recorded, "evidence", m.Evidence)
			a.kernelMu.Lock()
			k := a.kernel
			a.kernelMu.Unlock()
			if k != nil {
				a.recordCapabilitiesFor(k, capsProxyChange)
			}
		}
		if m.Proxy == event.ProxyIPTablesLegacy && !legacy {
			lp, err := dataplane.NewLegacy(dataplane.LegacyOptions{Node: a.cfg.Node, Emit: a.recordDataplane, Logger: a.log,
				Metrics: a.cfg.Dataplane.KubeProxyMetrics})
			if err == nil {
				legacy = true
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = lp.Run(ctx) // fails soft: logs why and returns
				}()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// proxyAttrs adds the node's proxy mode to a kernel_capabilities event's
// attributes, so that a report can say why a node has no dataplane events.
func (a *Agent) proxyAttrs(attrs map[string]string) {
	if a.dp == nil {
		attrs[event.AttrProxyMode] = "off"
		attrs[event.AttrProxyRecorded] = "false"
		attrs[event.AttrProxyEvidence] = "the agent's dataplane recording is off (--dataplane off)"
		return
	}
	m := a.proxyMode.Load()
	if m == nil {
		return // not detected yet: the next event carries it
	}
	attrs[event.AttrProxyMode] = m.Proxy
	attrs[event.AttrProxyRecorded] = strconv.FormatBool(m.Recorded)
	attrs[event.AttrProxyEvidence] = m.Evidence
}

// recordDataplane takes a change of this node's proxy rules (nftables,
// iptables on either backend, Cilium's maps): every removal feeds the lag
// histogram, and the change is stored unless OwnPodsOnly leaves it out.
func (a *Agent) recordDataplane(e event.Event) {
	if a.admitDataplane(&e) {
		a.record(e)
	}
}

// admitDataplane counts a dataplane change, measures its lag and tells
// whether it is stored.
func (a *Agent) admitDataplane(e *event.Event) bool {
	a.dpSeen.Add(1)
	if a.lag != nil {
		if node, lag, ok := a.lag.Observe(e); ok {
			a.m.ObserveDataplaneLag(node, lag)
		}
	}
	if !a.storesDataplane(e) {
		return false
	}
	a.dpStored.Add(1)
	return true
}

// storesDataplane tells whether a dataplane change is stored: every one
// on a node of the sample; else only those of an endpoint that is one of
// this node's pods, as the pod cache knows them (deleted pods linger in
// it, so a terminating pod's removal is kept). A node's record of an
// endpoint is then whole (its entry and its exits) or absent, never
// partial: the analysis reads a node's dataplane view of an endpoint
// instead of its watch view, and falls back to the watch and the lag
// where there is none.
func (a *Agent) storesDataplane(e *event.Event) bool {
	if !a.cfg.Dataplane.OwnPodsOnly {
		return true
	}
	_, _, own := a.ownPods.PodByIP(e.Local.Addr())
	return own
}

// tap sees every event of the watcher's cluster-wide watches, recorded or
// not (a standby in leader mode records none): the lag meter pairs this
// node's proxy removals with its own watch, so that every node reports
// its lag histogram, and the Cilium reader names frontends by the
// Services' ClusterIPs.
func (a *Agent) tap(e *event.Event) {
	if a.ciliumServices != nil {
		a.ciliumServices.Observe(e)
	}
	if a.lag != nil {
		a.lag.Observe(e)
	}
}
