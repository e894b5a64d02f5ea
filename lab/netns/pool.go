package netns

import (
	"fmt"
	"net/netip"
	"sync"
)

// Pool hands out pod addresses from the pod CIDR round-robin, so an address
// is reused as late as possible: a failure recorded against an address
// then names one pod only, and stale conntrack entries never point at a
// new pod.
type Pool struct {
	mu    sync.Mutex
	cidr  netip.Prefix
	skip  netip.Addr
	next  netip.Addr
	inUse map[netip.Addr]string
}

// NewPool returns a pool over the host addresses of n's pod CIDR, without
// the gateway.
func NewPool(n Network) *Pool {
	first := n.PodCIDR().Addr().Next()
	return &Pool{cidr: n.PodCIDR(), skip: n.Gateway.Addr(), next: first, inUse: map[netip.Addr]string{}}
}

// Get allocates an address to owner.
func (p *Pool) Get(owner string) (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	size := 1 << (32 - p.cidr.Bits())
	for range size {
		a := p.next
		p.next = p.advance(a)
		if a == p.skip || !p.isHost(a) {
			continue
		}
		if _, used := p.inUse[a]; used {
			continue
		}
		p.inUse[a] = owner
		return a, nil
	}
	return netip.Addr{}, fmt.Errorf("pod CIDR %s is exhausted (%d addresses in use)", p.cidr, len(p.inUse))
}

// Put returns an address to the pool.
func (p *Pool) Put(a netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.inUse, a)
}

func (p *Pool) advance(a netip.Addr) netip.Addr {
	n := a.Next()
	if !p.cidr.Contains(n) {
		return p.cidr.Addr().Next()
	}
	return n
}

// isHost excludes the network and broadcast addresses.
func (p *Pool) isHost(a netip.Addr) bool {
	if a == p.cidr.Addr() {
		return false
	}
	return p.cidr.Contains(a.Next())
}
