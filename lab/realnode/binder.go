package realnode

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

// bind plays the scheduler, which the lab does not run: every pod without
// a node, in any namespace (the chart's DaemonSet pods too, which the
// DaemonSet controller leaves to the scheduler), is bound to this node.
func (n *Node) bind(ctx context.Context) {
	pods := n.cfg.Client.CoreV1().Pods("")
	sel := fields.OneTermEqualSelector("spec.nodeName", "").String()
	for ctx.Err() == nil {
		list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		for i := range list.Items {
			n.bindPod(ctx, &list.Items[i])
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				n.bindPod(ctx, p)
			}
		}
		w.Stop()
	}
}

func (n *Node) bindPod(ctx context.Context, p *corev1.Pod) {
	if p.Spec.NodeName != "" || p.DeletionTimestamp != nil {
		return
	}
	err := n.cfg.Client.CoreV1().Pods(p.Namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: n.cfg.NodeName},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		n.cfg.Log.Warn("binding pod", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
}
