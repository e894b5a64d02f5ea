package event

import "strings"

// Entity names the thing whose state an event records, so that the newest
// event of each entity before an instant is that entity's state then (see
// the store's StateAt). Events that record no state (kernel, client,
// capability events) have none: Entity returns "".
//
//	entity                        key                              kinds
//	an endpoint of a Service      namespace, Service, Local address endpoint_*
//	a pod's readiness             Pod.UID                          pod_ready, pod_not_ready
//	a pod's lifecycle             Pod.UID                          pod_created, pod_deletion, pod_finished
//	a container                   Pod.UID, Pod.Container           container_started, container_terminated
//	a Service                     namespace, Service               service_changed
//	a workload                    namespace, Workload kind, name   workload_changed
//	a node proxy's endpoint       Node, Service, Local, proxy      dataplane_*
//
// The key begins with the entity's class and its namespace, each ended by
// a unit separator, so keys of one namespace share a prefix.
func (e *Event) Entity() string {
	ns := e.Pod.Namespace
	switch {
	case e.Kind.IsEndpoint():
		if e.Service == "" && e.Slice == "" {
			return ""
		}
		svc := e.Service
		if svc == "" {
			svc = "slice:" + e.Slice // a slice without a Service, as the watcher keys it
		}
		return entityKey("endpoint", ns, svc, e.Local.Addr().String())
	case e.Kind == PodReady || e.Kind == PodNotReady:
		return podEntity("pod_ready", ns, e.Pod.UID)
	case e.Kind == PodCreated || e.Kind == PodDeletion || e.Kind == PodFinished:
		return podEntity("pod_life", ns, e.Pod.UID)
	case e.Kind == ContainerStarted || e.Kind == ContainerTerminated:
		if e.Pod.UID == "" || e.Pod.Container == "" {
			return ""
		}
		return entityKey("container", ns, e.Pod.UID, e.Pod.Container)
	case e.Kind == ServiceChanged:
		if e.Service == "" {
			return ""
		}
		return entityKey("service", ns, e.Service)
	case e.Kind == WorkloadChanged:
		if e.Workload.IsZero() {
			return ""
		}
		return entityKey("workload", ns, e.Workload.Kind, e.Workload.Name)
	case e.Kind.IsDataplane():
		return entityKey("dataplane", ns, e.Node, e.Service, e.Local.String(), e.Attrs[AttrProxy])
	}
	return ""
}

func podEntity(class, ns, uid string) string {
	if uid == "" {
		return ""
	}
	return entityKey(class, ns, uid)
}

// entitySep separates a key's parts: a control character no name holds.
const entitySep = "\x1f"

func entityKey(class, ns string, parts ...string) string {
	var b strings.Builder
	b.WriteString(class)
	b.WriteString(entitySep)
	b.WriteString(ns)
	for _, p := range parts {
		b.WriteString(entitySep)
		b.WriteString(p)
	}
	return b.String()
}

// IsState reports whether events of kind k record an entity's state (see
// Entity).
func (k Kind) IsState() bool {
	switch {
	case k.IsEndpoint(), k.IsDataplane():
		return true
	}
	switch k {
	case PodReady, PodNotReady, PodCreated, PodDeletion, PodFinished, ContainerStarted, ContainerTerminated,
		ServiceChanged, WorkloadChanged:
		return true
	}
	return false
}
