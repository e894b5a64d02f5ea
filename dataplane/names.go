package dataplane

import (
	"net/netip"
	"strconv"
	"strings"
)

// ServicePort names one port of a Service as kube-proxy's chains do:
// namespace, name, protocol (tcp, udp, sctp) and the port's name ("" for an
// unnamed port).
type ServicePort struct {
	Namespace, Name, Protocol, Port string
}

// String renders ns/name/proto/port, kube-proxy's own spelling.
func (s ServicePort) String() string {
	return s.Namespace + "/" + s.Name + "/" + s.Protocol + "/" + s.Port
}

// Endpoint is one endpoint of a Service port in a node's rules.
type Endpoint struct {
	ServicePort
	Addr netip.AddrPort
}

// Chain-name prefixes kube-proxy's nftables mode uses
// (k8s.io/kubernetes/pkg/proxy/nftables: servicePort…ChainNamePrefix).
const (
	prefixService  = "service-"
	prefixLocal    = "local-"
	prefixEndpoint = "endpoint-"
)

// parseServiceChain reads a Service port's chain name,
// service-HASH-ns/name/proto/port or local-HASH-…: the chains whose rules
// pick an endpoint for the Service's cluster and local traffic policies.
func parseServiceChain(name string) (ServicePort, bool) {
	var rest string
	switch {
	case strings.HasPrefix(name, prefixService):
		rest = name[len(prefixService):]
	case strings.HasPrefix(name, prefixLocal):
		rest = name[len(prefixLocal):]
	default:
		return ServicePort{}, false
	}
	return parseBase(rest)
}

// parseBase reads HASH-ns/name/proto/port; the hash is 8 base32 characters.
// Namespace, name and port names cannot hold a slash, so the split is
// unambiguous; a base cut short by kube-proxy (it ends in "...") is refused.
func parseBase(s string) (ServicePort, bool) {
	if len(s) < 9 || s[8] != '-' || strings.HasSuffix(s, "...") {
		return ServicePort{}, false
	}
	parts := strings.Split(s[9:], "/")
	if len(parts) != 4 || parts[0] == "" || parts[1] == "" {
		return ServicePort{}, false
	}
	switch parts[2] {
	case "tcp", "udp", "sctp":
	default:
		return ServicePort{}, false
	}
	return ServicePort{Namespace: parts[0], Name: parts[1], Protocol: parts[2], Port: parts[3]}, true
}

// parseEndpointChain reads an endpoint's chain name,
// endpoint-HASH-ns/name/proto/port__ip/port (an IPv6 address with its
// colons as dots), which kube-proxy writes for Services with ClientIP
// session affinity.
func parseEndpointChain(name string) (Endpoint, bool) {
	if !strings.HasPrefix(name, prefixEndpoint) {
		return Endpoint{}, false
	}
	rest := name[len(prefixEndpoint):]
	i := strings.LastIndex(rest, "__")
	if i < 0 {
		return Endpoint{}, false
	}
	sp, ok := parseBase(rest[:i])
	if !ok {
		return Endpoint{}, false
	}
	ip, port, ok := strings.Cut(rest[i+2:], "/")
	if !ok {
		return Endpoint{}, false
	}
	if strings.Count(ip, ".") != 3 {
		ip = strings.ReplaceAll(ip, ".", ":") // IPv6, its colons written as dots
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return Endpoint{}, false
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return Endpoint{}, false
	}
	return Endpoint{ServicePort: sp, Addr: netip.AddrPortFrom(addr, uint16(p))}, true
}
