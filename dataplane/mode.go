package dataplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/drainscope/drainscope/event"
)

// Mode is how a node's proxy routes Services, as far as the agent can
// tell, and whether its rule changes are recorded.
type Mode struct {
	// Proxy is event.ProxyNFTables, event.ProxyIPTables (nf_tables
	// backend), event.ProxyIPTablesLegacy, "ipvs", or "" when no
	// kube-proxy rules were found.
	Proxy string
	// Recorded says whether drainscope reads this mode's rule changes.
	Recorded bool
	// Evidence is how the mode was told, and for a mode not recorded, why.
	Evidence string
}

// ModeOptions say where to look.
type ModeOptions struct {
	// Metrics is kube-proxy's metrics address (its /proxyMode);
	// DefaultKubeProxyMetrics when empty, "-" to not ask.
	Metrics string
	// LegacySave prints a legacy table: default iptables-legacy-save.
	LegacySave string
}

// DetectMode tells the node's proxy mode from kube-proxy's own answer
// (GET /proxyMode on its metrics port) when it is reachable, and from the
// rules present: kube-proxy's nftables table "kube-proxy", a KUBE-SERVICES
// chain in iptables-nft's nat table or in the legacy one, and the
// KUBE-IPTABLES-HINT chain the kubelet writes in the mangle table of the
// backend it uses.
func DetectMode(ctx context.Context, o ModeOptions) Mode {
	if o.Metrics == "" {
		o.Metrics = DefaultKubeProxyMetrics
	}
	if o.LegacySave == "" {
		o.LegacySave = "iptables-legacy-save"
	}
	var ev []string
	said := ""
	if o.Metrics != "-" {
		if m, err := askProxyMode(ctx, o.Metrics); err == nil {
			said = m
			ev = append(ev, fmt.Sprintf("kube-proxy's /proxyMode says %s", m))
		} else {
			ev = append(ev, fmt.Sprintf("kube-proxy's /proxyMode at %s did not answer", o.Metrics))
		}
	}
	nftTable, nftChains, nftErr := nftKubeChains()
	if nftErr != nil {
		ev = append(ev, "nftables unreadable: "+nftErr.Error())
	}
	legacy, hintLegacy, legacyErr := legacyKubeChains(ctx, o.LegacySave)
	if legacyErr != nil {
		ev = append(ev, "legacy iptables unreadable: "+legacyErr.Error())
	}
	hasNFT := nftChains["nat KUBE-SERVICES"]
	hintNFT := nftChains["mangle KUBE-IPTABLES-HINT"]
	if nftTable {
		ev = append(ev, "nftables table kube-proxy present")
	}
	if hasNFT {
		ev = append(ev, "KUBE-SERVICES in iptables-nft's nat table")
	}
	if legacy {
		ev = append(ev, "KUBE-SERVICES in the legacy nat table")
	}
	switch {
	case hintNFT:
		ev = append(ev, "KUBE-IPTABLES-HINT in iptables-nft's mangle table")
	case hintLegacy:
		ev = append(ev, "KUBE-IPTABLES-HINT in the legacy mangle table")
	}
	m := Mode{}
	switch {
	case said == "nftables" || (said == "" && nftTable && !hasNFT && !legacy):
		m = Mode{Proxy: event.ProxyNFTables, Recorded: nftErr == nil}
	case said == "iptables" || (said == "" && (hasNFT || legacy)):
		switch {
		case hasNFT && !legacy, !legacy && hintNFT:
			m = Mode{Proxy: event.ProxyIPTables, Recorded: nftErr == nil}
		case legacy && !hasNFT, !hasNFT && hintLegacy:
			m = Mode{Proxy: event.ProxyIPTablesLegacy, Recorded: legacyErr == nil}
		case hasNFT && legacy:
			// Both backends hold kube-proxy's chains: one is stale. The
			// kubelet's hint names the backend the node uses.
			if hintLegacy && !hintNFT {
				m = Mode{Proxy: event.ProxyIPTablesLegacy, Recorded: true}
			} else {
				m = Mode{Proxy: event.ProxyIPTables, Recorded: true}
			}
			ev = append(ev, "both backends hold KUBE-SERVICES: both are read")
		default:
			m = Mode{Proxy: event.ProxyIPTables}
			ev = append(ev, "no KUBE-SERVICES chain yet in either backend")
		}
	case said == "ipvs":
		m = Mode{Proxy: "ipvs"}
		ev = append(ev, "IPVS mode is not read: drainscope does not decode IPVS virtual servers")
	case said != "":
		m = Mode{Proxy: said}
		ev = append(ev, "a proxy mode drainscope does not read")
	default:
		ev = append(ev, "no kube-proxy rules found: the node's Services are routed by something else (a kube-proxy replacement such as Cilium's) or kube-proxy has not synced yet")
	}
	m.Evidence = strings.Join(ev, "; ")
	return m
}

func askProxyMode(ctx context.Context, addr string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/proxyMode", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("/proxyMode: %s", resp.Status)
	}
	return strings.TrimSpace(string(b)), nil
}

// nftKubeChains reports whether kube-proxy's nftables table exists and
// which of the chains that tell the iptables-nft backend exist, as
// "table chain".
func nftKubeChains() (table bool, chains map[string]bool, err error) {
	chains = map[string]bool{}
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return false, chains, err
	}
	defer c.Close()
	req, _ := request(unix.NFT_MSG_GETCHAIN, unix.NFPROTO_IPV4, netlink.Dump|netlink.Acknowledge, nil)
	msgs, err := c.Execute(req)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return false, chains, fmt.Errorf("listing nftables chains: %w", err)
	}
	for _, nm := range msgs {
		m, err := decode(nm)
		if err != nil {
			continue
		}
		if m.table == Table {
			table = true
		}
		if m.chain == xtServicesChain || m.chain == "KUBE-IPTABLES-HINT" {
			chains[m.table+" "+m.chain] = true
		}
	}
	return table, chains, nil
}

// legacyKubeChains looks for KUBE-SERVICES in the legacy nat table and
// KUBE-IPTABLES-HINT in the legacy mangle table. A table the kernel does
// not list in /proc/net/ip_tables_names is not read (reading it would
// load it).
func legacyKubeChains(ctx context.Context, save string) (services, hint bool, err error) {
	names, err := os.ReadFile("/proc/net/ip_tables_names")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, false, nil // no legacy iptables in this kernel
		}
		return false, false, err
	}
	loaded := strings.Fields(string(names))
	has := func(t, chain string) (bool, error) {
		if !contains(loaded, t) {
			return false, nil
		}
		out, err := exec.CommandContext(ctx, save, "-t", t).Output()
		if err != nil {
			return false, fmt.Errorf("%s -t %s: %w", save, t, err)
		}
		return bytes.Contains(out, []byte("\n:"+chain+" ")), nil
	}
	if services, err = has("nat", xtServicesChain); err != nil {
		return false, false, err
	}
	hint, err = has("mangle", "KUBE-IPTABLES-HINT")
	return services, hint, err
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
