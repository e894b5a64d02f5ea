package textreport

import (
	"strings"
	"testing"

	"github.com/drainscope/drainscope/analysis"
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
