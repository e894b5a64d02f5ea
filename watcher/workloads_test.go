package watcher

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/drainscope/drainscope/event"
)

// workloadRig feeds workload states to a workloadHandler, stripped as the
// informer strips them, and keeps the events it emits.
type workloadRig struct {
	t   *testing.T
	h   *workloadHandler
	c   *collector
	now time.Time
}

func newWorkloadRig(t *testing.T, kind string) *workloadRig {
	t.Helper()
	r := &workloadRig{t: t, c: newCollector(), now: time.Unix(1_800_000_000, 0)}
	w, err := New(fake.NewClientset(), Options{Node: "node-a", Sink: r.c.sink, Now: func() time.Time { return r.now }})
	if err != nil {
		t.Fatal(err)
	}
	r.h = &workloadHandler{w: w, kind: kind, known: map[string]workloadState{}}
	return r
}

func (r *workloadRig) strip(obj any) any {
	r.t.Helper()
	s, err := stripWorkload(obj)
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

// list is the informer's initial list.
func (r *workloadRig) list(objs ...any) {
	r.t.Helper()
	var s []any
	for _, o := range objs {
		s = append(s, r.strip(o))
	}
	r.h.replaceAll(s, true, r.now)
}

// update is a watch event one second after the previous one; it returns
// the events it emitted.
func (r *workloadRig) update(obj any) []event.Event {
	r.t.Helper()
	r.now = r.now.Add(time.Second)
	n := len(r.c.snapshot())
	r.h.upsert(r.strip(obj), r.now)
	return r.c.snapshot()[n:]
}

func reasons(evs []event.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Reason
	}
	return out
}

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// deployment is a Deployment of generation gen running image, its status
// that of a finished rollout of it.
func deployment(gen int64, image string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": "web"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: types.UID("uid-web"), Generation: gen},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
			},
		},
		Status: appsv1.DeploymentStatus{ObservedGeneration: gen, Replicas: replicas, UpdatedReplicas: replicas,
			ReadyReplicas: replicas, AvailableReplicas: replicas},
	}
}

// TestWorkloadPauseResume: kubectl rollout pause and resume each record
// one change; the controller's status updates in between record none.
func TestWorkloadPauseResume(t *testing.T) {
	r := newWorkloadRig(t, "Deployment")
	d := deployment(1, "web:1", 2)
	r.list(d)
	d = d.DeepCopy()
	d.Generation, d.Spec.Paused = 2, true
	evs := r.update(d)
	if !sameStrings(reasons(evs), []string{event.ChangePaused}) {
		t.Fatalf("pause recorded %v, want [paused]", reasons(evs))
	}
	if e := evs[0]; e.Workload != (event.Workload{Kind: "Deployment", Name: "web"}) || e.Pod.Namespace != "ns" ||
		e.Attrs[event.AttrGeneration] != "2" || e.Attrs[event.AttrWorkloadUID] != "uid-web" {
		t.Errorf("pause event %+v", e)
	}
	d = d.DeepCopy()
	d.Status.ObservedGeneration = 2
	if evs := r.update(d); len(evs) != 0 {
		t.Errorf("the controller observing the pause recorded %v", reasons(evs))
	}
	d = d.DeepCopy()
	d.Generation, d.Spec.Paused = 3, false
	if evs := r.update(d); !sameStrings(reasons(evs), []string{event.ChangeResumed}) {
		t.Errorf("resume recorded %v, want [resumed]", reasons(evs))
	}
}

// TestWorkloadPauseBeforeTemplate: an update holding a pause and a new
// template (found on a relist) records the pause first: it is what held
// the template.
func TestWorkloadPauseBeforeTemplate(t *testing.T) {
	r := newWorkloadRig(t, "Deployment")
	r.list(deployment(1, "web:1", 2))
	d := deployment(3, "web:2", 2)
	d.Spec.Paused = true
	d.Status.UpdatedReplicas = 0 // paused: no pod of the new template yet
	r.now = r.now.Add(time.Minute)
	r.h.replaceAll([]any{r.strip(d)}, false, r.now)
	evs := r.c.snapshot()
	if !sameStrings(reasons(evs), []string{event.ChangePaused, event.ChangeTemplate}) {
		t.Fatalf("relist recorded %v, want [paused template]", reasons(evs))
	}
	for _, e := range evs {
		if !e.Flags.Has(event.FlagRelist) {
			t.Errorf("%s not flagged relist", e.Reason)
		}
	}
}
