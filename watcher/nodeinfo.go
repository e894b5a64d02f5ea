package watcher

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"

	"github.com/drainscope/drainscope/event"
)

// nodeInfoTimeout bounds one observation's reads of the API server.
const nodeInfoTimeout = 30 * time.Second

// nodeInfo records node_info: the versions the node runs (its kubelet's,
// its kube-proxy's as the kubelet reports it, its container runtime's,
// from its Node; with PodNode only, the agent's own node) and the API
// server's. How a kubelet stops a container, and which fields an Event or
// EndpointSlice carries, differ by version. It is the node's own event,
// recorded in either Mode, when the watches have synced and every
// ObserveInterval; Run's goroutine is its one user.
type nodeInfo struct {
	w *Watcher
	// failing names the reads whose failure was logged, so that a lasting
	// one (no get on nodes in an older ClusterRole) is logged once, and
	// again only after a success.
	failing map[string]bool
}

func (w *Watcher) runNodeInfo(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-w.synced:
	}
	n := &nodeInfo{w: w, failing: map[string]bool{}}
	// An agent starts before its node's kubelet has registered the Node
	// (a new node, the lab's): asked again every nodeInfoRetry until it
	// has, for an ObserveInterval at most, so that the first record names
	// the kubelet's version.
	final := time.Now().Add(w.opts.ObserveInterval)
	for n.observe(ctx, !time.Now().Before(final)) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(nodeInfoRetry):
		}
	}
	every(ctx, w.opts.ObserveInterval, func() { n.observe(ctx, true) })
}

// nodeInfoRetry is how soon a Node not registered yet is asked for again.
const nodeInfoRetry = 2 * time.Second

// every calls f every d until ctx ends.
func every(ctx context.Context, d time.Duration, f func()) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			f()
		}
	}
}

// observe reads the versions and records what it could read: a read that
// fails (forbidden, not found, the server away) leaves its attributes out,
// and with nothing read nothing is recorded. Unless final, a Node not
// found yet records nothing and asks to be retried.
func (n *nodeInfo) observe(ctx context.Context, final bool) (retry bool) {
	w := n.w
	rctx, cancel := context.WithTimeout(ctx, nodeInfoTimeout)
	defer cancel()
	attrs := map[string]string{}
	v, err := discovery.ToServerVersionInterfaceWithContext(w.cs.Discovery()).ServerVersionWithContext(rctx)
	if n.read(ctx, "version", "", err) && v.GitVersion != "" {
		attrs[event.AttrAPIServerVersion] = v.GitVersion
	}
	if w.opts.PodNode != "" {
		node, err := w.cs.CoreV1().Nodes().Get(rctx, w.opts.PodNode, metav1.GetOptions{})
		if !final && apierrors.IsNotFound(err) {
			return true
		}
		if n.read(ctx, "node", w.opts.PodNode, err) {
			ni := node.Status.NodeInfo
			// kubeProxyVersion is empty where the kubelet's
			// DisableNodeKubeProxyVersion gate is on (the default from
			// 1.33): left out then.
			for k, v := range map[string]string{event.AttrKubeletVersion: ni.KubeletVersion,
				event.AttrKubeProxyVersion: ni.KubeProxyVersion, event.AttrContainerRuntime: ni.ContainerRuntimeVersion} {
				if v != "" {
					attrs[k] = v
				}
			}
		}
	}
	if len(attrs) == 0 {
		return false
	}
	w.emitOwn(w.opts.Now(), &event.Event{Kind: event.NodeInfo, Reason: event.ChangeObserved, Flags: event.FlagObserved,
		Attrs: attrs})
	return false
}

// read tells whether a read (what, of name) succeeded, and logs its
// failure once per outage; not at all when the watcher is stopping (ctx).
func (n *nodeInfo) read(ctx context.Context, what, name string, err error) bool {
	if err == nil {
		delete(n.failing, what)
		return true
	}
	if !n.failing[what] && ctx.Err() == nil {
		n.failing[what] = true
		n.w.log.Info("node_info: a read failed; recording what can be read", "read", what, "name", name, "err", err)
	}
	return false
}
