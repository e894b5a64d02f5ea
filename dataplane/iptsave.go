package dataplane

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"strings"
)

// parseSave reads the nat table of iptables-save's output (either
// backend) into the rules of the chains that matter, as the netlink
// decoder reads them: each rule keyed by its position. name is the source
// for error messages ("iptables-legacy-save", a file name).
func parseSave(r io.Reader, name string) (map[string]map[uint64]*xtRule, error) {
	out := map[string]map[uint64]*xtRule{}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	inNAT := false
	var n uint64
	for line := 1; sc.Scan(); line++ {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "*"):
			inNAT = l == "*"+xtTable
		case !inNAT || !strings.HasPrefix(l, "-A "):
		default:
			args, err := splitArgs(l)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: rule: %w", name, line, err)
			}
			chain := args[1]
			if !xtRelevant(chain) {
				continue
			}
			rule, err := saveRule(args[2:])
			if err != nil {
				return nil, fmt.Errorf("%s:%d: rule of chain %s: %w", name, line, chain, err)
			}
			if out[chain] == nil {
				out[chain] = map[uint64]*xtRule{}
			}
			n++
			out[chain][n] = rule
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// saveRule reads the options of one -A line that the model uses.
func saveRule(args []string) (*xtRule, error) {
	r := &xtRule{}
	target := ""
	for i := 0; i < len(args); i++ {
		next := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s without a value", args[i])
			}
			i++
			return args[i], nil
		}
		var err error
		switch args[i] {
		case "--comment":
			r.comment, err = next()
		case "-p", "--protocol":
			r.proto, err = next()
		case "-j", "--jump", "-g", "--goto":
			target, err = next()
		case "--to-destination":
			var v string
			if v, err = next(); err == nil {
				r.dnat, err = parseToDestination(v)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	if target != "DNAT" {
		r.jump = target
	}
	return r, nil
}

// parseToDestination reads DNAT's ADDR[:PORT] or [ADDR6]:PORT.
func parseToDestination(v string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(v); err == nil {
		return ap, nil
	}
	a, err := netip.ParseAddr(strings.Trim(v, "[]"))
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("--to-destination %q: not an address with or without a port", v)
	}
	return netip.AddrPortFrom(a, 0), nil
}

// splitArgs splits an iptables-save line as iptables-restore does: on
// blanks, with double quotes grouping and \" escaping a quote.
func splitArgs(l string) ([]string, error) {
	var out []string
	var b strings.Builder
	inQ, have := false, false
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case c == '\\' && i+1 < len(l) && l[i+1] == '"':
			b.WriteByte('"')
			i++
			have = true
		case c == '"':
			inQ, have = !inQ, true
		case (c == ' ' || c == '\t') && !inQ:
			if have {
				out = append(out, b.String())
				b.Reset()
				have = false
			}
		default:
			b.WriteByte(c)
			have = true
		}
	}
	if inQ {
		return nil, fmt.Errorf("unterminated quote")
	}
	if have {
		out = append(out, b.String())
	}
	if len(out) < 2 {
		return nil, fmt.Errorf("no chain")
	}
	return out, nil
}
