package scenario

import (
	"context"
	"fmt"
	"time"

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
	return nil
}
