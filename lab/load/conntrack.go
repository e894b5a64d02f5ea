package load

import (
	"bufio"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// ConntrackFile is the kernel's connection tracking table in text form.
const ConntrackFile = "/proc/net/nf_conntrack"

// ConntrackBackend finds where kube-proxy's DNAT sent the connection from
// local to remote, by reading the kernel's connection tracking table: the
// reply direction's source is the pod. It serves as Config.Backend for a
// request that failed before any response named its pod (a refused
// connection keeps its entry for about ten seconds after the RST).
func ConntrackBackend(local, remote netip.AddrPort) (netip.AddrPort, bool) {
	f, err := os.Open(ConntrackFile)
	if err != nil {
		return netip.AddrPort{}, false
	}
	defer f.Close()
	return findReplySource(f, local, remote)
}

// findReplySource scans conntrack lines such as
//
//	ipv4 2 tcp 6 9 CLOSE src=10.244.0.1 dst=10.96.0.10 sport=40000 dport=80 src=10.244.0.7 dst=10.244.0.1 sport=8080 dport=40000 mark=0 zone=0 use=2
//
// for the original tuple local→remote and returns the reply's source.
func findReplySource(r io.Reader, local, remote netip.AddrPort) (netip.AddrPort, bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, " tcp ") {
			continue
		}
		var srcs, dsts, sports, dports []string
		for _, f := range strings.Fields(line) {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				continue
			}
			switch k {
			case "src":
				srcs = append(srcs, v)
			case "dst":
				dsts = append(dsts, v)
			case "sport":
				sports = append(sports, v)
			case "dport":
				dports = append(dports, v)
			}
		}
		if len(srcs) < 2 || len(dsts) < 1 || len(sports) < 2 || len(dports) < 1 {
			continue
		}
		if !matches(srcs[0], sports[0], local) || !matches(dsts[0], dports[0], remote) {
			continue
		}
		a, err := netip.ParseAddr(srcs[1])
		if err != nil {
			continue
		}
		p, err := strconv.ParseUint(sports[1], 10, 16)
		if err != nil {
			continue
		}
		return netip.AddrPortFrom(a, uint16(p)), true
	}
	return netip.AddrPort{}, false
}

func matches(addr, port string, want netip.AddrPort) bool {
	a, err := netip.ParseAddr(addr)
	if err != nil || a != want.Addr() {
		return false
	}
	p, err := strconv.ParseUint(port, 10, 16)
	return err == nil && uint16(p) == want.Port()
}
