package watcher

import (
	"strconv"
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

// rolled returns d with its status as the controller would write it.
func rolled(d *appsv1.Deployment, observed int64, replicas, updated, available int32) *appsv1.Deployment {
	d = d.DeepCopy()
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: replicas,
		UpdatedReplicas: updated, ReadyReplicas: available, AvailableReplicas: available}
	return d
}

// TestWorkloadComplete: a rollout's end is recorded once, when the status
// turns done after the rollout was seen going; a spec change the
// controller only had to observe, and a workload done when the watch
// began, record none.
func TestWorkloadComplete(t *testing.T) {
	r := newWorkloadRig(t, "Deployment")
	r.list(deployment(1, "web:1", 3))
	v2 := deployment(2, "web:2", 3)
	steps := []struct {
		what string
		d    *appsv1.Deployment
		want []string
	}{
		{"a status update of the idle Deployment", rolled(deployment(1, "web:1", 3), 1, 3, 3, 3), nil},
		{"the new template", rolled(v2, 1, 3, 3, 3), []string{event.ChangeTemplate}},
		{"the controller observes it", rolled(v2, 2, 3, 0, 3), nil},
		{"a surge pod of the new template", rolled(v2, 2, 4, 1, 3), nil},
		{"all new, one old pod left", rolled(v2, 2, 4, 3, 3), nil},
		{"all new and available", rolled(v2, 2, 3, 3, 3), []string{event.ChangeComplete}},
		{"the same status again", rolled(v2, 2, 3, 3, 3), nil},
		{"scaled up", rolled(deployment(3, "web:2", 5), 2, 3, 3, 3), []string{event.ChangeScale}},
		{"the scale observed", rolled(deployment(3, "web:2", 5), 3, 3, 3, 3), nil},
		{"the new pods available", rolled(deployment(3, "web:2", 5), 3, 5, 5, 5), []string{event.ChangeComplete}},
	}
	for _, s := range steps {
		if got := reasons(r.update(s.d)); !sameStrings(got, s.want) {
			t.Errorf("%s: recorded %v, want %v", s.what, got, s.want)
		}
	}
	// A workload mid-rollout when the watch began: its end is recorded,
	// though not its beginning.
	r = newWorkloadRig(t, "Deployment")
	r.list(rolled(v2, 2, 4, 1, 3))
	if got := reasons(r.update(rolled(v2, 2, 3, 3, 3))); !sameStrings(got, []string{event.ChangeComplete}) {
		t.Errorf("a rollout in progress at the list ended: recorded %v, want [complete]", got)
	}
	// Paused with a new template: the rollout waits for the resume.
	r = newWorkloadRig(t, "Deployment")
	r.list(deployment(1, "web:1", 2))
	p := deployment(2, "web:2", 2)
	p.Spec.Paused = true
	steps = []struct {
		what string
		d    *appsv1.Deployment
		want []string
	}{
		{"paused with a new template", rolled(p, 1, 2, 2, 2), []string{event.ChangePaused, event.ChangeTemplate}},
		{"observed: no pod of it yet", rolled(p, 2, 2, 0, 2), nil},
		{"resumed", rolled(deployment(3, "web:2", 2), 2, 2, 0, 2), []string{event.ChangeResumed}},
		{"rolled out", rolled(deployment(3, "web:2", 2), 3, 2, 2, 2), []string{event.ChangeComplete}},
	}
	for _, s := range steps {
		if got := reasons(r.update(s.d)); !sameStrings(got, s.want) {
			t.Errorf("%s: recorded %v, want %v", s.what, got, s.want)
		}
	}
}

// TestWorkloadCompleteOnRelist: a rollout begun and ended while the watch
// was down shows as a template change and its end, both flagged relist.
func TestWorkloadCompleteOnRelist(t *testing.T) {
	r := newWorkloadRig(t, "Deployment")
	r.list(deployment(1, "web:1", 2))
	r.now = r.now.Add(time.Minute)
	r.h.replaceAll([]any{r.strip(deployment(2, "web:2", 2))}, false, r.now)
	evs := r.c.snapshot()
	if !sameStrings(reasons(evs), []string{event.ChangeTemplate, event.ChangeComplete}) {
		t.Fatalf("relist recorded %v, want [template complete]", reasons(evs))
	}
	for _, e := range evs {
		if !e.Flags.Has(event.FlagRelist) {
			t.Errorf("%s not flagged relist", e.Reason)
		}
	}
}

// TestRolloutStatus: the status tests are kubectl rollout status's.
func TestRolloutStatus(t *testing.T) {
	dep := func(mod func(*appsv1.Deployment)) *appsv1.Deployment {
		d := rolled(deployment(2, "web:2", 3), 2, 3, 3, 3)
		mod(d)
		return d
	}
	for _, tc := range []struct {
		name string
		d    *appsv1.Deployment
		want rolloutStatus
	}{
		{"done", dep(func(*appsv1.Deployment) {}), rolloutDone},
		{"spec not observed", dep(func(d *appsv1.Deployment) { d.Status.ObservedGeneration = 1 }), rolloutUnseen},
		{"replicas not all updated", dep(func(d *appsv1.Deployment) { d.Status.UpdatedReplicas = 2 }), rolloutPending},
		{"an old replica left", dep(func(d *appsv1.Deployment) { d.Status.Replicas = 4 }), rolloutPending},
		{"an updated replica unavailable", dep(func(d *appsv1.Deployment) { d.Status.AvailableReplicas = 2 }), rolloutPending},
		{"past its progress deadline", dep(func(d *appsv1.Deployment) {
			d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}}
		}), rolloutPending},
		{"more available than updated (old pods still up)", dep(func(d *appsv1.Deployment) { d.Status.AvailableReplicas = 5 }), rolloutDone},
	} {
		if got := deploymentRollout(tc.d); got != tc.want {
			t.Errorf("Deployment %s: %v, want %v", tc.name, got, tc.want)
		}
	}

	sts := func(mod func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
		s := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Generation: 2},
			Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(3)), UpdateStrategy: appsv1.StatefulSetUpdateStrategy{
				Type: appsv1.RollingUpdateStatefulSetStrategyType, RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To(int32(0))}}},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 3, ReadyReplicas: 3, UpdatedReplicas: 3,
				CurrentRevision: "db-1", UpdateRevision: "db-2"},
		}
		mod(s)
		return s
	}
	onDelete := func(s *appsv1.StatefulSet) {
		s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	}
	for _, tc := range []struct {
		name string
		s    *appsv1.StatefulSet
		want rolloutStatus
	}{
		// The controller moves currentRevision only after; kubectl does
		// not wait for it with a partition.
		{"rolling update done", sts(func(*appsv1.StatefulSet) {}), rolloutDone},
		{"never observed", sts(func(s *appsv1.StatefulSet) { s.Status.ObservedGeneration = 0 }), rolloutUnseen},
		{"spec not observed", sts(func(s *appsv1.StatefulSet) { s.Status.ObservedGeneration = 1 }), rolloutUnseen},
		{"a replica not ready", sts(func(s *appsv1.StatefulSet) { s.Status.ReadyReplicas = 2 }), rolloutPending},
		{"a replica not updated", sts(func(s *appsv1.StatefulSet) { s.Status.UpdatedReplicas = 2 }), rolloutPending},
		{"partition 2: one updated is all", sts(func(s *appsv1.StatefulSet) {
			s.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To(int32(2))
			s.Status.UpdatedReplicas = 1
		}), rolloutDone},
		{"OnDelete, revisions apart", sts(onDelete), rolloutPending},
		{"OnDelete, revisions equal", sts(func(s *appsv1.StatefulSet) { onDelete(s); s.Status.CurrentRevision = "db-2" }), rolloutDone},
	} {
		if got := statefulSetRollout(tc.s); got != tc.want {
			t.Errorf("StatefulSet %s: %v, want %v", tc.name, got, tc.want)
		}
	}

	ds := func(mod func(*appsv1.DaemonSetStatus)) *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Status: appsv1.DaemonSetStatus{
			ObservedGeneration: 2, DesiredNumberScheduled: 4, UpdatedNumberScheduled: 4, NumberAvailable: 4}}
		mod(&d.Status)
		return d
	}
	for _, tc := range []struct {
		name string
		d    *appsv1.DaemonSet
		want rolloutStatus
	}{
		{"done", ds(func(*appsv1.DaemonSetStatus) {}), rolloutDone},
		{"spec not observed", ds(func(s *appsv1.DaemonSetStatus) { s.ObservedGeneration = 1 }), rolloutUnseen},
		{"a node's pod not updated", ds(func(s *appsv1.DaemonSetStatus) { s.UpdatedNumberScheduled = 3 }), rolloutPending},
		{"a node's pod unavailable", ds(func(s *appsv1.DaemonSetStatus) { s.NumberAvailable = 3 }), rolloutPending},
	} {
		if got := daemonSetRollout(tc.d); got != tc.want {
			t.Errorf("DaemonSet %s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestWorkloadRollback: a template change back to a template the workload
// ran before is marked a rollback, as far back as 8 templates.
func TestWorkloadRollback(t *testing.T) {
	r := newWorkloadRig(t, "Deployment")
	r.list(deployment(1, "web:0", 2))
	gen := int64(1)
	to := func(image string) event.Event {
		t.Helper()
		gen++
		evs := r.update(deployment(gen, image, 2))
		if len(evs) != 2 || evs[0].Reason != event.ChangeTemplate || evs[1].Reason != event.ChangeComplete {
			t.Fatalf("to %s: recorded %v, want [template complete]", image, reasons(evs))
		}
		return evs[0]
	}
	for _, step := range []struct {
		image    string
		rollback bool
	}{
		{"web:1", false},
		{"web:0", true},  // kubectl rollout undo
		{"web:1", true},  // and undone again
		{"web:2", false}, // a new one
		{"web:0", true},  // two back
	} {
		e := to(step.image)
		if got := e.Attrs[event.AttrRollback] == "true"; got != step.rollback {
			t.Errorf("to %s: rollback %q, want %v", step.image, e.Attrs[event.AttrRollback], step.rollback)
		}
		if _, ok := e.Attrs[event.AttrRollback]; ok && !step.rollback {
			t.Errorf("to %s: rollback attribute %q on a new template", step.image, e.Attrs[event.AttrRollback])
		}
	}
	// Nine more templates: web:2, ten templates back, is forgotten; web:4,
	// among the last eight, is not.
	for i := 3; i <= 11; i++ {
		to("web:" + strconv.Itoa(i))
	}
	if e := to("web:2"); e.Attrs[event.AttrRollback] != "" {
		t.Errorf("back to a template beyond the last 8: rollback %q, want none", e.Attrs[event.AttrRollback])
	}
	if e := to("web:4"); e.Attrs[event.AttrRollback] != "true" {
		t.Errorf("back to one of the last 8 templates: rollback %q, want true", e.Attrs[event.AttrRollback])
	}
	// The history is the workload's: another one's templates are not it.
	api := deployment(1, "web:1", 2)
	api.Name, api.UID = "api", "uid-api"
	r.update(api)
	api = deployment(2, "web:3", 2)
	api.Name, api.UID = "api", "uid-api"
	if evs := r.update(api); len(evs) == 0 || evs[0].Attrs[event.AttrRollback] != "" {
		t.Errorf("another workload's first template change: %+v", evs)
	}
}

// TestWorkloadRolloutSince: every change during a rollout carries the
// time of the template change that began it, as this watcher saw it.
func TestWorkloadRolloutSince(t *testing.T) {
	r := newWorkloadRig(t, "Deployment")
	r.list(deployment(1, "web:1", 3))
	since := func(e event.Event) string { return e.Attrs[event.AttrRolloutSince] }
	one := func(what string, d *appsv1.Deployment, reason string) event.Event {
		t.Helper()
		evs := r.update(d)
		if len(evs) != 1 || evs[0].Reason != reason {
			t.Fatalf("%s: recorded %v, want [%s]", what, reasons(evs), reason)
		}
		return evs[0]
	}
	if e := one("a scale of the idle Deployment", rolled(deployment(2, "web:1", 4), 1, 3, 3, 3), event.ChangeScale); since(e) != "" {
		t.Errorf("a scale with no rollout in progress: rollout_since %q", since(e))
	}
	// The scale is still rolling (a new pod not yet available) when the
	// template changes: a scale begins no rollout, so the template does.
	if evs := r.update(rolled(deployment(2, "web:1", 4), 2, 4, 4, 3)); len(evs) != 0 {
		t.Fatalf("the scale observed: recorded %v", reasons(evs))
	}
	begin := one("a new template", rolled(deployment(3, "web:2", 4), 2, 4, 4, 3), event.ChangeTemplate)
	if want := strconv.FormatInt(begin.Time, 10); since(begin) != want {
		t.Fatalf("the template change that begins the rollout: rollout_since %q, want its own time %s", since(begin), want)
	}
	want := since(begin)
	r.update(rolled(deployment(3, "web:2", 4), 3, 5, 1, 4))
	for _, s := range []struct {
		what   string
		d      *appsv1.Deployment
		reason string
	}{
		{"scaled during the rollout", rolled(deployment(4, "web:2", 5), 3, 5, 1, 4), event.ChangeScale},
		{"paused", func() *appsv1.Deployment {
			d := rolled(deployment(5, "web:2", 5), 4, 6, 1, 5)
			d.Spec.Paused = true
			return d
		}(), event.ChangePaused},
		{"another template while paused", func() *appsv1.Deployment {
			d := rolled(deployment(6, "web:3", 5), 5, 6, 1, 5)
			d.Spec.Paused = true
			return d
		}(), event.ChangeTemplate},
		{"resumed", rolled(deployment(7, "web:3", 5), 6, 6, 0, 5), event.ChangeResumed},
		{"done", rolled(deployment(7, "web:3", 5), 7, 5, 5, 5), event.ChangeComplete},
	} {
		if e := one(s.what, s.d, s.reason); since(e) != want {
			t.Errorf("%s: rollout_since %q, want %s (the first template change's)", s.what, since(e), want)
		}
	}
	if e := one("a scale after the rollout", rolled(deployment(8, "web:3", 2), 7, 5, 5, 5), event.ChangeScale); since(e) != "" {
		t.Errorf("a scale after the rollout ended: rollout_since %q", since(e))
	}
	r.update(rolled(deployment(8, "web:3", 2), 8, 2, 2, 2))
	next := one("the next template", rolled(deployment(9, "web:4", 2), 8, 2, 2, 2), event.ChangeTemplate)
	if since(next) != strconv.FormatInt(next.Time, 10) {
		t.Errorf("the next rollout's template change: rollout_since %q, want its own time %d", since(next), next.Time)
	}
	r.now = r.now.Add(time.Second)
	r.h.remove(r.strip(deployment(9, "web:4", 2)), r.now)
	if evs := r.c.snapshot(); evs[len(evs)-1].Reason != event.ChangeDeleted || since(evs[len(evs)-1]) != since(next) {
		t.Errorf("deleted during the rollout: %s rollout_since %q, want %s", evs[len(evs)-1].Reason, since(evs[len(evs)-1]), since(next))
	}

	// Started during a rollout: when it began is not known, and a
	// template change during it does not make it known.
	r = newWorkloadRig(t, "Deployment")
	r.list(rolled(deployment(2, "web:2", 3), 2, 4, 1, 3))
	for _, s := range []struct {
		what   string
		d      *appsv1.Deployment
		reason string
	}{
		{"scaled", rolled(deployment(3, "web:2", 4), 2, 4, 1, 3), event.ChangeScale},
		{"a new template", rolled(deployment(4, "web:3", 4), 3, 4, 1, 3), event.ChangeTemplate},
		{"done", rolled(deployment(4, "web:3", 4), 4, 4, 4, 4), event.ChangeComplete},
	} {
		if e := one(s.what, s.d, s.reason); since(e) != "" {
			t.Errorf("%s, in a rollout begun before the watch: rollout_since %q, want none", s.what, since(e))
		}
	}
	if e := one("the next template", rolled(deployment(5, "web:4", 4), 4, 4, 4, 4), event.ChangeTemplate); since(e) != strconv.FormatInt(e.Time, 10) {
		t.Errorf("the first rollout begun while watching: rollout_since %q, want %d", since(e), e.Time)
	}
}
