package watcher

import (
	"encoding/json"
	"hash/fnv"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/drainscope/drainscope/event"
)

// Workload changes are what set pods ending and starting: a Deployment's pod
// template changing begins a rollout, a change of its replicas scales it, its
// deletion ends every pod it owns. The analysis starts a rollout at its
// trigger rather than at the first pod that ended, so that the new pods
// created before it (maxSurge) count as the rollout's.
//
// The Deployment cache keeps only what the comparison needs: the template
// is reduced to a hash.

// annTemplateHash holds, in the cached copy only, the hash of the pod
// template the transform dropped.
const annTemplateHash = "drainscope.io/template-hash"

// stripDeployment keeps a Deployment's identity, generation, replicas and
// the hash of its pod template.
func stripDeployment(obj any) (any, error) {
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		return obj, nil
	}
	out := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{
		Name: d.Name, Namespace: d.Namespace, UID: d.UID, ResourceVersion: d.ResourceVersion,
		Generation: d.Generation, Annotations: map[string]string{annTemplateHash: templateHash(d)},
	}}
	out.Spec.Replicas = d.Spec.Replicas
	return out, nil
}

// templateHash is a hash of the pod template as the API serves it; equal
// templates hash equal, which is all the comparison needs.
func templateHash(d *appsv1.Deployment) string {
	b, err := json.Marshal(&d.Spec.Template)
	if err != nil {
		return "" // a template that does not marshal compares as unchanged
	}
	h := fnv.New64a()
	h.Write(b)
	return strconv.FormatUint(h.Sum64(), 16)
}

// workloadState is what the tracker last reported of one Deployment.
type workloadState struct {
	uid        string
	generation int64
	replicas   int32
	template   string
}

func stateOf(d *appsv1.Deployment) workloadState {
	r := int32(1) // the API's default
	if d.Spec.Replicas != nil {
		r = *d.Spec.Replicas
	}
	return workloadState{uid: string(d.UID), generation: d.Generation, replicas: r, template: d.Annotations[annTemplateHash]}
}

// workloadHandler turns Deployment deltas into workload_changed events.
// Only the informer goroutine calls it, so its map needs no lock.
type workloadHandler struct {
	w     *Watcher
	known map[string]workloadState // namespace/name
}

func (h *workloadHandler) replaceAll(objs []any, initial bool, at time.Time) {
	seen := make(map[string]bool, len(objs))
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			seen[d.Namespace+"/"+d.Name] = true
			if initial {
				h.known[d.Namespace+"/"+d.Name] = stateOf(d)
				continue
			}
			h.apply(d, at, event.FlagRelist)
		}
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
}

func (h *workloadHandler) upsert(obj any, at time.Time) {
	if d, ok := obj.(*appsv1.Deployment); ok {
		h.apply(d, at, 0)
	}
}

func (h *workloadHandler) remove(obj any, at time.Time) {
	flags := event.Flags(0)
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, flags = tomb.Obj, event.FlagRelist
	}
	if d, ok := obj.(*appsv1.Deployment); ok {
		h.gone(d.Namespace+"/"+d.Name, at, flags)
	}
}

// apply reports what changed since the Deployment's last known state: a new
// Deployment (or one recreated under its name), its template, its replicas.
func (h *workloadHandler) apply(d *appsv1.Deployment, at time.Time, flags event.Flags) {
	key := d.Namespace + "/" + d.Name
	now := stateOf(d)
	was, ok := h.known[key]
	h.known[key] = now
	wl := event.Workload{Kind: "Deployment", Name: d.Name}
	if !ok || was.uid != now.uid {
		h.w.emitWorkload(at, d.Namespace, wl, event.ChangeCreated, workloadState{}, now, flags)
		return
	}
	if was.template != now.template {
		h.w.emitWorkload(at, d.Namespace, wl, event.ChangeTemplate, was, now, flags)
	}
	if was.replicas != now.replicas {
		h.w.emitWorkload(at, d.Namespace, wl, event.ChangeScale, was, now, flags)
	}
}

func (h *workloadHandler) gone(key string, at time.Time, flags event.Flags) {
	was, ok := h.known[key]
	if !ok {
		return
	}
	delete(h.known, key)
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	h.w.emitWorkload(at, ns, event.Workload{Kind: "Deployment", Name: name}, event.ChangeDeleted, was, workloadState{}, flags)
}

// emitWorkload builds a workload_changed event. Like the endpoint events it
// is cluster-wide, recorded by whoever records EndpointSlices.
func (w *Watcher) emitWorkload(at time.Time, ns string, wl event.Workload, reason string, was, now workloadState, flags event.Flags) {
	e := event.Event{
		Kind: event.WorkloadChanged, Pod: event.PodRef{Namespace: ns}, Workload: wl,
		Reason: reason, Flags: flags, Attrs: map[string]string{},
	}
	if now.generation != 0 {
		e.Attrs[event.AttrGeneration] = strconv.FormatInt(now.generation, 10)
	}
	switch reason {
	case event.ChangeScale:
		e.Attrs[event.AttrReplicasFrom] = strconv.Itoa(int(was.replicas))
		e.Attrs[event.AttrReplicasTo] = strconv.Itoa(int(now.replicas))
	case event.ChangeCreated:
		e.Attrs[event.AttrReplicasTo] = strconv.Itoa(int(now.replicas))
	case event.ChangeDeleted:
		e.Attrs[event.AttrReplicasFrom] = strconv.Itoa(int(was.replicas))
	}
	w.emitShared(at, &e)
}
