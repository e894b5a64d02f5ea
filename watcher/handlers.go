package watcher

import (
	"net/netip"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/drainscope/drainscope/event"
)

// podHandler feeds the pod informer's deltas to the pod tracker.
type podHandler struct{ w *Watcher }

func (h *podHandler) replaceAll(objs []any, initial bool, at time.Time) {
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			pods = append(pods, p)
		}
	}
	if !initial {
		h.w.relists.Add(1)
	}
	t := h.w.pods
	t.opMu.Lock()
	defer t.opMu.Unlock()
	t.at = at
	t.replaceAll(pods, event.FlagRelist, initial)
	// What the list found is the state to start from: recorded as
	// observed, after the transitions a relist recovered.
	t.observe(at)
}

func (h *podHandler) upsert(obj any, at time.Time) {
	if p, ok := obj.(*corev1.Pod); ok {
		h.w.pods.opMu.Lock()
		defer h.w.pods.opMu.Unlock()
		h.w.pods.at = at
		h.w.pods.apply(p, 0, false)
	}
}

func (h *podHandler) remove(obj any, at time.Time) {
	flags := event.Flags(0)
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, flags = tomb.Obj, event.FlagRelist
	}
	if p, ok := obj.(*corev1.Pod); ok {
		h.w.pods.opMu.Lock()
		defer h.w.pods.opMu.Unlock()
		h.w.pods.at = at
		final := p
		if flags != 0 {
			final = nil // the last state known, not the state at deletion
		}
		h.w.pods.remove(string(p.UID), final, flags, false)
	}
}

// sliceHandler feeds the EndpointSlice informer's deltas to the tracker.
type sliceHandler struct{ w *Watcher }

func (h *sliceHandler) replaceAll(objs []any, initial bool, at time.Time) {
	list := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok {
			list = append(list, s)
		}
	}
	if !initial {
		h.w.relists.Add(1)
	}
	h.w.sliceMu.Lock()
	defer h.w.sliceMu.Unlock()
	h.w.slices.at = at
	h.w.slices.replaceAll(list, event.FlagRelist, initial)
	if h.w.observesShared() {
		h.w.slices.observe(at)
	}
}

func (h *sliceHandler) upsert(obj any, at time.Time) {
	if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
		h.w.sliceMu.Lock()
		defer h.w.sliceMu.Unlock()
		h.w.slices.at = at
		h.w.slices.apply(s, 0, false)
	}
}

func (h *sliceHandler) remove(obj any, at time.Time) {
	flags := event.Flags(0)
	key := ""
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		key, flags = tomb.Key, event.FlagRelist
	} else if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
		key = sliceKey(s)
	}
	if key == "" {
		return
	}
	h.w.sliceMu.Lock()
	defer h.w.sliceMu.Unlock()
	h.w.slices.at = at
	h.w.slices.remove(key, flags, false)
}

// emitPod builds and delivers a pod event.
func (w *Watcher) emitPod(at time.Time, k event.Kind, st *podState, fill func(*event.Event), flags event.Flags) {
	e := event.Event{Kind: k, Pod: st.ref, Workload: st.workload, Flags: flags}
	if fill != nil {
		fill(&e)
	}
	w.emitOwn(at, &e)
}

// emitOwn delivers an event of this node's own (its pods', its kubelet's,
// its versions) in either Mode: only the cluster-wide watches' events wait
// for leadership (emitShared).
func (w *Watcher) emitOwn(at time.Time, e *event.Event) {
	w.emitMu.Lock()
	defer w.emitMu.Unlock()
	e.Time = w.stamp(at)
	w.deliver(e)
}

// emitEndpoint builds an endpoint event and hands it to emitShared.
func (w *Watcher) emitEndpoint(at time.Time, k event.Kind, key epKey, st epState, flags event.Flags) {
	e := event.Event{
		Kind:   k,
		Pod:    event.PodRef{Namespace: key.ns, Name: st.podName, UID: key.podUID},
		Local:  netip.AddrPortFrom(key.addr, st.port),
		Slice:  st.slice,
		Flags:  flags,
		Attrs:  map[string]string{event.AttrConditions: st.conditions()},
		Source: event.SourceWatcher,
	}
	if !strings.HasPrefix(key.group, "slice:") {
		e.Service = key.group
	}
	if st.trigger != "" {
		e.Attrs[event.AttrLastChangeTriggerTime] = st.trigger
	}
	if st.node != "" {
		e.Attrs[AttrEndpointNode] = st.node
	}
	if st.ports != "" && st.port == 0 {
		e.Attrs[AttrPorts] = st.ports
	}
	if key.podUID != "" {
		if _, wl, ok := w.pods.PodByUID(key.podUID); ok {
			e.Workload = wl
		}
	}
	w.emitShared(at, &e)
}

// emitShared delivers an event of the cluster-wide watches (EndpointSlices,
// Services, workloads), or, on a standby in Leader mode, keeps it for a
// takeover; an observed state goes only where observesShared.
func (w *Watcher) emitShared(at time.Time, e *event.Event) { w.emitSharedStamped(at, e, nil) }

// emitSharedStamped is emitShared calling stamped, when not nil, once e
// has its time and before anyone sees it: for what an event says of its
// own time.
func (w *Watcher) emitSharedStamped(at time.Time, e *event.Event, stamped func(*event.Event)) {
	w.emitMu.Lock()
	defer w.emitMu.Unlock()
	e.Time = w.stamp(at)
	if stamped != nil {
		stamped(e)
	}
	if w.opts.Tap != nil {
		w.opts.Tap(e)
	}
	if e.Flags.Has(event.FlagObserved) && !w.observesShared() {
		return
	}
	if !w.leading.Load() {
		w.standby.add(*e)
		return
	}
	w.deliver(e)
}

// workload resolves the controller owning p: a ReplicaSet's Deployment
// through the ReplicaSet cache, else the owner itself.
func (w *Watcher) workload(p *corev1.Pod) event.Workload {
	ref := metav1.GetControllerOf(p)
	if ref == nil {
		return event.Workload{}
	}
	if ref.Kind != "ReplicaSet" {
		return event.Workload{Kind: ref.Kind, Name: ref.Name}
	}
	if w.rsLister != nil {
		if rs, err := w.rsLister.ReplicaSets(p.Namespace).Get(ref.Name); err == nil {
			if o := metav1.GetControllerOf(rs); o != nil {
				return event.Workload{Kind: o.Kind, Name: o.Name}
			}
			return event.Workload{Kind: "ReplicaSet", Name: ref.Name}
		}
	}
	// Not cached yet (the pod can arrive before its ReplicaSet): a
	// Deployment names its ReplicaSets DEPLOYMENT-HASH and labels their
	// pods with the hash.
	if h := p.Labels[appsv1.DefaultDeploymentUniqueLabelKey]; h != "" && strings.HasSuffix(ref.Name, "-"+h) {
		return event.Workload{Kind: "Deployment", Name: strings.TrimSuffix(ref.Name, "-"+h)}
	}
	return event.Workload{Kind: "ReplicaSet", Name: ref.Name}
}

// stripPod keeps what the watcher reads of a pod, so that the cache of a
// busy node stays small.
func stripPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: p.Labels, OwnerReferences: p.OwnerReferences, CreationTimestamp: p.CreationTimestamp,
			DeletionTimestamp: p.DeletionTimestamp, DeletionGracePeriodSeconds: p.DeletionGracePeriodSeconds,
		},
		// The grace period its containers' preStop hooks and SIGTERM share.
		Spec: corev1.PodSpec{NodeName: p.Spec.NodeName, TerminationGracePeriodSeconds: p.Spec.TerminationGracePeriodSeconds},
		Status: corev1.PodStatus{
			Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs,
			// Why a pod ended with no deletion (Evicted, Shutdown …).
			Reason: p.Status.Reason, Message: p.Status.Message,
		},
	}
	for _, c := range p.Status.Conditions {
		switch c.Type {
		case corev1.PodReady:
			out.Status.Conditions = append(out.Status.Conditions, corev1.PodCondition{
				Type: c.Type, Status: c.Status, LastTransitionTime: c.LastTransitionTime})
		case corev1.DisruptionTarget:
			// Why the pod is going: eviction, preemption, a taint, the
			// kubelet's node-pressure eviction.
			out.Status.Conditions = append(out.Status.Conditions, corev1.PodCondition{
				Type: c.Type, Status: c.Status, Reason: c.Reason})
		}
	}
	out.Status.InitContainerStatuses = stripStatuses(p.Status.InitContainerStatuses)
	out.Status.ContainerStatuses = stripStatuses(p.Status.ContainerStatuses)
	// Which init containers are sidecars, the ports each container
	// declares and its preStop hook.
	out.Spec.InitContainers = stripContainers(p.Spec.InitContainers)
	out.Spec.Containers = stripContainers(p.Spec.Containers)
	return out, nil
}

// stripContainers keeps each container's name, restart policy, ports
// (their number and protocol) and preStop hook (stripLifecycle).
func stripContainers(list []corev1.Container) []corev1.Container {
	if len(list) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(list))
	for i, c := range list {
		out[i] = corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy, Lifecycle: stripLifecycle(c.Lifecycle)}
		if len(c.Ports) > 0 {
			out[i].Ports = make([]corev1.ContainerPort, len(c.Ports))
			for j, p := range c.Ports {
				out[i].Ports[j] = corev1.ContainerPort{ContainerPort: p.ContainerPort, Protocol: p.Protocol}
			}
		}
	}
	return out
}

// stripStatuses keeps what the pod tracker reads of containers' statuses.
func stripStatuses(list []corev1.ContainerStatus) []corev1.ContainerStatus {
	if len(list) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(list))
	for i, c := range list {
		out[i] = corev1.ContainerStatus{
			Name: c.Name, ContainerID: c.ContainerID, RestartCount: c.RestartCount, Ready: c.Ready,
			State:                corev1.ContainerState{Terminated: c.State.Terminated, Running: c.State.Running},
			LastTerminationState: corev1.ContainerState{Terminated: c.LastTerminationState.Terminated},
		}
	}
	return out
}

// stripSlice drops the managed fields and every annotation but the
// last-change trigger time.
func stripSlice(obj any) (any, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	s.ManagedFields = nil
	if t, ok := s.Annotations[corev1.EndpointsLastChangeTriggerTime]; ok {
		s.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: t}
	} else {
		s.Annotations = nil
	}
	return s, nil
}

// stripReplicaSet keeps a ReplicaSet's identity and owners.
func stripReplicaSet(obj any) (any, error) {
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok {
		return obj, nil
	}
	return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{
		Name: rs.Name, Namespace: rs.Namespace, UID: rs.UID, ResourceVersion: rs.ResourceVersion,
		OwnerReferences: rs.OwnerReferences,
	}}, nil
}
