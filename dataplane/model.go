package dataplane

import (
	"cmp"
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/drainscope/drainscope/event"
)

// Table is the name of kube-proxy's nftables tables (families ip and ip6).
const Table = "kube-proxy"

// Change is an endpoint that entered or left a Service port's chains.
type Change struct {
	Endpoint
	Added bool
	Chain string // a chain that holds (held) the endpoint
	Proxy string // event.ProxyIPTables…; "" for kube-proxy's nftables mode
}

// rule is what one rule of a Service port chain sends to.
type rule struct {
	direct []netip.AddrPort // dnat to ADDR:PORT
	maps   []mapRef         // dnat to numgen … map { n : ADDR . PORT }
	vmaps  []string         // numgen … vmap { n : goto endpoint-… }
	gotos  []string         // … goto endpoint-…
}

// mapRef is a dnat whose address and port come from a map's element data.
type mapRef struct {
	set              string
	addrOff, addrLen int
	portOff          int // -1: no port
}

type set struct {
	anonymous bool
	elems     map[string]elem // by key
}

type table struct {
	rules map[string]map[uint64]*rule // chain → handle
	sets  map[string]*set
}

func newTable() *table {
	return &table{rules: map[string]map[uint64]*rule{}, sets: map[string]*set{}}
}

type tableKey struct {
	family byte
	name   string
}

// model is kube-proxy's rules as the notifications and dumps have told
// them, and the endpoints they sent to at the last commit.
type model struct {
	tables map[tableKey]*table
	// current is what each Service port's chains sent to at the last
	// commit: endpoint address → a chain holding it.
	current map[ServicePort]map[netip.AddrPort]string
	// touched are the Service ports whose chains the open transaction
	// changed; all says a table went, and everything is read again.
	touched map[ServicePort]bool
	all     bool
	// xt is kube-proxy's iptables mode on the nf_tables backend: its nat
	// tables' notifications arrive on the same group.
	xt *xtModel
}

func newModel() *model {
	return &model{tables: map[tableKey]*table{}, current: map[ServicePort]map[netip.AddrPort]string{}, touched: map[ServicePort]bool{},
		xt: newXTModel(event.ProxyIPTables)}
}

// flat lists the current endpoints of the nftables mode's tables.
func (md *model) flat() map[Endpoint]string { return flatten(md.current) }

// touch marks the Service port a chain belongs to as changed.
func (md *model) touch(chain string) {
	if sp, ok := parseServiceChain(chain); ok {
		md.touched[sp] = true
	} else if ep, ok := parseEndpointChain(chain); ok {
		md.touched[ep.ServicePort] = true
	} else if strings.HasPrefix(chain, prefixEndpoint) {
		md.all = true // a name cut short: no Service port to go by
	}
}

// ours reports whether m is about one of kube-proxy's tables.
func ours(m *msg) bool {
	return m.table == Table && (m.family == unix.NFPROTO_IPV4 || m.family == unix.NFPROTO_IPV6)
}

// apply folds one message into the model. Adds and deletes are idempotent,
// so a dump and notifications of the same commit may overlap.
func (md *model) apply(m *msg) {
	md.xt.apply(m)
	if !ours(m) {
		return
	}
	k := tableKey{m.family, m.table}
	if m.op == unix.NFT_MSG_DELTABLE {
		delete(md.tables, k)
		md.all = true
		return
	}
	t := md.tables[k]
	if t == nil {
		t = newTable()
		md.tables[k] = t
	}
	switch m.op {
	case unix.NFT_MSG_DELCHAIN:
		if _, ok := t.rules[m.chain]; ok {
			md.touch(m.chain)
		}
		delete(t.rules, m.chain)
	case unix.NFT_MSG_NEWRULE:
		if !relevantChain(m.chain) {
			return
		}
		md.touch(m.chain)
		r := readRule(m)
		if r == nil {
			// Not a rule that sends anywhere: forget whatever the handle held.
			if hs := t.rules[m.chain]; hs != nil {
				delete(hs, m.handle)
			}
			return
		}
		hs := t.rules[m.chain]
		if hs == nil {
			hs = map[uint64]*rule{}
			t.rules[m.chain] = hs
		}
		hs[m.handle] = r
	case unix.NFT_MSG_DELRULE:
		if hs := t.rules[m.chain]; hs != nil {
			md.touch(m.chain)
			delete(hs, m.handle)
			if len(hs) == 0 {
				delete(t.rules, m.chain)
			}
		}
	case unix.NFT_MSG_NEWSET:
		if t.sets[m.set] == nil {
			t.sets[m.set] = &set{anonymous: m.setFlags&unix.NFT_SET_ANONYMOUS != 0, elems: map[string]elem{}}
		}
	case unix.NFT_MSG_DELSET:
		delete(t.sets, m.set)
	case unix.NFT_MSG_NEWSETELEM:
		// Only anonymous maps hold the endpoints of a rule; kube-proxy's
		// named sets and maps (service-ips, affinity-…) do not.
		s := t.sets[m.set]
		if s == nil || !s.anonymous {
			return
		}
		for _, e := range m.elems {
			s.elems[string(e.key)] = e
		}
	case unix.NFT_MSG_DELSETELEM:
		if s := t.sets[m.set]; s != nil {
			for _, e := range m.elems {
				delete(s.elems, string(e.key))
			}
		}
	}
}

// relevantChain reports whether a chain's rules can send to an endpoint.
func relevantChain(name string) bool {
	_, ok := parseServiceChain(name)
	return ok || strings.HasPrefix(name, prefixEndpoint)
}

// readRule interprets a rule's expressions, following the registers from
// the immediates and map lookups that load them to the dnat that reads
// them. It returns nil for a rule that neither NATs nor jumps to a chain.
func readRule(m *msg) *rule {
	type word struct {
		imm  []byte
		set  string // loaded from this map's data …
		off  int    // … at this offset
		used bool
	}
	var regs [20]word // 4 words of verdict, then 16 words of data
	var r rule
	for _, e := range m.exprs {
		switch e := e.(type) {
		case *expr.Immediate:
			i := regIndex(e.Register)
			for o := 0; o < len(e.Data) && i >= 0 && i < len(regs); o, i = o+4, i+1 {
				regs[i] = word{imm: e.Data[o:min(o+4, len(e.Data))], used: true}
			}
		case *expr.Lookup:
			if !e.IsDestRegSet {
				continue
			}
			if e.DestRegister == unix.NFT_REG_VERDICT {
				r.vmaps = append(r.vmaps, e.SetName)
				continue
			}
			for i, o := regIndex(e.DestRegister), 0; i >= 0 && i < len(regs); i, o = i+1, o+4 {
				regs[i] = word{set: e.SetName, off: o, used: true}
			}
		case *expr.Verdict:
			if (e.Kind == expr.VerdictGoto || e.Kind == expr.VerdictJump) && e.Chain != "" {
				r.gotos = append(r.gotos, e.Chain)
			}
		case *expr.NAT:
			if e.Type != expr.NATTypeDestNAT || e.RegAddrMin == 0 {
				continue
			}
			alen := 4
			if e.Family == unix.NFPROTO_IPV6 {
				alen = 16
			}
			ai := regIndex(e.RegAddrMin)
			if ai < 0 || ai+alen/4 > len(regs) || !regs[ai].used {
				continue
			}
			pi := -1
			if e.RegProtoMin != 0 {
				pi = regIndex(e.RegProtoMin)
			}
			if regs[ai].set != "" {
				ref := mapRef{set: regs[ai].set, addrOff: regs[ai].off, addrLen: alen, portOff: -1}
				if pi >= 0 && pi < len(regs) && regs[pi].set == ref.set {
					ref.portOff = regs[pi].off
				}
				r.maps = append(r.maps, ref)
				continue
			}
			var b []byte
			for i := ai; i < ai+alen/4; i++ {
				b = append(b, regs[i].imm...)
			}
			addr, ok := netip.AddrFromSlice(b)
			if !ok {
				continue
			}
			var port uint16
			if pi >= 0 && pi < len(regs) && len(regs[pi].imm) >= 2 {
				port = binary.BigEndian.Uint16(regs[pi].imm)
			}
			r.direct = append(r.direct, netip.AddrPortFrom(addr, port))
		}
	}
	if len(r.direct) == 0 && len(r.maps) == 0 && len(r.vmaps) == 0 && len(r.gotos) == 0 {
		return nil
	}
	return &r
}

// regIndex maps a register number to its 32-bit word in the register file
// (the kernel's nft_parse_register): NFT_REG_1..4 are 16 bytes each after
// the verdict, NFT_REG32_00..15 are 4 bytes each from the same place.
func regIndex(r uint32) int {
	switch {
	case r <= unix.NFT_REG_4:
		return int(r) * 4
	case r >= unix.NFT_REG32_00 && r <= unix.NFT_REG32_15:
		return int(r-unix.NFT_REG32_00) + 4
	}
	return -1
}

// endpoints lists what the Service port chains send to now: of the ports
// in only, or of all when only is nil.
func (md *model) endpoints(only map[ServicePort]bool) map[ServicePort]map[netip.AddrPort]string {
	out := map[ServicePort]map[netip.AddrPort]string{}
	for sp := range only {
		out[sp] = map[netip.AddrPort]string{} // a port left without endpoints
	}
	for _, t := range md.tables {
		for chain, hs := range t.rules {
			sp, ok := parseServiceChain(chain)
			if !ok || (only != nil && !only[sp]) {
				continue
			}
			eps := out[sp]
			if eps == nil {
				eps = map[netip.AddrPort]string{}
				out[sp] = eps
			}
			add := func(a netip.AddrPort) {
				if !a.IsValid() {
					return
				}
				if prev, ok := eps[a]; !ok || chain < prev {
					eps[a] = chain
				}
			}
			for _, r := range hs {
				for _, a := range r.direct {
					add(a)
				}
				for _, ref := range r.maps {
					if s := t.sets[ref.set]; s != nil {
						for _, e := range s.elems {
							add(mapAddr(e.data, ref))
						}
					}
				}
				for _, name := range r.vmaps {
					if s := t.sets[name]; s != nil {
						for _, e := range s.elems {
							add(t.chainAddr(e.chain))
						}
					}
				}
				for _, c := range r.gotos {
					add(t.chainAddr(c))
				}
			}
		}
	}
	return out
}

// mapAddr reads ADDR . PORT from a map element's data.
func mapAddr(data []byte, ref mapRef) netip.AddrPort {
	if ref.addrOff+ref.addrLen > len(data) {
		return netip.AddrPort{}
	}
	addr, ok := netip.AddrFromSlice(data[ref.addrOff : ref.addrOff+ref.addrLen])
	if !ok {
		return netip.AddrPort{}
	}
	var port uint16
	if ref.portOff >= 0 && ref.portOff+2 <= len(data) {
		port = binary.BigEndian.Uint16(data[ref.portOff:])
	}
	return netip.AddrPortFrom(addr, port)
}

// chainAddr is the endpoint an endpoint chain sends to: its own dnat when
// the model holds it, else the address its name spells.
func (t *table) chainAddr(chain string) netip.AddrPort {
	for _, r := range t.rules[chain] {
		if len(r.direct) > 0 {
			return r.direct[0]
		}
	}
	if ep, ok := parseEndpointChain(chain); ok {
		return ep.Addr
	}
	return netip.AddrPort{}
}

// commit compares what the chains the transaction touched send to now
// with the last commit and returns the endpoints that appeared and went.
func (md *model) commit() []Change {
	only := md.touched
	if md.all {
		only = nil
	}
	now := md.endpoints(only)
	var out []Change
	if only == nil {
		out = diff(md.flat(), flatten(now))
		md.current = now
	} else {
		for sp, eps := range now {
			prev := md.current[sp]
			for a, c := range eps {
				if _, ok := prev[a]; !ok {
					out = append(out, Change{Endpoint: Endpoint{sp, a}, Added: true, Chain: c})
				}
			}
			for a, c := range prev {
				if _, ok := eps[a]; !ok {
					out = append(out, Change{Endpoint: Endpoint{sp, a}, Chain: c})
				}
			}
			if len(eps) == 0 {
				delete(md.current, sp)
			} else {
				md.current[sp] = eps
			}
		}
		sortChanges(out)
	}
	clear(md.touched)
	md.all = false
	md.gc()
	return append(out, md.xt.commit()...)
}

func flatten(m map[ServicePort]map[netip.AddrPort]string) map[Endpoint]string {
	out := map[Endpoint]string{}
	for sp, eps := range m {
		for a, c := range eps {
			out[Endpoint{sp, a}] = c
		}
	}
	return out
}

// diff lists the endpoints of now that prev lacks (added) and those of
// prev that now lacks (removed), in a stable order.
func diff(prev, now map[Endpoint]string) []Change {
	var out []Change
	for ep, chain := range now {
		if _, ok := prev[ep]; !ok {
			out = append(out, Change{Endpoint: ep, Added: true, Chain: chain})
		}
	}
	for ep, chain := range prev {
		if _, ok := now[ep]; !ok {
			out = append(out, Change{Endpoint: ep, Chain: chain})
		}
	}
	sortChanges(out)
	return out
}

func sortChanges(out []Change) {
	slices.SortFunc(out, func(a, b Change) int {
		return cmp.Or(
			cmp.Compare(a.String(), b.String()),
			a.Addr.Compare(b.Addr),
			cmp.Compare(btoi(a.Added), btoi(b.Added)),
		)
	})
}

// gc drops anonymous sets no rule refers to any more: the kernel frees
// them with their rule, whether or not it announces it.
func (md *model) gc() {
	for _, t := range md.tables {
		used := map[string]bool{}
		for _, hs := range t.rules {
			for _, r := range hs {
				for _, m := range r.maps {
					used[m.set] = true
				}
				for _, v := range r.vmaps {
					used[v] = true
				}
			}
		}
		for name, s := range t.sets {
			if s.anonymous && !used[name] {
				delete(t.sets, name)
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
