// Package simnode plays the kubelet for the lab. It follows the Pod Lifecycle
// documentation wherever the kubelet does something observable: it registers a
// Node with addresses, binds pending pods to itself (the lab runs no
// scheduler), runs each container as a real process in the pod's own network
// namespace and in a cgroup whose path holds the pod UID, runs readiness
// probes and reports pod status, and on deletion runs the preStop hook, sends
// SIGTERM, waits out the grace period counted from before the hook, sends
// SIGKILL, records how each container terminated and finishes the pod by
// deleting it with a grace period of zero.
//
// It has no container runtime and no images: an image name maps to a
// program on this host (Config.Images).
package simnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/lab/cgroup"
	"github.com/drainscope/drainscope/lab/netns"
)

// Image is what a container image name means on this host.
type Image struct {
	Entrypoint []string // program and leading arguments; the container's args follow
	Env        []string // extra environment, KEY=value
}

// Config sets the node up.
type Config struct {
	Name      string
	Client    kubernetes.Interface
	Network   netns.Network
	Cgroups   cgroup.Tree
	Images    map[string]Image
	LogDir    string // container logs: <LogDir>/<namespace>_<pod>_<uid>/<container>.log
	Namespace string // manage the pods of this namespace only; "" for all
	Log       *slog.Logger
	// Record, when set, receives the node's own observations of what it
	// did to processes (signal sent, process exited), for hosts where the
	// kernel capture does not run. Events are sealed.
	Record func(event.Event)
	// Sandbox, when set, is told when a pod's network and cgroup come
	// into being (up true) and once they are gone, so a kernel capture can start and
	// stop watching them.
	Sandbox func(p PodInfo, up bool)
	// Version is reported as the kubelet version in the Node's status.
	Version string
	// KubeletPort, when set, serves the kubelet's port-forward endpoint
	// for the API server's pods/portforward on the node's address, and
	// the Node's status names it. ClientCA, when set, is the CA the API
	// server's client certificate (--kubelet-client-certificate) must be
	// signed by.
	KubeletPort int32
	ClientCA    string
}

// Node is the running lab node.
type Node struct {
	cfg  Config
	pool *netns.Pool
	log  *slog.Logger

	mu       sync.Mutex
	workers  map[types.UID]*podWorker
	finished map[types.UID]bool
	byIP     map[netip.Addr]*podWorker
	byNetNS  map[uint64]*podWorker
	wg       sync.WaitGroup
	stopping bool
}

// New checks cfg and returns a node that has not started yet.
func New(cfg Config) (*Node, error) {
	if cfg.Name == "" || cfg.Client == nil {
		return nil, errors.New("node: a name and a client are required")
	}
	if err := cfg.Network.Validate(); err != nil {
		return nil, err
	}
	if cfg.Cgroups.Mount == "" {
		return nil, errors.New("node: no cgroup tree")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.LogDir == "" {
		cfg.LogDir = os.TempDir()
	}
	if cfg.Version == "" {
		cfg.Version = "v1.37.2"
	}
	return &Node{
		cfg:      cfg,
		pool:     netns.NewPool(cfg.Network),
		log:      cfg.Log.With("node", cfg.Name),
		workers:  map[types.UID]*podWorker{},
		finished: map[types.UID]bool{},
		byIP:     map[netip.Addr]*podWorker{},
		byNetNS:  map[uint64]*podWorker{},
	}, nil
}

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// IP is the node's InternalIP: the bridge's address.
func (n *Node) IP() netip.Addr { return n.cfg.Network.Gateway.Addr() }

// Register creates the Node object, or takes over one of the same name, and
// reports it Ready with its addresses; kube-proxy waits for those.
func (n *Node) Register(ctx context.Context) error {
	nodes := n.cfg.Client.CoreV1().Nodes()
	want := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.cfg.Name,
			Labels: map[string]string{
				"kubernetes.io/hostname": n.cfg.Name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     runtime.GOARCH,
			},
		},
		Spec: corev1.NodeSpec{
			PodCIDR:  n.cfg.Network.PodCIDR().String(),
			PodCIDRs: []string{n.cfg.Network.PodCIDR().String()},
		},
	}
	got, err := nodes.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = nodes.Get(ctx, n.cfg.Name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("registering node %s: %w", n.cfg.Name, err)
	}
	got.Status = n.nodeStatus()
	if _, err := nodes.UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("reporting node %s status: %w", n.cfg.Name, err)
	}
	return nil
}

func (n *Node) nodeStatus() corev1.NodeStatus {
	now := metav1.Now()
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = strings.TrimSpace(string(b))
	}
	return corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "lab node"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "lab node"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "lab node"),
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "drainscope lab node is posting ready status"),
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: n.IP().String()},
			{Type: corev1.NodeHostName, Address: n.cfg.Name},
		},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: n.cfg.KubeletPort}},
		NodeInfo: corev1.NodeSystemInfo{
			KernelVersion:           kernel,
			OSImage:                 "drainscope lab",
			ContainerRuntimeVersion: runtimeName + "://dev",
			KubeletVersion:          n.cfg.Version,
			OperatingSystem:         "linux",
			Architecture:            runtime.GOARCH,
		},
	}
}

// runtimeName prefixes container IDs, as containerd:// or cri-o:// would.
const runtimeName = "drainscope-lab"

// Run watches pods until ctx ends, then kills whatever still runs (without
// telling the API server: the lab is going away) and cleans up after it.
func (n *Node) Run(ctx context.Context) error {
	var opts []informers.SharedInformerOption
	if n.cfg.Namespace != "" {
		opts = append(opts, informers.WithNamespace(n.cfg.Namespace))
	}
	if n.cfg.KubeletPort > 0 {
		stop, err := n.serveStreaming(ctx)
		if err != nil {
			return err
		}
		defer stop()
	}
	factory := informers.NewSharedInformerFactoryWithOptions(n.cfg.Client, 0, opts...)
	inf := factory.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { n.dispatch(ctx, obj) },
		UpdateFunc: func(_, obj any) { n.dispatch(ctx, obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				n.removed(p)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watching pods: %w", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		n.shutdown()
		return fmt.Errorf("pod informer did not sync: %w", ctx.Err())
	}
	n.log.Info("lab node running", "ip", n.IP(), "pod_cidr", n.cfg.Network.PodCIDR())
	<-ctx.Done()
	factory.Shutdown()
	n.shutdown()
	return nil
}

// dispatch routes a pod update: bind it if unscheduled, hand it to its
// worker if it is ours.
func (n *Node) dispatch(ctx context.Context, obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	switch p.Spec.NodeName {
	case "":
		if p.DeletionTimestamp == nil && (p.Spec.SchedulerName == "" || p.Spec.SchedulerName == corev1.DefaultSchedulerName) {
			go n.bind(ctx, p)
		}
		return
	case n.cfg.Name:
	default:
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopping || n.finished[p.UID] {
		return
	}
	w := n.workers[p.UID]
	if w == nil {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			return
		}
		w = newPodWorker(n, p)
		n.workers[p.UID] = w
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			w.run(ctx)
			n.forget(w)
		}()
	}
	w.update(p)
}

// bind assigns an unscheduled pod to this node, as the scheduler would.
func (n *Node) bind(ctx context.Context, p *corev1.Pod) {
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: n.cfg.Name},
	}
	err := n.cfg.Client.CoreV1().Pods(p.Namespace).Bind(ctx, b, metav1.CreateOptions{})
	switch {
	case err == nil:
		n.log.Debug("bound pod", "pod", p.Namespace+"/"+p.Name)
	case apierrors.IsConflict(err), apierrors.IsNotFound(err), ctx.Err() != nil:
		// Already bound by an earlier update, or gone.
	default:
		n.log.Warn("binding pod", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
}

// removed handles a pod that left the API server. If its worker is still
// running, the pod was force-deleted: stop it as the kubelet would.
func (n *Node) removed(p *corev1.Pod) {
	n.mu.Lock()
	w := n.workers[p.UID]
	n.mu.Unlock()
	if w != nil {
		w.gone()
	}
}

func (n *Node) forget(w *podWorker) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.workers, w.uid)
	n.finished[w.uid] = true
	for ip, x := range n.byIP {
		if x == w {
			delete(n.byIP, ip)
		}
	}
	for ino, x := range n.byNetNS {
		if x == w {
			delete(n.byNetNS, ino)
		}
	}
}

func (n *Node) indexNetwork(w *podWorker, ip netip.Addr, ino uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.byIP[ip] = w
	if ino != 0 {
		n.byNetNS[ino] = w
	}
}

// shutdown kills every pod's processes at once and removes their
// namespaces and cgroups.
func (n *Node) shutdown() {
	n.mu.Lock()
	n.stopping = true
	ws := make([]*podWorker, 0, len(n.workers))
	for _, w := range n.workers {
		ws = append(ws, w)
	}
	n.mu.Unlock()
	for _, w := range ws {
		w.abort()
	}
	n.wg.Wait()
}

// Pods returns a snapshot of the pods the node runs or ran last, by UID.
func (n *Node) Pods() []PodInfo {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]PodInfo, 0, len(n.workers))
	for _, w := range n.workers {
		out = append(out, w.info())
	}
	return out
}

// PodInfo describes one pod the node runs.
type PodInfo struct {
	Ref      event.PodRef
	Workload event.Workload
	IP       netip.Addr
	NetNS    uint64
	Cgroup   string
}

// PodByUID implements the eBPF collector's pod lookup.
func (n *Node) PodByUID(uid string) (event.PodRef, event.Workload, bool) {
	n.mu.Lock()
	w := n.workers[types.UID(uid)]
	n.mu.Unlock()
	if w == nil {
		return event.PodRef{}, event.Workload{}, false
	}
	i := w.info()
	return i.Ref, i.Workload, true
}

// PodByIP implements the eBPF collector's pod lookup.
func (n *Node) PodByIP(ip netip.Addr) (event.PodRef, event.Workload, bool) {
	n.mu.Lock()
	w := n.byIP[ip]
	n.mu.Unlock()
	if w == nil {
		return event.PodRef{}, event.Workload{}, false
	}
	i := w.info()
	return i.Ref, i.Workload, true
}

// PodByNetNS implements the eBPF collector's network namespace lookup.
func (n *Node) PodByNetNS(ino uint64) (event.PodRef, event.Workload, bool) {
	n.mu.Lock()
	w := n.byNetNS[ino]
	n.mu.Unlock()
	if w == nil {
		return event.PodRef{}, event.Workload{}, false
	}
	i := w.info()
	return i.Ref, i.Workload, true
}

// record hands an observation to Config.Record.
func (n *Node) record(e event.Event) {
	if n.cfg.Record == nil {
		return
	}
	e.Node = n.cfg.Name
	e.Source = event.SourceLab
	if e.Time == 0 {
		e.Time = time.Now().UnixNano()
	}
	e.Seal()
	n.cfg.Record(e)
}

// workloadOf resolves the pod's owner to its workload: a ReplicaSet's
// Deployment, or the direct controller.
func (n *Node) workloadOf(ctx context.Context, p *corev1.Pod) event.Workload {
	ref := metav1.GetControllerOf(p)
	if ref == nil {
		return event.Workload{}
	}
	if ref.Kind == "ReplicaSet" {
		rs, err := n.cfg.Client.AppsV1().ReplicaSets(p.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err == nil {
			if owner := metav1.GetControllerOf(rs); owner != nil {
				return event.Workload{Kind: owner.Kind, Name: owner.Name}
			}
		}
	}
	return event.Workload{Kind: ref.Kind, Name: ref.Name}
}
