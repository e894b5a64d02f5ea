package cilium

import (
	"net/netip"
	"strings"
	"sync"

	"github.com/drainscope/drainscope/event"
)

// ServiceIndex maps ClusterIPs to Services from the watcher's
// service_changed events (Attrs cluster_ips), which the agent sees go by:
// Observe every recorded event, and pass Lookup as Options.Services. A
// ClusterIP taken over by another Service later names the new one; a
// deleted Service's addresses are forgotten.
type ServiceIndex struct {
	mu    sync.RWMutex
	byIP  map[netip.Addr]svcName
	ipsOf map[svcName][]netip.Addr
}

type svcName struct{ ns, name string }

// NewServiceIndex returns an empty index.
func NewServiceIndex() *ServiceIndex {
	return &ServiceIndex{byIP: map[netip.Addr]svcName{}, ipsOf: map[svcName][]netip.Addr{}}
}

// Observe learns from a service_changed event and ignores other events.
func (x *ServiceIndex) Observe(e *event.Event) {
	if e.Kind != event.ServiceChanged || e.Service == "" {
		return
	}
	s := svcName{e.Pod.Namespace, e.Service}
	var ips []netip.Addr
	if e.Reason != event.ChangeDeleted {
		for _, f := range strings.Split(e.Attrs[event.AttrClusterIPs], ",") {
			if a, err := netip.ParseAddr(strings.TrimSpace(f)); err == nil {
				ips = append(ips, a.Unmap())
			}
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, a := range x.ipsOf[s] {
		if x.byIP[a] == s {
			delete(x.byIP, a)
		}
	}
	delete(x.ipsOf, s)
	if len(ips) > 0 {
		x.ipsOf[s] = ips
		for _, a := range ips {
			x.byIP[a] = s
		}
	}
}

// Lookup is an Options.Services: the Service whose ClusterIP is addr. The
// port's name is not in service_changed events, so it is "".
func (x *ServiceIndex) Lookup(addr netip.Addr, _ uint16, _ string) (ns, name, portName string, ok bool) {
	x.mu.RLock()
	s, ok := x.byIP[addr.Unmap()]
	x.mu.RUnlock()
	return s.ns, s.name, "", ok
}
