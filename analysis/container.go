package analysis

import (
	"strconv"
	"strings"

	"github.com/drainscope/drainscope/event"
)

// Which container of a pod is the app. A pod runs several containers: the
// app, and beside it a log shipper, a proxy, a native sidecar; each has a
// main process that gets SIGTERM and exits. The app is the container that
// serves the Service's port: the one whose spec declares a port the pod's
// endpoints name (the watcher's container_started), else the one whose
// listener on such a port the kernel saw close. Another container's
// signals and exits are its own: recorded, shown, never taken for the
// app's. Until the app is known, every container's count as the app's, as
// on a pod of one container.
//
// The evidence is what FindDisruptions reads too (the pods' lifecycle,
// not their connections), so that the list and the analysis agree on
// which pods' lives ended: the kernel's connection records would tell the
// app sooner, on a pod that declares no port, but only to the analysis.

// ctrLife is one container of the pod as far as its own events tell: its
// identity, whether it serves the Service's port, and its signals, exits,
// listener and termination, kept so that the app's account can be made
// from its own once it is known.
type ctrLife struct {
	id, name string // the runtime's container ID (as the cgroup names it), the spec's name
	role     string
	ports    []uint16 // declared in the spec
	serves   bool     // the kernel saw its listener on a port the endpoints name close
	// inbound: the kernel saw its sockets hold connections from outside
	// the pod while another container is the app: a proxy on the data
	// path (a mesh's sidecar, its inbound redirected to it).
	inbound bool
	events  int          // lifecycle events it had
	sigterm *event.Event // its first SIGTERM
	exit    *event.Event // its main process's last exit
	// What its spec gives it to stop (container_started): the preStop
	// handler's type, the seconds it waits (-1: not known) and the pod's
	// terminationGracePeriodSeconds (-1: not known).
	prestop      string
	prestopSleep int64
	grace        int64
	// hookFailed is the kubelet's first FailedPreStopHook about it.
	hookFailed *event.Event
}

// lifeRec is one lifecycle event of the pod (a signal, an exit, a
// listener's close, a termination) with its container, nil when it names
// none.
type lifeRec struct {
	ev  *event.Event
	ctr *ctrLife
}

// maxLifeLog bounds the lifecycle events a pod keeps for making the app's
// account again: a worker recycled every minute signals and exits without
// end.
const maxLifeLog = 64

// ctrKeys is how an event names its container: the runtime ID (a kernel
// event's cgroup, the watcher's status) and the spec's name (the
// watcher's events). A kernel event's Pod.Container is the ID.
func ctrKeys(e *event.Event) (id, name string) {
	id = e.Attrs[event.AttrContainerID]
	if _, after, ok := strings.Cut(id, "://"); ok {
		id = after
	}
	if e.Kind.IsKernel() {
		if id == "" {
			id = e.Pod.Container
		}
		return id, ""
	}
	return id, e.Pod.Container
}

// container finds (or, with create, makes) the container e is about; nil
// for an event that names none.
func (p *podState) container(e *event.Event, create bool) *ctrLife {
	id, name := ctrKeys(e)
	if id == "" && name == "" {
		return nil
	}
	for _, c := range p.ctrs {
		// Any of the keys naming the other: an event of a node that does
		// not tell IDs from names names its container one way only.
		if id != "" && (c.id == id || c.name == id) || name != "" && (c.name == name || c.id == name) {
			if c.name == "" {
				c.name = name
			}
			if c.id == "" {
				c.id = id
			}
			return c
		}
	}
	if !create || len(p.ctrs) >= 8 {
		return nil
	}
	c := &ctrLife{id: id, name: name, prestopSleep: -1, grace: -1}
	p.ctrs = append(p.ctrs, c)
	return c
}

// learnContainer records what a container_started or container_terminated
// says of its container: its name, role and declared ports.
func (p *podState) learnContainer(e *event.Event) {
	c := p.container(e, true)
	if c == nil {
		return
	}
	if r := e.Attrs[event.AttrContainerRole]; r != "" {
		wasInit := c.role == event.ContainerRoleInit
		c.role = r
		if r == event.ContainerRoleInit && !wasInit && c.events > 0 && p.app == nil {
			// Its exit, seen before the watcher named it, was taken for
			// the app's: make the account again without it.
			p.rederive()
		}
	}
	if e.Kind == event.ContainerStarted {
		c.prestop = e.Attrs[event.AttrPreStop]
		c.prestopSleep = attrSeconds(e, event.AttrPreStopSleep)
		c.grace = attrSeconds(e, event.AttrGracePeriod)
	}
	if v := e.Attrs[event.AttrContainerPorts]; v != "" && c.ports == nil {
		for _, f := range strings.Split(v, ",") {
			num, _, _ := strings.Cut(strings.TrimSpace(f), "/")
			if n, err := strconv.ParseUint(num, 10, 16); err == nil {
				c.ports = append(c.ports, uint16(n))
			}
		}
	}
	p.findApp()
}

// attrSeconds reads a whole number of seconds from e's attribute key,
// -1 when absent or not a number.
func attrSeconds(e *event.Event, key string) int64 {
	n, err := strconv.ParseInt(e.Attrs[key], 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// kubeletEvent records a kubelet's Event about one of the pod's
// containers: a preStop hook that failed.
func (p *podState) kubeletEvent(e, kept *event.Event) {
	if e.Reason != event.KubeletFailedPreStopHook {
		return
	}
	if c := p.container(e, true); c != nil && c.hookFailed == nil {
		c.hookFailed = kept
	}
}

// appContainer is the app's container: the one findApp decided, else the
// pod's only container that is not an init container or a sidecar; nil
// when the records do not say.
func (p *podState) appContainer() *ctrLife {
	if p.app != nil {
		return p.app
	}
	var only *ctrLife
	for _, c := range p.ctrs {
		if c.role == event.ContainerRoleInit || c.role == event.ContainerRoleSidecar || c.name == "" {
			continue
		}
		if only != nil {
			return nil
		}
		only = c
	}
	return only
}

// stopSpec is what the app container's spec gave it to stop, and what the
// kubelet said of its preStop; nil when the app's container is not known.
func (p *podState) stopSpec() *StopSpec {
	c := p.appContainer()
	if c == nil {
		return nil
	}
	s := &StopSpec{Container: c.name, PreStop: c.prestop, Recorded: c.grace >= 0}
	if c.prestopSleep >= 0 {
		s.PreStopSleep = ptr(c.prestopSleep)
	}
	if c.grace >= 0 {
		s.GracePeriod = ptr(c.grace)
	}
	if c.hookFailed != nil {
		s.HookFailed = c.hookFailed.Time
	}
	return s
}

// StopSpec is what a pod's app container was given to stop, as the
// watcher read its spec, and whether the kubelet reported its preStop
// hook failed.
type StopSpec struct {
	Container string `json:"container"`
	// Recorded: the watcher recorded the container's spec (its
	// container_started carried the grace period, which the API server
	// always sets): an absent preStop is none, not unknown. Records of
	// agents before this attribute say nothing of the spec.
	Recorded bool `json:"recorded"`
	// PreStop is the preStop handler's type (sleep, exec, httpGet,
	// tcpSocket), "" for none or not recorded; PreStopSleep the seconds it
	// waits when its spec says.
	PreStop      string `json:"prestop,omitempty"`
	PreStopSleep *int64 `json:"prestop_sleep_s,omitempty"`
	// GracePeriod is the pod's terminationGracePeriodSeconds.
	GracePeriod *int64 `json:"grace_period_s,omitempty"`
	// HookFailed is when the kubelet reported FailedPreStopHook for the
	// container: the hook did not run its course (an exec of a command the
	// image lacks), so SIGTERM came at once.
	HookFailed int64 `json:"prestop_failed_ns,omitempty"`
}

// learnListener records that the container of a listener_closed served
// the port it names, when the pod's endpoints name that port.
func (p *podState) learnListener(e *event.Event) {
	port := e.Local.Port()
	if port == 0 || !p.servesPort(port) {
		return
	}
	c := p.container(e, true)
	if c == nil || c.serves {
		return
	}
	c.serves = true
	p.findApp()
}

// servesPort reports whether the pod's endpoints name port.
func (p *podState) servesPort(port uint16) bool {
	for i := range p.ep {
		for _, tr := range p.ep[i].trans {
			if tr.ev.Local.Port() == port {
				return true
			}
		}
	}
	return false
}

// findApp decides the app once the records say: the container that
// served a port of the endpoints, else the one that declares one. When it
// is decided and other containers had lifecycle events, the app's account
// is made again from its own.
func (p *podState) findApp() {
	if p.app != nil {
		return
	}
	var app *ctrLife
	for _, c := range p.ctrs {
		if c.serves {
			app = c
			break
		}
	}
	if app == nil {
		for _, c := range p.ctrs {
			for _, port := range c.ports {
				if p.servesPort(port) {
					app = c
					break
				}
			}
			if app != nil {
				break
			}
		}
	}
	if app == nil {
		return
	}
	p.app = app
	others := false
	for _, c := range p.ctrs {
		if c != app && c.events > 0 {
			others = true
		}
	}
	if others {
		p.rederive()
	}
}

// otherContainer reports whether c is known not to be the app: another
// container once the app is known, and an init container always (it runs
// to completion before the app starts: its exit is no end of the pod's).
func (p *podState) otherContainer(c *ctrLife) bool {
	return c != nil && (c.role == event.ContainerRoleInit || p.app != nil && c != p.app)
}

// record counts e among the container's own events.
func (c *ctrLife) record(e *event.Event) {
	c.events++
	switch {
	case e.Kind == event.Signal && e.Signal == event.SIGTERM && c.sigterm == nil:
		c.sigterm = e
	case e.Kind == event.ProcessExit && e.Flags.Has(event.FlagMain):
		c.exit = e
	case e.Kind == event.ProcessExit && (c.exit == nil || c.exit.Kind == event.ProxyState):
		c.exit = e
	}
}

// rederive makes the app's account (its SIGTERM, kill, exits, listener,
// termination) again from the app container's own events and those that
// name no container, leaving out the other containers' that were taken
// for the app's before it was known.
func (p *podState) rederive() {
	if p.life != nil {
		d, f := p.life.deletion, p.life.finished
		p.life = newLifecycle()
		p.life.deletion, p.life.finished = d, f
	}
	p.exits, p.pids = nil, nil
	p.ended = p.unlisted || p.lifeEvents().finished.Time != 0
	for _, r := range p.lifeLog {
		if !p.otherContainer(r.ctr) {
			p.lifecycleEvent(r.ev, r.ev)
		}
	}
}

// ContainerView is one container of a pod with more than one: what it
// is and what it did at the pod's end.
type ContainerView struct {
	Name string `json:"name,omitempty"`
	ID   string `json:"id,omitempty"`
	Role string `json:"role,omitempty"` // app, sidecar, init, as the pod's spec says
	// Inbound: it held the pod's connections from outside the pod while
	// another container was the app: a proxy on the data path.
	Inbound bool `json:"inbound,omitempty"`
	// App: the container that served the Service's port, whose end is the
	// pod's in the timeline.
	App     bool      `json:"app"`
	Sigterm int64     `json:"sigterm_ns,omitempty"`
	Exit    *ExitView `json:"exit,omitempty"`
}

// containerViews lists the pod's containers when it has more than one
// (the sandbox aside: it gets no SIGTERM while another does).
func (p *podState) containerViews() []ContainerView {
	var out []ContainerView
	for _, c := range p.ctrs {
		if c.name == "" && c.sigterm == nil && len(p.termed) > 0 && !p.termedID(c.id) {
			continue // the sandbox
		}
		v := ContainerView{Name: c.name, ID: c.id, Role: c.role, App: c == p.app, Inbound: c.inbound}
		if c.sigterm != nil {
			v.Sigterm = c.sigterm.Time
		}
		if c.exit != nil {
			x := exitView(c.exit)
			v.Exit = &x
		}
		out = append(out, v)
	}
	if len(out) < 2 {
		return nil
	}
	return out
}

func (p *podState) termedID(id string) bool {
	for _, t := range p.termed {
		if t == id {
			return true
		}
	}
	return false
}

// learnInbound records that the container of a kernel connection event
// from outside the pod, other than the app, carried the pod's inbound
// connections.
func (p *podState) learnInbound(e *event.Event) {
	if p.app == nil || len(p.ctrs) < 2 {
		return
	}
	if r := e.Remote.Addr(); !r.IsValid() || r.IsLoopback() || r.Unmap().IsLoopback() {
		return
	}
	if c := p.container(e, false); c != nil && c != p.app && !c.inbound {
		c.inbound = true
	}
}

// inboundProxy is the container other than the app that carried the
// pod's inbound connections, nil when none did.
func (p *podState) inboundProxy() *ctrLife {
	for _, c := range p.ctrs {
		if c.inbound && c != p.app {
			return c
		}
	}
	return nil
}

// proxyName names a container for people: its spec's name, else its ID.
func (c *ctrLife) proxyName() string {
	if c.name != "" {
		return c.name
	}
	if len(c.id) > 12 {
		return c.id[:12]
	}
	return c.id
}

// proxyState records what a mesh proxy's own log says of its shutdown
// (event.ProxyState) where the node's capture did not see its process:
// its drain's start stands for its SIGTERM, its abort or exit for its
// exit. The kernel's record of the process, where there is one, wins.
func (p *podState) proxyState(e, kept *event.Event) {
	c := p.container(e, true)
	if c == nil {
		return
	}
	fromLog := c.exit != nil && c.exit.Kind == event.ProxyState
	switch e.Reason {
	case event.ProxyDraining:
		if c.sigterm == nil {
			c.sigterm = kept
		}
	case event.ProxyTerminating:
		if c.exit == nil {
			c.exit = kept
		}
	case event.ProxyExited:
		if c.exit == nil || fromLog {
			c.exit = kept
		}
	}
}
