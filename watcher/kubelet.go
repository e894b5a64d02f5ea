package watcher

import (
	"cmp"
	"context"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/drainscope/drainscope/event"
)

// The kubelet tells of a failure to stop a container only in an Event: a
// preStop hook that failed (FailedPreStopHook: SIGTERM came at once, not
// after the hook's wait) and a kill that failed (FailedKillPod). Neither
// shows in the pod's status. The watcher records them as kubelet_event,
// one watch per reason, each selected by the API server
// (involvedObject.kind and reason are among core/v1 Events' selectable
// fields), so that the rest of the cluster's Events never reach the agent.
//
// The kubelet's recorder counts a repeat in the Event it already wrote
// (count, lastTimestamp), not in a new one: an update is recorded when the
// count grew or the last time moved, not for any other change.

// kubeletReasons are the reasons of the kubelet's Events recorded.
var kubeletReasons = []string{event.KubeletFailedPreStopHook, event.KubeletFailedKillPod}

// maxKubeletMessage bounds an Event's message as recorded: the kubelet's
// are a line (an error killing a pod quotes the runtime's error).
const maxKubeletMessage = 1 << 10

func (w *Watcher) kubeletEventListWatch(reason string) cache.ListerWatcher {
	evs := w.cs.CoreV1().Events(w.opts.Namespace)
	sel := fields.AndSelectors(
		fields.OneTermEqualSelector("involvedObject.kind", "Pod"),
		fields.OneTermEqualSelector("reason", reason),
	).String()
	return w.listWatch(func(o *metav1.ListOptions) { o.FieldSelector = sel },
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return evs.List(ctx, o) },
		evs.Watch)
}

// runKubeletEvents starts the watches of the kubelet's Events. The pods'
// initial list must be processed first: an Event is placed by its pod.
func (w *Watcher) runKubeletEvents(ctx context.Context) (waits []cache.InformerSynced, running []<-chan struct{}) {
	for _, reason := range kubeletReasons {
		name := "events/" + reason
		ctrl, done := runInformer(ctx, name, w.kubeletEventListWatch(reason), &corev1.Event{}, stripKubeletEvent,
			&kubeletEventHandler{w: w, reason: reason, known: map[string]kubeletSeen{}}, w.opts.Now, w.watchError(name))
		waits, running = append(waits, ctrl.HasSynced), append(running, done)
	}
	return waits, running
}

// stripKubeletEvent keeps what kubelet_event records of an Event, its
// message cut to maxKubeletMessage.
func stripKubeletEvent(obj any) (any, error) {
	ev, ok := obj.(*corev1.Event)
	if !ok {
		return obj, nil
	}
	io := &ev.InvolvedObject
	out := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: ev.Name, Namespace: ev.Namespace, UID: ev.UID, ResourceVersion: ev.ResourceVersion},
		InvolvedObject: corev1.ObjectReference{Kind: io.Kind, Namespace: io.Namespace, Name: io.Name, UID: io.UID,
			FieldPath: io.FieldPath},
		Reason: ev.Reason, Message: truncateMessage(ev.Message, maxKubeletMessage),
		Source: corev1.EventSource{Host: ev.Source.Host}, ReportingInstance: ev.ReportingInstance,
		Count: ev.Count, LastTimestamp: ev.LastTimestamp, EventTime: ev.EventTime,
	}
	if ev.Series != nil {
		out.Series = &corev1.EventSeries{Count: ev.Series.Count, LastObservedTime: ev.Series.LastObservedTime}
	}
	return out, nil
}

// truncateMessage cuts s to at most n bytes on a character boundary, the
// cut marked with "…". The result is a copy: the cut-off rest is not kept.
func truncateMessage(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := max(n-len(mark), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// kubeletSeen is one Event's occurrences as last recorded.
type kubeletSeen struct {
	count int32
	last  int64 // Unix nanoseconds of the last occurrence; 0 when the Event gives none
}

// kubeletSeenOf reads an Event's count and last occurrence: the kubelet's
// recorder writes count and lastTimestamp; an Event written through
// events.k8s.io has a series (from its second occurrence) and an eventTime
// instead. A count of 0 is such an Event's first occurrence.
func kubeletSeenOf(ev *corev1.Event) kubeletSeen {
	s := kubeletSeen{count: max(ev.Count, 1)}
	last := ev.LastTimestamp.Time
	if ev.EventTime.After(last) {
		last = ev.EventTime.Time
	}
	if ev.Series != nil {
		s.count = max(s.count, ev.Series.Count)
		if ev.Series.LastObservedTime.After(last) {
			last = ev.Series.LastObservedTime.Time
		}
	}
	if !last.IsZero() {
		s.last = last.UnixNano()
	}
	return s
}

// containerOfFieldPath is the container a pod's fieldPath names, as the
// kubelet writes it (spec.containers{NAME}, spec.initContainers{NAME},
// spec.ephemeralContainers{NAME}); "" for the pod itself.
func containerOfFieldPath(fp string) string {
	for _, prefix := range []string{"spec.containers{", "spec.initContainers{", "spec.ephemeralContainers{"} {
		if rest, ok := strings.CutPrefix(fp, prefix); ok {
			if name, ok := strings.CutSuffix(rest, "}"); ok {
				return name
			}
		}
	}
	return ""
}

// kubeletEventHandler turns one reason's Event deltas into kubelet_event
// events.
type kubeletEventHandler struct {
	w      *Watcher
	reason string
	// known is what was recorded of each Event, by namespace/name; the
	// informer's goroutine is its one user. An Event lives an hour (the
	// API server's --event-ttl), and is forgotten when it goes.
	known map[string]kubeletSeen
}

func (h *kubeletEventHandler) replaceAll(objs []any, initial bool, at time.Time) {
	// The Events the list finds happened before the watch began.
	flags := event.FlagObserved
	if !initial {
		h.w.relists.Add(1)
		flags = event.FlagRelist
	}
	seen := make(map[string]bool, len(objs))
	for _, o := range objs {
		if ev, ok := o.(*corev1.Event); ok {
			seen[ev.Namespace+"/"+ev.Name] = true
			h.apply(ev, at, flags)
		}
	}
	for key := range h.known {
		if !seen[key] {
			delete(h.known, key)
		}
	}
}

func (h *kubeletEventHandler) upsert(obj any, at time.Time) {
	if ev, ok := obj.(*corev1.Event); ok {
		h.apply(ev, at, 0)
	}
}

func (h *kubeletEventHandler) remove(obj any, _ time.Time) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		delete(h.known, tomb.Key)
		return
	}
	if ev, ok := obj.(*corev1.Event); ok {
		delete(h.known, ev.Namespace+"/"+ev.Name)
	}
}

// apply records ev when it is new, or repeated since it was last recorded,
// and this watcher's to record (kubeletPod).
func (h *kubeletEventHandler) apply(ev *corev1.Event, at time.Time, flags event.Flags) {
	// The API server selected them; checked again for a server (or a fake
	// clientset) that does not.
	if ev.Reason != h.reason || ev.InvolvedObject.Kind != "Pod" {
		return
	}
	key := ev.Namespace + "/" + ev.Name
	now := kubeletSeenOf(ev)
	if was, ok := h.known[key]; ok && now.count <= was.count && now.last == was.last {
		return
	}
	ref, wl, ok := h.w.kubeletPod(ev)
	if !ok {
		return
	}
	h.known[key] = now
	e := event.Event{Kind: event.KubeletEvent, Pod: ref, Workload: wl, Reason: ev.Reason, Flags: flags,
		Attrs: map[string]string{event.AttrCount: strconv.Itoa(int(now.count))}}
	if ev.Message != "" {
		e.Attrs[event.AttrMessage] = ev.Message
	}
	if now.last != 0 {
		e.Attrs[event.AttrLastTimestamp] = time.Unix(0, now.last).UTC().Format(time.RFC3339Nano)
	}
	h.w.emitOwn(at, &e)
}

// kubeletPod names ev's pod, with its workload when the pod tracker knows
// it, and tells whether this watcher records ev. Cluster-wide (no
// PodNode) it records every one; an agent records those about its own
// node's pods, so that each is recorded once, by the node whose pods the
// relay lets it speak for: the pod found in the tracker (which holds
// only this node's) by UID, or by name when the reference has no UID; a
// pod not known (yet, or any longer) by the kubelet that wrote the Event.
func (w *Watcher) kubeletPod(ev *corev1.Event) (event.PodRef, event.Workload, bool) {
	io := &ev.InvolvedObject
	ref := event.PodRef{Namespace: cmp.Or(io.Namespace, ev.Namespace), Name: io.Name, UID: string(io.UID),
		Container: containerOfFieldPath(io.FieldPath)}
	var wl event.Workload
	var known bool
	if ref.UID != "" {
		// Not by name then: a pod of the same name may be another one,
		// recreated (a StatefulSet's), on another node.
		_, wl, known = w.pods.PodByUID(ref.UID)
	} else {
		var r event.PodRef
		if r, wl, known = w.pods.podByName(ref.Namespace, ref.Name); known {
			ref.UID = r.UID
		}
	}
	if known || w.opts.PodNode == "" {
		return ref, wl, true
	}
	return ref, wl, cmp.Or(ev.Source.Host, ev.ReportingInstance) == w.opts.PodNode
}
