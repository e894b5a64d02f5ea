package controlplane

import (
	"context"
	"fmt"
	"net/http"
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
	// ExtraArgs are appended to the generated flags (a later flag wins).
	ExtraArgs []string
	// Wait is how long to wait for kube-proxy's /healthz to answer; default
	// 60 s, negative to not wait.
	Wait time.Duration
}

type proxyProc struct {
	*process
	mode string
}

// cleanup removes the rules the stopped kube-proxy left in the host's
// packet filter (kube-proxy keeps them on exit so that traffic keeps
// flowing across its restarts).
func (p *proxyProc) cleanup() error {
	out, err := exec.Command(p.path, "--cleanup", "--proxy-mode="+p.mode).CombinedOutput()
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
	c.mu.Lock()
	err = p.start()
	if err == nil {
		c.proxies = append(c.proxies, &proxyProc{process: p, mode: o.Mode})
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
