package scenario

import (
	"context"
	"fmt"

	"github.com/drainscope/drainscope/ebpf"
	"github.com/drainscope/drainscope/event"
)

// ShadowKernel is a second eBPF capture beside the lab's own, tracking the
// same pods, whose events go to Emit and never to the store: two ways of
// seeing the same kernel events compared side by side in one run (for
// example refused connections through the 6.10 tracepoint and through the
// fallback of older kernels, Config.WithoutFeatures =
// [ebpf.FeatureNoSocketResets]).
type ShadowKernel struct {
	Config ebpf.Config // Node and Pods are the lab's
	Emit   func(event.Event)

	c    *ebpf.Collector
	done chan error
}

// startShadow opens the shadow capture after the lab's own.
func (c *Cluster) startShadow(ctx context.Context, pods ebpf.PodLookup) error {
	s := c.opts.Shadow
	if s == nil {
		return nil
	}
	cfg := s.Config
	cfg.Node, cfg.Pods, cfg.Logger = NodeName, pods, c.log
	k, err := ebpf.Open(cfg)
	if err != nil {
		return fmt.Errorf("shadow capture: %w", err)
	}
	if _, err := k.TrackCgroupPath(c.tree.Root()); err != nil {
		k.Close()
		return fmt.Errorf("shadow capture: %w", err)
	}
	s.c, s.done = k, make(chan error, 1)
	go func() { s.done <- k.Run(context.WithoutCancel(ctx), func(e *event.Event) { s.Emit(*e) }) }()
	return nil
}

// Collector is the shadow's collector once the lab is up.
func (s *ShadowKernel) Collector() *ebpf.Collector { return s.c }

func (c *Cluster) shadowNetNS(ino uint64, up bool) {
	if s := c.opts.Shadow; s != nil && s.c != nil {
		if up {
			_ = s.c.TrackNetNS(ino)
		} else {
			_ = s.c.UntrackNetNS(ino)
		}
	}
}

func (c *Cluster) stopShadow() {
	if s := c.opts.Shadow; s != nil && s.c != nil {
		s.c.Close()
		<-s.done
		s.c = nil
	}
}
