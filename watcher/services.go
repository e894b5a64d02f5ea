package watcher

import (
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/drainscope/drainscope/event"
)

// Services are what a client knows: it dials a ClusterIP or a Service's DNS
// name, never the pod. The watcher records each Service's addresses and
// ports when they appear, change and go, so that the analysis can take a
// client's target, at the time of its failure, to the Service and from
// there to the Service's endpoints. A ClusterIP can be reused by another
// Service later and a Service recreated under its name gets a new one:
// the events' times tell them apart. ExternalName Services have no
// address of the cluster's and are left out.
//
// Services change rarely, so the event that made one known is usually far
// older than the window a report or a timeline reads. The watcher records
// every Service it knows once when its watch starts, at a relist, and again
// every Options.ObserveInterval (reason "observed", FlagObserved), with the
// endpoints and pods, so any window holds each Service's addresses.

// stripService keeps a Service's identity, type, addresses and ports.
func stripService(obj any) (any, error) {
	s, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil
	}
	out := &corev1.Service{ObjectMeta: metav1.ObjectMeta{
		Name: s.Name, Namespace: s.Namespace, UID: s.UID, ResourceVersion: s.ResourceVersion,
	}}
	out.Spec.Type, out.Spec.ClusterIPs = s.Spec.Type, s.Spec.ClusterIPs
	for _, p := range s.Spec.Ports {
		out.Spec.Ports = append(out.Spec.Ports, corev1.ServicePort{Port: p.Port, Protocol: p.Protocol})
	}
	return out, nil
}

// serviceState is what the tracker last reported of one Service.
type serviceState struct {
	uid, typ, ips, ports string
}

func serviceStateOf(s *corev1.Service) (serviceState, bool) {
	if s.Spec.Type == corev1.ServiceTypeExternalName {
		return serviceState{}, false
	}
	var ips []string
	for _, ip := range s.Spec.ClusterIPs {
		if ip != "" && ip != corev1.ClusterIPNone {
			ips = append(ips, ip)
		}
	}
	ports := make([]string, 0, len(s.Spec.Ports))
	for _, p := range s.Spec.Ports {
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		ports = append(ports, strconv.Itoa(int(p.Port))+"/"+string(proto))
	}
	typ := string(s.Spec.Type)
	if typ == "" {
		typ = string(corev1.ServiceTypeClusterIP)
	}
	return serviceState{uid: string(s.UID), typ: typ, ips: strings.Join(ips, ","), ports: strings.Join(ports, ",")}, true
}

// ObserveEvery is how often, by default, the watcher records again the
// state of everything it tracks (Options.ObserveInterval).
const ObserveEvery = 10 * time.Minute

// serviceHandler turns Service deltas into service_changed events. The
// informer goroutine calls it, and snapshot from Run's ticker, so mu guards
// known.
type serviceHandler struct {
	w     *Watcher
	mu    sync.Mutex
	known map[string]serviceState // namespace/name
}

// snapshot records every known Service as observed at at.
func (h *serviceHandler) snapshot(at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for key, st := range h.known {
		ns, name, _ := cache.SplitMetaNamespaceKey(key)
		h.w.emitService(at, ns, name, event.ChangeObserved, st, event.FlagObserved)
	}
}

func (h *serviceHandler) replaceAll(objs []any, initial bool, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := make(map[string]bool, len(objs))
	for _, o := range objs {
		s, ok := o.(*corev1.Service)
		if !ok {
			continue
		}
		key := s.Namespace + "/" + s.Name
		seen[key] = true
		if initial {
			// The Services that exist when the watch starts are recorded
			// too, as observed: a failure's target must resolve to a
			// Service created before the agent started.
			if st, ok := serviceStateOf(s); ok {
				h.known[key] = st
				h.w.emitService(at, s.Namespace, s.Name, event.ChangeObserved, st, event.FlagObserved)
			}
			continue
		}
		h.apply(s, at, event.FlagRelist)
	}
	if initial {
		return
	}
	h.w.relists.Add(1)
	for key := range h.known {
		if !seen[key] {
			h.gone(key, at, event.FlagRelist)
		}
	}
	for key, st := range h.known {
		ns, name, _ := cache.SplitMetaNamespaceKey(key)
		h.w.emitService(at, ns, name, event.ChangeObserved, st, event.FlagObserved)
	}
}

func (h *serviceHandler) upsert(obj any, at time.Time) {
	if s, ok := obj.(*corev1.Service); ok {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.apply(s, at, 0)
	}
}

func (h *serviceHandler) remove(obj any, at time.Time) {
	flags := event.Flags(0)
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, flags = tomb.Obj, event.FlagRelist
	}
	if s, ok := obj.(*corev1.Service); ok {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.gone(s.Namespace+"/"+s.Name, at, flags)
	}
}

// apply and gone are called with mu held.
func (h *serviceHandler) apply(s *corev1.Service, at time.Time, flags event.Flags) {
	key := s.Namespace + "/" + s.Name
	now, ok := serviceStateOf(s)
	if !ok {
		h.gone(key, at, flags) // turned into an ExternalName
		return
	}
	was, known := h.known[key]
	h.known[key] = now
	switch {
	case known && was.uid != now.uid:
		// Recreated under the same name between two observations.
		h.w.emitService(at, s.Namespace, s.Name, event.ChangeDeleted, was, flags)
		h.w.emitService(at, s.Namespace, s.Name, event.ChangeCreated, now, flags)
	case !known:
		h.w.emitService(at, s.Namespace, s.Name, event.ChangeCreated, now, flags)
	case was != now:
		h.w.emitService(at, s.Namespace, s.Name, event.ChangeUpdated, now, flags)
	}
}

func (h *serviceHandler) gone(key string, at time.Time, flags event.Flags) {
	was, ok := h.known[key]
	if !ok {
		return
	}
	delete(h.known, key)
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	h.w.emitService(at, ns, name, event.ChangeDeleted, was, flags)
}

// emitService builds a service_changed event: for a deletion, with the
// addresses the Service had.
func (w *Watcher) emitService(at time.Time, ns, name, reason string, st serviceState, flags event.Flags) {
	e := event.Event{
		Kind: event.ServiceChanged, Pod: event.PodRef{Namespace: ns}, Service: name,
		Reason: reason, Flags: flags,
		Attrs: map[string]string{event.AttrClusterIPs: st.ips, event.AttrServicePorts: st.ports, event.AttrServiceType: st.typ},
	}
	w.emitShared(at, &e)
}
