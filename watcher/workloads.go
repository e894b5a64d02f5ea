package watcher

import (
	"cmp"
	"encoding/json"
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/drainscope/drainscope/event"
)

// Workload changes are what set pods ending and starting: a workload's pod
// template changing begins a rollout, a change of its replicas scales it,
// its deletion ends every pod it owns. The analysis starts a rollout at its
// trigger rather than at the first pod that ended, so that the new pods
// created before it (maxSurge) count as the rollout's. A Deployment's pause
// holds its rollout where it is and its resume lets it proceed, so both are
// recorded too: a rollout that stalled for an hour was paused, not slow.
// And the end of a rollout (complete), so that a rollout still going can be
// told from one done. Deployments, StatefulSets and DaemonSets are watched
// alike.
//
// The cache keeps only what the comparison needs: the template is reduced
// to a hash, the status to where it says the rollout is.

// annTemplateHash holds, in the cached copy only, the hash of the pod
// template the transform dropped; annRollout the rolloutStatus of the
// status it dropped.
const (
	annTemplateHash = "drainscope.io/template-hash"
	annRollout      = "drainscope.io/rollout"
)

// stripWorkload keeps a workload's identity, generation, replicas, whether
// it is paused, the hash of its pod template and its rolloutStatus.
func stripWorkload(obj any) (any, error) {
	meta := func(m metav1.ObjectMeta, t *corev1.PodTemplateSpec, r rolloutStatus) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
			Generation: m.Generation, Annotations: map[string]string{annTemplateHash: templateHash(t), annRollout: r.String()}}
	}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		out := &appsv1.Deployment{ObjectMeta: meta(o.ObjectMeta, &o.Spec.Template, deploymentRollout(o))}
		out.Spec.Replicas, out.Spec.Paused = o.Spec.Replicas, o.Spec.Paused
		return out, nil
	case *appsv1.StatefulSet:
		out := &appsv1.StatefulSet{ObjectMeta: meta(o.ObjectMeta, &o.Spec.Template, statefulSetRollout(o))}
		out.Spec.Replicas = o.Spec.Replicas
		return out, nil
	case *appsv1.DaemonSet:
		return &appsv1.DaemonSet{ObjectMeta: meta(o.ObjectMeta, &o.Spec.Template, daemonSetRollout(o))}, nil
	}
	return obj, nil
}

// rolloutStatus is where a workload's status says its rollout is.
type rolloutStatus uint8

const (
	// rolloutUnseen: the controller has not yet observed the current
	// spec (status.observedGeneration is behind metadata.generation).
	// Every change of the spec passes through it, a pause or a scale as
	// much as a new template, so on its own it is no rollout.
	rolloutUnseen rolloutStatus = iota
	// rolloutPending: observed, and the status shows pods left to update,
	// make ready or remove.
	rolloutPending
	// rolloutDone: observed, and done as kubectl rollout status decides.
	rolloutDone
)

var rolloutNames = [...]string{rolloutUnseen: "unseen", rolloutPending: "pending", rolloutDone: "done"}

func (r rolloutStatus) String() string { return rolloutNames[r] }

func parseRollout(s string) rolloutStatus {
	for i, n := range rolloutNames {
		if n == s {
			return rolloutStatus(i)
		}
	}
	return rolloutUnseen
}

// The tests below are kubectl rollout status's
// (k8s.io/kubectl/pkg/polymorphichelpers, rollout_status.go): where kubectl
// reports an error the rollout is pending, and where it refuses a strategy
// other than RollingUpdate the same counts decide.

// deploymentRollout: done once every replica runs the new template, no old
// one is left and the new ones are available. A rollout past its progress
// deadline is pending: it has not ended, it has failed to progress.
func deploymentRollout(d *appsv1.Deployment) rolloutStatus {
	st := &d.Status
	if d.Generation > st.ObservedGeneration {
		return rolloutUnseen
	}
	for _, c := range st.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == deploymentTimedOut {
			return rolloutPending
		}
	}
	if d.Spec.Replicas != nil && st.UpdatedReplicas < *d.Spec.Replicas ||
		st.Replicas > st.UpdatedReplicas || st.AvailableReplicas < st.UpdatedReplicas {
		return rolloutPending
	}
	return rolloutDone
}

// deploymentTimedOut is the Progressing condition's reason once a rollout
// exceeded its progressDeadlineSeconds (k8s.io/kubectl's
// deploymentutil.TimedOutReason).
const deploymentTimedOut = "ProgressDeadlineExceeded"

// statefulSetRollout: done once every replica is ready and the pods from
// the partition up run the new revision (a RollingUpdate strategy, which
// the API gives a partition, 0 by default), or else once the current
// revision is the update revision (OnDelete: the controller moves it when
// every pod was recreated).
func statefulSetRollout(s *appsv1.StatefulSet) rolloutStatus {
	st := &s.Status
	if st.ObservedGeneration == 0 || s.Generation > st.ObservedGeneration {
		return rolloutUnseen
	}
	if s.Spec.Replicas != nil && st.ReadyReplicas < *s.Spec.Replicas {
		return rolloutPending
	}
	done := st.UpdateRevision == st.CurrentRevision
	if u := s.Spec.UpdateStrategy; u.Type == appsv1.RollingUpdateStatefulSetStrategyType && u.RollingUpdate != nil {
		done = s.Spec.Replicas == nil || u.RollingUpdate.Partition == nil ||
			st.UpdatedReplicas >= *s.Spec.Replicas-*u.RollingUpdate.Partition
	}
	if !done {
		return rolloutPending
	}
	return rolloutDone
}

// daemonSetRollout: done once every node that should run a pod runs one of
// the new template, available (with OnDelete, once each old pod was
// deleted and replaced).
func daemonSetRollout(d *appsv1.DaemonSet) rolloutStatus {
	st := &d.Status
	switch {
	case d.Generation > st.ObservedGeneration:
		return rolloutUnseen
	case st.UpdatedNumberScheduled < st.DesiredNumberScheduled || st.NumberAvailable < st.DesiredNumberScheduled:
		return rolloutPending
	}
	return rolloutDone
}

// templateHash is a hash of the pod template as the API serves it; equal
// templates hash equal, which is all the comparison needs.
func templateHash(t *corev1.PodTemplateSpec) string {
	b, err := json.Marshal(t)
	if err != nil {
		return "" // a template that does not marshal compares as unchanged
	}
	h := fnv.New64a()
	h.Write(b)
	return strconv.FormatUint(h.Sum64(), 16)
}

// workloadState is what the tracker last reported of one workload.
type workloadState struct {
	uid        string
	generation int64
	replicas   int32
	template   uint64 // templateHash; 0 when it could not be taken
	paused     bool   // a Deployment's spec.paused; StatefulSets and DaemonSets have none
	rollout    rolloutStatus
	// progressing: since the status was last done, this watcher saw the
	// template change or the status show pods left to roll, or it found
	// the rollout not done at its initial list. The status turning done
	// then ends a rollout; a spec change the controller merely had to
	// observe (a pause, a change of the progress deadline) ends none.
	progressing bool
	// earlier are the templates this watcher saw the workload run before
	// the current one, the latest last, each once: a template change back
	// to one of them is a rollback (kubectl rollout undo, or a revert).
	earlier [rollbackDepth]uint64
	// since is the time of the template change that began the rollout in
	// progress (its event's, UTC ns), 0 when none is or when its beginning
	// was not seen; sinceUnknown says the latter: the rollout was in
	// progress when the watch began, so a template change during it
	// begins nothing new this watcher could date.
	since        int64
	sinceUnknown bool
}

// rollbackDepth is how many earlier templates of each workload are kept: a
// rollback goes to the previous revision, rarely further back.
const rollbackDepth = 8

// sawBefore reports whether h is one of the earlier templates.
func (s *workloadState) sawBefore(h uint64) bool {
	return h != 0 && slices.Contains(s.earlier[:], h)
}

// remember adds h to the earlier templates as the latest, forgetting the
// oldest when they are rollbackDepth.
func (s *workloadState) remember(h uint64) {
	if h == 0 {
		return
	}
	var kept [rollbackDepth]uint64
	n := 0
	for _, x := range s.earlier {
		if x != 0 && x != h {
			kept[n] = x
			n++
		}
	}
	if n == rollbackDepth {
		copy(kept[:], kept[1:])
		n--
	}
	kept[n] = h
	s.earlier = kept
}

// workloadOf reads a stripped workload; ok is false for another type.
func workloadOf(obj any) (m *metav1.ObjectMeta, kind string, st workloadState, ok bool) {
	var replicas *int32
	paused := false
	switch o := obj.(type) {
	case *appsv1.Deployment:
		m, kind, replicas, paused = &o.ObjectMeta, "Deployment", o.Spec.Replicas, o.Spec.Paused
	case *appsv1.StatefulSet:
		m, kind, replicas = &o.ObjectMeta, "StatefulSet", o.Spec.Replicas
	case *appsv1.DaemonSet:
		m, kind = &o.ObjectMeta, "DaemonSet" // one pod a node: no replicas to change
	default:
		return nil, "", workloadState{}, false
	}
	r := int32(1) // the API's default
	if replicas != nil {
		r = *replicas
	}
	if kind == "DaemonSet" {
		r = 0
	}
	tmpl, _ := strconv.ParseUint(m.Annotations[annTemplateHash], 16, 64) // "" (no hash) reads as 0
	return m, kind, workloadState{uid: string(m.UID), generation: m.Generation, replicas: r, template: tmpl,
		paused: paused, rollout: parseRollout(m.Annotations[annRollout])}, true
}

// workloadHandler turns one kind's deltas into workload_changed events.
// Only its informer's goroutine calls it, so its map needs no lock.
type workloadHandler struct {
	w     *Watcher
	kind  string
	known map[string]workloadState // namespace/name
}

func (h *workloadHandler) replaceAll(objs []any, initial bool, at time.Time) {
	seen := make(map[string]bool, len(objs))
	for _, o := range objs {
		m, _, st, ok := workloadOf(o)
		if !ok {
			continue
		}
		key := m.Namespace + "/" + m.Name
		seen[key] = true
		if initial {
			st.progressing = st.rollout != rolloutDone
			st.sinceUnknown = st.progressing
			h.known[key] = st
			continue
		}
		h.apply(m, st, at, event.FlagRelist)
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
	if m, _, st, ok := workloadOf(obj); ok {
		h.apply(m, st, at, 0)
	}
}

func (h *workloadHandler) remove(obj any, at time.Time) {
	flags := event.Flags(0)
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, flags = tomb.Obj, event.FlagRelist
	}
	if m, _, _, ok := workloadOf(obj); ok {
		h.gone(m.Namespace+"/"+m.Name, at, flags)
	}
}

// apply reports what changed since the workload's last known state: a new
// workload (or one recreated under its name), its pause or resume, its
// template, its replicas, the end of its rollout. A pause or resume comes
// first: in one update holding a template change too (a relist), it is
// what held or released the new template. The end comes last, once per
// rollout. A template change back to an earlier template is marked a
// rollback. Each change made during a rollout carries when the rollout
// began, as far as this watcher saw it begin: the template change that
// began it, which a template change during it does not move.
func (h *workloadHandler) apply(m *metav1.ObjectMeta, now workloadState, at time.Time, flags event.Flags) {
	key := m.Namespace + "/" + m.Name
	was, ok := h.known[key]
	wl := event.Workload{Kind: h.kind, Name: m.Name}
	if !ok || was.uid != now.uid {
		now.progressing = now.rollout == rolloutPending
		h.known[key] = now
		h.w.emitWorkload(at, m.Namespace, wl, change{reason: event.ChangeCreated}, workloadState{}, now, flags)
		return
	}
	now.progressing = was.progressing || now.rollout == rolloutPending || was.template != now.template
	now.earlier, now.since, now.sinceUnknown = was.earlier, was.since, was.sinceUnknown
	if was.paused != now.paused {
		reason := event.ChangeResumed
		if now.paused {
			reason = event.ChangePaused
		}
		h.w.emitWorkload(at, m.Namespace, wl, change{reason: reason, since: now.since}, was, now, flags)
	}
	if was.template != now.template {
		c := change{reason: event.ChangeTemplate, rollback: was.sawBefore(now.template), since: now.since}
		now.remember(was.template)
		begins := now.since == 0 && !now.sinceUnknown
		if begins {
			c.since = sinceSelf
		}
		t := h.w.emitWorkload(at, m.Namespace, wl, c, was, now, flags)
		if begins {
			now.since = t
		}
	}
	if was.replicas != now.replicas {
		h.w.emitWorkload(at, m.Namespace, wl, change{reason: event.ChangeScale, since: now.since}, was, now, flags)
	}
	if now.rollout == rolloutDone && now.progressing {
		h.w.emitWorkload(at, m.Namespace, wl, change{reason: event.ChangeComplete, since: now.since}, was, now, flags)
		now.progressing, now.since, now.sinceUnknown = false, 0, false
	}
	h.known[key] = now
}

func (h *workloadHandler) gone(key string, at time.Time, flags event.Flags) {
	was, ok := h.known[key]
	if !ok {
		return
	}
	delete(h.known, key)
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	h.w.emitWorkload(at, ns, event.Workload{Kind: h.kind, Name: name}, change{reason: event.ChangeDeleted, since: was.since},
		was, workloadState{}, flags)
}

// change is one workload change to record.
type change struct {
	reason   string // event.Change*
	rollback bool   // a template change back to an earlier template
	// since is the beginning of the rollout in progress (UTC ns), 0 when
	// none is known, sinceSelf for the change that begins it.
	since int64
}

// sinceSelf, as change.since, is the time of the change's own event.
const sinceSelf = -1

// emitWorkload builds a workload_changed event and returns its time. Like
// the endpoint events it is cluster-wide, recorded by whoever records
// EndpointSlices.
func (w *Watcher) emitWorkload(at time.Time, ns string, wl event.Workload, c change, was, now workloadState, flags event.Flags) int64 {
	reason := c.reason
	e := event.Event{
		Kind: event.WorkloadChanged, Pod: event.PodRef{Namespace: ns}, Workload: wl,
		Reason: reason, Flags: flags, Attrs: map[string]string{},
	}
	if c.rollback {
		e.Attrs[event.AttrRollback] = "true"
	}
	if uid := cmp.Or(now.uid, was.uid); uid != "" {
		e.Attrs[event.AttrWorkloadUID] = uid
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
	if c.since > 0 {
		e.Attrs[event.AttrRolloutSince] = strconv.FormatInt(c.since, 10)
	}
	var stamped func(*event.Event)
	if c.since == sinceSelf {
		// The time is the event's own, known once stamped.
		stamped = func(e *event.Event) { e.Attrs[event.AttrRolloutSince] = strconv.FormatInt(e.Time, 10) }
	}
	w.emitSharedStamped(at, &e, stamped)
	return e.Time
}
