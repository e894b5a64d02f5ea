package analysis

import (
	"cmp"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/drainscope/drainscope/event"
)

// podState is what the aligner remembers about one pod: a handful of
// landmark events and per-node endpoint transitions, never the pod's full
// event history (connection events only update counters).
type podState struct {
	ref     event.PodRef
	wl      event.Workload
	node    string
	first   int64
	last    int64
	created int64
	// born: its creation was seen as it happened, not re-observed by a
	// list (an agent's restart lists every pod as created).
	born     bool
	ready    int64 // first pod_ready
	notReady int64 // first pod_not_ready

	// life holds the pod's lifecycle events once it has one (see
	// lifeEvents).
	life  *lifecycle
	exits []*event.Event // the app's exits, shared with the landmarks (see keeper)
	pids  []int32        // signal targets and listener owners: the pod's main processes
	// termed are the containers (runtime IDs from the cgroup path) whose
	// processes got SIGTERM: the app containers. A real node's sandbox
	// (pause) container never gets one; the runtime SIGKILLs it once the
	// app containers are gone.
	termed []string

	ep       []epView // per Service and observing node: its view of the endpoint
	dp       []epView // per Service and proxy's node: its dataplane's view (dataplane events)
	lags     *lagTable
	services []string
	// spreads are the endpoint's not ready, terminating and removed
	// across nodes; nil until one is seen (a cluster-wide window names
	// a hundred thousand pods, few of which leave their endpoints).
	spreads *[3]spreadAcc

	// Connection endings seen after SIGTERM (after deletion when no SIGTERM
	// is seen), in time order; connSummary folds them per connection.
	// Recorded, like failures and inferred, only while the pod's timeline
	// may be built (Aligner.timelineWanted): nothing else reads them.
	conns []connEnd

	landmarks []mark     // shared with the aligner's global ring (see keeper)
	leases    []*ipLease // this pod's entries in the aligner's address index

	failures map[Cause]int
	inferred map[Cause]int

	refusedOutOfRotation int
	ended                bool // exit, kill or removal seen: may be evicted once quiet
	unlisted             bool // its endpoint removed from every Service that held it
	enlisted             bool // in Aligner.ending

	// mainKnown: the pod's node marks its containers' main processes
	// (event.FlagMain), so a process event without the mark is an exec
	// probe's, kubectl exec's or a worker's, never the app's.
	mainKnown bool
	// since is when the pod's current life began: 0 for its start, else
	// when a container restarted in place (the pod kept). before is the
	// life that ended then: a SIGTERM or an exit belongs to one container
	// instance, and a restarted container starts clean.
	since  int64
	before *podState

	// ctrs are the pod's containers as their own events tell (see
	// container.go), app the one that serves the Service's port once the
	// records say which.
	ctrs    []*ctrLife
	app     *ctrLife
	lifeLog []lifeRec
}

type epKey struct{ svc, node string }

// epView is one node's view of the pod's endpoint in one Service: the
// transitions between in and out of rotation, oldest first. A slice, not a
// map: a pod has a few, and the aligner reads them for every failure.
type epView struct {
	epKey
	trans []epTrans
	// proxy is a dataplane view's Attrs[proxy] of its latest transition,
	// which may keep no event (see epTrans).
	proxy string
}

type epTrans struct {
	t int64 // ev.Time, beside the flags for the scans
	// ev is shared (see keeper). A dataplane transition of a pod the
	// analysis does not want (Aligner.wants) keeps none: nothing reads
	// its event but a decision, a timeline or an explanation of that pod.
	ev    *event.Event
	ready bool
	// observed: the state as a list found it (event.FlagObserved), not a
	// transition: nothing is known of what came before it.
	observed bool
	// unmeasured: a dataplane removal no watch leave preceded (yet); see
	// Aligner.lateLeave.
	unmeasured bool
}

// spread returns the pod's spread i (spreadNotReady, ...), making the
// spreads at the first.
func (p *podState) spread(i int) *spreadAcc {
	if p.spreads == nil {
		p.spreads = new([3]spreadAcc)
	}
	return &p.spreads[i]
}

type spreadAcc struct {
	first, last int64
	nodes       []string
}

func (s *spreadAcc) add(t int64, node string) {
	if s.first == 0 || t < s.first {
		s.first = t
	}
	if t > s.last {
		s.last = t
	}
	for _, n := range s.nodes {
		if n == node {
			return
		}
	}
	s.nodes = append(s.nodes, node)
}

// addrKey is an address and port as a map key without pointers (the
// garbage collector skips such maps), IPv4 and IPv4-mapped IPv6 alike.
type addrKey struct {
	ip   [16]byte
	port uint16
}

func keyOf(ap netip.AddrPort) addrKey {
	return addrKey{ap.Addr().As16(), ap.Port()}
}

type connKey struct{ local, remote addrKey }

// connEnd is one ending of a connection, kept small: a busy pod ends
// thousands of connections after SIGTERM.
type connEnd struct {
	key connKey
	how connHow // beside key's 36 bytes, where it takes no room of its own
	t   int64
	// idle is how long before t the peer last acknowledged this side's
	// data (conn_closed's Duration; 0 unknown): a connection whose idle
	// time reaches back before SIGTERM was open at SIGTERM.
	idle int64
}

type connHow uint8

const (
	endClosed     connHow = iota // this side closed it
	endClosedExit                // closed by the process's exit (the kernel saw it at exit)
	endByPeer                    // the peer closed it
	endRSTSent                   // this side reset it
	endRSTRecv                   // the peer reset it
)

func connHowOf(e *event.Event) connHow {
	switch {
	case e.Kind == event.RSTSent:
		return endRSTSent
	case e.Kind == event.RSTReceived:
		return endRSTRecv
	case e.Reason == "peer":
		return endByPeer
	case e.Flags.Has(event.FlagAtExit):
		return endClosedExit
	}
	return endClosed
}

const (
	spreadNotReady = iota
	spreadTerminating
	spreadRemoved
)

const maxLandmarks = 512

func isLandmark(e *event.Event) bool {
	switch e.Kind {
	case event.ConnClosed, event.RSTSent, event.RSTReceived, event.ConnRefused, event.ClientFailure:
		return false
	}
	// A state re-observed every few minutes is no landmark.
	return !e.Flags.Has(event.FlagObserved)
}

// routing says whether Service traffic could reach the pod at t: its
// endpoint in rotation on some node (or none seen), out everywhere but
// less than the proxy lag ago, or out for longer, when a connection to it
// comes from the kubelet's probes or a client that bypasses the Service.
func (p *podState) routing(t int64, opts *Options) routingState {
	r := p.rotationAt(t, nil)
	switch {
	case !r.in && p.born && !p.readyBy(t):
		// Seen created and not ready yet: its endpoint was never in
		// rotation (its not-ready add is no leave). A connection then is
		// the kubelet's probe's, before the pod's server listens.
		return unrouted
	case !r.seen || r.in || r.lastLeave == nil:
		return routed
	case t-r.lastLeave.t <= r.lag:
		return lagging
	}
	return unrouted
}

type routingState uint8

const (
	routed routingState = iota
	lagging
	unrouted
)

// terminating reports whether anything showed the pod ending at or before t.
func (p *podState) terminatingAt(t int64) *event.Event {
	for _, e := range []*event.Event{p.lifeEvents().deletion, p.lifeEvents().finished, p.lifeEvents().sigterm, p.lifeEvents().listener, p.lifeEvents().kill} {
		if e.Time != 0 && e.Time <= t {
			return e
		}
	}
	for _, x := range p.exits {
		if x.Time <= t && p.isMainExit(x) {
			return x
		}
	}
	return nil
}

// at is the pod's life that t falls in: a container restarted in place
// begins a new one (see since).
func (p *podState) at(t int64) *podState {
	q := p
	for q.before != nil && t < q.since {
		q = q.before
	}
	return q
}

// maxLives bounds the ended lives a pod keeps (a crash-looping container
// restarts every few minutes).
const maxLives = 4

// restart ends the pod's current life at t: a container of the pod began
// again in place (the pod kept), so what signalled or ended the previous
// instance no longer describes the pod. The ended life is kept for the
// failures that came before t and are still to be decided.
func (p *podState) restart(t int64) {
	old := *p // keeps the ended life's lifecycle; p gets a new one below
	old.before = nil
	if p.spreads != nil {
		sp := *p.spreads // the ended life's, as they were
		old.spreads = &sp
	}
	if p.before != nil {
		n := 1
		prev := &old
		for q := p.before; q != nil && n < maxLives; q = q.before {
			c := *q
			c.before = nil
			prev.before = &c
			prev = &c
			n++
		}
	}
	p.before = &old
	p.since = t
	if p.life != nil {
		d := p.life.deletion
		p.life = newLifecycle()
		p.life.deletion = d // the deletion is the pod's, not the life's
	}
	p.exits, p.pids, p.termed, p.conns = nil, nil, nil, nil
	p.ctrs, p.app, p.lifeLog = nil, nil, nil
	p.notReady = 0
	p.ended = false
	p.failures, p.inferred = nil, nil
}

// lifecycle is a pod's lifecycle events, each noEvent (Time 0) until
// seen, else the copy its landmark shares (see keeper). It is allocated at
// the pod's first one: in a long window most pods are quiet.
type lifecycle struct {
	deletion *event.Event // first pod_deletion
	sigterm  *event.Event // first SIGTERM to a process of the pod
	kill     *event.Event // first SIGKILL
	term     *event.Event // last container_terminated
	listener *event.Event // first listener_closed
	finished *event.Event // first pod_finished: the pod ended without a deletion
}

// noEvent is a lifecycle event not seen; never written.
var noEvent event.Event

func newLifecycle() *lifecycle {
	return &lifecycle{deletion: &noEvent, sigterm: &noEvent, kill: &noEvent, term: &noEvent, listener: &noEvent, finished: &noEvent}
}

// noLifecycle is what lifeEvents returns for a pod without one; never
// written.
var noLifecycle = *newLifecycle()

// lifeEvents returns the pod's lifecycle events for reading.
func (p *podState) lifeEvents() *lifecycle {
	if p.life == nil {
		return &noLifecycle
	}
	return p.life
}

// writableLifeEvents returns the pod's lifecycle events for writing,
// allocating them.
func (p *podState) writableLifeEvents() *lifecycle {
	if p.life == nil {
		p.life = newLifecycle()
	}
	return p.life
}

// lifeEnded reports whether the pod's current life shows its app's end:
// a main-process exit, a kill or a container termination the kubelet
// reported.
func (p *podState) lifeEnded() bool {
	return p.lifeEvents().kill.Time != 0 || p.lifeEvents().term.Time != 0 || p.lastMainExit() != nil
}

// ingest records k's event in the pod's state and reports whether it
// became one of the pod's landmarks. A connection's end is the aligner's
// to record (Aligner.Add): only a wanted timeline reads it.
func (p *podState) ingest(k *keeper, opts *Options) bool {
	e := k.e
	if p.first == 0 {
		p.first = e.Time
	}
	p.last = e.Time
	if p.ref.UID == "" && e.Pod.UID != "" {
		p.ref.UID = e.Pod.UID
	}
	if p.ref.Name == "" && e.Pod.Name != "" {
		p.ref.Namespace, p.ref.Name = e.Pod.Namespace, e.Pod.Name
	}
	if p.ref.Container == "" && e.Pod.Container != "" {
		p.ref.Container = e.Pod.Container
	}
	if p.wl.IsZero() && !e.Workload.IsZero() {
		p.wl = e.Workload
	}
	if p.node == "" && e.Node != "" && (e.Kind.IsKernel() || strings.HasPrefix(string(e.Kind), "pod_") || e.Kind == event.ContainerTerminated) {
		p.node = e.Node
	}
	if e.Flags.Has(event.FlagMain) {
		p.mainKnown = true
	}
	if p.lifeEvents().deletion.Time == 0 && p.lifeEvents().finished.Time == 0 && p.startsAgain(e) {
		p.restart(e.Time)
	}
	landmark := isLandmark(e) && !p.repeatedSignal(e, opts)
	if landmark {
		if p.landmarks == nil {
			p.landmarks = make([]mark, 0, 16) // a replaced pod has 10 to 20
		}
		if len(p.landmarks) >= maxLandmarks {
			p.landmarks = newerPart(p.landmarks, maxLandmarks/2, maxLandmarks)
		}
		p.landmarks = append(p.landmarks, mark{e.Time, k.get()})
	}
	switch e.Kind {
	case event.PodCreated:
		if p.created == 0 {
			p.created = e.Time
			p.born = !e.Flags.Has(event.FlagObserved)
		}
	case event.PodReady:
		if p.ready == 0 {
			p.ready = e.Time
		}
	case event.PodNotReady:
		if p.notReady == 0 && !e.Flags.Has(event.FlagObserved) {
			p.notReady = e.Time
		}
	case event.PodDeletion:
		if p.lifeEvents().deletion.Time == 0 {
			p.writableLifeEvents().deletion = k.get()
		}
	case event.PodFinished:
		if p.lifeEvents().finished.Time == 0 {
			p.writableLifeEvents().finished = k.get()
		}
		p.ended = true
	case event.ContainerStarted:
		p.learnContainer(e)
	case event.KubeletEvent:
		p.kubeletEvent(e, k.get())
	case event.ProxyState:
		p.proxyState(e, k.get())
	case event.ContainerTerminated, event.Signal, event.ProcessExit, event.ListenerClosed:
		if e.Kind == event.ContainerTerminated {
			p.learnContainer(e)
		} else if !p.isMain(e) {
			break // an exec probe's, kubectl exec's or a worker's
		}
		c := p.container(e, true)
		if c == nil && e.Kind.IsKernel() && p.starting() {
			// A process of a pod still starting, whose container the
			// capture could not name: an init container's (a mesh's
			// iptables redirect, run to completion before the app), not
			// an end of the app, which has served nothing yet.
			break
		}
		kept := k.get()
		if c != nil {
			c.record(kept)
		}
		if len(p.lifeLog) < maxLifeLog {
			p.lifeLog = append(p.lifeLog, lifeRec{kept, c})
		}
		if p.otherContainer(c) {
			break // another container's: recorded as its own, never the app's
		}
		p.lifecycleEvent(e, kept)
		if e.Kind == event.ListenerClosed && p.app == nil {
			p.learnListener(e)
		}
	}
	switch e.Kind {
	case event.ConnClosed, event.RSTSent, event.RSTReceived:
		p.learnInbound(e)
	}
	if e.Kind.IsEndpoint() {
		p.endpoint(k)
		if p.app == nil && len(p.ctrs) > 0 {
			p.findApp() // the port a container declared is now the endpoints'
		}
	}
	return landmark
}

// lifecycleEvent records one of the app's signals, exits, listener
// closes and terminations; kept is e as the pod keeps it.
func (p *podState) lifecycleEvent(e, kept *event.Event) {
	switch e.Kind {
	case event.ContainerTerminated:
		p.writableLifeEvents().term = kept
	case event.Signal:
		if p.sandboxEvent(e) {
			break
		}
		switch e.Signal {
		case event.SIGTERM:
			if p.lifeEvents().sigterm.Time == 0 {
				p.writableLifeEvents().sigterm = kept
			}
			if c := e.Pod.Container; c != "" && !slices.Contains(p.termed, c) && len(p.termed) < 16 {
				p.termed = append(p.termed, c)
			}
		case event.SIGKILL:
			// An ignored SIGKILL killed nothing: a process sends them to
			// its own threads as it exits, and PID 1 of a container
			// ignores its own.
			if e.Reason == signalIgnored {
				break
			}
			if p.lifeEvents().kill.Time == 0 {
				p.writableLifeEvents().kill = kept
			}
			p.ended = true
		}
		p.addPID(e.PID)
	case event.ProcessExit:
		if len(p.exits) < 64 {
			p.exits = append(p.exits, kept)
		}
		if p.isMainExit(e) && p.lifeEvents().sigterm.Time != 0 {
			p.ended = true
		}
	case event.ListenerClosed:
		if p.lifeEvents().listener.Time == 0 {
			p.writableLifeEvents().listener = kept
		}
		p.addPID(e.PID)
	}
}

// evictedByKubelet reports whether the kubelet evicted the pod for node
// pressure: a deletion or a finish whose DisruptionTarget says so, or a
// finish with the reason Evicted.
func (p *podState) evictedByKubelet() bool {
	l := p.lifeEvents()
	return triggerOfDisruption(l.deletion.Attrs[event.AttrDisruption]) == TriggerNodePressure ||
		triggerOfDisruption(l.finished.Attrs[event.AttrDisruption]) == TriggerNodePressure ||
		l.finished.Time != 0 && triggerOfFinish(l.finished.Reason) == TriggerNodePressure
}

// startsAgain reports whether e shows the app running again after its
// life ended, the pod not deleted: its container restarted in place. The
// app's container started again, or the pod or its endpoint ready again:
// the watcher may have missed the kubelet's own reports (its agent was
// down), leaving only the endpoint's return. A state the watcher
// re-observed counts once it is termReportLag past the end, beyond the
// kubelet's report of the end itself. Another container's restart (a
// sidecar's crash loop) is its own.
func (p *podState) startsAgain(e *event.Event) bool {
	switch e.Kind {
	case event.ContainerStarted:
		// An init container or a native sidecar starting is not the
		// app running again: it starts before the app does.
		if r := e.Attrs[event.AttrContainerRole]; r == event.ContainerRoleInit || r == event.ContainerRoleSidecar ||
			p.otherContainer(p.container(e, false)) {
			return false
		}
	case event.PodReady, event.EndpointReady:
	default:
		return false
	}
	if !p.lifeEnded() {
		return false
	}
	if !e.Flags.Has(event.FlagObserved) {
		return true
	}
	end := p.lifeEvents().kill.Time
	if x := p.lastMainExit(); x != nil {
		end = max(end, x.Time)
	}
	end = max(end, p.lifeEvents().term.Time)
	return e.Time-end > int64(termReportLag)
}

// starting reports whether the pod was seen created (as it happened) and
// has not been ready or deleted since: it has served nothing yet.
func (p *podState) starting() bool {
	return p.born && !p.readyBy(math.MaxInt64) && p.lifeEvents().deletion.Time == 0
}

// readyBy reports whether anything showed the pod ready at or before t:
// the pod's own readiness, or an endpoint of it ready on some node (where
// the watcher missed the pod's).
func (p *podState) readyBy(t int64) bool {
	if p.ready != 0 && p.ready <= t {
		return true
	}
	for i := range p.ep {
		for _, tr := range p.ep[i].trans {
			if tr.ready && tr.t <= t {
				return true
			}
		}
	}
	return false
}

// RepeatsSignal reports whether e delivers again, within slack, the
// signal prev delivered to the same process: a runtime that dies by a
// signal raises it again to itself (Go does, twice), which adds nothing to
// a timeline.
func RepeatsSignal(prev, e *event.Event, slack time.Duration) bool {
	return e.Kind == event.Signal && prev.Kind == event.Signal && prev.Signal == e.Signal &&
		prev.PID == e.PID && e.Time-prev.Time >= 0 && e.Time-prev.Time <= int64(slack)
}

// repeatedSignal reports whether e repeats a signal among the pod's
// landmarks (see RepeatsSignal).
func (p *podState) repeatedSignal(e *event.Event, opts *Options) bool {
	if e.Kind != event.Signal {
		return false
	}
	for i := len(p.landmarks) - 1; i >= 0 && e.Time-p.landmarks[i].t <= int64(opts.ExitSlack); i-- {
		if RepeatsSignal(p.landmarks[i].ev, e, opts.ExitSlack) {
			return true
		}
	}
	return false
}

func (p *podState) addPID(pid int32) {
	if pid == 0 {
		return
	}
	for _, x := range p.pids {
		if x == pid {
			return
		}
	}
	if len(p.pids) < 16 {
		p.pids = append(p.pids, pid)
	}
}

// isMain reports whether a process event may be the app's: any, unless
// the pod's node marks main processes and e lacks the mark.
func (p *podState) isMain(e *event.Event) bool {
	return e.Flags.Has(event.FlagMain) || !p.mainKnown
}

// isMainExit tells the exit of the app from the exits of other processes
// in its containers: exec probes, kubectl exec, an app's recycled
// workers, a preStop sleep. Where the node marks main processes
// (event.FlagMain) the mark decides. Where it does not, an exit counts
// when it is a process that got the signal or owned the listener; with
// none seen, an exit at or after SIGTERM or deletion; with neither, only
// an exit the kubelet also reported as the container's termination, or a
// kill: an exit alone on a pod that nothing was ending is not the app's.
func (p *podState) isMainExit(e *event.Event) bool {
	if p.sandboxEvent(e) {
		return false
	}
	if e.Flags.Has(event.FlagMain) {
		return true
	}
	if p.mainKnown {
		return false
	}
	if len(p.pids) > 0 && e.PID != 0 {
		for _, x := range p.pids {
			if x == e.PID {
				return true
			}
		}
		return false
	}
	ref := p.lifeEvents().sigterm.Time
	if ref == 0 {
		ref = p.lifeEvents().deletion.Time
	}
	if ref != 0 {
		return e.Time >= ref
	}
	return e.Signal == event.SIGKILL || (p.lifeEvents().term.Time != 0 && abs(p.lifeEvents().term.Time-e.Time) <= int64(termReportLag))
}

// termReportLag bounds how long after a container's main process exited
// the kubelet's report of the termination may reach the watcher.
const termReportLag = 30 * time.Second

// signalIgnored is the kernel's result for a signal nothing acted on
// (ebpf's signal results).
const signalIgnored = "ignored"

// IgnoredSignal reports whether e is a signal nothing acted on: a process
// sends SIGKILL to its own threads as it exits, and PID 1 of a container
// ignores its own. It killed nothing, and a timeline shows it as nothing.
func IgnoredSignal(e *event.Event) bool {
	return e.Kind == event.Signal && e.Reason == signalIgnored
}

// sandboxEvent reports whether e is about a container of the pod that got
// no SIGTERM while another did: on a real node, the sandbox (pause)
// container the runtime stops, with SIGKILL, after the app containers.
func (p *podState) sandboxEvent(e *event.Event) bool {
	c := e.Pod.Container
	return c != "" && len(p.termed) > 0 && !slices.Contains(p.termed, c) &&
		!(e.Kind == event.Signal && e.Signal == event.SIGTERM)
}

// mainExit is the main process's exit nearest to t, or nil.
func (p *podState) mainExit(t int64) *event.Event {
	var best *event.Event
	for _, e := range p.exits {
		if !p.isMainExit(e) {
			continue
		}
		if best == nil || abs(e.Time-t) < abs(best.Time-t) {
			best = e
		}
	}
	return best
}

// appHeld reports whether a connection event of the pod's is one the
// app served: the process that held it is the app (an exec probe's or a
// worker's connection ends nothing a client had), and, where the pod's
// served ports are known (its endpoints, its listener), the pod's side is
// one of them, not the client side of a connection the pod made itself
// (a probe's request to 127.0.0.1:8080).
func (p *podState) appHeld(e *event.Event) bool {
	if !p.isMain(e) {
		return false
	}
	known := false
	port := e.Local.Port()
	if p.lifeEvents().listener.Time != 0 && p.lifeEvents().listener.Local.IsValid() {
		known = true
		if p.lifeEvents().listener.Local.Port() == port {
			return true
		}
	}
	for _, v := range p.ep {
		for i := range v.trans {
			if l := v.trans[i].ev.Local; l.IsValid() && l.Port() != 0 {
				known = true
				if l.Port() == port {
					return true
				}
			}
		}
	}
	return !known
}

// diedAt is the app's death at or before t when nothing ended it: its
// main process exited or was killed with no SIGTERM and no deletion of
// the pod before (an OOM kill, a crash). Nil otherwise.
func (p *podState) diedAt(t int64) *event.Event {
	if p.lifeEvents().sigterm.Time != 0 && p.lifeEvents().sigterm.Time <= t || p.lifeEvents().deletion.Time != 0 && p.lifeEvents().deletion.Time <= t {
		return nil
	}
	if x := p.lastMainExit(); x != nil && x.Time <= t {
		return x
	}
	if p.lifeEvents().kill.Time != 0 && p.lifeEvents().kill.Time <= t && p.isMain(p.lifeEvents().kill) {
		return p.lifeEvents().kill
	}
	return nil
}

// lastMainExit is the main process's last exit, or nil.
func (p *podState) lastMainExit() *event.Event {
	for i := len(p.exits) - 1; i >= 0; i-- {
		if p.isMainExit(p.exits[i]) {
			return p.exits[i]
		}
	}
	return nil
}

func (p *podState) connEnded(e *event.Event) {
	if e.Kind == event.ConnRefused {
		return // a SYN refused: no connection ended
	}
	ref := p.lifeEvents().sigterm.Time
	if ref == 0 {
		ref = p.lifeEvents().deletion.Time
	}
	if ref == 0 || e.Time < ref {
		return
	}
	if p.conns == nil {
		p.conns = make([]connEnd, 0, 16)
	}
	c := connEnd{key: connKey{keyOf(e.Local), keyOf(e.Remote)}, t: e.Time, how: connHowOf(e)}
	if e.Kind == event.ConnClosed {
		c.idle = e.Duration
	}
	p.conns = append(p.conns, c)
}

func (p *podState) endpoint(k *keeper) {
	e := k.e
	svc := serviceKey(e.Pod.Namespace, e.Service)
	if svc != "" {
		found := false
		for _, s := range p.services {
			if s == svc {
				found = true
				break
			}
		}
		if !found && len(p.services) < 8 {
			p.services = append(p.services, svc)
		}
	}
	observed := e.Flags.Has(event.FlagObserved)
	switch {
	case observed:
		// A state found by a list is no transition of the spreads.
	case e.Kind == event.EndpointNotReady:
		p.spread(spreadNotReady).add(e.Time, e.Node)
	case e.Kind == event.EndpointTerminating:
		p.spread(spreadTerminating).add(e.Time, e.Node)
	case e.Kind == event.EndpointRemoved:
		p.spread(spreadRemoved).add(e.Time, e.Node)
		// A pod's membership is per Service: leaving one (the Service
		// deleted, its selector changed) ends no pod that another still
		// holds.
		if !p.memberElsewhere(svc) {
			p.ended, p.unlisted = true, true
		}
	}
	ready, known := endpointReady(e)
	if !known {
		return
	}
	key := epKey{svc, e.Node}
	i := 0
	for i < len(p.ep) && p.ep[i].epKey != key {
		i++
	}
	if i == len(p.ep) {
		p.ep = append(p.ep, epView{epKey: key})
	}
	v := &p.ep[i]
	if n := len(v.trans); n > 0 && v.trans[n-1].ready == ready {
		return // no change in this node's view
	}
	if len(v.trans) >= 32 {
		v.trans = newerPart(v.trans, 16, 32)
	}
	v.trans = append(v.trans, epTrans{t: e.Time, ev: k.get(), ready: ready, observed: observed})
}

// memberElsewhere reports whether a Service other than svc still holds
// the pod's endpoint on some node: its latest transition there is not a
// removal.
func (p *podState) memberElsewhere(svc string) bool {
	for i := range p.ep {
		v := &p.ep[i]
		if v.svc == svc || len(v.trans) == 0 {
			continue
		}
		if last := v.trans[len(v.trans)-1].ev; last.Kind != event.EndpointRemoved {
			return true
		}
	}
	return false
}

// endpointReady tells whether an endpoint event leaves the endpoint routed
// (ready) or not; known is false when the event does not say.
func endpointReady(e *event.Event) (ready, known bool) {
	switch e.Kind {
	case event.EndpointReady:
		return true, true
	case event.EndpointNotReady, event.EndpointTerminating, event.EndpointRemoved:
		return false, true
	case event.EndpointAdded:
		return readyFromConditions(e.Attrs[event.AttrConditions])
	}
	return false, false
}

// readyFromConditions reads the ready condition from the conditions
// attribute in any of the spellings "ready,serving", "ready=true,…",
// {"ready":true,…}.
func readyFromConditions(s string) (ready, known bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return false, false
	}
	for _, tok := range strings.FieldsFunc(s, func(r rune) bool {
		return r == ',' || r == ' ' || r == '{' || r == '}' || r == ';' || r == '|'
	}) {
		k, v, hasV := strings.Cut(tok, "=")
		if !hasV {
			k, v, hasV = strings.Cut(tok, ":")
		}
		k, v = strings.Trim(k, `"'`), strings.Trim(v, `"'`)
		switch k {
		case "ready":
			if !hasV {
				return true, true
			}
			return v == "true" || v == "1" || v == "yes", true
		case "!ready", "notready", "not_ready", "unready":
			return false, true
		}
	}
	return false, true
}

// rotation describes whether the pod's endpoint was routed at t.
type rotation struct {
	seen bool // any endpoint transition of the pod (for the service) was seen
	in   bool // some node still had it ready at t
	// The transitions, not their events: a pod out of a scoped analysis
	// keeps no event for its dataplane transitions (see Aligner.wants).
	leftAfter *epTrans // in: the last node's leave observed after t, if seen
	lastLeave *epTrans // !in: the leave at or before t that allows routing the latest
	// lag is how long after lastLeave a connection may still have been
	// routed to the pod: the node's measured lag (or Options.ProxyLag) for
	// a watch event, Options.DataplaneSlack for its proxy's own removal.
	lag int64
}

// rotationAt answers from the per-node views (views: the node's dataplane
// where recorded, else its watch). A node whose first transition after t
// is a leave had the endpoint ready at t even if its earlier history fell
// outside what was recorded. A leave observed exactly at t counts as still
// routed: the proxy's rules change after the API does.
func (p *podState) rotationAt(t int64, svcs []string) rotation {
	var r rotation
	var buf [8]view
	for _, vw := range p.views(svcs, buf[:0]) {
		s := vw.v.trans
		r.seen = true
		i := 0
		for i < len(s) && s[i].t < t {
			i++
		}
		// s[:i] are before t, s[i:] at or after t.
		var readyAtT bool
		if i > 0 {
			readyAtT = s[i-1].ready
		}
		if i == 0 && len(s) > 0 && !s[0].ready && !s[0].observed {
			readyAtT = true // its first move is a leave: it was in rotation at t
		}
		if readyAtT {
			r.in = true
			for j := i; j < len(s); j++ {
				if !s[j].ready {
					if r.leftAfter == nil || s[j].t > r.leftAfter.t {
						r.leftAfter = &s[j]
					}
					break
				}
			}
			continue
		}
		for j := i - 1; j >= 0; j-- {
			if !s[j].ready {
				if r.lastLeave == nil || s[j].t+vw.allow > r.lastLeave.t+r.lag {
					r.lastLeave, r.lag = &s[j], vw.allow
				}
				break
			}
		}
	}
	return r
}

// newerPart returns s[from:] in a new array with room for n: the life a
// restart ended (see restart) may still hold s's array, and compacting it
// in place would write the pod's newer entries over that life's.
func newerPart[T any](s []T, from, n int) []T {
	return append(make([]T, 0, n), s[from:]...)
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// gone reports whether the aligner may forget p: it ended more than
// retain ago, or was deleted and has been quiet for a long time since (its
// end was not seen). A live pod is never forgotten for being quiet: a pod
// ready for a week is as ready as one that became ready a second ago.
func (p *podState) gone(now, retain int64) bool {
	if p.ended && p.last < now-retain {
		return true
	}
	return p.lifeEvents().deletion.Time != 0 && p.last < now-6*retain
}

func hasLifecycle(p *podState) bool {
	return len(p.landmarks) > 0 || len(p.dp) > 0 || p.lifeEvents().deletion.Time != 0 || p.created != 0 || p.ready != 0
}

// events are the pod's landmarks and its dataplane transitions, which are
// held in its views only, in time order: at most maxLandmarks, as when
// the transitions were landmarks too, the landmarks all kept and the
// latest transitions left out past the bound. They are the kept events
// themselves, not copies: the caller reads them, as it reads the pod.
func (p *podState) events() []*event.Event {
	n := 0
	for i := range p.dp {
		n += len(p.dp[i].trans)
	}
	dp := make([]*event.Event, 0, n)
	for i := range p.dp {
		for j := range p.dp[i].trans {
			dp = append(dp, p.dp[i].trans[j].ev)
		}
	}
	byTime := func(a, b *event.Event) int { return cmp.Compare(a.Time, b.Time) }
	slices.SortStableFunc(dp, byTime)
	dp = dp[:min(len(dp), max(0, maxLandmarks-len(p.landmarks)))]
	out := make([]*event.Event, 0, len(p.landmarks)+len(dp))
	for _, m := range p.landmarks {
		out = append(out, m.ev)
	}
	if len(dp) == 0 {
		return out
	}
	out = append(out, dp...)
	slices.SortStableFunc(out, byTime)
	return out
}

func (p *podState) offsets(t int64, svcs []string) Offsets {
	var o Offsets
	set := func(x *Offset, at int64) {
		if at != 0 {
			*x = Offset{NS: t - at, OK: true}
		}
	}
	set(&o.Sigterm, p.lifeEvents().sigterm.Time)
	set(&o.Kill, p.lifeEvents().kill.Time)
	set(&o.Deletion, p.lifeEvents().deletion.Time)
	if x := p.mainExit(t); x != nil {
		set(&o.Exit, x.Time)
	}
	r := p.rotationAt(t, svcs)
	switch {
	case r.leftAfter != nil:
		set(&o.Rotation, r.leftAfter.t)
	case r.lastLeave != nil:
		set(&o.Rotation, r.lastLeave.t)
	}
	return o
}
