// Package event defines the one record every part of drainscope produces and
// consumes. An Event is a timestamped observation of a pod's lifecycle, of an
// endpoint condition, of something the kernel did, or of a failure a client
// saw.
//
// All parts write the same flat Event; each Kind documents which fields it
// uses (see the table in kinds.go). Keeping one flat shape lets the stores
// use typed columns and bulk copies, and lets the analysis join kernel,
// control-plane and client evidence without conversions.
package event

import (
	"maps"
	"net/netip"
	"time"
)

// Event is one observation. Time is UTC wall-clock nanoseconds since the Unix
// epoch, taken when the observation was made (a kernel event converted from
// the monotonic clock, a watch event when its handler ran), never a
// whole-second API timestamp; those go in Attrs.
type Event struct {
	ID     ID    // stable identity; zero until Seal is called
	Time   int64 // UTC unix nanoseconds
	Kind   Kind
	Node   string // the node that observed the event
	Source Source

	Pod      PodRef
	Workload Workload // owner of Pod (in Pod.Namespace), when known

	// The two PIDs side by side, not each beside its command name: the
	// struct is then 352 bytes, one of the allocator's size classes (360
	// took 384), and an analysis keeps a copy of every endpoint, dataplane
	// and lifecycle event of its window (TestEventSize).
	PID      int32  // process the event is about (signal target, exiting task, socket owner)
	PeerPID  int32  // signal sender
	Comm     string // PID's command name
	PeerComm string // PeerPID's command name (the signal sender's)

	Signal   int32 // signal number: Signal, ProcessExit by signal
	Code     int32 // exit code (ProcessExit, ContainerTerminated); HTTP status (ClientFailure)
	Duration int64 // nanoseconds: grace period (PodDeletion), request duration (ClientFailure), idle time (ConnClosed)

	Local  netip.AddrPort // socket's local side; endpoint address (Endpoint*); client address (ClientFailure)
	Remote netip.AddrPort // socket's peer; target dialled (ClientFailure)
	NetNS  uint64         // network namespace inode of the socket

	Service string // Service the endpoint belongs to, or the client targeted
	Slice   string // EndpointSlice name (Endpoint*)

	Reason string // kind-specific reason: RST reason, termination reason, failure class
	Flags  Flags
	Attrs  map[string]string // extras, e.g. the API's whole-second timestamps
}

// PodRef names the pod (and container) an event belongs to.
type PodRef struct {
	Namespace string
	Name      string
	UID       string
	Container string
}

// IsZero reports whether the event was not attributed to any pod.
func (p PodRef) IsZero() bool { return p.UID == "" && p.Name == "" }

// String renders namespace/name, or "-" when unknown.
func (p PodRef) String() string {
	if p.IsZero() {
		return "-"
	}
	return p.Namespace + "/" + p.Name
}

// Workload is the controller that owns a pod, resolved through ReplicaSets to
// their Deployment. Its namespace is the pod's.
type Workload struct {
	Kind string // Deployment, StatefulSet, DaemonSet, ReplicaSet, Job …
	Name string
}

// IsZero reports whether the workload is unknown.
func (w Workload) IsZero() bool { return w.Name == "" }

// String renders Kind/Name as stored, or "" when unknown.
func (w Workload) String() string {
	if w.IsZero() {
		return ""
	}
	return w.Kind + "/" + w.Name
}

// Source says which part of drainscope recorded an event.
type Source string

const (
	SourceWatcher   Source = "watcher"   // client-go watches
	SourceKernel    Source = "kernel"    // eBPF programs
	SourceClient    Source = "client"    // imported or reported client failures
	SourceLab       Source = "lab"       // the lab's node and load generator
	SourceDataplane Source = "dataplane" // a node proxy's rules (kube-proxy's nftables table)
	SourceAgent     Source = "agent"     // an agent's account of its own recording (recorder_coverage)
)

// Flags qualify an event.
type Flags uint32

const (
	// FlagAtExit marks a socket closed or reset by the owning process's exit
	// path (PF_EXITING), or in its final moments before exit.
	FlagAtExit Flags = 1 << iota
	// FlagRelist marks a transition recovered by diffing after a relist: it
	// happened while the watch was broken, so Time is when it was noticed.
	FlagRelist
	// FlagInferred marks a client failure inferred from kernel evidence
	// alone, with no client log.
	FlagInferred
	// FlagUnreadData marks a reset sent while received data was unread.
	FlagUnreadData
	// The values are stored: new flags go after the others.

	// FlagObserved marks the state as the watcher found it at its initial
	// list, a relist or a periodic re-observation, not a transition at
	// this time: the state began at or before Time, perhaps days before.
	FlagObserved
	// FlagMain marks a kernel event about its container's main process:
	// the one the runtime started as the container's init (PID 1 of the
	// container's pid namespace). Exec'd probes, kubectl exec and an app's
	// workers are not; their exits do not end the container.
	FlagMain
	// FlagNearExit marks a FlagAtExit that rests on timing alone: the
	// socket was closed or reset by its process within the capture's exit
	// window before the process exited, not in the kernel's exit path (a
	// runtime closing its sockets in its own teardown). An app that closes
	// a connection cleanly, after a whole response with Connection: close,
	// just before it exits looks the same.
	FlagNearExit
)

// Has reports whether all of q are set.
func (f Flags) Has(q Flags) bool { return f&q == q }

// At returns the event time as a time.Time in UTC.
func (e *Event) At() time.Time { return time.Unix(0, e.Time).UTC() }

// Clone copies e with its own Attrs map, for a caller that keeps an event
// whose map the producer may reuse or change.
func (e *Event) Clone() Event {
	c := *e
	c.Attrs = maps.Clone(e.Attrs)
	return c
}

// Seal makes the event's strings storable (Sanitize) and computes its
// identity from that content. Call it once the event is complete; writing a
// sealed event twice stores it once. The identity is of the sanitized
// event, the one that is stored, so sealing again, or sealing an event read
// back from a store, gives the same ID; the original bytes of a command
// name are in Attrs and so still part of it.
func (e *Event) Seal() {
	e.Sanitize()
	e.ID = Identity(e)
}
