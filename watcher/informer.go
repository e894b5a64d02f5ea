package watcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// handler receives what one informer saw, on the informer's goroutine. at
// is when the delta was taken from the queue: the time its events carry.
type handler interface {
	// replaceAll gets a complete list: the initial one (initial) or a
	// relist after the watch broke.
	replaceAll(objs []any, initial bool, at time.Time)
	upsert(obj any, at time.Time)
	remove(obj any, at time.Time)
}

// runInformer lists and watches through lw into h until ctx ends; done is
// closed when it has stopped. It is a
// client-go reflector and in-order queue like a shared informer's, but the
// queue hands over a relist as one complete list (not a stream of updates
// indistinguishable from watch events), so the handler can tell
// transitions it saw happen from transitions it recovered by diffing.
func runInformer(ctx context.Context, name string, lw cache.ListerWatcher, obj runtime.Object, transform cache.TransformFunc,
	h handler, now func() time.Time, onWatchError func(error)) (cache.Controller, <-chan struct{}) {
	fifo := cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{
		Name:         name,
		KeyFunction:  cache.MetaNamespaceKeyFunc,
		Transformer:  transform,
		AtomicEvents: true,
	})
	ctrl := cache.New(&cache.Config{
		Queue:             fifo,
		ListerWatcher:     lw,
		ObjectType:        obj,
		ObjectDescription: name,
		Process: func(o any, isInInitialList bool) error {
			deltas, ok := o.(cache.Deltas)
			if !ok {
				return fmt.Errorf("%s: queue gave %T, not Deltas", name, o)
			}
			at := now()
			for _, d := range deltas {
				switch d.Type {
				case cache.ReplacedAll:
					info, ok := d.Object.(cache.ReplacedAllInfo)
					if !ok {
						return fmt.Errorf("%s: ReplacedAll carried %T", name, d.Object)
					}
					h.replaceAll(info.Objects, isInInitialList, at)
				case cache.Added, cache.Updated, cache.Replaced, cache.Sync:
					h.upsert(d.Object, at)
				case cache.Deleted:
					// A tombstone (cache.DeletedFinalStateUnknown) marks a
					// deletion noticed on a relist.
					h.remove(d.Object, at)
				case cache.SyncAll, cache.Bookmark:
					// No resync period is set, and bookmarks change nothing.
				}
			}
			return nil
		},
		WatchErrorHandlerWithContext: func(ctx context.Context, r *cache.Reflector, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			onWatchError(err)
		},
	})
	done := make(chan struct{})
	go func() { defer close(done); ctrl.RunWithContext(ctx) }()
	return ctrl, done
}
