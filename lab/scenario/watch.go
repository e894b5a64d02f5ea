package scenario

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/drainscope/drainscope/dataplane"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/watcher"
)

// startWatchers runs drainscope's watcher on the lab namespace, as the
// agent on this node would: pod transitions and EndpointSlice conditions
// go to the store beside the kernel's and the clients' events.
func (c *Cluster) startWatchers(ctx context.Context) error {
	w, err := watcher.New(c.Client, watcher.Options{
		Node:      NodeName,
		Namespace: Namespace,
		PodNode:   NodeName,
		Sink:      c.rec.Add,
		Logger:    c.log,
	})
	if err != nil {
		return fmt.Errorf("starting the watcher: %w", err)
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	if err := w.WaitForSync(sctx); err != nil {
		cancel()
		<-done
		return fmt.Errorf("the watcher did not sync: %w", err)
	}
	c.watcher = w
	c.watchers = append(c.watchers, func() {
		cancel()
		if err := <-done; err != nil {
			c.log.Warn("watcher", "err", err)
		}
	})
	return c.startDataplane(ctx)
}

// startDataplane follows kube-proxy's nftables rules, as the agent does,
// keeping the lab namespace's Services. It starts before kube-proxy, whose
// table it then sees created.
func (c *Cluster) startDataplane(ctx context.Context) error {
	dp, err := dataplane.New(dataplane.Options{Node: NodeName, Logger: c.log, Emit: func(e event.Event) {
		if e.Pod.Namespace == Namespace && !c.quiet.Load() {
			c.rec.Add(e)
		}
	}})
	if err != nil {
		return err
	}
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = dp.Run(dctx) // fails soft: logs why once
	}()
	c.watchers = append(c.watchers, func() { cancel(); <-done })
	return nil
}

// startLegacy follows kube-proxy's iptables rules on the legacy backend,
// which announces nothing: after each sync its metric reports, read
// through iptables-legacy-save.
func (c *Cluster) startLegacy(ctx context.Context) error {
	lp, err := dataplane.NewLegacy(dataplane.LegacyOptions{Node: NodeName, Logger: c.log, Metrics: c.CP.ProxyMetrics(NodeName),
		Emit: func(e event.Event) {
			if e.Pod.Namespace == Namespace && !c.quiet.Load() {
				c.rec.Add(e)
			}
		}})
	if err != nil {
		return err
	}
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = lp.Run(dctx) // fails soft: logs why once
	}()
	stop := sync.OnceFunc(func() { cancel(); <-done })
	c.stopLegacy = stop
	c.watchers = append(c.watchers, stop)
	return nil
}

// ProxyDescription names the lab's kube-proxy mode and what the node's
// own detection says of it, as an agent would report it.
func (c *Cluster) ProxyDescription(ctx context.Context) string {
	m := dataplane.DetectMode(ctx, dataplane.ModeOptions{Metrics: c.CP.ProxyMetrics(NodeName)})
	s := "kube-proxy " + c.proxyMode
	if m.Proxy != c.proxyMode {
		s += fmt.Sprintf(" (detected as %q)", m.Proxy)
	}
	return s + ": " + m.Evidence
}
