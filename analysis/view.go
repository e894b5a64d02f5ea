package analysis

import (
	"time"

	"github.com/drainscope/drainscope/event"
)

// EventView is an event as the results carry it: JSON-tagged, the ID as hex
// (a 64-bit number does not survive JavaScript), addresses as text, empty
// fields omitted.
type EventView struct {
	ID        string            `json:"id"`
	Time      int64             `json:"time_ns"`
	Kind      event.Kind        `json:"kind"`
	Node      string            `json:"node,omitempty"`
	Source    event.Source      `json:"source,omitempty"`
	Pod       *PodView          `json:"pod,omitempty"`
	Workload  string            `json:"workload,omitempty"`
	PID       int32             `json:"pid,omitempty"`
	Comm      string            `json:"comm,omitempty"`
	PeerPID   int32             `json:"peer_pid,omitempty"`
	PeerComm  string            `json:"peer_comm,omitempty"`
	Signal    int32             `json:"signal,omitempty"`
	Code      int32             `json:"code,omitempty"`
	Duration  int64             `json:"duration_ns,omitempty"`
	Local     string            `json:"local,omitempty"`
	Remote    string            `json:"remote,omitempty"`
	NetNS     uint64            `json:"netns,omitempty"`
	Service   string            `json:"service,omitempty"`
	Slice     string            `json:"slice,omitempty"`
	Reason    string            `json:"reason,omitempty"`
	Flags     []string          `json:"flags,omitempty"`
	Attrs     map[string]string `json:"attrs,omitempty"`
	Summary   string            `json:"summary"`
	TimeHuman string            `json:"time"`
}

// PodView names a pod in results.
type PodView struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
	Container string `json:"container,omitempty"`
	// Life is when the pod's life in question began, for any but its
	// first (see PodTimeline.Since).
	Life int64 `json:"life_ns,omitempty"`
}

func podView(p event.PodRef) *PodView {
	if p.IsZero() {
		return nil
	}
	return &PodView{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Container: p.Container}
}

// String renders namespace/name.
func (p *PodView) String() string {
	if p == nil {
		return "-"
	}
	return p.Namespace + "/" + p.Name
}

// View converts an event for results.
func View(e *event.Event) EventView {
	v := EventView{
		ID: e.ID.String(), Time: e.Time, Kind: e.Kind, Node: e.Node, Source: e.Source,
		Pod: podView(e.Pod), Workload: e.Workload.String(),
		PID: e.PID, Comm: e.Comm, PeerPID: e.PeerPID, PeerComm: e.PeerComm,
		Signal: e.Signal, Code: e.Code, Duration: e.Duration,
		NetNS: e.NetNS, Service: e.Service, Slice: e.Slice, Reason: e.Reason,
		Summary: Describe(e), TimeHuman: fmtTime(e.Time),
	}
	if e.Local.IsValid() {
		v.Local = e.Local.String()
	}
	if e.Remote.IsValid() {
		v.Remote = e.Remote.String()
	}
	for _, f := range []struct {
		f    event.Flags
		name string
	}{{event.FlagAtExit, "at_exit"}, {event.FlagRelist, "relist"}, {event.FlagInferred, "inferred"}, {event.FlagUnreadData, "unread_data"}, {event.FlagNearExit, "near_exit"}} {
		if e.Flags.Has(f.f) {
			v.Flags = append(v.Flags, f.name)
		}
	}
	if len(e.Attrs) > 0 {
		v.Attrs = e.Attrs // read only, as the event's (see Aligner.Add)
	}
	return v
}

func fmtTime(ns int64) string {
	if ns == 0 {
		return ""
	}
	return time.Unix(0, ns).UTC().Format("2006-01-02T15:04:05.000000Z")
}
