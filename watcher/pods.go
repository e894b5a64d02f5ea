package watcher

import (
	"cmp"
	"hash/fnv"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drainscope/drainscope/event"
)

// Extra attribute keys of pod events, beside event.AttrCreationTimestamp and
// event.AttrDeletionTimestamp. Values are the API's RFC 3339 timestamps
// (whole seconds).
const (
	AttrTransitionTime = "transition_time"     // pod_ready, pod_not_ready: the Ready condition's lastTransitionTime
	AttrStartedAt      = "started_at"          // container_started, container_terminated
	AttrFinishedAt     = "finished_at"         // container_terminated
	AttrContainerID    = event.AttrContainerID // container_started, container_terminated: without the runtime:// prefix
	AttrRestartCount   = "restart_count"       // container_started, container_terminated: the instance's restartCount
	AttrMessage        = event.AttrMessage     // container_terminated: the runtime's message, when any
)

// PodLookup resolves a pod seen by the kernel (by its UID, taken from the
// cgroup path, by a container ID, or by its address) to the names the
// events carry. The watcher's pod cache implements it; deleted pods stay
// resolvable for a while, since kernel events of a pod's last moments can
// arrive after its API object is gone.
type PodLookup interface {
	PodByUID(uid string) (event.PodRef, event.Workload, bool)
	PodByIP(ip netip.Addr) (event.PodRef, event.Workload, bool)
	// PodByContainerID takes the ID without the runtime prefix
	// ("containerd://"); the PodRef it returns names the container.
	PodByContainerID(id string) (event.PodRef, event.Workload, bool)
}

// podState is what the watcher last reported about a pod.
type podState struct {
	ref      event.PodRef
	workload event.Workload
	ip       netip.Addr
	ips      []netip.Addr
	rv       string
	deleting bool
	ready    bool
	// readySince is the Ready condition's lastTransitionTime (Unix
	// seconds, 0 when unknown), and del what the deletion said (nil until
	// the pod is being deleted): both for re-observations.
	readySince int64
	del        *deletionInfo
	// fin is what the pod's end said when it ended with no deletion
	// requested (phase Failed or Succeeded): nil until then, and for
	// re-observations.
	fin *finishInfo
	// terminations recorded per container, so each is reported once:
	// the terminationKey of its last few.
	terminated map[string][]uint64
	containers map[string]string // container ID → name
	// running is each container's running instance, by container name.
	running map[string]containerRun
	// grace is the pod's terminationGracePeriodSeconds, -1 when unset:
	// the time its containers' preStop hooks and SIGTERM share.
	grace int64
}

// deletionInfo is what a pod_deletion event carries.
type deletionInfo struct {
	grace      int64 // ns
	timestamp  string
	disruption string
}

// finishInfo is what a pod_finished event carries.
type finishInfo struct {
	reason, phase, message, disruption string
}

// containerRun is one running container instance as the kubelet reported it.
type containerRun struct {
	id        string // without the runtime prefix
	startedAt int64  // Unix seconds, 0 when unknown
	restarts  int32
	role      containerRole
	ports     unique.Handle[string] // portsOf its spec
	stop      stopSpec              // preStopOf its spec
}

// podTracker turns Pod states into pod events and keeps the lookup tables.
// apply, remove and replaceAll run on the informer's goroutine; the lookups
// may be called from any goroutine.
type podTracker struct {
	emit func(at time.Time, k event.Kind, p *podState, fill func(*event.Event), flags event.Flags)
	// at is when the update being applied was received; set by the
	// informer's handler before each call.
	at time.Time
	// opMu serialises the informer's calls with observe, which runs on a
	// ticker: the fields of podState other than the lookups' are the
	// informer goroutine's, and observe reads them.
	opMu     sync.Mutex
	workload func(*corev1.Pod) event.Workload
	now      func() time.Time
	linger   time.Duration

	mu    sync.RWMutex
	pods  map[string]*podState // by UID
	byIP  map[netip.Addr]*podState
	byCID map[string]*podState
	gone  []goneRec // deleted pods still resolvable, oldest first
}

type goneRec struct {
	at  time.Time
	pod *podState
}

func newPodTracker(emit func(time.Time, event.Kind, *podState, func(*event.Event), event.Flags), workload func(*corev1.Pod) event.Workload, now func() time.Time, linger time.Duration) *podTracker {
	return &podTracker{
		emit: emit, workload: workload, now: now, linger: linger,
		pods:  map[string]*podState{},
		byIP:  map[netip.Addr]*podState{},
		byCID: map[string]*podState{},
	}
}

func podReady(p *corev1.Pod) (bool, metav1.Time) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue, c.LastTransitionTime
		}
	}
	return false, metav1.Time{}
}

func rfc3339(t metav1.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func stripRuntime(id string) string {
	if _, after, ok := strings.Cut(id, "://"); ok {
		return after
	}
	return id
}

// apply reports what changed in p since the watcher last saw it. created
// says the pod is new to the watcher through a watch or relist (not the
// initial list); silent suppresses every event (the initial list).
func (t *podTracker) apply(p *corev1.Pod, flags event.Flags, silent bool) {
	uid := string(p.UID)
	t.mu.RLock()
	st := t.pods[uid]
	t.mu.RUnlock()
	if st != nil && st.rv == p.ResourceVersion {
		return
	}
	isNew := st == nil
	if isNew {
		st = &podState{terminated: map[string][]uint64{}, containers: map[string]string{}, running: map[string]containerRun{}}
	}
	st.grace = -1
	if g := p.Spec.TerminationGracePeriodSeconds; g != nil {
		st.grace = *g
	}
	st.rv = p.ResourceVersion
	ref := event.PodRef{Namespace: p.Namespace, Name: p.Name, UID: uid}
	w := st.workload
	if w.IsZero() || w.Kind == "ReplicaSet" {
		w = t.workload(p)
	}
	var ips []netip.Addr
	for _, pip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(pip.IP); err == nil {
			ips = append(ips, a)
		}
	}
	var ip netip.Addr
	if a, err := netip.ParseAddr(p.Status.PodIP); err == nil {
		ip = a
		if len(ips) == 0 {
			ips = append(ips, a)
		}
	}
	// The fields lookups read change under the write lock only.
	t.mu.Lock()
	st.ref, st.workload, st.ip, st.ips = ref, w, ip, ips
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for i := range list {
			if id := list[i].ContainerID; id != "" {
				id = stripRuntime(id)
				st.containers[id] = list[i].Name
				t.byCID[id] = st
			}
		}
	}
	t.pods[uid] = st
	for _, a := range ips {
		t.byIP[a] = st
	}
	t.mu.Unlock()

	if isNew && !silent {
		t.emit(t.at, event.PodCreated, st, func(e *event.Event) {
			e.Attrs = map[string]string{event.AttrCreationTimestamp: rfc3339(p.CreationTimestamp)}
		}, flags)
	}
	if p.DeletionTimestamp != nil && !st.deleting {
		st.deleting = true
		st.del = deletionOf(p)
		if !silent {
			t.emitDeletion(st, flags)
		}
	}
	// A pod can end with no deletion: the kubelet's node-pressure
	// eviction, a node's graceful shutdown or a pod that ran to
	// completion leave the object in place, its phase final. A pod being
	// deleted ends too, but its deletion says why.
	if st.fin == nil && !st.deleting && (p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded) {
		st.fin = &finishInfo{reason: cmp.Or(p.Status.Reason, string(p.Status.Phase)), phase: string(p.Status.Phase),
			message: p.Status.Message, disruption: disruptionReason(p)}
		if !silent {
			t.emitFinished(t.at, st, flags)
		}
	}
	ready, since := podReady(p)
	st.readySince = 0
	if !since.IsZero() {
		st.readySince = since.Unix()
	}
	if ready != st.ready {
		st.ready = ready
		if !silent && !(isNew && !ready) {
			t.emitReadiness(t.at, st, flags)
		}
	}
	// The init containers first, as they start: a native sidecar (an init
	// container restarted Always) runs beside the app's containers, and
	// traffic through it (a service mesh's proxy) ends when it does.
	for i := range p.Status.InitContainerStatuses {
		cs := &p.Status.InitContainerStatuses[i]
		spec := specOf(p.Spec.InitContainers, cs.Name)
		role := roleInit
		if spec != nil && spec.RestartPolicy != nil && *spec.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			role = roleSidecar
		}
		t.container(st, cs, spec, role, flags, silent)
	}
	for i := range p.Status.ContainerStatuses {
		cs := &p.Status.ContainerStatuses[i]
		t.container(st, cs, specOf(p.Spec.Containers, cs.Name), roleApp, flags, silent)
	}
}

// container reports what changed in one container's status; spec is the
// container's in the pod's spec, nil when not found.
func (t *podTracker) container(st *podState, cs *corev1.ContainerStatus, spec *corev1.Container, role containerRole, flags event.Flags, silent bool) {
	// A termination the watcher missed (the container already restarted)
	// is in lastState; the current one in state.
	t.terminated(st, cs.Name, role, cs.LastTerminationState.Terminated, cs.RestartCount-1, flags, silent)
	t.terminated(st, cs.Name, role, cs.State.Terminated, cs.RestartCount, flags, silent)
	t.started(st, cs, spec, role, flags, silent)
}

func specOf(list []corev1.Container, name string) *corev1.Container {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

// portsOf is what the container declares it listens on, as
// event.AttrContainerPorts writes it ("8080/TCP,9090/TCP"), interned: the
// pods of one workload share one string. The zero Handle when it declares
// none.
func portsOf(c *corev1.Container) unique.Handle[string] {
	if c == nil || len(c.Ports) == 0 {
		return unique.Handle[string]{}
	}
	var b strings.Builder
	for i, p := range c.Ports {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(p.ContainerPort)))
		b.WriteByte('/')
		b.WriteString(string(cmp.Or(p.Protocol, corev1.ProtocolTCP))) // the API's default
	}
	return unique.Make(b.String())
}

// containerRole is what a container is to its pod (event.AttrContainerRole).
type containerRole uint8

const (
	roleApp     containerRole = iota // one of spec.containers
	roleInit                         // an init container, run to completion before the others start
	roleSidecar                      // an init container restarted Always: it runs beside the others
)

var roleNames = [...]string{roleApp: event.ContainerRoleApp, roleInit: event.ContainerRoleInit, roleSidecar: event.ContainerRoleSidecar}

func (r containerRole) String() string { return roleNames[r] }

// started records the container's running instance and reports a new one
// (a start or a restart: a container ID not seen running before).
func (t *podTracker) started(st *podState, cs *corev1.ContainerStatus, spec *corev1.Container, role containerRole, flags event.Flags, silent bool) {
	if cs.State.Running == nil || cs.ContainerID == "" {
		delete(st.running, cs.Name)
		return
	}
	run := containerRun{id: stripRuntime(cs.ContainerID), restarts: cs.RestartCount, role: role}
	if !cs.State.Running.StartedAt.IsZero() {
		run.startedAt = cs.State.Running.StartedAt.Unix()
	}
	was, ok := st.running[cs.Name]
	if ok && was.id == run.id {
		// A container's ports and lifecycle cannot change.
		run.ports, run.stop = was.ports, was.stop
		st.running[cs.Name] = run
		return
	}
	run.ports, run.stop = portsOf(spec), preStopOf(spec)
	st.running[cs.Name] = run
	if !silent {
		t.emitStarted(t.at, st, cs.Name, run, flags)
	}
}

func (t *podTracker) emitStarted(at time.Time, st *podState, name string, run containerRun, flags event.Flags) {
	t.emit(at, event.ContainerStarted, st, func(e *event.Event) {
		e.Pod.Container = name
		e.Attrs = map[string]string{AttrContainerID: run.id, AttrRestartCount: strconv.Itoa(int(run.restarts)),
			event.AttrContainerRole: run.role.String()}
		if run.startedAt != 0 {
			e.Attrs[AttrStartedAt] = time.Unix(run.startedAt, 0).UTC().Format(time.RFC3339)
		}
		if run.ports != (unique.Handle[string]{}) {
			e.Attrs[event.AttrContainerPorts] = run.ports.Value()
		}
		if run.stop.hook != hookNone {
			e.Attrs[event.AttrPreStop] = run.stop.hook.String()
		}
		if run.stop.timed {
			e.Attrs[event.AttrPreStopSleep] = strconv.Itoa(int(run.stop.sleep))
		}
		if st.grace >= 0 {
			e.Attrs[event.AttrGracePeriod] = strconv.FormatInt(st.grace, 10)
		}
	}, flags)
}

// observe reports every pod's state as it is now, flagged FlagObserved:
// its readiness (with its address), its end when it ended with no
// deletion, its deletion when it is being deleted (after the end: the
// newest is the pod's state), and each running container instance. A walk
// of the tracker's own state; nothing is read from the API.
func (t *podTracker) observe(at time.Time) {
	t.mu.RLock()
	pods := make([]*podState, 0, len(t.pods))
	for _, st := range t.pods {
		pods = append(pods, st)
	}
	t.mu.RUnlock()
	for _, st := range pods {
		t.emitReadiness(at, st, event.FlagObserved)
		if st.fin != nil {
			t.emitFinished(at, st, event.FlagObserved)
		}
		if st.deleting {
			t.emitDeletionAt(at, st, event.FlagObserved)
		}
		for name, run := range st.running {
			t.emitStarted(at, st, name, run, event.FlagObserved)
		}
	}
}

// emitReadiness reports the pod's readiness as it now is.
func (t *podTracker) emitReadiness(at time.Time, st *podState, flags event.Flags) {
	k := event.PodNotReady
	if st.ready {
		k = event.PodReady
	}
	t.emit(at, k, st, func(e *event.Event) {
		if st.ip.IsValid() {
			e.Local = netip.AddrPortFrom(st.ip, 0)
		}
		if st.readySince != 0 {
			e.Attrs = map[string]string{AttrTransitionTime: time.Unix(st.readySince, 0).UTC().Format(time.RFC3339)}
		}
	}, flags)
}

func (t *podTracker) terminated(st *podState, name string, role containerRole, term *corev1.ContainerStateTerminated, restarts int32,
	flags event.Flags, silent bool) {
	if term == nil {
		return
	}
	id := terminationKey(term)
	seen := st.terminated[name]
	if slices.Contains(seen, id) {
		return
	}
	if len(seen) >= 4 {
		seen = seen[1:]
	}
	st.terminated[name] = append(seen, id)
	if silent {
		return
	}
	t.emit(t.at, event.ContainerTerminated, st, func(e *event.Event) {
		e.Pod.Container = name
		e.Code = term.ExitCode
		e.Signal = term.Signal
		e.Reason = term.Reason
		e.Attrs = map[string]string{event.AttrContainerRole: role.String()}
		if s := rfc3339(term.StartedAt); s != "" {
			e.Attrs[AttrStartedAt] = s
		}
		if s := rfc3339(term.FinishedAt); s != "" {
			e.Attrs[AttrFinishedAt] = s
		}
		if term.ContainerID != "" {
			e.Attrs[AttrContainerID] = stripRuntime(term.ContainerID)
		}
		if term.Message != "" {
			e.Attrs[AttrMessage] = term.Message
		}
		if restarts >= 0 {
			e.Attrs[AttrRestartCount] = strconv.Itoa(int(restarts))
		}
	}, flags)
}

// terminationKey tells one termination from another: a hash of the
// instance's ID, its start, end and exit code. A container's last
// termination stays in the pod's status for the pod's life (a completed
// init container's, a finished pod's), so the key is 8 bytes, not the
// 120 of the fields written out.
func terminationKey(term *corev1.ContainerStateTerminated) uint64 {
	h := fnv.New64a()
	h.Write([]byte(term.ContainerID + "|" + rfc3339(term.StartedAt) + "|" + rfc3339(term.FinishedAt) + "|" + strconv.Itoa(int(term.ExitCode))))
	return h.Sum64()
}

// deletionOf is what p's deletion says; nil for nil.
func deletionOf(p *corev1.Pod) *deletionInfo {
	if p == nil {
		return nil
	}
	d := &deletionInfo{disruption: disruptionReason(p)}
	if p.DeletionGracePeriodSeconds != nil {
		d.grace = *p.DeletionGracePeriodSeconds * int64(time.Second)
	}
	if p.DeletionTimestamp != nil {
		d.timestamp = rfc3339(*p.DeletionTimestamp)
	}
	return d
}

func (t *podTracker) emitDeletion(st *podState, flags event.Flags) {
	t.emitDeletionAt(t.at, st, flags)
}

func (t *podTracker) emitDeletionAt(at time.Time, st *podState, flags event.Flags) {
	t.emit(at, event.PodDeletion, st, func(e *event.Event) {
		d := st.del
		if d == nil {
			return
		}
		e.Duration = d.grace
		e.Attrs = map[string]string{}
		if d.timestamp != "" {
			e.Attrs[event.AttrDeletionTimestamp] = d.timestamp
		}
		if d.disruption != "" {
			e.Attrs[event.AttrDisruption] = d.disruption
		}
	}, flags)
}

func (t *podTracker) emitFinished(at time.Time, st *podState, flags event.Flags) {
	f := st.fin
	t.emit(at, event.PodFinished, st, func(e *event.Event) {
		e.Reason = f.reason
		e.Attrs = map[string]string{event.AttrPhase: f.phase}
		if f.message != "" {
			e.Attrs[event.AttrMessage] = f.message
		}
		if f.disruption != "" {
			e.Attrs[event.AttrDisruption] = f.disruption
		}
	}, flags)
}

// disruptionReason is the reason of the pod's DisruptionTarget condition,
// which the eviction API, the scheduler's preemption, the taint manager and
// the kubelet's node-pressure eviction set before they delete the pod (the
// kubelet before it fails it: TerminationByKubelet); "" for a plain
// deletion (kubectl delete, a controller scaling down).
func disruptionReason(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return c.Reason
		}
	}
	return ""
}

// remove handles a pod gone from the API. p is its final state, or nil when
// unknown (the deletion was noticed on a relist).
func (t *podTracker) remove(uid string, p *corev1.Pod, flags event.Flags, silent bool) {
	if p != nil {
		t.apply(p, flags, silent)
	}
	t.mu.RLock()
	st := t.pods[uid]
	t.mu.RUnlock()
	if st == nil {
		return
	}
	if !st.deleting && !silent {
		st.deleting = true
		st.del = deletionOf(p)
		t.emitDeletion(st, flags)
	}
	now := t.now()
	t.mu.Lock()
	delete(t.pods, uid)
	t.gone = append(t.gone, goneRec{at: now, pod: st})
	t.expireLocked(now)
	t.mu.Unlock()
}

// replaceAll reconciles with a complete list of pods.
func (t *podTracker) replaceAll(list []*corev1.Pod, flags event.Flags, silent bool) {
	seen := make(map[string]bool, len(list))
	for _, p := range list {
		seen[string(p.UID)] = true
		t.apply(p, flags, silent)
	}
	t.mu.RLock()
	var gone []string
	for uid := range t.pods {
		if !seen[uid] {
			gone = append(gone, uid)
		}
	}
	t.mu.RUnlock()
	for _, uid := range gone {
		t.remove(uid, nil, flags, silent)
	}
}

// expireLocked drops deleted pods older than linger from the tables, unless
// a newer pod took over their entries.
func (t *podTracker) expireLocked(now time.Time) {
	n := 0
	for n < len(t.gone) && now.Sub(t.gone[n].at) > t.linger {
		st := t.gone[n].pod
		for _, a := range st.ips {
			if t.byIP[a] == st {
				delete(t.byIP, a)
			}
		}
		for id := range st.containers {
			if t.byCID[id] == st {
				delete(t.byCID, id)
			}
		}
		if t.pods[st.ref.UID] == st {
			delete(t.pods, st.ref.UID)
		}
		t.gone[n] = goneRec{}
		n++
	}
	t.gone = t.gone[n:]
}

func (t *podTracker) find(st *podState) (event.PodRef, event.Workload, bool) {
	if st == nil {
		return event.PodRef{}, event.Workload{}, false
	}
	return st.ref, st.workload, true
}

// PodByUID implements PodLookup.
func (t *podTracker) PodByUID(uid string) (event.PodRef, event.Workload, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if st := t.pods[uid]; st != nil {
		return t.find(st)
	}
	for i := len(t.gone) - 1; i >= 0; i-- {
		if t.gone[i].pod.ref.UID == uid {
			return t.find(t.gone[i].pod)
		}
	}
	return t.find(nil)
}

// podByName is the pod of that namespace and name, else the newest
// deleted one still resolvable: for a reference that gives no UID. A walk
// of every pod; the references that need it are rare.
func (t *podTracker) podByName(ns, name string) (event.PodRef, event.Workload, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, st := range t.pods {
		if st.ref.Namespace == ns && st.ref.Name == name {
			return t.find(st)
		}
	}
	for i := len(t.gone) - 1; i >= 0; i-- {
		if r := t.gone[i].pod.ref; r.Namespace == ns && r.Name == name {
			return t.find(t.gone[i].pod)
		}
	}
	return t.find(nil)
}

// PodByIP implements PodLookup.
func (t *podTracker) PodByIP(ip netip.Addr) (event.PodRef, event.Workload, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.find(t.byIP[ip.Unmap()])
}

// PodByContainerID implements PodLookup.
func (t *podTracker) PodByContainerID(id string) (event.PodRef, event.Workload, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	st := t.byCID[stripRuntime(id)]
	ref, w, ok := t.find(st)
	if ok {
		ref.Container = st.containers[stripRuntime(id)]
	}
	return ref, w, ok
}

func (t *podTracker) size() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.pods)
}

// StaticPods is a PodLookup over a fixed table, for tests of code that only
// needs lookups.
type StaticPods struct {
	Pods []StaticPod
}

// StaticPod is one entry of StaticPods.
type StaticPod struct {
	Ref          event.PodRef
	Workload     event.Workload
	IPs          []netip.Addr
	ContainerIDs map[string]string // ID → container name
}

// PodByUID implements PodLookup.
func (s *StaticPods) PodByUID(uid string) (event.PodRef, event.Workload, bool) {
	for _, p := range s.Pods {
		if p.Ref.UID == uid {
			return p.Ref, p.Workload, true
		}
	}
	return event.PodRef{}, event.Workload{}, false
}

// PodByIP implements PodLookup.
func (s *StaticPods) PodByIP(ip netip.Addr) (event.PodRef, event.Workload, bool) {
	for _, p := range s.Pods {
		for _, a := range p.IPs {
			if a == ip.Unmap() {
				return p.Ref, p.Workload, true
			}
		}
	}
	return event.PodRef{}, event.Workload{}, false
}

// PodByContainerID implements PodLookup.
func (s *StaticPods) PodByContainerID(id string) (event.PodRef, event.Workload, bool) {
	id = stripRuntime(id)
	for _, p := range s.Pods {
		if name, ok := p.ContainerIDs[id]; ok {
			r := p.Ref
			r.Container = name
			return r, p.Workload, true
		}
	}
	return event.PodRef{}, event.Workload{}, false
}

var (
	_ PodLookup = (*podTracker)(nil)
	_ PodLookup = (*StaticPods)(nil)
)
