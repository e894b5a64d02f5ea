package analysis

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/drainscope/drainscope/event"
)

// served is the pod a failure was served by, how it was found, and the
// pod-side kernel records on the failure's client address.
type served struct {
	pod *podState // nil when no pod is known to have served it
	via string    // pod, backend, target, kernel; "" when none was found
	// kernel holds the connection events on the client address within
	// [t-KernelWindow, t+Lookahead], oldest first: the chosen pod's only
	// once a pod is chosen. It is the aligner's scratch, valid until the
	// next call.
	kernel []*event.Event
}

// servedBy finds the pod a failure was served by: named, by the backend
// address the client or proxy logged, by the address dialled, or by the
// pod-side kernel events on the client's connection. inferred says the
// failure was inferred from kernel events, whose named pod counts as found
// by the kernel.
func (a *Aligner) servedBy(f *event.Event, inferred bool) served {
	t := f.Time
	la, kw := int64(a.opts.Lookahead), int64(a.opts.KernelWindow)
	clientAP := unmapAP(f.Local)
	var p *podState
	via := ""
	if !f.Pod.IsZero() {
		if p = a.pod(&f.Pod, false); p != nil {
			via = "pod"
			if inferred {
				via = "kernel"
			}
		}
	}
	// An address belongs to the pod that held it when the request began:
	// a timeout logged at its end may come after the address went to the
	// next pod.
	began := t - max(f.Duration, 0)
	if p == nil {
		if ip, ok := a.backend(f.Attrs[event.AttrBackend]); ok {
			if p = a.podByIP(ip, began); p != nil {
				via = "backend"
			}
		}
	}
	if p == nil && f.Remote.IsValid() {
		if p = a.podByIP(f.Remote.Addr(), began); p != nil {
			via = "target"
		}
	}
	from := t - kw
	newConn := p == nil && !inferred && (f.Reason == event.FailRefused || f.Reason == event.FailTimeout)
	if newConn {
		// A connection refused or never answered was a new one: a pod's
		// record of the client's address from before the request began
		// (give or take ExitBefore of the two clocks) is of an earlier
		// connection that had the same local port, not this one's.
		from = max(from, t-max(f.Duration, 0)-int64(a.opts.ExitBefore))
	}
	ks := a.kscratch[:0]
	if clientAP.IsValid() {
		// A client reuses its local ports: the kernel's record of an earlier
		// connection from the same address may be another Service's pod.
		// When the client named (or dialled) a Service, only its pods count,
		// and those of every Service that held the dialled address within
		// the records' window: a connection outlives its Service's deletion
		// (the proxy's connection tracking keeps it), and the API server
		// hands the freed address to the next Service.
		var target []string
		if p == nil {
			target = a.servicesFor(f, nil)
			if ip, ok := dialled(f); ok && len(target) > 0 {
				target = a.servicesHeld(target, ip, from, t+la)
			}
		}
		kpods := a.kpods[:0]
		a.kernelFor(keyOf(clientAP), from, t+la, func(k *event.Event, kp *podState) bool {
			// A pod not known to serve the target is not taken on
			// trust: a false pod is worse than none.
			if p == nil && kp != nil && len(target) > 0 && !servesAny(kp.services, target) {
				return true
			}
			// Nor was that new connection ever established: a close the
			// pod side recorded ended another one with the same local
			// port (a client that retries at once often gets the port
			// again, and the retry reaches a pod).
			if newConn && k.Kind == event.ConnClosed {
				return true
			}
			if p == nil || kp == p {
				ks = append(ks, k)
				kpods = append(kpods, kp)
			}
			return true
		})
		a.kpods = kpods
		slices.Reverse(ks) // oldest first, each beside its pod
		slices.Reverse(kpods)
		if p == nil && len(ks) > 0 {
			// The pod is the one of the connection that failed: the
			// kernel's last record with a pod at or before the failure
			// (the pod's side acts before the client notices; a record
			// with none, such as a reset sent once the pod's network was
			// gone, names nobody). A record after it is the connection
			// only when there is none before: a client that reconnects at
			// once after a reset often gets the same local port, to
			// another pod of the Service.
			best := -1
			for i, k := range ks {
				if kpods[i] != nil && k.Time <= t {
					best = i // ks is oldest first
				}
			}
			for i := range ks {
				if best >= 0 {
					break
				}
				if kpods[i] != nil {
					best = i
				}
			}
			if best >= 0 {
				p = kpods[best]
				via = "kernel"
				out := ks[:0]
				for i, k := range ks {
					if kpods[i] == p {
						out = append(out, k)
					}
				}
				ks = out
			}
		}
	}
	a.kscratch = ks
	return served{pod: p, via: via, kernel: ks}
}

// kernelProof reports whether kernel evidence alone also shows a
// client-reported failure at t from client: an inferred failure on the same
// address and port within [t-KernelWindow, t+Lookahead] (proven), and
// whether every such match was only likely (an in-use connection cut at
// exit).
func (a *Aligner) kernelProof(client netip.AddrPort, t int64) (proven, likely bool) {
	la, kw := int64(a.opts.Lookahead), int64(a.opts.KernelWindow)
	likely = true
	ms, _ := a.inferredAt.get(keyOf(client))
	for _, m := range ms {
		if m.t >= t-kw && m.t <= t+la {
			proven = true
			likely = likely && m.likely
		}
	}
	return proven, likely && proven
}

// parseBackend reads the backend a client or proxy logged: "ip:port", "ip",
// or a proxy's list of attempts ("a, b"; the last one answered).
func parseBackend(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	if i := strings.LastIndexByte(s, ','); i >= 0 {
		s = s[i+1:]
	}
	s = strings.TrimSpace(s)
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if ip, err := netip.ParseAddr(s); err == nil {
		return ip.Unmap(), true
	}
	return netip.Addr{}, false
}

// backend parses a backend attribute through a bounded cache: a proxy log
// names the same few upstreams over and over.
func (a *Aligner) backend(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	if ip, ok := a.backends[s]; ok {
		return ip, ip.IsValid()
	}
	ip, _ := parseBackend(s)
	if len(a.backends) >= 4096 {
		clear(a.backends)
	}
	a.backends[s] = ip
	return ip, ip.IsValid()
}

// servesAny reports whether a pod's Services include one of want.
func servesAny(have, want []string) bool {
	for _, w := range want {
		if slices.Contains(have, w) {
			return true
		}
	}
	return false
}
