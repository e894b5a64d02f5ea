package dataplane

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// loadCapture reads a capture written by TestKubeProxyRules -capture, one
// slice of messages per datagram as the kernel sent them.
func loadCapture(t *testing.T, path string) [][]netlink.Message {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]netlink.Message
	last := -1
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		var m capturedMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s:%d: %v", path, n, err)
		}
		data, err := hex.DecodeString(m.Data)
		if err != nil {
			t.Fatalf("%s:%d: field data: %v", path, n, err)
		}
		if m.Datagram != last {
			out = append(out, nil)
			last = m.Datagram
		}
		out[len(out)-1] = append(out[len(out)-1], netlink.Message{
			Header: netlink.Header{Type: netlink.HeaderType(m.Type), Flags: netlink.HeaderFlags(m.Flags)},
			Data:   data,
		})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// The capture is a real kube-proxy v1.37.2 (nftables mode) creating its
// table, then programming Service dp/web (no affinity: an anonymous numgen
// map of ip . port) and dp/sticky (ClientIP affinity: a vmap of
// endpoint-… chains) with endpoints 10.244.0.11–13:8080, then two syncs
// each marking one more endpoint terminating (.11, then .12). Replayed
// through the decoder and the model, it must give each endpoint's entry
// and exit once, in that order, and end with what `nft -j list table`
// printed at the end of the same run.
func TestReplayKubeProxyCapture(t *testing.T) {
	dgrams := loadCapture(t, "testdata/"+captureFile)
	f, got := replay(t, dgrams)
	for _, c := range got {
		t.Logf("commit %d: added=%v %s %s (%s)", c.commit, c.Added, c.ServicePort, c.Addr, c.Chain)
	}
	checkReplayedSequence(t, got)
	// The capture holds each way kube-proxy writes a choice of endpoint:
	// at its end web has one endpoint left (a plain dnat) and sticky
	// one too (a vmap of endpoint chains, beside the affinity rule's goto).
	kinds := map[string]int{}
	for _, tb := range f.md.tables {
		for chain, hs := range tb.rules {
			sp, ok := parseServiceChain(chain)
			if !ok {
				continue
			}
			for _, r := range hs {
				kinds[sp.Name+" direct"] += len(r.direct)
				for _, v := range r.vmaps {
					if s := tb.sets[v]; s != nil {
						kinds[sp.Name+" vmap"] += len(s.elems)
					}
				}
			}
		}
	}
	if kinds["web direct"] != 1 || kinds["sticky vmap"] != 1 {
		t.Errorf("at the end of the capture: %v, want web's one dnat and sticky's vmap of 1", kinds)
	}
	listing, err := os.ReadFile("testdata/kube-proxy-v1.37.2.nft.json")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(f.md.flat()), endpointsFromJSON(t, listing); !slices.Equal(got, want) {
		t.Errorf("after the replay: %v\nnft -j list table: %v", got, want)
	}
}

// A replayed commit the snapshot already holds (its generation is not
// newer) changes nothing: the snapshot is taken after the monitor joins,
// so the first notifications may repeat it.
func TestReplaySkipsCommitsInTheSnapshot(t *testing.T) {
	dgrams := loadCapture(t, "testdata/"+captureFile)
	f := &follower{md: newModel()}
	var lastGen uint32
	for _, msgs := range dgrams {
		f.feed(msgs, quiet)
		for _, nm := range msgs {
			if m, _ := decode(nm); m.op == unix.NFT_MSG_NEWGEN {
				lastGen = m.gen
			}
		}
	}
	if lastGen == 0 {
		t.Fatal("no generation in the capture")
	}
	before := keys(f.md.flat())
	again := &follower{md: f.md, gen: lastGen}
	for _, msgs := range dgrams {
		for _, cs := range again.feed(msgs, quiet) {
			if len(cs) > 0 {
				t.Errorf("a commit older than the snapshot reported %v", cs)
			}
		}
	}
	if after := keys(f.md.flat()); !slices.Equal(before, after) {
		t.Errorf("replaying older commits changed the endpoints: %v → %v", before, after)
	}
}

func TestChainNames(t *testing.T) {
	for _, c := range []struct {
		name string
		sp   ServicePort
		ok   bool
	}{
		{"service-G72YLFXC-dp/web/tcp/http", ServicePort{"dp", "web", "tcp", "http"}, true},
		{"local-G72YLFXC-dp/web/udp/", ServicePort{"dp", "web", "udp", ""}, true},
		{"service-endpoints-check", ServicePort{}, false},
		{"external-G72YLFXC-dp/web/tcp/http", ServicePort{}, false},
		{"service-G72YLFXC-dp/web/icmp/http", ServicePort{}, false},
		{"service-G72YLFXC-dp/web/tcp/a-very-long-port...", ServicePort{}, false},
	} {
		sp, ok := parseServiceChain(c.name)
		if ok != c.ok || sp != c.sp {
			t.Errorf("parseServiceChain(%q) = %v, %v; want %v, %v", c.name, sp, ok, c.sp, c.ok)
		}
	}
	for _, c := range []struct {
		name string
		addr string
	}{
		{"endpoint-S4QWZIGO-dp/sticky/tcp/http__10.244.0.13/8080", "10.244.0.13:8080"},
		{"endpoint-ABCDEFGH-dp/v6/tcp/__fd00.10.244..5/80", "[fd00:10:244::5]:80"},
		{"endpoint-ABCDEFGH-dp/v6/tcp/p__notanaddress/80", ""},
	} {
		ep, ok := parseEndpointChain(c.name)
		if (c.addr == "") == ok || (ok && ep.Addr.String() != c.addr) {
			t.Errorf("parseEndpointChain(%q) = %v, %v; want %s", c.name, ep.Addr, ok, c.addr)
		}
	}
}

// readRule follows registers: the single-endpoint dnat kube-proxy writes
// (two immediates), and an IPv6 map lookup whose data is addr . port.
func TestReadRuleRegisters(t *testing.T) {
	one := &msg{exprs: []expr.Any{
		&expr.Immediate{Register: unix.NFT_REG_1, Data: []byte{10, 244, 0, 7}},
		&expr.Immediate{Register: unix.NFT_REG_2, Data: []byte{0x1f, 0x90}},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: unix.NFT_REG_1, RegProtoMin: unix.NFT_REG_2},
	}}
	if r := readRule(one); r == nil || len(r.direct) != 1 || r.direct[0].String() != "10.244.0.7:8080" {
		t.Errorf("single dnat: %+v", r)
	}
	v6 := &msg{exprs: []expr.Any{
		nil, // numgen
		&expr.Lookup{SetName: "__map3", SourceRegister: unix.NFT_REG_1, DestRegister: unix.NFT_REG_1, IsDestRegSet: true},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV6, RegAddrMin: unix.NFT_REG_1, RegProtoMin: unix.NFT_REG_2},
	}}
	r := readRule(v6)
	if r == nil || len(r.maps) != 1 || r.maps[0] != (mapRef{set: "__map3", addrOff: 0, addrLen: 16, portOff: 16}) {
		t.Fatalf("v6 map: %+v", r)
	}
	data := append(netip.MustParseAddr("fd00::5").AsSlice(), 0, 80, 0, 0)
	if a := mapAddr(data, r.maps[0]); a.String() != "[fd00::5]:80" {
		t.Errorf("v6 map element: %s", a)
	}
	if readRule(&msg{exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}}) != nil {
		t.Error("an accept rule was read as sending somewhere")
	}
}

// The same sequence with kube-proxy v1.37.2 in iptables mode on the
// nf_tables backend (iptables-nft 1.8.9): KUBE-SVC-/KUBE-SEP- chains whose
// comments, statistic and recent matches and DNAT targets are xtables
// compat expressions. Replayed, it must give each endpoint's entry and
// exit once, in order, with proxy=iptables, and end with what
// iptables-nft-save listed at the end of the same run.
func TestReplayKubeProxyIPTablesCapture(t *testing.T) {
	dgrams := loadCapture(t, "testdata/"+captureFileIPT)
	f, got := replay(t, dgrams)
	for _, c := range got {
		t.Logf("commit %d: added=%v %s %s (%s, %s)", c.commit, c.Added, c.ServicePort, c.Addr, c.Chain, c.Proxy)
		if c.Proxy != "iptables" || !strings.HasPrefix(c.Chain, "KUBE-SVC-") {
			t.Errorf("%s %s: proxy %q, chain %q", c.ServicePort, c.Addr, c.Proxy, c.Chain)
		}
	}
	checkReplayedSequence(t, got)
	if len(f.md.flat()) != 0 {
		t.Errorf("nftables-mode endpoints in an iptables-mode capture: %v", keys(f.md.flat()))
	}
	listing, err := os.ReadFile("testdata/kube-proxy-v1.37.2-iptables.save")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(f.md.xt.current), endpointsFromSave(t, listing, "testdata/kube-proxy-v1.37.2-iptables.save"); !slices.Equal(got, want) || len(want) != 2 {
		t.Errorf("after the replay: %v\niptables-nft-save: %v (want the two endpoints left)", got, want)
	}
}

// replayedChange is one change a replay reported, with the commit (1, 2,
// …) that reported it.
type replayedChange struct {
	commit int
	Change
}

// replay feeds a capture's datagrams through the decoder and a follower,
// as the watcher does, and returns the follower and the changes in order.
func replay(t *testing.T, dgrams [][]netlink.Message) (*follower, []replayedChange) {
	t.Helper()
	f := &follower{md: newModel()}
	var got []replayedChange
	commits := 0
	for _, msgs := range dgrams {
		for _, nm := range msgs {
			if _, err := decode(nm); err != nil {
				t.Errorf("message type %#x: %v", uint16(nm.Header.Type), err)
			}
		}
		for _, cs := range f.feed(msgs, quiet) {
			commits++
			for _, c := range cs {
				got = append(got, replayedChange{commits, c})
			}
		}
	}
	return f, got
}

// checkReplayedSequence checks the sequence both captures hold: Services
// dp/web and dp/sticky with endpoints 10.244.0.11–13:8080, then .11 and
// then .12 marked terminating. Each endpoint enters once; .11 and .12
// leave once each, .11 first and after it entered; .13 never leaves.
func checkReplayedSequence(t *testing.T, got []replayedChange) {
	t.Helper()
	addedAt := map[Endpoint]int{}
	removedAt := map[Endpoint]int{}
	for _, c := range got {
		m := removedAt
		if c.Added {
			m = addedAt
		}
		if _, dup := m[c.Endpoint]; dup {
			t.Errorf("%s %s reported twice (added=%v)", c.ServicePort, c.Addr, c.Added)
		}
		m[c.Endpoint] = c.commit
	}
	ep := func(svc, addr string) Endpoint {
		return Endpoint{ServicePort{"dp", svc, "tcp", "http"}, netip.MustParseAddrPort(addr)}
	}
	for _, svc := range []string{"web", "sticky"} {
		for _, a := range []string{"10.244.0.11:8080", "10.244.0.12:8080", "10.244.0.13:8080"} {
			if _, ok := addedAt[ep(svc, a)]; !ok {
				t.Errorf("%s %s: no entry reported", svc, a)
			}
		}
		first, ok1 := removedAt[ep(svc, "10.244.0.11:8080")]
		second, ok2 := removedAt[ep(svc, "10.244.0.12:8080")]
		if !ok1 || !ok2 {
			t.Errorf("%s: removals of .11 and .12: %v %v", svc, ok1, ok2)
		} else if first > second {
			t.Errorf("%s: .11 left in commit %d, after .12 in %d; .11 was marked terminating first", svc, first, second)
		}
		if first <= addedAt[ep(svc, "10.244.0.11:8080")] {
			t.Errorf("%s: .11 left before or as it entered", svc)
		}
		if _, ok := removedAt[ep(svc, "10.244.0.13:8080")]; ok {
			t.Errorf("%s: .13 stayed ready and was reported removed", svc)
		}
	}
	if len(removedAt) != 4 {
		t.Errorf("%d removals, want 4", len(removedAt))
	}
}
