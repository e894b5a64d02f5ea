package agent

import (
	"context"
	"sync"
	"time"

	"github.com/drainscope/drainscope/dataplane"
	"github.com/drainscope/drainscope/dataplane/cilium"
)

// CiliumConfig configures the reading of Cilium's service maps (package
// dataplane/cilium): on nodes where Cilium's eBPF load balancer routes
// Services instead of kube-proxy, when each backend left a Service's
// slots. It needs the host's bpffs (/sys/fs/bpf) and CAP_BPF (or
// CAP_SYS_ADMIN) to open pinned maps.
type CiliumConfig struct {
	// Dir holds Cilium's pinned maps; "" turns the reader off. The
	// command's --cilium-maps=auto sets it to cilium.DefaultDir when the
	// maps are there at start.
	Dir string
	// Interval between reads; default 250 ms.
	Interval time.Duration
}

// newCilium builds the reader, whose frontends are named through the
// ClusterIPs of the watcher's service_changed events.
func (a *Agent) newCilium() error {
	if a.cfg.Cilium.Dir == "" {
		return nil
	}
	idx := cilium.NewServiceIndex()
	r, err := cilium.New(cilium.Options{
		Node: a.cfg.Node, Emit: a.recordDataplane, Dir: a.cfg.Cilium.Dir, Interval: a.cfg.Cilium.Interval,
		Services: idx.Lookup, Logger: a.cfg.Logger,
	})
	if err != nil {
		return err
	}
	a.cilium, a.ciliumServices = r, idx
	if a.lag == nil {
		a.lag = dataplane.NewLagMeter()
	}
	return nil
}

func (a *Agent) startCilium(ctx context.Context, wg *sync.WaitGroup) {
	if a.cilium == nil {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = a.cilium.Run(ctx) // fails soft: logs why and retries
	}()
}

// CiliumStats are the Cilium reader's counters; ok is false when it is off.
func (a *Agent) CiliumStats() (cilium.Stats, bool) {
	if a.cilium == nil {
		return cilium.Stats{}, false
	}
	return a.cilium.Stats(), true
}
