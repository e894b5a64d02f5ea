package scenario

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/lab/realnode"
	"github.com/drainscope/drainscope/lab/simnode"
)

// NodeDriver is the lab's one node, whichever plays it: the process node
// (simNode, lab/simnode: each container a process of the lab) or the real
// node (realNode, lab/realnode: a kubelet with containerd and runc). It
// holds everything the cluster does differently on the two; the rest of
// the lab (control plane, kube-proxy, watchers, runs, analysis) is the
// same on both, and TestLabNodeParity checks that the same runs get the
// same causes on each.
type NodeDriver interface {
	// Kind is NodeProcess or NodeKubelet.
	Kind() string
	// Description says which node ran the pods, for the report.
	Description() string
	// AppCommand is the sample service's command in its container: the
	// image's entrypoint on the real node, the lab's own command on the
	// process node.
	AppCommand() []string
	// MemoryLimits reports whether the node enforces a container's memory
	// limit (so that a container can be OOM-killed); the process node
	// does not.
	MemoryLimits() bool
	// StorageLimits reports whether the node's kubelet evicts a pod past
	// its ephemeral-storage limit (its eviction manager measures the
	// pod's local storage); the process node does not.
	StorageLimits() bool

	// preflight reports what the host or the options lack for the node.
	preflight(o Options) error
	// controlPlane is what the node needs of the control plane beyond the
	// defaults: more controllers and API server flags.
	controlPlane(c *Cluster) (controllers, apiArgs []string)
	// up starts the node, with the watchers and the kernel capture, and
	// kube-proxy, once the control plane runs.
	up(ctx context.Context, c *Cluster, start time.Time) error
	// down stops the node; its pods end at once. Safe on a node that
	// never started.
	down(ctx context.Context, c *Cluster)
}

// newNodeDriver is the node Options.Node names (already checked).
func newNodeDriver(o Options) NodeDriver {
	if o.Node == NodeKubelet {
		return &realNode{}
	}
	return &simNode{appCommand: o.AppCommand}
}

// simNode is the process node: lab/simnode plays the kubelet.
type simNode struct {
	n          *simnode.Node
	appCommand []string
	cancel     context.CancelFunc
	done       chan error
}

func (s *simNode) Kind() string { return NodeProcess }

func (s *simNode) Description() string {
	return "process (the lab's own node: each container a process in its own network namespace and cgroup)"
}

func (s *simNode) AppCommand() []string { return s.appCommand }

func (s *simNode) MemoryLimits() bool { return false }

func (s *simNode) StorageLimits() bool { return false }

func (s *simNode) preflight(o Options) error {
	if o.Sidecar {
		return errors.New("scenario: the sidecar images run on the real node only (--node kubelet)")
	}
	if len(o.AppCommand) == 0 {
		return errors.New("scenario: no command for the sample service")
	}
	return nil
}

func (s *simNode) controlPlane(*Cluster) ([]string, []string) { return nil, nil }

func (s *simNode) up(ctx context.Context, c *Cluster, start time.Time) error {
	o := c.opts
	// The log shipper's shell is the host's: the process node runs every
	// container's program from the host's file system.
	images := map[string]simnode.Image{AppImage: {Entrypoint: o.AppCommand, Env: o.AppEnv}, ShipperImage: {Entrypoint: shipperEntrypoint}}
	for name, img := range o.Images {
		images[name] = img
	}
	var sandboxMu sync.Mutex
	var sandboxHook func(simnode.PodInfo, bool)
	var err error
	s.n, err = simnode.New(simnode.Config{
		Name:      NodeName,
		Client:    c.Client,
		Network:   c.net,
		Cgroups:   c.tree,
		Images:    images,
		LogDir:    podLogDir,
		Namespace: Namespace,
		Log:       o.Log,
		Sandbox: func(p simnode.PodInfo, up bool) {
			sandboxMu.Lock()
			h := sandboxHook
			sandboxMu.Unlock()
			if h != nil {
				h(p, up)
			}
		},
		Record: func(e event.Event) {
			if c.kernel == nil && !c.quiet.Load() {
				c.rec.Add(e)
			}
		},
		Version: controlplane.Version,
		// pods/portforward (kubectl port-forward) reaches the pods here.
		KubeletPort: KubeletPort,
		ClientCA:    c.CP.CACert(),
	})
	if err != nil {
		return err
	}
	if err := s.n.Register(ctx); err != nil {
		return err
	}
	if err := c.CP.EnsureNamespace(ctx, Namespace); err != nil {
		return err
	}

	if !o.NoKernel {
		if err := c.startKernel(ctx, s.n); err != nil {
			c.KernelErr = err
			o.progress("kernel capture off: %v (the lab node records signals and exits itself)", err)
		} else {
			sandboxMu.Lock()
			sandboxHook = func(p simnode.PodInfo, up bool) {
				if p.NetNS == 0 {
					return
				}
				if up {
					_ = c.kernel.TrackNetNS(p.NetNS)
				} else {
					_ = c.kernel.UntrackNetNS(p.NetNS)
				}
				c.shadowNetNS(p.NetNS, up)
			}
			sandboxMu.Unlock()
			if err := c.startShadow(ctx, s.n); err != nil {
				return err
			}
			o.progress("kernel capture on: %d programs, tracking cgroup %s", loaded(c.kernel.Programs()), c.tree.Root())
		}
	} else {
		c.KernelErr = errors.New("turned off")
	}
	if err := c.startWatchers(ctx); err != nil {
		return err
	}

	nodeCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel, s.done = cancel, make(chan error, 1)
	go func() { s.done <- s.n.Run(nodeCtx) }()

	if err := c.startKubeProxy(ctx); err != nil {
		return err
	}
	o.progress("lab node %s and kube-proxy (%s) running, %.1fs after start", NodeName, c.proxyMode, time.Since(start).Seconds())
	return nil
}

func (s *simNode) down(context.Context, *Cluster) {
	if s.cancel != nil {
		// The node kills the pods' processes at once.
		s.cancel()
		<-s.done
	}
}

// realNode is the real node: lab/realnode runs containerd and the kubelet.
type realNode struct {
	n *realnode.Node
}

func (r *realNode) Kind() string { return NodeKubelet }

func (r *realNode) Description() string {
	runtime := "not started"
	if r.n != nil {
		runtime = r.n.Runtime()
	}
	return "kubelet (real: " + runtime + ", runc, CNI bridge)"
}

func (r *realNode) AppCommand() []string { return slices.Clone(appEntrypoint) }

func (r *realNode) MemoryLimits() bool { return true }

func (r *realNode) StorageLimits() bool { return true }

// kubeletLog is the real kubelet's last log lines that match, for an
// error that its log explains; "" on the process node.
func (c *Cluster) kubeletLog(match string, lines int) string {
	r, ok := c.Node.(*realNode)
	if !ok || r.n == nil {
		return ""
	}
	var out []string
	for _, l := range strings.Split(r.n.Logs("kubelet", 5000), "\n") {
		if strings.Contains(strings.ToLower(l), match) {
			out = append(out, l)
		}
	}
	return strings.Join(out[max(len(out)-lines, 0):], "\n")
}

func (r *realNode) preflight(o Options) error {
	if err := PreflightKubelet(o.BinDir, o.Binary); err != nil {
		return err
	}
	if o.Sidecar {
		return PreflightSidecar()
	}
	return nil
}

func (r *realNode) controlPlane(c *Cluster) ([]string, []string) {
	// The chart's agent is a DaemonSet.
	controllers := append(slices.Clone(controlplane.DefaultControllers), "daemonset-controller")
	// Pods reach the API server through the kubernetes Service, whose
	// endpoint is the advertised address: the bridge's, relayed to the
	// loopback address the API server listens on (upKubelet).
	apiArgs := []string{"--advertise-address=" + c.net.Gateway.Addr().String(), "--endpoint-reconciler-type=lease"}
	return controllers, apiArgs
}

func (r *realNode) up(ctx context.Context, c *Cluster, start time.Time) error {
	if err := c.CP.EnsureNamespace(ctx, Namespace); err != nil {
		return err
	}
	return c.upKubelet(ctx, r, start)
}

func (r *realNode) down(ctx context.Context, c *Cluster) {
	if r.n != nil {
		c.removePods(ctx)
		r.n.Stop()
	}
}
