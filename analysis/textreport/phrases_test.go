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

// A pod of several containers: the report names each and what it was, and
// puts a container's own SIGTERM and exit on its own rows, apart from the
// app's.
func TestContainerRows(t *testing.T) {
	const s = int64(1e9)
	tl := &analysis.PodTimeline{
		Deletion: 10 * s,
		Sigterm:  &analysis.SignalView{Time: 15 * s, Sender: "runc", Target: "sampleapp"},
		Exit:     &analysis.ExitView{Time: 20 * s, Comm: "sampleapp"},
		Containers: []analysis.ContainerView{
			{Name: "app", App: true, Sigterm: 15 * s, Exit: &analysis.ExitView{Time: 20 * s}},
			{Name: "proxy", Inbound: true, Sigterm: 10*s + 20e6, Exit: &analysis.ExitView{Time: 10*s + 50e6}},
			{Name: "istio-proxy", Role: event.ContainerRoleSidecar, Inbound: true},
			{ID: "0123456789abcdef0123", Exit: &analysis.ExitView{Time: 21 * s, Signal: "SIGKILL"}},
		},
	}
	var got []string
	for _, r := range timelineRows(tl) {
		got = append(got, r.text)
	}
	want := []string{
		"deletion observed, grace period 0 ms",
		"SIGTERM to container proxy (the inbound proxy)",
		"container proxy (the inbound proxy) exited with code 0",
		"SIGTERM from runc to sampleapp",
		"sampleapp exited with code 0",
		"container 0123456789ab exited by SIGKILL",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got, want := containersPhrase(tl), "containers: app (the app: serves the Service's port); proxy (the inbound proxy); istio-proxy (native sidecar, the inbound proxy); 0123456789ab"; !strings.HasPrefix(got, want) {
		t.Errorf("containers line %q, want it to begin %q", got, want)
	}
	if containersPhrase(&analysis.PodTimeline{}) != "" {
		t.Error("a containers line for a pod of one container")
	}
}

// A name that holds a markdown link or image, however escaped, stays text
// in the markdown report: no bracket is left unescaped, and the invisible
// characters and separators are shown as escapes.
func TestMarkdownNamesStayText(t *testing.T) {
	for _, name := range []string{
		"![x](http://attacker.invalid/pixel.png)",
		"[click](javascript:alert(1))",
		`\[x\](http://attacker.invalid)`,
		`\\[x\\](http://attacker.invalid)`,
		"pay\u200bment\u2028FORGED\ufeff",
	} {
		got := mdEscape(name)
		// Outside escapes: drop each escaped pair, then no bracket,
		// separator or invisible character may remain.
		bare := strings.NewReplacer(`\\`, "", `\[`, "", `\]`, "").Replace(got)
		if strings.ContainsAny(bare, "[]\u200b\u2028\ufeff") {
			t.Errorf("mdEscape(%q) = %q: a bracket or an invisible character left as it is", name, got)
		}
	}
	if got, want := mdEscape("pay\u200bment\u2028x"), `pay\\u200bment\\u2028x`; got != want {
		t.Errorf("mdEscape = %q, want %q", got, want)
	}
}
