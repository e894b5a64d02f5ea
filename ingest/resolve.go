package ingest

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// Owner is the pod that held an IP address at some time.
type Owner struct {
	Pod      event.PodRef
	Workload event.Workload
	Service  string // from the latest endpoint event, when there was one
}

type ipClaim struct {
	t     int64
	owner Owner
}

// Resolver answers "which pod had this IP at that time?" from the pod and
// endpoint events in the store: each pod_ready, pod_not_ready and endpoint_*
// event says its pod held the address in Local at that moment. An address
// belongs to the pod of the latest such event at or before the time asked,
// so a pod keeps its address through termination until another pod's event
// claims it. Before the first event seen for an address, its first pod is
// taken when that event is at most Lookahead later. A Resolver is not safe
// for concurrent use.
type Resolver struct {
	claims map[netip.Addr][]ipClaim
	sorted bool
	// services are the Services (namespace/name) the events named, to
	// resolve a proxy's upstream names (UpstreamService).
	services map[string]bool
	// Lookahead bounds how far after the asked time the first claim of an
	// address may be and still answer for it.
	Lookahead time.Duration
}

// DefaultLookahead is the Resolver's Lookahead unless set otherwise.
const DefaultLookahead = 5 * time.Minute

// ResolverKinds are the event kinds a Resolver learns from.
var ResolverKinds = []event.Kind{
	event.PodReady, event.PodNotReady,
	event.EndpointAdded, event.EndpointReady, event.EndpointNotReady, event.EndpointServing,
	event.EndpointNotServing, event.EndpointTerminating, event.EndpointRemoved,
	event.ServiceChanged,
}

// NewResolver returns an empty resolver: every lookup misses until events
// are added.
func NewResolver() *Resolver {
	return &Resolver{claims: map[netip.Addr][]ipClaim{}, services: map[string]bool{}, Lookahead: DefaultLookahead}
}

// LoadResolver builds a resolver from the store's pod and endpoint events
// in w. With no such events it resolves nothing (and failures keep an empty
// Pod), which is not an error.
func LoadResolver(ctx context.Context, s store.Store, w event.Window) (*Resolver, error) {
	r := NewResolver()
	err := s.Scan(ctx, store.Query{Window: w, Kinds: ResolverKinds}, func(e *event.Event) error {
		r.Add(e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("loading pod addresses from %s: %w", s.Describe(), err)
	}
	return r, nil
}

// Add learns from e if it ties a pod to an address; other events are ignored.
func (r *Resolver) Add(e *event.Event) {
	if (e.Kind == event.ServiceChanged || e.Kind.IsEndpoint()) && e.Service != "" && e.Pod.Namespace != "" {
		r.services[e.Pod.Namespace+"/"+e.Service] = true
	}
	if e.Pod.IsZero() || !e.Local.Addr().IsValid() {
		return
	}
	switch {
	case e.Kind == event.PodReady, e.Kind == event.PodNotReady, e.Kind.IsEndpoint():
	default:
		return
	}
	ip := e.Local.Addr().Unmap()
	r.claims[ip] = append(r.claims[ip], ipClaim{t: e.Time, owner: Owner{Pod: e.Pod, Workload: e.Workload, Service: e.Service}})
	r.sorted = false
}

// Len is the number of addresses known.
func (r *Resolver) Len() int { return len(r.claims) }

func (r *Resolver) sort() {
	for ip, cs := range r.claims {
		sort.SliceStable(cs, func(i, j int) bool { return cs[i].t < cs[j].t })
		// Carry a pod's Service forward to its claims that lack one
		// (pod_ready events name no Service).
		for i := 1; i < len(cs); i++ {
			if cs[i].owner.Service == "" && cs[i-1].owner.Pod == cs[i].owner.Pod {
				cs[i].owner.Service = cs[i-1].owner.Service
			}
		}
		r.claims[ip] = cs
	}
	r.sorted = true
}

// Lookup returns the pod that held ip at t (UTC ns).
func (r *Resolver) Lookup(ip netip.Addr, t int64) (Owner, bool) {
	if r == nil || !ip.IsValid() {
		return Owner{}, false
	}
	if !r.sorted {
		r.sort()
	}
	cs := r.claims[ip.Unmap()]
	if len(cs) == 0 {
		return Owner{}, false
	}
	i := sort.Search(len(cs), func(i int) bool { return cs[i].t > t })
	if i > 0 {
		return cs[i-1].owner, true
	}
	if cs[0].t-t <= int64(r.Lookahead) {
		return cs[0].owner, true
	}
	return Owner{}, false
}

// KnownService reports whether an event named the Service key
// (namespace/name).
func (r *Resolver) KnownService(key string) bool {
	return r != nil && r.services[key]
}
