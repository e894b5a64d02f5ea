package textreport

import (
	"strings"
	"testing"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
)

func TestProxyLines(t *testing.T) {
	got := ProxyLines([]analysis.NodeProxy{
		{Node: "a", Mode: "iptables", Recorded: true},
		{Node: "b", Mode: "iptables", Recorded: true},
		{Node: "c", Mode: "nftables", Recorded: true},
		{Node: "d", Mode: "ipvs", Evidence: "kube-proxy's /proxyMode says ipvs; IPVS mode is not read"},
		{Node: "e", Mode: "", Evidence: "no kube-proxy rules found"},
	})
	want := []string{
		"proxy rules recorded: kube-proxy iptables (nf_tables backend) on 2 nodes, kube-proxy nftables on 1 node",
		"proxy of d: kube-proxy IPVS, not recorded: kube-proxy's /proxyMode says ipvs; IPVS mode is not read",
		"proxy of e: no kube-proxy rules found, not recorded: no kube-proxy rules found",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The lag line names each proxy whose lag was measured, a mesh's envoy as
// well as kube-proxy's modes.
func TestLagLineNamesTheProxy(t *testing.T) {
	got := LagLine([]analysis.NodeLag{
		{Node: "node-a", Proxy: "envoy", Samples: 1, P50: 200e6, P99: 200e6, Max: 200e6},
		{Node: "node-b", Proxy: event.ProxyNFTables, Samples: 3, P50: 50e6, P99: 90e6, Max: 90e6},
	})
	if want := "(measured, envoy, kube-proxy nftables)"; !strings.Contains(got, want) {
		t.Errorf("lag line %q, want it to say %q", got, want)
	}
	if LagLine(nil) != "" {
		t.Error("a lag line with no lag measured")
	}
}
