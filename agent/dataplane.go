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
				a.recordCapabilities(k)
			}
		}
		if m.Proxy == event.ProxyIPTablesLegacy && !legacy {
			lp, err := dataplane.NewLegacy(dataplane.LegacyOptions{Node: a.cfg.Node, Emit: a.record, Logger: a.log,
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
