package dataplane

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// msg is one nftables netlink message as the watcher uses it: a
// notification or one answer of a dump, which have the same layout.
type msg struct {
	op     uint16 // unix.NFT_MSG_*
	family byte   // unix.NFPROTO_IPV4, NFPROTO_IPV6 …
	table  string

	chain  string // rules, chains
	handle uint64 // rules

	exprs   []expr.Any // rules: the expressions this package reads, in order
	comment string     // rules: the comment in the rule's user data (iptables-nft ≥ 1.8.10 keeps it there)

	set      string // sets, elements
	setFlags uint32 // sets
	elems    []elem // elements

	gen uint32 // NEWGEN: the ruleset's generation after the commit
}

// elem is one set or map element: its key and what it maps to, a value
// (ip . port) or a verdict's chain.
type elem struct {
	key   []byte
	data  []byte
	chain string // goto/jump target of a verdict map's element
}

// nftOp returns the nftables message type of h, or false for another
// netfilter subsystem's message.
func nftOp(h netlink.Header) (uint16, bool) {
	t := uint16(h.Type)
	if t>>8 != unix.NFNL_SUBSYS_NFTABLES {
		return 0, false
	}
	return t & 0xff, true
}

// decode reads the parts of an nftables message that the mapping needs.
// Kinds it does not use are returned with op set and nothing else.
func decode(m netlink.Message) (msg, error) {
	op, ok := nftOp(m.Header)
	if !ok {
		return msg{}, fmt.Errorf("netlink message type %#x is not nftables", uint16(m.Header.Type))
	}
	if len(m.Data) < 4 {
		return msg{}, fmt.Errorf("nftables message %d: %d bytes, shorter than its header", op, len(m.Data))
	}
	out := msg{op: op, family: m.Data[0]}
	ad, err := netlink.NewAttributeDecoder(m.Data[4:])
	if err != nil {
		return out, fmt.Errorf("nftables message %d: %w", op, err)
	}
	ad.ByteOrder = binary.BigEndian
	switch op {
	case unix.NFT_MSG_NEWGEN:
		for ad.Next() {
			if ad.Type() == unix.NFTA_GEN_ID {
				out.gen = ad.Uint32()
			}
		}
	case unix.NFT_MSG_NEWTABLE, unix.NFT_MSG_DELTABLE:
		for ad.Next() {
			if ad.Type() == unix.NFTA_TABLE_NAME {
				out.table = ad.String()
			}
		}
	case unix.NFT_MSG_NEWCHAIN, unix.NFT_MSG_DELCHAIN:
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_CHAIN_TABLE:
				out.table = ad.String()
			case unix.NFTA_CHAIN_NAME:
				out.chain = ad.String()
			}
		}
	case unix.NFT_MSG_NEWRULE, unix.NFT_MSG_DELRULE:
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_RULE_TABLE:
				out.table = ad.String()
			case unix.NFTA_RULE_CHAIN:
				out.chain = ad.String()
			case unix.NFTA_RULE_HANDLE:
				out.handle = ad.Uint64()
			case unix.NFTA_RULE_EXPRESSIONS:
				ad.Nested(func(nad *netlink.AttributeDecoder) error {
					out.exprs, err = decodeExprs(out.family, nad)
					return err
				})
			case unix.NFTA_RULE_USERDATA:
				out.comment = udataComment(ad.Bytes())
			}
		}
	case unix.NFT_MSG_NEWSET, unix.NFT_MSG_DELSET:
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_SET_TABLE:
				out.table = ad.String()
			case unix.NFTA_SET_NAME:
				out.set = ad.String()
			case unix.NFTA_SET_FLAGS:
				out.setFlags = ad.Uint32()
			}
		}
	case unix.NFT_MSG_NEWSETELEM, unix.NFT_MSG_DELSETELEM:
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_SET_ELEM_LIST_TABLE:
				out.table = ad.String()
			case unix.NFTA_SET_ELEM_LIST_SET:
				out.set = ad.String()
			case unix.NFTA_SET_ELEM_LIST_ELEMENTS:
				ad.Nested(func(nad *netlink.AttributeDecoder) error {
					for nad.Next() {
						if nad.Type() != unix.NFTA_LIST_ELEM {
							continue
						}
						var e elem
						nad.Nested(func(ead *netlink.AttributeDecoder) error { return decodeElem(ead, &e) })
						out.elems = append(out.elems, e)
					}
					return nil
				})
			}
		}
	default:
		return out, nil
	}
	if err := ad.Err(); err != nil {
		return out, fmt.Errorf("nftables message %d (table %q): %w", op, out.table, err)
	}
	return out, err
}

// decodeExprs keeps the expressions that name where a rule sends a packet:
// immediate values and verdicts, set and map lookups, and NAT. The others
// are kept as nil placeholders so that register use stays in order.
func decodeExprs(family byte, ad *netlink.AttributeDecoder) ([]expr.Any, error) {
	var out []expr.Any
	for ad.Next() {
		if ad.Type() != unix.NFTA_LIST_ELEM {
			continue
		}
		var name string
		var data []byte
		ad.Nested(func(ead *netlink.AttributeDecoder) error {
			for ead.Next() {
				switch ead.Type() {
				case unix.NFTA_EXPR_NAME:
					name = ead.String()
				case unix.NFTA_EXPR_DATA:
					data = ead.Bytes()
				}
			}
			return nil
		})
		var e expr.Any
		switch name {
		case "immediate":
			imm := &expr.Immediate{}
			if err := expr.Unmarshal(family, data, imm); err != nil {
				return nil, fmt.Errorf("expression immediate: %w", err)
			}
			e = imm
			if imm.Register == unix.NFT_REG_VERDICT && len(imm.Data) == 0 {
				v := &expr.Verdict{}
				if err := expr.Unmarshal(family, data, v); err != nil {
					return nil, fmt.Errorf("expression immediate (verdict): %w", err)
				}
				e = v
			}
		case "lookup":
			l := &expr.Lookup{}
			if err := expr.Unmarshal(family, data, l); err != nil {
				return nil, fmt.Errorf("expression lookup: %w", err)
			}
			e = l
		case "nat":
			n := &expr.NAT{}
			if err := expr.Unmarshal(family, data, n); err != nil {
				return nil, fmt.Errorf("expression nat: %w", err)
			}
			e = n
		case "match", "target":
			// iptables-nft's xtables extensions: kept raw, read by
			// readXTRule (package xt's decoders fail on some payloads).
			x, err := decodeCompat(data)
			if err != nil {
				return nil, fmt.Errorf("expression %s: %w", name, err)
			}
			if name == "match" {
				e = &expr.Match{Name: x.name, Rev: x.rev, Info: &x.info}
			} else {
				e = &expr.Target{Name: x.name, Rev: x.rev, Info: &x.info}
			}
		case "meta":
			m := &expr.Meta{}
			if err := expr.Unmarshal(family, data, m); err != nil {
				return nil, fmt.Errorf("expression meta: %w", err)
			}
			e = m
		case "cmp":
			c := &expr.Cmp{}
			if err := expr.Unmarshal(family, data, c); err != nil {
				return nil, fmt.Errorf("expression cmp: %w", err)
			}
			e = c
		}
		out = append(out, e)
	}
	return out, ad.Err()
}

type compat struct {
	name string
	rev  uint32
	info xt.Unknown
}

// decodeCompat reads a match or target expression's name, revision and
// payload (NFTA_MATCH_* and NFTA_TARGET_* share their numbers).
func decodeCompat(data []byte) (compat, error) {
	var x compat
	ad, err := netlink.NewAttributeDecoder(data)
	if err != nil {
		return x, err
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_MATCH_NAME:
			x.name = strings.TrimRight(string(ad.Bytes()), "\x00")
		case unix.NFTA_MATCH_REV:
			x.rev = ad.Uint32()
		case unix.NFTA_MATCH_INFO:
			x.info = xt.Unknown(ad.Bytes())
		}
	}
	return x, ad.Err()
}

// udataComment reads the comment from a rule's user data, the TLVs of
// libnftnl (NFTNL_UDATA_RULE_COMMENT, type 0, a NUL-terminated string).
func udataComment(b []byte) string {
	for len(b) >= 2 {
		typ, n := b[0], int(b[1])
		if 2+n > len(b) {
			return ""
		}
		if typ == 0 {
			return strings.TrimRight(string(b[2:2+n]), "\x00")
		}
		b = b[2+n:]
	}
	return ""
}

// decodeElem reads one NFTA_LIST_ELEM of a set element list.
func decodeElem(ad *netlink.AttributeDecoder, e *elem) error {
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_SET_ELEM_KEY:
			ad.Nested(func(d *netlink.AttributeDecoder) error {
				for d.Next() {
					if d.Type() == unix.NFTA_DATA_VALUE {
						e.key = d.Bytes()
					}
				}
				return nil
			})
		case unix.NFTA_SET_ELEM_DATA:
			ad.Nested(func(d *netlink.AttributeDecoder) error {
				for d.Next() {
					switch d.Type() {
					case unix.NFTA_DATA_VALUE:
						e.data = d.Bytes()
					case unix.NFTA_DATA_VERDICT:
						d.Nested(func(v *netlink.AttributeDecoder) error {
							for v.Next() {
								if v.Type() == unix.NFTA_VERDICT_CHAIN {
									e.chain = v.String()
								}
							}
							return nil
						})
					}
				}
				return nil
			})
		}
	}
	return nil
}
