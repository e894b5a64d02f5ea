package controlplane

import (
	"context"
	"fmt"
	"net/http"
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

// StartKubeProxy starts a kube-proxy for o.NodeName against this control
// plane. Stop stops it with the rest. Its log is logs/kube-proxy-NODE.log.
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
		c.proxies = append(c.proxies, p)
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
