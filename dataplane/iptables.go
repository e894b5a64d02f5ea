package dataplane

import (
	"encoding/binary"
	"maps"
	"net/netip"
	"strings"

	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"golang.org/x/sys/unix"
)

// kube-proxy's iptables mode (k8s.io/kubernetes/pkg/proxy/iptables): in
// the nat table, KUBE-SERVICES jumps to one KUBE-SVC-HASH chain per Service
// port (KUBE-SVL-HASH for a Local traffic policy), whose rules jump, each
// with a statistic match but the last, to one KUBE-SEP-HASH chain per
// endpoint, which DNATs to the endpoint. The hashes hide the names: the
// Service port comes from the rules' comments ("ns/svc:port -> ip:port" on
// the Service chain's rules, "ns/svc:port cluster IP" on KUBE-SERVICES'
// jump, which kube-proxy keeps even when it drops the others beyond 1000
// endpoints), the address from the DNAT.
const (
	xtTable         = "nat"
	xtServicesChain = "KUBE-SERVICES"
	xtPrefixSVC     = "KUBE-SVC-"
	xtPrefixSVL     = "KUBE-SVL-"
	xtPrefixSEP     = "KUBE-SEP-"
)

// xtRule is what one rule of those chains says: its comment, the protocol
// it matches, the chain it jumps to and the address it DNATs to.
type xtRule struct {
	comment string
	proto   string
	jump    string
	dnat    netip.AddrPort
}

// xtModel is kube-proxy's iptables rules (family → chain → rule handle or
// position) and the endpoints they sent to at the last commit.
type xtModel struct {
	proxy   string // event.ProxyIPTables or event.ProxyIPTablesLegacy
	chains  map[byte]map[string]map[uint64]*xtRule
	current map[Endpoint]string
	dirty   bool
	// What the open transaction touched (all: everything is read again):
	// kube-proxy's partial syncs rewrite only the changed Service chains
	// (and KUBE-SERVICES), so a commit reads only the chains it changed.
	touched map[xtChain]bool
	all     bool
	// held is, per Service chain, the endpoints it sent to at the last
	// commit; named the Service port KUBE-SERVICES gave each chain.
	held  map[xtChain]map[Endpoint]bool
	named map[xtChain]ServicePort
}

type xtChain struct {
	family byte
	name   string
}

func newXTModel(proxy string) *xtModel {
	return &xtModel{proxy: proxy, chains: map[byte]map[string]map[uint64]*xtRule{}, current: map[Endpoint]string{},
		touched: map[xtChain]bool{}, held: map[xtChain]map[Endpoint]bool{}, named: map[xtChain]ServicePort{}}
}

func (x *xtModel) touch(family byte, chain string) {
	x.dirty = true
	x.touched[xtChain{family, chain}] = true
}

// xtRelevant reports whether a nat chain's rules can name an endpoint or
// a Service port.
func xtRelevant(chain string) bool {
	return chain == xtServicesChain || strings.HasPrefix(chain, xtPrefixSVC) ||
		strings.HasPrefix(chain, xtPrefixSVL) || strings.HasPrefix(chain, xtPrefixSEP)
}

func xtServiceChain(chain string) bool {
	return strings.HasPrefix(chain, xtPrefixSVC) || strings.HasPrefix(chain, xtPrefixSVL)
}

// oursXT reports whether m is about iptables-nft's nat table.
func oursXT(m *msg) bool {
	return m.table == xtTable && (m.family == unix.NFPROTO_IPV4 || m.family == unix.NFPROTO_IPV6)
}

// apply folds one nftables message about the nat table into the model.
func (x *xtModel) apply(m *msg) {
	if !oursXT(m) {
		return
	}
	switch m.op {
	case unix.NFT_MSG_DELTABLE:
		if len(x.chains[m.family]) > 0 {
			x.dirty, x.all = true, true
		}
		delete(x.chains, m.family)
	case unix.NFT_MSG_DELCHAIN:
		if cs := x.chains[m.family]; cs != nil && cs[m.chain] != nil {
			delete(cs, m.chain)
			x.touch(m.family, m.chain)
		}
	case unix.NFT_MSG_NEWRULE:
		if !xtRelevant(m.chain) {
			return
		}
		r := readXTRule(m)
		x.put(m.family, m.chain, m.handle, r)
	case unix.NFT_MSG_DELRULE:
		if cs := x.chains[m.family]; cs != nil && cs[m.chain] != nil {
			delete(cs[m.chain], m.handle)
			if len(cs[m.chain]) == 0 {
				delete(cs, m.chain)
			}
			x.touch(m.family, m.chain)
		}
	}
}

func (x *xtModel) put(family byte, chain string, handle uint64, r *xtRule) {
	cs := x.chains[family]
	if cs == nil {
		cs = map[string]map[uint64]*xtRule{}
		x.chains[family] = cs
	}
	hs := cs[chain]
	if hs == nil {
		hs = map[uint64]*xtRule{}
		cs[chain] = hs
	}
	hs[handle] = r
	x.touch(family, chain)
}

// readXTRule reads an iptables-nft rule: compat matches (comment, tcp,
// udp, sctp) and targets (DNAT), the native protocol match iptables-nft
// writes for -p, a jump or goto, and a native dnat should a newer
// iptables-nft write one.
func readXTRule(m *msg) *xtRule {
	r := &xtRule{comment: m.comment}
	l4reg := uint32(0)
	for _, e := range m.exprs {
		switch e := e.(type) {
		case *expr.Match:
			info := compatInfo(e.Info)
			switch e.Name {
			case "comment":
				if r.comment == "" {
					r.comment = strings.TrimRight(string(info), "\x00")
				}
			case "tcp", "udp", "sctp":
				r.proto = e.Name
			}
		case *expr.Target:
			if e.Name == "DNAT" {
				r.dnat = decodeDNAT(m.family, e.Rev, compatInfo(e.Info))
			}
		case *expr.Meta:
			if e.Key == expr.MetaKeyL4PROTO {
				l4reg = e.Register
			}
		case *expr.Cmp:
			if l4reg != 0 && e.Register == l4reg && e.Op == expr.CmpOpEq && len(e.Data) > 0 && r.proto == "" {
				r.proto = protoName(e.Data[0])
			}
		case *expr.Verdict:
			if (e.Kind == expr.VerdictJump || e.Kind == expr.VerdictGoto) && e.Chain != "" {
				r.jump = e.Chain
			}
		}
	}
	if !r.dnat.IsValid() {
		if nr := readRule(m); nr != nil && len(nr.direct) > 0 {
			r.dnat = nr.direct[0]
		}
	}
	return r
}

func compatInfo(i any) []byte {
	switch v := i.(type) {
	case *xt.Unknown:
		return []byte(*v)
	}
	return nil
}

func protoName(p byte) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "tcp"
	case unix.IPPROTO_UDP:
		return "udp"
	case unix.IPPROTO_SCTP:
		return "sctp"
	}
	return ""
}

// decodeDNAT reads the DNAT target's payload: revision 0 (IPv4 only) is
// struct nf_nat_ipv4_multi_range_compat, 1 struct nf_nat_range and 2
// struct nf_nat_range2 (linux/netfilter/nf_nat.h); flags are host order,
// addresses and ports network order.
func decodeDNAT(family byte, rev uint32, b []byte) netip.AddrPort {
	const protoSpecified = 1 << 1 // NF_NAT_RANGE_PROTO_SPECIFIED
	var flags uint32
	var addr netip.Addr
	var port uint16
	switch {
	case rev == 0 && family == unix.NFPROTO_IPV4 && len(b) >= 20:
		flags = binary.NativeEndian.Uint32(b[4:])
		addr = netip.AddrFrom4([4]byte(b[8:12]))
		port = binary.BigEndian.Uint16(b[16:])
	case (rev == 1 || rev == 2) && len(b) >= 38:
		flags = binary.NativeEndian.Uint32(b[0:])
		if family == unix.NFPROTO_IPV6 {
			addr = netip.AddrFrom16([16]byte(b[4:20]))
		} else {
			addr = netip.AddrFrom4([4]byte(b[4:8]))
		}
		port = binary.BigEndian.Uint16(b[36:])
	default:
		return netip.AddrPort{}
	}
	if flags&protoSpecified == 0 {
		port = 0
	}
	return netip.AddrPortFrom(addr, port)
}

// parseServicePortName reads kube-proxy's "ns/name:port" (":port" absent
// for an unnamed port), the start of its comments.
func parseServicePortName(s string) (ns, name, port string, ok bool) {
	ns, rest, ok := strings.Cut(s, "/")
	if !ok || ns == "" || rest == "" || strings.ContainsAny(rest, " /") {
		return "", "", "", false
	}
	name, port, _ = strings.Cut(rest, ":")
	return ns, name, port, name != ""
}

// names reads the Service port of each Service chain from KUBE-SERVICES'
// jumps to it ("ns/svc:port cluster IP"), and their protocol.
func names(family byte, cs map[string]map[uint64]*xtRule) map[xtChain]ServicePort {
	named := map[xtChain]ServicePort{}
	for _, r := range cs[xtServicesChain] {
		if !xtServiceChain(r.jump) {
			continue
		}
		if ns, name, port, ok := parseServicePortName(strings.TrimSuffix(r.comment, " cluster IP")); ok {
			named[xtChain{family, r.jump}] = ServicePort{Namespace: ns, Name: name, Protocol: r.proto, Port: port}
		}
	}
	return named
}

// chainEndpoints lists what one Service chain sends to now.
func (x *xtModel) chainEndpoints(k xtChain) map[Endpoint]bool {
	cs := x.chains[k.family]
	out := map[Endpoint]bool{}
	sp, known := x.named[k]
	for _, r := range cs[k.name] {
		if !strings.HasPrefix(r.jump, xtPrefixSEP) {
			continue
		}
		// The Service chain's own comment, "ns/svc:port -> ip:port".
		head, tail, _ := strings.Cut(r.comment, " -> ")
		if ns, name, port, ok := parseServicePortName(head); ok {
			sp.Namespace, sp.Name, sp.Port, known = ns, name, port, true
		}
		addr, proto := netip.AddrPort{}, ""
		for _, er := range cs[r.jump] {
			if er.dnat.IsValid() {
				addr, proto = er.dnat, er.proto
				break
			}
		}
		if !addr.IsValid() {
			addr, _ = netip.ParseAddrPort(tail) // the endpoint chain is not (yet) read
		}
		if !known || !addr.IsValid() {
			continue
		}
		ep := Endpoint{ServicePort: sp, Addr: addr}
		if ep.Protocol == "" {
			ep.Protocol = proto
		}
		out[ep] = true
	}
	return out
}

// endpoints lists what every Service port chain sends to now, read
// afresh (the listing tests compare it with the model's commits).
func (x *xtModel) endpoints() map[Endpoint]string {
	y := newXTModel(x.proxy)
	y.chains, y.dirty, y.all = x.chains, true, true
	y.commit()
	return y.current
}

// commit returns the endpoints that appeared and went since the last
// commit, reading again the Service chains the transaction touched, those
// that jump to an endpoint chain it touched, and those KUBE-SERVICES now
// names otherwise.
func (x *xtModel) commit() []Change {
	if !x.dirty {
		return nil
	}
	redo := map[xtChain]bool{}
	named := x.named
	if x.all {
		named = map[xtChain]ServicePort{}
		for fam, cs := range x.chains {
			maps.Copy(named, names(fam, cs))
		}
		for k := range x.held {
			redo[k] = true
		}
		for fam, cs := range x.chains {
			for c := range cs {
				if xtServiceChain(c) {
					redo[xtChain{fam, c}] = true
				}
			}
		}
	} else {
		seps := map[xtChain]bool{}
		for k := range x.touched {
			switch {
			case k.name == xtServicesChain:
				fresh := names(k.family, x.chains[k.family])
				for c, sp := range fresh {
					if named[c] != sp {
						redo[c] = true
					}
				}
				for c := range named {
					if _, ok := fresh[c]; !ok && c.family == k.family {
						redo[c] = true
					}
				}
				if !maps.Equal(fresh, filterFamily(named, k.family)) {
					named = maps.Clone(named)
					maps.DeleteFunc(named, func(c xtChain, _ ServicePort) bool { return c.family == k.family })
					maps.Copy(named, fresh)
				}
			case xtServiceChain(k.name):
				redo[k] = true
			case strings.HasPrefix(k.name, xtPrefixSEP):
				seps[k] = true
			}
		}
		if len(seps) > 0 {
			for fam, cs := range x.chains {
				for c, rules := range cs {
					if !xtServiceChain(c) || redo[xtChain{fam, c}] {
						continue
					}
					for _, r := range rules {
						if seps[xtChain{fam, r.jump}] {
							redo[xtChain{fam, c}] = true
							break
						}
					}
				}
			}
		}
	}
	x.named = named
	// Endpoints held by the chains read again, before and after.
	var out []Change
	before := map[Endpoint]bool{}
	for k := range redo {
		for ep := range x.held[k] {
			before[ep] = true
		}
	}
	for k := range redo {
		eps := x.chainEndpoints(k)
		if len(eps) == 0 {
			delete(x.held, k)
		} else {
			x.held[k] = eps
		}
	}
	candidates := maps.Clone(before)
	for k := range redo {
		for ep := range x.held[k] {
			candidates[ep] = true
		}
	}
	// The chain that holds each candidate now, the first by name.
	holders := map[Endpoint]string{}
	for k, eps := range x.held {
		for ep := range eps {
			if candidates[ep] {
				if best, ok := holders[ep]; !ok || k.name < best {
					holders[ep] = k.name
				}
			}
		}
	}
	for ep := range candidates {
		chain, now := holders[ep]
		prev, was := x.current[ep]
		switch {
		case now && !was:
			x.current[ep] = chain
			out = append(out, Change{Endpoint: ep, Added: true, Chain: chain, Proxy: x.proxy})
		case !now && was:
			delete(x.current, ep)
			out = append(out, Change{Endpoint: ep, Chain: prev, Proxy: x.proxy})
		case now:
			x.current[ep] = chain
		}
	}
	sortChanges(out)
	clear(x.touched)
	x.dirty, x.all = false, false
	return out
}

// replace puts whole tables in place of the model's (a legacy read).
func (x *xtModel) replace(chains map[byte]map[string]map[uint64]*xtRule) {
	x.chains, x.dirty, x.all = chains, true, true
}

func filterFamily(m map[xtChain]ServicePort, family byte) map[xtChain]ServicePort {
	out := map[xtChain]ServicePort{}
	for k, v := range m {
		if k.family == family {
			out[k] = v
		}
	}
	return out
}
