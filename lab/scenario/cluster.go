package scenario

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/ebpf"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/lab/cgroup"
	"github.com/drainscope/drainscope/lab/lock"
	"github.com/drainscope/drainscope/lab/netns"
	"github.com/drainscope/drainscope/lab/simnode"
	"github.com/drainscope/drainscope/store"
	"github.com/drainscope/drainscope/watcher"
)

// Lab-wide names.
const (
	NodeName  = "drainscope-lab"
	Namespace = "drainscope-lab"
	// AppImage is the sample service's image name; the lab node runs
	// Options.AppCommand for it.
	AppImage = "drainscope.dev/sampleapp:lab"
	// ShipperImage is the long-lived pods' log shipper's: a shell
	// (shipperEntrypoint) that runs the script its container's args give.
	ShipperImage = "drainscope.dev/log-shipper:lab"
	// KubeletPort is where the lab node serves the kubelet's
	// port-forward endpoint, on the bridge's address.
	KubeletPort = 10250
)

// Options configure the cluster.
type Options struct {
	BinDir string // Kubernetes binaries; controlplane.BinDir() when empty
	// AppCommand runs the sample service: the program and its leading
	// arguments (for the drainscope binary: itself, "lab", "sampleapp").
	AppCommand []string
	AppEnv     []string
	// Images are more images the lab node can run, beside the sample
	// service's (AppImage).
	Images map[string]simnode.Image
	Store  store.Store
	// NoKernel skips the eBPF capture; the lab node then records the
	// signals it sends and the exits it sees itself.
	NoKernel bool
	// WaitForLock waits for another lab to finish instead of failing.
	WaitForLock bool
	// ProxyArgs are appended to kube-proxy's flags, e.g.
	// --iptables-min-sync-period=3s (the nftables mode reads it too).
	ProxyArgs []string
	// ProxyMode is kube-proxy's mode: ProxyNFTables (the default),
	// ProxyIPTables (iptables-nft) or ProxyIPTablesLegacy.
	ProxyMode string
	Log       *slog.Logger
	Progress  io.Writer // one line per step; nil for none
	// Node is the kind of node: NodeProcess (the default) or NodeKubelet.
	Node string
	// Binary is a statically linked drainscope binary, for the images a
	// real node runs (the sample service and the sandbox); NodeKubelet only.
	Binary string
	// Sidecar builds and imports the sidecar profile's images too (the
	// proxy, the redirect's iptables; SidecarImages); NodeKubelet only.
	Sidecar bool
	// Shadow, when set, is a second eBPF capture beside the lab's own
	// (process node only), see ShadowKernel.
	Shadow *ShadowKernel
	// DirectWrites stores the agent's events (watcher, kernel,
	// dataplane) straight into Store. By default they go as an agent's
	// do with --server: through the server's relay, which the lab serves
	// on loopback, with the token of an agent pod on the lab node.
	DirectWrites bool
}

// Node kinds.
const (
	// NodeProcess is the lab's own node: each container a process.
	NodeProcess = "process"
	// NodeKubelet is a real kubelet with containerd and runc.
	NodeKubelet = "kubelet"
)

// Cluster is a running single-node lab cluster.
type Cluster struct {
	CP *controlplane.ControlPlane
	// Node is the lab's node: the process node (simnode) or the real one
	// (realnode), as Options.Node chose.
	Node   NodeDriver
	Client kubernetes.Interface

	opts     Options
	log      *slog.Logger
	lock     *lock.Lock
	net      netns.Network
	tree     cgroup.Tree
	rec      *recorder
	relay    *labRelay // nil with Options.DirectWrites
	kernel   *ebpf.Collector
	kernelCh chan error
	watchers []func()
	watcher  *watcher.Watcher
	stops    []func() // relays to stop at Down

	proxyMode  string
	stopLegacy func()      // the legacy backend's poller, when it runs
	quiet      atomic.Bool // tearing down: record nothing more
	downOnce   sync.Once
	// KernelErr says why the eBPF capture is not running, when it is not.
	KernelErr error
}

func (o *Options) progress(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

// Up brings the cluster up: checks the host, removes an earlier lab's
// leftovers, creates the pod network, starts the control plane, the lab
// node, kube-proxy and the recording agent. On error everything it started
// is torn down again.
func Up(ctx context.Context, o Options) (c *Cluster, err error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Store == nil {
		return nil, errors.New("scenario: no store")
	}
	switch o.Node {
	case "":
		o.Node = NodeProcess
	case NodeProcess, NodeKubelet:
	default:
		return nil, fmt.Errorf("scenario: unknown node kind %q (want %s or %s)", o.Node, NodeProcess, NodeKubelet)
	}
	node := newNodeDriver(o)
	if err := Preflight(o.BinDir); err != nil {
		return nil, err
	}
	if err := node.preflight(o); err != nil {
		return nil, err
	}
	c = &Cluster{opts: o, log: o.Log, net: netns.Default, proxyMode: cmp.Or(o.ProxyMode, ProxyNFTables), Node: node}
	if _, backend, err := proxyFlags(c.proxyMode); err != nil {
		return nil, err
	} else if backend != "" {
		if _, err := exec.LookPath("iptables-" + backend + "-restore"); err != nil {
			return nil, fmt.Errorf("kube-proxy's %s mode needs iptables-%s (Debian package iptables): %w", c.proxyMode, backend, err)
		}
	}
	if o.WaitForLock {
		c.lock, err = lock.Acquire(ctx)
	} else {
		c.lock, err = lock.TryAcquire()
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.Down()
		}
	}()

	if left, err := FindLeftovers(); err != nil {
		return c, err
	} else if !left.Empty() {
		o.progress("removing what an earlier lab left: %s", left)
		if _, err := Cleanup(ctx, true); err != nil {
			return c, fmt.Errorf("an earlier lab left things behind that could not be removed: %w\n(run 'drainscope lab cleanup' as root once the cause is fixed)", err)
		}
	}
	if c.tree, err = cgroup.Detect(); err != nil {
		return c, err
	}
	root, err := cgroup.Create(c.tree.Root())
	if err != nil {
		return c, err
	}
	root.Close()
	if err := c.net.Setup(ctx); err != nil {
		return c, err
	}
	o.progress("pod network: bridge %s %s, pods %s, services %s", c.net.Bridge, c.net.Gateway, c.net.PodCIDR(), c.net.ServiceCIDR)

	start := time.Now()
	o.progress("starting etcd, kube-apiserver, kube-controller-manager (%s) …", controlplane.Version)
	controllers, apiArgs := c.Node.controlPlane(c)
	c.CP, err = controlplane.Start(ctx, controlplane.Options{
		BinDir:        o.BinDir,
		Dir:           k8sDir,
		ServiceCIDR:   c.net.ServiceCIDR.String(),
		Controllers:   controllers,
		APIServerArgs: apiArgs,
		// The real node relays the API server's port on the bridge.
		APIPortFreeOn: []netip.Addr{c.net.Gateway.Addr()},
		Logger:        o.Log,
	})
	if err != nil {
		return c, fmt.Errorf("starting the control plane: %w", err)
	}
	c.Client = c.CP.Client()
	o.progress("control plane ready in %.1fs (API %s)", time.Since(start).Seconds(), c.CP.Host())
	var agentStore store.Store
	if !o.DirectWrites {
		if err := c.startRelay(ctx); err != nil {
			return c, fmt.Errorf("the agent's relay: %w", err)
		}
		agentStore = c.relay.client
	}
	c.rec = newRecorder(o.Store, agentStore, o.Log)

	if err := c.Node.up(ctx, c, start); err != nil {
		return c, err
	}
	return c, nil
}

func (c *Cluster) startKubeProxy(ctx context.Context) error {
	mode, backend, err := proxyFlags(c.proxyMode)
	if err != nil {
		return err
	}
	if err := claimTables(c.proxyMode); err != nil {
		return fmt.Errorf("recording the nftables tables: %w", err)
	}
	if err := c.CP.StartKubeProxy(ctx, controlplane.ProxyOptions{
		NodeName:        NodeName,
		Mode:            mode,
		IPTablesBackend: backend,
		ClusterCIDR:     c.net.PodCIDR().String(),
		// Leave the host's conntrack timeouts alone too, and in iptables
		// mode its route_localnet sysctl (localhost NodePorts).
		ExtraArgs: append([]string{"--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
			"--iptables-localhost-nodeports=false"}, c.opts.ProxyArgs...),
	}); err != nil {
		return fmt.Errorf("starting kube-proxy: %w\n%s", err, c.CP.Logs("kube-proxy-"+NodeName, 20))
	}
	if c.proxyMode == ProxyIPTablesLegacy {
		return c.startLegacy(ctx)
	}
	return nil
}

// Proxy modes of the lab's kube-proxy (Options.ProxyMode).
const (
	ProxyNFTables       = "nftables"
	ProxyIPTables       = "iptables" // the nf_tables backend, iptables-nft
	ProxyIPTablesLegacy = "iptables-legacy"
)

// ProxyModes lists the modes the lab runs kube-proxy in.
var ProxyModes = []string{ProxyNFTables, ProxyIPTables, ProxyIPTablesLegacy}

// proxyFlags are kube-proxy's --proxy-mode and the iptables backend of a
// lab proxy mode.
func proxyFlags(mode string) (string, string, error) {
	switch mode {
	case ProxyNFTables:
		return "nftables", "", nil
	case ProxyIPTables:
		return "iptables", "nft", nil
	case ProxyIPTablesLegacy:
		return "iptables", "legacy", nil
	}
	return "", "", fmt.Errorf("proxy mode %q: want one of %s", mode, strings.Join(ProxyModes, ", "))
}

// ProxyMode is the mode the lab's kube-proxy runs in.
func (c *Cluster) ProxyMode() string { return c.proxyMode }

// SwitchProxy stops kube-proxy, removes its rules and starts it again in
// another mode, on the same cluster: what a node whose kube-proxy is
// reconfigured goes through.
func (c *Cluster) SwitchProxy(ctx context.Context, mode string) error {
	if _, _, err := proxyFlags(mode); err != nil {
		return err
	}
	if c.stopLegacy != nil {
		c.stopLegacy()
		c.stopLegacy = nil
	}
	if err := c.CP.StopKubeProxy(NodeName); err != nil {
		return fmt.Errorf("stopping kube-proxy: %w", err)
	}
	c.proxyMode = mode
	return c.startKubeProxy(ctx)
}

func loaded(ps []ebpf.Program) int {
	n := 0
	for _, p := range ps {
		if p.Loaded {
			n++
		}
	}
	return n
}

// startKernel opens the eBPF capture and tracks the lab's whole cgroup tree.
func (c *Cluster) startKernel(ctx context.Context, pods ebpf.PodLookup) error {
	k, err := ebpf.Open(ebpf.Config{Node: NodeName, Pods: pods, Logger: c.log})
	if err != nil {
		return err
	}
	if root := k.CgroupRoot(); root != c.tree.Mount {
		k.Close()
		return fmt.Errorf("the capture uses the cgroup hierarchy at %s, the lab's pods live under %s", root, c.tree.Mount)
	}
	if _, err := k.TrackCgroupPath(c.tree.Root()); err != nil {
		k.Close()
		return err
	}
	c.kernel = k
	c.kernelCh = make(chan error, 1)
	go func() {
		// Attrs is the collector's shared, read-only map: the copy of
		// the event may keep it.
		c.kernelCh <- k.Run(context.WithoutCancel(ctx), func(e *event.Event) { c.rec.Add(*e) })
	}()
	c.recordCapabilities(k)
	return nil
}

// capabilitiesEvery is how often the lab records its capture's
// kernel_capabilities again, as the agent does (agent.capabilitiesEvery):
// more often than a report reads history before its window
// (analysis.Options.Lead), so that a long run's report sees one.
const capabilitiesEvery = 10 * time.Minute

// recordCapabilities records, now and every capabilitiesEvery until Down,
// the kernel_capabilities event the agent records for its capture: the
// node's kernel, the features the programs use, the evidence it cannot
// see, and that the programs mark containers' main processes. Without it
// a reader that reads the pods' lifecycle but not their connections (the
// web API's list, FindDisruptions) cannot tell a worker's SIGTERM and
// exit, unmarked, from the app's, and ends the pod there.
func (c *Cluster) recordCapabilities(k *ebpf.Collector) {
	var feats []string
	for _, f := range k.Features() {
		feats = append(feats, string(f))
	}
	feats = append(feats, event.FeatureMainProcess)
	attrs := map[string]string{
		event.AttrKernelRelease:  k.KernelRelease(),
		event.AttrKernelFeatures: strings.Join(feats, ","),
	}
	missing := strings.Join(ebpf.MissingEvidence(k.Evidence()), ",")
	record := func() {
		c.Record(event.Event{Time: time.Now().UnixNano(), Kind: event.KernelCapabilities, Node: NodeName,
			Source: event.SourceKernel, Reason: missing, Attrs: attrs})
	}
	record()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(capabilitiesEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				record()
			}
		}
	}()
	c.watchers = append(c.watchers, func() { close(stop); <-done })
}

// Record stores an event observed by the lab itself.
func (c *Cluster) Record(e event.Event) {
	if !c.quiet.Load() {
		c.rec.Add(e)
	}
}

// Sync waits until every event recorded so far is in the store.
func (c *Cluster) Sync() { c.rec.Sync() }

// Counts returns the stored events by kind.
func (c *Cluster) Counts() map[event.Kind]int { return c.rec.Counts() }

// Kernel reports whether the eBPF capture runs.
func (c *Cluster) Kernel() bool { return c.kernel != nil }

// Down stops everything and removes what the lab created. It is safe to
// call more than once and on a partly started cluster.
func (c *Cluster) Down() {
	c.downOnce.Do(func() {
		ctx := context.Background()
		// Stop recording first: the teardown's kills are not part of any
		// experiment and would only confuse a later report.
		c.quiet.Store(true)
		for _, stop := range c.watchers {
			stop()
		}
		c.stopShadow()
		if c.kernel != nil {
			c.kernel.Close()
			<-c.kernelCh
		}
		if c.rec != nil {
			c.rec.Close()
		}
		if c.relay != nil {
			c.relay.close()
		}
		if c.Node != nil {
			// The pods end at once: the lab is going away, there is
			// nothing to drain for.
			c.Node.down(ctx, c)
		}
		for _, stop := range c.stops {
			stop()
		}
		if c.CP != nil {
			c.CP.Stop()
		}
		if _, err := Cleanup(ctx, true); err != nil {
			c.log.Warn("cleaning up the lab", "err", err)
			fmt.Fprintf(os.Stderr, "drainscope lab: cleanup incomplete: %v\n", err)
		}
		if c.lock != nil {
			_ = c.lock.Release()
		}
	})
}

// removePods deletes every pod on the real node and waits, up to 45 s, for
// the kubelet to stop their containers and remove them: a pod still
// running when the kubelet and containerd stop (the server --keep started,
// a user's own) would leave its runc state and shim socket in the host's
// /run/containerd and its CNI result in /var/lib/cni.
func (c *Cluster) removePods(ctx context.Context) {
	if c.Client == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	pods := c.Client.CoreV1().Pods(metav1.NamespaceAll)
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) == 0 {
		return
	}
	// Their controllers first, or the controller manager makes new ones.
	apps := c.Client.AppsV1()
	seen := map[string]bool{}
	for _, p := range list.Items {
		if seen[p.Namespace] {
			continue
		}
		seen[p.Namespace] = true
		all := metav1.ListOptions{}
		_ = apps.Deployments(p.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, all)
		_ = apps.ReplicaSets(p.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, all)
		_ = apps.StatefulSets(p.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, all)
		_ = apps.DaemonSets(p.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, all)
	}
	grace := int64(1) // not 0: that removes the object without the kubelet
	for _, p := range list.Items {
		_ = c.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	}
	for {
		list, err := pods.List(ctx, metav1.ListOptions{})
		if err == nil && len(list.Items) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			n := -1
			if list != nil {
				n = len(list.Items)
			}
			c.log.Warn("tearing down: pods still on the real node", "pods", n, "err", err)
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}
