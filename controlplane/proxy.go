package controlplane

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// ProxyOptions configure a kube-proxy for one node. kube-proxy programs the
// host's packet filter, so it needs root (CAP_NET_ADMIN) and, in nftables
// mode, the nft tool; it waits until the Node object has status.addresses
// (see RegisterNode).
type ProxyOptions struct {
	NodeName    string // required: --hostname-override; the Node must exist
	Mode        string // default "nftables"
	ClusterCIDR string // pod addresses, default 10.244.0.0/16
	// IPTablesBackend picks the iptables that iptables mode runs: "nft"
	// (iptables-nft) or "legacy" (iptables-legacy), through a directory of
	// links named iptables, iptables-save … put first on its PATH; ""
	// leaves PATH alone (Debian's iptables is iptables-nft).
	IPTablesBackend string
	// ExtraArgs are appended to the generated flags (a later flag wins).
	ExtraArgs []string
	// Wait is how long to wait for kube-proxy's /healthz to answer; default
	// 60 s, negative to not wait.
	Wait time.Duration
}

type proxyProc struct {
	*process
	mode    string
	node    string
	metrics string // host:port of its metrics (and /proxyMode)
}

// cleanup removes the rules the stopped kube-proxy left in the host's
// packet filter (kube-proxy keeps them on exit so that traffic keeps
// flowing across its restarts).
func (p *proxyProc) cleanup() error {
	cmd := exec.Command(p.path, "--cleanup", "--proxy-mode="+p.mode)
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("kube-proxy --cleanup: %w: %s", err, out)
	}
	return nil
}

// StartKubeProxy starts a kube-proxy for o.NodeName against this control
// plane. Stop stops it with the rest and removes its rules (kube-proxy
// --cleanup). Its log is logs/kube-proxy-NODE.log. It runs in this
// process's network namespace, where it reaches the API server on
// loopback; two kube-proxies in one namespace fight over the same tables.
func (c *ControlPlane) StartKubeProxy(ctx context.Context, o ProxyOptions) error {
	if o.NodeName == "" {
		return fmt.Errorf("kube-proxy: NodeName is required")
	}
	if o.Mode == "" {
		o.Mode = "nftables"
	}
	if o.ClusterCIDR == "" {
		o.ClusterCIDR = "10.244.0.0/16"
	}
	if o.Wait == 0 {
		o.Wait = 60 * time.Second
	}
	bins, err := CheckBinaries(c.BinDir(), "kube-proxy")
	if err != nil {
		return err
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	healthz := "127.0.0.1:" + itoa(ports[0])
	args := []string{
		"--kubeconfig=" + c.kubecfg,
		"--hostname-override=" + o.NodeName,
		"--proxy-mode=" + o.Mode,
		"--cluster-cidr=" + o.ClusterCIDR,
		"--healthz-bind-address=" + healthz,
		"--metrics-bind-address=127.0.0.1:" + itoa(ports[1]),
		// Leave the host's conntrack table size alone.
		"--conntrack-max-per-core=0",
		"--v=2",
	}
	args = append(args, o.ExtraArgs...)
	name := "kube-proxy-" + o.NodeName
	p := &process{name: name, path: bins["kube-proxy"], args: args, log: filepath.Join(c.dir, "logs", name+".log")}
	if o.IPTablesBackend != "" {
		dir, err := iptablesBackendDir(filepath.Join(c.dir, "iptables-"+o.IPTablesBackend), o.IPTablesBackend)
		if err != nil {
			return err
		}
		p.env = []string{"PATH=" + dir + ":" + os.Getenv("PATH")}
	}
	c.mu.Lock()
	err = p.start()
	if err == nil {
		c.proxies = append(c.proxies, &proxyProc{process: p, mode: o.Mode, node: o.NodeName, metrics: "127.0.0.1:" + itoa(ports[1])})
	}
	c.mu.Unlock()
	if err != nil || o.Wait < 0 {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, o.Wait)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second}
	return waitFor(wctx, p, "kube-proxy /healthz", func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+healthz+"/healthz", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/healthz: %s", resp.Status)
		}
		return nil
	})
}

// ProxyMetrics is the metrics address (host:port) of the kube-proxy of
// node, "" when none runs.
func (c *ControlPlane) ProxyMetrics(node string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.proxies {
		if p.node == node {
			return p.metrics
		}
	}
	return ""
}

// StopKubeProxy stops the kube-proxy of node and removes its rules, so
// that another (in another mode) may start.
func (c *ControlPlane) StopKubeProxy(node string) error {
	c.mu.Lock()
	var p *proxyProc
	for i, q := range c.proxies {
		if q.node == node {
			p = q
			c.proxies = append(c.proxies[:i], c.proxies[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	if p == nil {
		return fmt.Errorf("no kube-proxy runs for node %s", node)
	}
	p.stop(10 * time.Second)
	return p.cleanup()
}

// iptablesBackendDir makes dir hold iptables, iptables-save,
// iptables-restore and their ip6tables siblings as links to the backend's
// commands (xtables-nft-multi and xtables-legacy-multi act on the name
// they are called by).
func iptablesBackendDir(dir, backend string) (string, error) {
	if backend != "nft" && backend != "legacy" {
		return "", fmt.Errorf("kube-proxy: iptables backend %q is neither nft nor legacy", backend)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for _, fam := range []string{"iptables", "ip6tables"} {
		for _, suffix := range []string{"", "-save", "-restore"} {
			target, err := exec.LookPath(fam + "-" + backend + suffix)
			if err != nil {
				return "", fmt.Errorf("kube-proxy's iptables %s backend: %w (Debian package iptables)", backend, err)
			}
			link := filepath.Join(dir, fam+suffix)
			_ = os.Remove(link)
			if err := os.Symlink(target, link); err != nil {
				return "", err
			}
		}
	}
	return dir, nil
}

// CleanupKubeProxy removes the rules a kube-proxy left in mode (kube-proxy
// --cleanup), with the iptables backend given ("nft", "legacy" or "" for
// the PATH's), the kube-proxy binary found in binDir as CheckBinaries does.
func CleanupKubeProxy(binDir, mode, backend string) error {
	bins, err := CheckBinaries(binDir, "kube-proxy")
	if err != nil {
		return err
	}
	p := &proxyProc{process: &process{name: "kube-proxy", path: bins["kube-proxy"]}, mode: mode}
	if backend != "" {
		dir, err := iptablesBackendDir(filepath.Join(os.TempDir(), "drainscope-iptables-"+backend), backend)
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		p.env = []string{"PATH=" + dir + ":" + os.Getenv("PATH")}
	}
	return p.cleanup()
}
