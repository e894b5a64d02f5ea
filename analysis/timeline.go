package analysis

import (
	"sort"

	"github.com/drainscope/drainscope/event"
)

// PodTimeline is one pod's life as far as drainscope saw it, centred on its
// termination. Times are UTC ns, 0 when not seen; durations are ns.
type PodTimeline struct {
	Pod      PodView  `json:"pod"`
	Workload string   `json:"workload,omitempty"`
	Kind     string   `json:"workload_kind,omitempty"`
	Name     string   `json:"workload_name,omitempty"`
	Node     string   `json:"node,omitempty"`
	Services []string `json:"services,omitempty"`
	IPs      []string `json:"ips,omitempty"`

	// Since is when this life of the pod began, 0 for its start: a
	// container restarted in place (the pod kept) begins a new life, and
	// each life that ended has a timeline of its own.
	Since int64 `json:"life_since_ns,omitempty"`

	Created  int64 `json:"created_ns,omitempty"`
	Ready    int64 `json:"ready_ns,omitempty"`
	NotReady int64 `json:"not_ready_ns,omitempty"`
	Deletion int64 `json:"deletion_ns,omitempty"`
	// GracePeriod is the pod_deletion's grace period; it counts from the
	// deletion, before preStop.
	GracePeriod int64 `json:"grace_period_ns,omitempty"`
	// Disruption is why the API says the pod was deleted, when it says:
	// its DisruptionTarget condition's reason (EvictionByEvictionAPI,
	// PreemptionByScheduler, DeletionByTaintManager, TerminationByKubelet).
	Disruption string `json:"disruption,omitempty"`
	// Finished is the reason the pod ended without a deletion, when its
	// status said (pod_finished: Evicted for the kubelet's node-pressure
	// eviction, Shutdown …), FinishedAt when.
	Finished   string `json:"finished,omitempty"`
	FinishedAt int64  `json:"finished_ns,omitempty"`

	// Endpoint transitions across the nodes that observed them: first and
	// last observation, i.e. the propagation spread.
	EndpointNotReady    *Spread `json:"endpoint_not_ready,omitempty"`
	EndpointTerminating *Spread `json:"endpoint_terminating,omitempty"`
	EndpointRemoved     *Spread `json:"endpoint_removed,omitempty"`
	// OutOfRotation is when each node first saw the endpoint stop being
	// ready (not ready, terminating or removed, whichever came first there);
	// for a node whose proxy recorded its rules (dataplane events), when
	// those stopped sending to it.
	OutOfRotation *Spread `json:"out_of_rotation,omitempty"`
	// Dataplane lists when each node's proxy began (InRotation) and
	// stopped sending the Service's new connections to the pod.
	Dataplane []DataplaneMark `json:"dataplane,omitempty"`

	// PreStop is the window from deletion to SIGTERM: the kubelet runs the
	// preStop hook in it.
	PreStop        int64        `json:"prestop_ns,omitempty"`
	Sigterm        *SignalView  `json:"sigterm,omitempty"`
	ListenerClosed int64        `json:"listener_closed_ns,omitempty"`
	Connections    *ConnSummary `json:"connections,omitempty"`
	Exit           *ExitView    `json:"exit,omitempty"`
	Kill           *SignalView  `json:"sigkill,omitempty"`
	Terminated     *ExitView    `json:"container_terminated,omitempty"`
	// Containers lists the pod's containers when it has more than one:
	// which was the app (the Service's port), and what each did. The
	// SIGTERM, exit and kill above are the app's.
	Containers []ContainerView `json:"containers,omitempty"`
	// Stop is what the app's container was given to stop (its preStop,
	// the grace period) and whether its preStop hook failed.
	Stop *StopSpec `json:"stop,omitempty"`

	Gaps Gaps `json:"gaps"`

	Failures         map[Cause]int `json:"failures,omitempty"`
	InferredFailures map[Cause]int `json:"inferred_failures,omitempty"`
	// RefusedOutOfRotation counts the SYNs the pod refused after its
	// endpoint had left rotation everywhere: probes, or clients that
	// bypass the Service.
	RefusedOutOfRotation int `json:"refused_out_of_rotation,omitempty"`
	// Events are the pod's lifecycle events (no per-connection events),
	// as Analyze reports them; the timelines an Aligner hands its onPod
	// callback leave them empty.
	Events []EventView `json:"events"`

	events []*event.Event // the kept events themselves (podState.events): read during onPod
	// nEvents and firstEvent are the number of the events and the first
	// one's time, set by the collector whether or not it built Events
	// (Options.NoEventViews).
	nEvents    int
	firstEvent int64
}

// eventCount is the number of the pod's lifecycle events, whether or not
// their views were built.
func (t *PodTimeline) eventCount() int { return max(len(t.Events), t.nEvents) }

// DataplaneMark is one change of a node's proxy rules for the pod's
// endpoint in one Service.
type DataplaneMark struct {
	Node       string `json:"node"`
	Service    string `json:"service,omitempty"`
	Time       int64  `json:"time_ns"`
	InRotation bool   `json:"in_rotation"`
}

// Spread is the first and last observation of a transition across nodes.
type Spread struct {
	First  int64    `json:"first_ns"`
	Last   int64    `json:"last_ns"`
	Spread int64    `json:"spread_ns"`
	Nodes  []string `json:"nodes"`
}

// SignalView is a signal delivered to the pod.
type SignalView struct {
	Time      int64  `json:"time_ns"`
	Signal    string `json:"signal"`
	Sender    string `json:"sender,omitempty"`
	SenderPID int32  `json:"sender_pid,omitempty"`
	Target    string `json:"target,omitempty"`
	TargetPID int32  `json:"target_pid,omitempty"`
}

// ExitView is how the pod's main process (or its container) ended.
type ExitView struct {
	Time   int64  `json:"time_ns"`
	PID    int32  `json:"pid,omitempty"`
	Comm   string `json:"comm,omitempty"`
	Code   int32  `json:"code"`
	Signal string `json:"signal,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// ConnSummary says how the connections that were open at SIGTERM ended
// (after deletion when no SIGTERM was seen). The capture records how a
// connection ends, not when it opened, so a connection whose first close
// or reset came after SIGTERM counts as open at SIGTERM when nothing could
// have accepted it since: the listener was closed by then (or within
// ExitSlack of it, as when the process exits at SIGTERM), or no listener
// close was seen; or when its last acknowledged data came before SIGTERM.
// The others, ended after SIGTERM while the listener still accepted, may
// have been opened after SIGTERM (an app that keeps serving while it
// drains accepts new ones): they are counted in AfterSigterm and nowhere
// else.
type ConnSummary struct {
	AtSigterm int `json:"open_at_sigterm"`
	// AfterSigterm counts the connections that ended after SIGTERM while
	// the listener was still open, with nothing showing they were open at
	// SIGTERM.
	AfterSigterm int `json:"maybe_opened_after_sigterm,omitempty"`
	ByApp        int `json:"closed_by_app"`
	ByExit       int `json:"closed_by_exit"`
	ByPeer       int `json:"closed_by_peer"`
	Reset        int `json:"reset"`
	// RacedAfterClose counts connections the pod closed and then reset
	// because the peer sent data on them: the keep-alive race's signature.
	RacedAfterClose int `json:"reset_after_close"`
}

// Gaps are the intervals that decide whether a rollout drops requests.
type Gaps struct {
	// SigtermAfterRotation is SIGTERM minus the time the last node took the
	// endpoint out of rotation: negative means SIGTERM came while some node
	// still routed to the pod (the endpoint race window).
	SigtermAfterRotation *int64 `json:"sigterm_after_rotation_ns,omitempty"`
	// SigtermAfterRemoval is SIGTERM minus the last endpoint_removed.
	SigtermAfterRemoval *int64 `json:"sigterm_after_removal_ns,omitempty"`
	// Propagation is the deletion to the last node's out-of-rotation.
	Propagation *int64 `json:"propagation_ns,omitempty"`
	// ExitAfterSigterm is the main process's exit minus SIGTERM.
	ExitAfterSigterm *int64 `json:"exit_after_sigterm_ns,omitempty"`
	// GraceUsed is the end (exit or SIGKILL) minus the deletion;
	// GraceLeft the grace period minus that.
	GraceUsed *int64 `json:"grace_used_ns,omitempty"`
	GraceLeft *int64 `json:"grace_left_ns,omitempty"`
}

// Ended reports whether the pod's life was seen ending.
func (t *PodTimeline) Ended() bool {
	return t.Deletion != 0 || t.FinishedAt != 0 || t.Sigterm != nil || t.Kill != nil || t.Exit != nil
}

func ptr(v int64) *int64 { return &v }

// exitView is a process_exit as the timeline shows it.
func exitView(e *event.Event) ExitView {
	x := ExitView{Time: e.Time, PID: e.PID, Comm: e.Comm, Code: e.Code}
	if e.Signal != 0 {
		x.Signal = signalName(e.Signal)
	}
	return x
}

func (p *podState) timeline(opts *Options) PodTimeline {
	t := PodTimeline{
		Pod:      PodView{Namespace: p.ref.Namespace, Name: p.ref.Name, UID: p.ref.UID, Container: p.ref.Container},
		Workload: p.wl.String(), Kind: p.wl.Kind, Name: p.wl.Name, Node: p.node,
		Services: append([]string(nil), p.services...),
		Created:  p.created, Ready: p.ready, NotReady: p.notReady,
		Since:    p.since,
		Deletion: p.lifeEvents().deletion.Time, GracePeriod: p.lifeEvents().deletion.Duration, Disruption: p.lifeEvents().deletion.Attrs[event.AttrDisruption],
		FinishedAt: p.lifeEvents().finished.Time, Finished: p.lifeEvents().finished.Reason,
		ListenerClosed: p.lifeEvents().listener.Time,
		events:         p.events(),
	}
	for _, l := range p.leases {
		t.IPs = append(t.IPs, l.ip.String())
	}
	spread := func(s *spreadAcc) *Spread {
		if s.first == 0 {
			return nil
		}
		nodes := append([]string(nil), s.nodes...)
		sort.Strings(nodes)
		return &Spread{First: s.first, Last: s.last, Spread: s.last - s.first, Nodes: nodes}
	}
	if p.spreads != nil {
		t.EndpointNotReady = spread(&p.spreads[spreadNotReady])
		t.EndpointTerminating = spread(&p.spreads[spreadTerminating])
		t.EndpointRemoved = spread(&p.spreads[spreadRemoved])
	}
	var out spreadAcc
	var buf [8]view
	for _, vw := range p.views(nil, buf[:0]) {
		v := vw.v
		wasReady := false
		for _, tr := range v.trans {
			if tr.ready {
				wasReady = true
				continue
			}
			// A new pod's endpoint is added not ready: that is not
			// leaving rotation. Any other not-ready transition is, even
			// without a ready one recorded before it (the watch may have
			// started late).
			if wasReady || (tr.ev.Kind != event.EndpointAdded && !tr.observed) {
				out.add(tr.t, v.node)
				break
			}
		}
	}
	// Only nodes whose first leave is counted: a node that came back ready
	// and left again keeps its first leave, which is what routed traffic.
	t.OutOfRotation = spread(&out)
	for _, v := range p.dp {
		for _, tr := range v.trans {
			t.Dataplane = append(t.Dataplane, DataplaneMark{Node: v.node, Service: v.svc, Time: tr.t, InRotation: tr.ready})
		}
	}
	sort.Slice(t.Dataplane, func(i, j int) bool {
		a, b := t.Dataplane[i], t.Dataplane[j]
		if a.Time != b.Time {
			return a.Time < b.Time
		}
		return a.Node < b.Node
	})
	if p.lifeEvents().sigterm.Time != 0 {
		s := sigView(p.lifeEvents().sigterm)
		t.Sigterm = &s
		if p.lifeEvents().deletion.Time != 0 && p.lifeEvents().sigterm.Time >= p.lifeEvents().deletion.Time {
			t.PreStop = p.lifeEvents().sigterm.Time - p.lifeEvents().deletion.Time
		}
	}
	if p.lifeEvents().kill.Time != 0 {
		s := sigView(p.lifeEvents().kill)
		t.Kill = &s
	}
	exit := p.lastMainExit()
	if exit != nil {
		x := exitView(exit)
		t.Exit = &x
	}
	t.Containers = p.containerViews()
	t.Stop = p.stopSpec()
	if p.lifeEvents().term.Time != 0 {
		t.Terminated = &ExitView{Time: p.lifeEvents().term.Time, Code: p.lifeEvents().term.Code, Reason: p.lifeEvents().term.Reason}
		if p.lifeEvents().term.Signal != 0 {
			t.Terminated.Signal = signalName(p.lifeEvents().term.Signal)
		}
	}
	if len(p.conns) > 0 {
		t.Connections = p.connSummary(exit, opts)
	}
	// Gaps.
	if p.lifeEvents().sigterm.Time != 0 {
		if t.OutOfRotation != nil {
			t.Gaps.SigtermAfterRotation = ptr(p.lifeEvents().sigterm.Time - t.OutOfRotation.Last)
		}
		if t.EndpointRemoved != nil {
			t.Gaps.SigtermAfterRemoval = ptr(p.lifeEvents().sigterm.Time - t.EndpointRemoved.Last)
		}
		if exit != nil && exit.Time >= p.lifeEvents().sigterm.Time {
			t.Gaps.ExitAfterSigterm = ptr(exit.Time - p.lifeEvents().sigterm.Time)
		}
	}
	if p.lifeEvents().deletion.Time != 0 {
		if t.OutOfRotation != nil {
			t.Gaps.Propagation = ptr(t.OutOfRotation.Last - p.lifeEvents().deletion.Time)
		}
		end := int64(0)
		if exit != nil {
			end = exit.Time
		}
		if p.lifeEvents().kill.Time != 0 && (end == 0 || p.lifeEvents().kill.Time < end) {
			end = p.lifeEvents().kill.Time
		}
		if end >= p.lifeEvents().deletion.Time && end != 0 {
			t.Gaps.GraceUsed = ptr(end - p.lifeEvents().deletion.Time)
			if p.lifeEvents().deletion.Duration > 0 {
				t.Gaps.GraceLeft = ptr(p.lifeEvents().deletion.Duration - (end - p.lifeEvents().deletion.Time))
			}
		}
	}
	if len(p.failures) > 0 {
		t.Failures = p.failures
	}
	if len(p.inferred) > 0 {
		t.InferredFailures = p.inferred
	}
	t.RefusedOutOfRotation = p.refusedOutOfRotation
	return t
}

// acceptedUntil is when the pod's listener stopped accepting, as far as the
// connections open at SIGTERM are concerned: 0 when it had stopped by
// SIGTERM (within slack) or no listener close was seen, so that every
// connection ending after SIGTERM was open then.
func (p *podState) acceptedUntil(opts *Options) int64 {
	ref := p.lifeEvents().sigterm.Time
	if ref == 0 {
		ref = p.lifeEvents().deletion.Time
	}
	if p.lifeEvents().listener.Time == 0 || p.lifeEvents().listener.Time <= ref+int64(opts.ExitSlack) {
		return 0
	}
	return p.lifeEvents().listener.Time
}

func sigView(e *event.Event) SignalView {
	return SignalView{
		Time: e.Time, Signal: signalName(e.Signal),
		Sender: e.PeerComm, SenderPID: e.PeerPID, Target: e.Comm, TargetPID: e.PID,
	}
}

// connSummary counts the connections that ended after SIGTERM by how each
// first ended, and those where a RST followed this side's close: the peer
// sent data on a connection the pod had already closed.
func (p *podState) connSummary(exit *event.Event, opts *Options) *ConnSummary {
	c := &ConnSummary{}
	type conn struct {
		first int  // index of its first ending
		raced bool // a RST followed this side's close
	}
	conns := make(map[connKey]conn, len(p.conns))
	ref := p.lifeEvents().sigterm.Time
	if ref == 0 {
		ref = p.lifeEvents().deletion.Time
	}
	accepting := p.acceptedUntil(opts)
	for i, e := range p.conns {
		k, seen := conns[e.key]
		if !seen {
			conns[e.key] = conn{first: i}
			continue
		}
		if e.how == endRSTSent && p.conns[k.first].how <= endByPeer {
			k.raced = true
			conns[e.key] = k
		}
	}
	for _, k := range conns {
		e := &p.conns[k.first]
		// While the listener accepted, a connection ending after SIGTERM
		// may be a new one, unless it carried data before SIGTERM.
		if accepting != 0 && !(e.idle > 0 && e.t-e.idle < ref) {
			c.AfterSigterm++
			continue
		}
		c.AtSigterm++
		switch {
		case e.how == endRSTSent || e.how == endRSTRecv:
			c.Reset++
		case e.how == endByPeer:
			c.ByPeer++
		case e.how == endClosedExit || (exit != nil && e.t <= exit.Time+int64(opts.ExitSlack) && exit.Time-e.t <= int64(opts.ExitSlack)):
			c.ByExit++
		default:
			c.ByApp++
		}
		if k.raced {
			c.RacedAfterClose++
		}
	}
	return c
}
