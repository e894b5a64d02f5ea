package scenario

import (
	"context"
	"log/slog"
	"time"

	"github.com/drainscope/drainscope/export"
	"github.com/drainscope/drainscope/export/k8sevents"
)

// ExportEvents runs what drainscope serve --events runs, against the lab's
// cluster and store: each finished disruption that dropped requests puts a
// DroppedRequests Event on its Deployment, for kubectl describe. A
// disruption is finished once quiet (drainscope serve waits 2 min by
// default; a lab run is over sooner). It runs until stop.
func (c *Cluster) ExportEvents(ctx context.Context, quiet time.Duration, log *slog.Logger) (stop func()) {
	if log == nil {
		log = c.log
	}
	sink := k8sevents.New(k8sevents.Options{Client: c.Client, Host: NodeName, Log: log})
	feed := export.New(c.opts.Store, []export.Sink{sink}, export.Options{Quiet: quiet, Poll: time.Second, Log: log})
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); feed.Run(fctx) }()
	return func() { cancel(); <-done }
}
