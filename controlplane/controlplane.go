// Package controlplane runs a real Kubernetes control plane on this machine.
// It starts etcd, kube-apiserver and kube-controller-manager (and, when asked,
// kube-proxy), built at one pinned version by scripts/k8s-binaries.sh, as
// child processes on free loopback ports with certificates, keys and a token
// generated into a temporary directory. Tests use it to run the watcher
// against the real API server and the real EndpointSlice controller; the lab
// uses it as its cluster.
//
//	cp, err := controlplane.Start(ctx, controlplane.Options{})
//	if errors.Is(err, controlplane.ErrMissingBinaries) { ... run scripts/k8s-binaries.sh ... }
//	defer cp.Stop()
//	cp.EnsureNamespace(ctx, "app")                        // waits for its default ServiceAccount
//	cp.RegisterNode(ctx, controlplane.NodeOptions{Name: "node-a", InternalIP: "10.244.0.1"})
//	cs := cp.Client()                                     // or cp.Config(), cp.Kubeconfig()
//	cp.StartKubeProxy(ctx, controlplane.ProxyOptions{NodeName: "node-a"}) // root, nftables
//	cp.RestartAPIServer(ctx)                              // same address; watches break
//
// Components log to Dir()/logs/NAME.log (Logs returns a tail).
package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Version is the Kubernetes release the binaries are built from; it must
// match hack/k8sbin/go.mod.
const Version = "v1.37.2"

// EnvBinDir names the directory holding the binaries, overriding the cache.
const EnvBinDir = "DRAINSCOPE_K8S_BIN"

// Binaries lists the programs scripts/k8s-binaries.sh builds.
var Binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-proxy", "kubectl"}

// DefaultControllers are the kube-controller-manager controllers started by
// default: what Deployments, ReplicaSets, EndpointSlices and pods (their
// default ServiceAccount and its token) need, and the garbage collector so
// that deleting a Deployment removes its ReplicaSets and pods.
var DefaultControllers = []string{
	"deployment-controller", "replicaset-controller", "endpointslice-controller",
	"endpointslice-mirroring-controller", "serviceaccount-controller",
	"serviceaccount-token-controller", "root-ca-certificate-publisher-controller",
	"garbage-collector-controller", "namespace-controller",
}

// BinDir is where the binaries are looked for: $DRAINSCOPE_K8S_BIN, else
// ${DRAINSCOPE_CACHE:-$HOME/.cache/drainscope}/k8s/<Version>/bin, the
// directory scripts/k8s-binaries.sh prints.
func BinDir() string {
	if d := os.Getenv(EnvBinDir); d != "" {
		return d
	}
	cache := os.Getenv("DRAINSCOPE_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		cache = filepath.Join(home, ".cache", "drainscope")
	}
	return filepath.Join(cache, "k8s", Version, "bin")
}

// ErrMissingBinaries reports binaries that are not built; the message says
// how to build them.
var ErrMissingBinaries = errors.New("kubernetes binaries missing (run scripts/k8s-binaries.sh)")

// CheckBinaries returns the path of each named binary in dir (BinDir when
// empty), or an error wrapping ErrMissingBinaries.
func CheckBinaries(dir string, names ...string) (map[string]string, error) {
	if dir == "" {
		dir = BinDir()
	}
	if len(names) == 0 {
		names = Binaries
	}
	paths := make(map[string]string, len(names))
	var missing []string
	for _, n := range names {
		p := filepath.Join(dir, n)
		if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			missing = append(missing, n)
			continue
		}
		paths[n] = p
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s not found in %s", ErrMissingBinaries, strings.Join(missing, ", "), dir)
	}
	return paths, nil
}

// Options configure Start. The zero value starts etcd, kube-apiserver and
// kube-controller-manager with DefaultControllers in a new temporary
// directory that Stop removes.
type Options struct {
	BinDir string // default BinDir()
	// Dir holds certificates, kubeconfig, etcd data and logs. Empty: a new
	// temporary directory, removed by Stop unless KeepDir.
	Dir     string
	KeepDir bool

	ServiceCIDR string // default 10.96.0.0/16

	// Controllers for kube-controller-manager; nil means DefaultControllers.
	Controllers []string
	// NoControllerManager starts only etcd and kube-apiserver.
	NoControllerManager bool

	// APIServerArgs and ControllerManagerArgs are appended to the generated
	// flags (a later flag wins).
	APIServerArgs         []string
	ControllerManagerArgs []string

	// APIPortFreeOn are addresses where the API server's port must be
	// free as well: a relay will listen on that port there (the lab's
	// bridge address, which the kubernetes Service advertises). The port
	// is then chosen outside the kernel's ephemeral range, so that no
	// connection made meanwhile from those addresses can take it.
	APIPortFreeOn []netip.Addr

	// Durable makes etcd fsync; off by default because tests and the lab
	// throw the data away and fsync dominates write latency.
	Durable bool

	// Logger receives progress messages; nil discards them.
	Logger *slog.Logger
}

// ControlPlane is a running control plane. Its methods are safe for
// concurrent use.
type ControlPlane struct {
	opts     Options
	dir      string
	ownDir   bool
	bins     map[string]string
	sec      *secrets
	log      *slog.Logger
	etcdURL  string
	apiPort  int
	kubecfg  string
	restCfg  *rest.Config
	client   kubernetes.Interface
	mu       sync.Mutex
	etcd     *process
	api      *process
	kcm      *process
	proxies  []*proxyProc
	stopOnce sync.Once
}

// Start runs etcd, kube-apiserver and (unless disabled) kube-controller-
// manager, and returns once the API server is ready and, with the
// serviceaccount controller, the default namespace's default ServiceAccount
// exists. On error everything started is stopped again.
func Start(ctx context.Context, o Options) (cp *ControlPlane, err error) {
	need := []string{"etcd", "kube-apiserver"}
	if !o.NoControllerManager {
		need = append(need, "kube-controller-manager")
	}
	bins, err := CheckBinaries(o.BinDir, need...)
	if err != nil {
		return nil, err
	}
	if o.ServiceCIDR == "" {
		o.ServiceCIDR = "10.96.0.0/16"
	}
	if o.Controllers == nil {
		o.Controllers = DefaultControllers
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &ControlPlane{opts: o, bins: bins, log: log}
	if o.Dir == "" {
		d, err := os.MkdirTemp("", "drainscope-k8s-")
		if err != nil {
			return nil, fmt.Errorf("creating control-plane directory: %w", err)
		}
		c.dir, c.ownDir = d, !o.KeepDir
	} else {
		c.dir = o.Dir
	}
	for _, d := range []string{"pki", "logs", "etcd"} {
		if err := os.MkdirAll(filepath.Join(c.dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("creating control-plane directory: %w", err)
		}
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()

	svcIP, err := firstServiceIP(o.ServiceCIDR)
	if err != nil {
		return nil, err
	}
	if c.sec, err = writeSecrets(filepath.Join(c.dir, "pki"), svcIP); err != nil {
		return nil, fmt.Errorf("writing certificates: %w", err)
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdClient, etcdPeer := ports[0], ports[1]
	c.apiPort = ports[2]
	if len(o.APIPortFreeOn) > 0 {
		if c.apiPort, err = portFreeOn(o.APIPortFreeOn); err != nil {
			return nil, err
		}
	}
	c.etcdURL = "http://127.0.0.1:" + itoa(etcdClient)

	start := time.Now()
	if err := c.startEtcd(ctx, etcdClient, etcdPeer); err != nil {
		return nil, err
	}
	log.Info("etcd ready", "url", c.etcdURL, "after", time.Since(start).Round(time.Millisecond))

	c.restCfg = &rest.Config{
		Host:            "https://127.0.0.1:" + itoa(c.apiPort),
		BearerToken:     c.sec.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.sec.caPEM},
		QPS:             -1, // no client-side throttling: tests measure the server
		Burst:           -1,
	}
	c.kubecfg = filepath.Join(c.dir, "kubeconfig")
	if err := writeKubeconfig(c.kubecfg, c.restCfg.Host, c.sec); err != nil {
		return nil, err
	}
	if c.client, err = kubernetes.NewForConfig(c.restCfg); err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}

	c.api = &process{name: "kube-apiserver", path: bins["kube-apiserver"], args: c.apiServerArgs(),
		log: filepath.Join(c.dir, "logs", "kube-apiserver.log")}
	if err := c.startAPIServer(ctx); err != nil {
		return nil, err
	}
	log.Info("kube-apiserver ready", "url", c.restCfg.Host, "after", time.Since(start).Round(time.Millisecond))

	if !o.NoControllerManager {
		if err := c.startControllerManager(ctx); err != nil {
			return nil, err
		}
		log.Info("kube-controller-manager ready", "controllers", strings.Join(o.Controllers, ","), "after", time.Since(start).Round(time.Millisecond))
	}
	return c, nil
}

func (c *ControlPlane) startEtcd(ctx context.Context, clientPort, peerPort int) error {
	client := "http://127.0.0.1:" + itoa(clientPort)
	peer := "http://127.0.0.1:" + itoa(peerPort)
	args := []string{
		"--name=default",
		"--data-dir=" + filepath.Join(c.dir, "etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=default=" + peer,
		"--log-level=warn",
	}
	if !c.opts.Durable {
		args = append(args, "--unsafe-no-fsync")
	}
	c.etcd = &process{name: "etcd", path: c.bins["etcd"], args: args, log: filepath.Join(c.dir, "logs", "etcd.log")}
	if err := c.etcd.start(); err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return waitFor(wctx, c.etcd, "etcd health", func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, client+"/health", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("etcd /health: %s", resp.Status)
		}
		return nil
	})
}

func (c *ControlPlane) apiServerArgs() []string {
	pki := filepath.Join(c.dir, "pki")
	args := []string{
		"--etcd-servers=" + c.etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + itoa(c.apiPort),
		"--cert-dir=" + pki,
		"--tls-cert-file=" + c.sec.serverCert,
		"--tls-private-key-file=" + c.sec.serverKey,
		"--client-ca-file=" + c.sec.caCert,
		"--token-auth-file=" + c.sec.tokens,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + c.sec.saPub,
		"--service-account-signing-key-file=" + c.sec.saKey,
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=" + c.opts.ServiceCIDR,
		"--allow-privileged=true",
		// The apiserver would publish its own address (loopback) as the
		// kubernetes Service's endpoint, which EndpointSlices reject.
		"--endpoint-reconciler-type=none",
		// pods/portforward reaches a node at its InternalIP: the lab node
		// has no resolvable host name.
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-client-certificate=" + c.sec.kubeletClientCert,
		"--kubelet-client-key=" + c.sec.kubeletClientKey,
		"--profiling=false",
		"--v=1",
	}
	return append(args, c.opts.APIServerArgs...)
}

func (c *ControlPlane) startAPIServer(ctx context.Context) error {
	if err := c.api.start(); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	hc, err := c.httpClient()
	if err != nil {
		return err
	}
	return waitFor(wctx, c.api, "kube-apiserver /readyz", func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.restCfg.Host+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+c.sec.token)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	})
}

func (c *ControlPlane) httpClient() (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.sec.caPEM) {
		return nil, errors.New("parsing generated CA")
	}
	return &http.Client{
		Timeout:   3 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}, nil
}

func (c *ControlPlane) startControllerManager(ctx context.Context) error {
	args := []string{
		"--kubeconfig=" + c.kubecfg,
		"--authentication-kubeconfig=" + c.kubecfg,
		"--authorization-kubeconfig=" + c.kubecfg,
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--controllers=" + strings.Join(c.opts.Controllers, ","),
		"--service-account-private-key-file=" + c.sec.saKey,
		"--root-ca-file=" + c.sec.caCert,
		"--use-service-account-credentials=false",
		"--leader-elect=false",
		"--service-cluster-ip-range=" + c.opts.ServiceCIDR,
		"--v=1",
	}
	args = append(args, c.opts.ControllerManagerArgs...)
	c.kcm = &process{name: "kube-controller-manager", path: c.bins["kube-controller-manager"], args: args,
		log: filepath.Join(c.dir, "logs", "kube-controller-manager.log")}
	if err := c.kcm.start(); err != nil {
		return err
	}
	if !hasController(c.opts.Controllers, "serviceaccount") {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	return waitFor(wctx, c.kcm, "the default ServiceAccount", func(ctx context.Context) error {
		_, err := c.client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

func hasController(list []string, name string) bool {
	for _, n := range list {
		if n == name || n == name+"-controller" || n == "*" {
			return true
		}
	}
	return false
}

// Config returns a copy of the admin client configuration (bearer token,
// CA, no client-side rate limit).
func (c *ControlPlane) Config() *rest.Config { return rest.CopyConfig(c.restCfg) }

// Client is a clientset for Config.
func (c *ControlPlane) Client() kubernetes.Interface { return c.client }

// Kubeconfig is the path of an admin kubeconfig for kubectl and
// kube-proxy.
func (c *ControlPlane) Kubeconfig() string { return c.kubecfg }

// Host is the API server's URL (https://127.0.0.1:PORT). It stays the same
// across RestartAPIServer.
func (c *ControlPlane) Host() string { return c.restCfg.Host }

// EtcdURL is etcd's client URL.
func (c *ControlPlane) EtcdURL() string { return c.etcdURL }

// Dir holds the certificates (pki/), kubeconfig, etcd data and the
// components' logs (logs/NAME.log).
func (c *ControlPlane) Dir() string { return c.dir }

// CACert is the path of the CA that signed the API server's certificate.
func (c *ControlPlane) CACert() string { return c.sec.caCert }

// BinDir is the directory the binaries are taken from.
func (c *ControlPlane) BinDir() string { return filepath.Dir(c.bins["etcd"]) }

// Kubectl returns a kubectl command bound to this control plane.
func (c *ControlPlane) Kubectl(ctx context.Context, args ...string) (*exec.Cmd, error) {
	bins, err := CheckBinaries(c.BinDir(), "kubectl")
	if err != nil {
		return nil, err
	}
	return exec.CommandContext(ctx, bins["kubectl"], append([]string{"--kubeconfig=" + c.kubecfg}, args...)...), nil
}

// StopAPIServer stops kube-apiserver: every watch breaks and every request
// fails until StartAPIServer.
func (c *ControlPlane) StopAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.api.stop(30 * time.Second)
}

// StartAPIServer starts kube-apiserver again on the same port and waits for
// /readyz.
func (c *ControlPlane) StartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.startAPIServer(ctx)
}

// PauseAPIServer stops kube-apiserver's process (SIGSTOP) for d, then
// lets it go on (SIGCONT), as a node's freeze or a long GC pause does:
// connections stay open, nothing is answered meanwhile. It returns once
// the server runs again.
func (c *ControlPlane) PauseAPIServer(d time.Duration) error {
	c.mu.Lock()
	err := c.api.signal(syscall.SIGSTOP)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	time.Sleep(d) // not holding c.mu: Stop and the rest are not held up
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.api.signal(syscall.SIGCONT)
}

// RestartAPIServer stops and starts kube-apiserver. Its watch cache starts
// empty, so watchers that come back with an older resource version are told
// to relist.
func (c *ControlPlane) RestartAPIServer(ctx context.Context) error {
	if err := c.StopAPIServer(); err != nil {
		return err
	}
	return c.StartAPIServer(ctx)
}

// Stop stops every component (kube-proxy, controller manager, API server,
// etcd, in that order) and removes the directory unless it was given or
// KeepDir was set. It is safe to call more than once.
func (c *ControlPlane) Stop() {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, p := range c.proxies {
			p.stop(10 * time.Second)
			if err := p.cleanup(); err != nil {
				c.log.Error("removing kube-proxy's rules", "err", err)
			}
		}
		for _, p := range []*process{c.kcm, c.api, c.etcd} {
			if p != nil {
				p.stop(20 * time.Second)
			}
		}
		if c.ownDir {
			os.RemoveAll(c.dir)
		}
	})
}

// Logs returns the tail of a component's log ("etcd", "kube-apiserver",
// "kube-controller-manager", "kube-proxy-NODE"), for failing tests.
func (c *ControlPlane) Logs(name string, max int) string {
	p := &process{name: name, log: filepath.Join(c.dir, "logs", name+".log")}
	return p.tail(max)
}

// EnsureNamespace creates ns if needed and, when the serviceaccount
// controller runs, waits for its default ServiceAccount, without which the
// API server refuses pods.
func (c *ControlPlane) EnsureNamespace(ctx context.Context, ns string) error {
	_, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	if c.opts.NoControllerManager || !hasController(c.opts.Controllers, "serviceaccount") {
		return nil
	}
	// waitFor also notices kube-controller-manager exiting, and shows its log.
	return waitFor(ctx, c.kcm, "the default ServiceAccount in "+ns, func(ctx context.Context) error {
		_, err := c.client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// NodeOptions describe a Node object to register.
type NodeOptions struct {
	Name       string
	InternalIP string // status.addresses; kube-proxy waits for it
	PodCIDR    string // spec.podCIDR, e.g. 10.244.0.0/24
	Labels     map[string]string
}

// RegisterNode creates (or updates) a Ready Node with the given address, as
// a kubelet would register itself. The EndpointSlice controller leaves out
// pods whose node does not exist, and kube-proxy needs the node's address.
func (c *ControlPlane) RegisterNode(ctx context.Context, o NodeOptions) (*corev1.Node, error) {
	return RegisterNode(ctx, c.client, o)
}

// RegisterNode is ControlPlane.RegisterNode for any clientset.
func RegisterNode(ctx context.Context, cs kubernetes.Interface, o NodeOptions) (*corev1.Node, error) {
	labels := map[string]string{"kubernetes.io/hostname": o.Name, "kubernetes.io/os": "linux"}
	for k, v := range o.Labels {
		labels[k] = v
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: o.Name, Labels: labels},
		Spec:       corev1.NodeSpec{PodCIDR: o.PodCIDR},
	}
	if o.PodCIDR != "" {
		n.Spec.PodCIDRs = []string{o.PodCIDR}
	}
	created, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = cs.CoreV1().Nodes().Get(ctx, o.Name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("registering node %s: %w", o.Name, err)
	}
	now := metav1.Now()
	created.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "node registered by drainscope", LastHeartbeatTime: now, LastTransitionTime: now,
	}}
	created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: o.Name}}
	if o.InternalIP != "" {
		created.Status.Addresses = append(created.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: o.InternalIP})
	}
	updated, err := cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("setting node %s status: %w", o.Name, err)
	}
	return updated, nil
}

func firstServiceIP(cidr string) (string, error) {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		return "", fmt.Errorf("service CIDR %q: %w", cidr, err)
	}
	ip := n.IP.To16()
	out := make(net.IP, len(ip))
	copy(out, ip)
	out[len(out)-1]++
	return out.String(), nil
}

func writeKubeconfig(path, host string, s *secrets) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["drainscope"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: s.caPEM}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: s.token}
	cfg.Contexts["drainscope"] = &clientcmdapi.Context{Cluster: "drainscope", AuthInfo: "admin"}
	cfg.CurrentContext = "drainscope"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	return nil
}
