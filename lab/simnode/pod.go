package simnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/drainscope/drainscope/ebpf"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/lab/cgroup"
	"github.com/drainscope/drainscope/lab/netns"
)

// minimumGracePeriod is the kubelet's floor for the time between SIGTERM
// and SIGKILL once a preStop hook has used up the grace period.
const minimumGracePeriod = 2 * time.Second

// restartBackoff is the delay before restarting a container that exited on
// its own (the kubelet's initial crash-loop back-off).
const restartBackoff = 10 * time.Second

// podWorker owns one pod from binding to deletion, like the kubelet's pod
// worker: everything that changes the pod's processes happens on its
// goroutine; status reports go out from a second goroutine so that a long
// preStop hook never delays a readiness change.
type podWorker struct {
	n   *Node
	uid types.UID

	updated chan struct{} // a newer pod is in latest
	goneCh  chan struct{} // the pod left the API server
	abortCh chan struct{} // the lab is shutting down
	exits   chan *container
	dirty   chan struct{} // status changed
	once    struct{ gone, abort sync.Once }

	mu       sync.Mutex
	latest   *corev1.Pod
	phase    corev1.PodPhase
	sandbox  bool // network and cgroup set up
	started  time.Time
	ip       netip.Addr
	net      *netns.Pod
	netnsIno uint64
	podDir   string
	workload event.Workload
	ctrs     []*container

	writeMu sync.Mutex // one status write at a time
}

func newPodWorker(n *Node, p *corev1.Pod) *podWorker {
	return &podWorker{
		// latest is set before run can start: run reads it at once.
		n: n, uid: p.UID, latest: p,
		updated: make(chan struct{}, 1),
		goneCh:  make(chan struct{}),
		abortCh: make(chan struct{}),
		// One slot per container: a container has one exit pending at
		// most (it restarts only after run took the exit), so the
		// sender's non-blocking send never drops one.
		exits: make(chan *container, max(1, len(p.Spec.Containers))),
		dirty: make(chan struct{}, 1),
		phase: corev1.PodPending,
	}
}

func (w *podWorker) update(p *corev1.Pod) {
	w.mu.Lock()
	w.latest = p
	w.mu.Unlock()
	select {
	case w.updated <- struct{}{}:
	default:
	}
}

func (w *podWorker) gone()  { w.once.gone.Do(func() { close(w.goneCh) }) }
func (w *podWorker) abort() { w.once.abort.Do(func() { close(w.abortCh) }) }

func (w *podWorker) pod() *corev1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest
}

func (w *podWorker) markDirty() {
	select {
	case w.dirty <- struct{}{}:
	default:
	}
}

func (w *podWorker) info() PodInfo {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.latest
	ref := event.PodRef{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}
	if len(p.Spec.Containers) == 1 {
		ref.Container = p.Spec.Containers[0].Name
	}
	return PodInfo{Ref: ref, Workload: w.workload, IP: w.ip, NetNS: w.netnsIno, Cgroup: w.podDir}
}

func (w *podWorker) logger() *slog.Logger {
	p := w.pod()
	return w.n.log.With("pod", p.Namespace+"/"+p.Name)
}

// run is the pod's whole life on this node.
func (w *podWorker) run(ctx context.Context) {
	log := w.logger()
	statusCtx, stopStatus := context.WithCancel(context.WithoutCancel(ctx))
	statusDone := make(chan struct{})
	go func() { defer close(statusDone); w.statusLoop(statusCtx) }()
	defer func() {
		stopStatus()
		<-statusDone
		w.teardown()
	}()

	p := w.pod()
	if p.DeletionTimestamp != nil {
		// Deleted before it ever ran: nothing to stop.
		w.finish(ctx)
		return
	}
	wl := w.n.workloadOf(ctx, p)
	w.mu.Lock() // info reads it from other goroutines
	w.workload = wl
	w.mu.Unlock()
	if err := w.setupSandbox(ctx, p); err != nil {
		log.Warn("creating pod sandbox", "err", err)
		w.mu.Lock()
		for _, c := range w.ctrs {
			c.waiting, c.waitingMsg = "CreateContainerError", err.Error()
		}
		w.mu.Unlock()
		w.markDirty()
	} else {
		for _, c := range w.containers() {
			w.startContainer(ctx, c)
		}
	}
	probeCtx, stopProbes := context.WithCancel(ctx)
	defer stopProbes()
	for _, c := range w.containers() {
		go w.probeLoop(probeCtx, c)
	}

	restart := make(chan *container, 4)
	for {
		select {
		case <-w.updated:
			if p := w.pod(); p.DeletionTimestamp != nil {
				grace := gracePeriod(p)
				log.Info("pod deletion observed", "grace", grace)
				w.killPod(ctx, grace, stopProbes)
				w.finish(ctx)
				return
			}
		case <-w.goneCh:
			p := w.pod()
			log.Info("pod removed from the API server; stopping it", "grace", gracePeriod(p))
			w.killPod(ctx, gracePeriod(p), stopProbes)
			return
		case <-w.abortCh:
			w.killNow()
			return
		case <-ctx.Done():
			w.killNow()
			return
		case c := <-w.exits:
			w.markDirty()
			if shouldRestart(w.pod(), c) {
				log.Info("container exited; restarting after back-off", "container", c.spec.Name, "backoff", restartBackoff)
				go func() {
					select {
					case <-time.After(restartBackoff):
						restart <- c
					case <-probeCtx.Done():
					}
				}()
			}
		case c := <-restart:
			if w.pod().DeletionTimestamp == nil {
				w.mu.Lock()
				c.restarts++
				w.mu.Unlock()
				w.startContainer(ctx, c)
			}
		}
	}
}

func (w *podWorker) containers() []*container {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*container(nil), w.ctrs...)
}

// gracePeriod is what the kubelet uses for a deletion: the deletion's own
// grace period, else the pod spec's, else the API default of 30 s.
func gracePeriod(p *corev1.Pod) time.Duration {
	switch {
	case p.DeletionGracePeriodSeconds != nil:
		return time.Duration(*p.DeletionGracePeriodSeconds) * time.Second
	case p.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*p.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}

func shouldRestart(p *corev1.Pod, c *container) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	switch p.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return c.lastExitCode() != 0
	}
	return true
}

// setupSandbox gives the pod its address, network namespace and cgroup,
// as the runtime's RunPodSandbox and the CNI plugin would.
func (w *podWorker) setupSandbox(ctx context.Context, p *corev1.Pod) error {
	w.mu.Lock()
	for _, spec := range p.Spec.Containers {
		w.ctrs = append(w.ctrs, &container{mu: &w.mu, spec: spec, waiting: "ContainerCreating"})
	}
	w.mu.Unlock()
	w.markDirty()

	ip, err := w.n.pool.Get(string(p.UID))
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.ip = ip
	w.mu.Unlock()
	np, err := w.n.cfg.Network.AddPod(ctx, string(p.UID), ip)
	if err != nil {
		return err
	}
	ino, err := ebpf.NetNSInode(np.Path())
	if err != nil {
		return err
	}
	podDir := w.n.cfg.Cgroups.PodDir(string(p.UID), string(p.Status.QOSClass))
	if err := os.MkdirAll(podDir, 0o755); err != nil {
		return fmt.Errorf("creating pod cgroup: %w", err)
	}
	w.mu.Lock()
	w.net, w.netnsIno, w.podDir, w.sandbox = np, ino, podDir, true
	w.started = time.Now()
	w.mu.Unlock()
	w.n.indexNetwork(w, ip, ino)
	if w.n.cfg.Sandbox != nil {
		w.n.cfg.Sandbox(w.info(), true)
	}
	w.markDirty()
	return nil
}

// killPod stops every running container as the kubelet's killPod does, in
// parallel, then stops probing.
func (w *podWorker) killPod(ctx context.Context, grace time.Duration, stopProbes func()) {
	var wg sync.WaitGroup
	for _, c := range w.containers() {
		if !c.running() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.killContainer(ctx, c, grace)
		}()
	}
	wg.Wait()
	stopProbes()
	phase := terminalPhase(w.containers())
	w.mu.Lock()
	w.phase = phase
	for _, c := range w.ctrs {
		c.ready = false
	}
	w.mu.Unlock()
	w.markDirty()
}

// killContainer follows the Pod Lifecycle documentation: the preStop hook
// runs first and its time counts against the grace period; then SIGTERM;
// then SIGKILL when the grace period (at least two seconds after the hook)
// runs out.
func (w *podWorker) killContainer(ctx context.Context, c *container, grace time.Duration) {
	log := w.logger().With("container", c.spec.Name)
	start := time.Now()
	if h := preStop(c.spec); h != nil {
		hctx, cancel := context.WithTimeout(ctx, grace)
		err := w.runHook(hctx, c, h)
		cancel()
		log.Info("preStop hook finished", "took", time.Since(start).Round(time.Millisecond), "err", errString(err))
	}
	remaining := grace - time.Since(start)
	if remaining < minimumGracePeriod {
		remaining = minimumGracePeriod
	}
	if !c.running() {
		return
	}
	w.signal(c, syscall.SIGTERM)
	select {
	case <-c.exitedCh():
		return
	case <-time.After(remaining):
	case <-w.abortCh:
	}
	if c.running() {
		log.Info("grace period over; killing", "after", time.Since(start).Round(time.Millisecond))
		w.signal(c, syscall.SIGKILL)
		<-c.exitedCh()
	}
}

// killNow ends every process of the pod at once, for a lab shutdown.
func (w *podWorker) killNow() {
	for _, c := range w.containers() {
		w.mu.Lock()
		g := c.group
		w.mu.Unlock()
		if g != nil {
			_ = g.Kill()
		}
		if c.running() {
			select {
			case <-c.exitedCh():
			case <-time.After(5 * time.Second):
			}
		}
	}
}

// finish reports the final status and deletes the pod with a grace period
// of zero, as the kubelet's status manager does once nothing runs.
func (w *podWorker) finish(ctx context.Context) {
	p := w.pod()
	log := w.logger()
	if w.sandboxReady() {
		if err := w.writeStatus(ctx); err != nil && !apierrors.IsNotFound(err) {
			log.Warn("reporting final pod status", "err", err)
		}
	}
	zero := int64(0)
	uid := p.UID
	err := w.n.cfg.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero,
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		log.Warn("deleting finished pod", "err", err)
		return
	}
	log.Info("pod finished")
}

func (w *podWorker) sandboxReady() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sandbox
}

// teardown removes the sandbox: cgroups, network namespace, address.
func (w *podWorker) teardown() {
	w.killNow()
	w.mu.Lock()
	np, ip, podDir, ctrs := w.net, w.ip, w.podDir, w.ctrs
	w.mu.Unlock()
	for _, c := range ctrs {
		if c.group != nil {
			_ = c.group.Close()
		}
		if c.logf != nil {
			_ = c.logf.Close()
		}
	}
	log := w.logger()
	if podDir != "" {
		if err := cgroup.Remove(podDir, 5*time.Second); err != nil {
			log.Warn("removing pod cgroup", "err", err)
		}
	}
	if np != nil {
		if err := netns.RemovePod(context.Background(), np); err != nil {
			log.Warn("removing pod network", "err", err)
		}
		// Only now: a node agent watches a namespace until it is gone,
		// and the resets its sockets send until then are evidence.
		if w.n.cfg.Sandbox != nil {
			w.n.cfg.Sandbox(w.info(), false)
		}
	}
	if ip.IsValid() {
		w.n.pool.Put(ip)
	}
}

// statusLoop reports the pod's status whenever it changes.
func (w *podWorker) statusLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.dirty:
		}
		if err := w.writeStatus(ctx); err != nil && ctx.Err() == nil && !apierrors.IsNotFound(err) {
			w.logger().Warn("reporting pod status", "err", err)
			w.markDirty()
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// writeStatus sends the status built from the worker's state, on top of the
// newest pod the API server has.
func (w *podWorker) writeStatus(ctx context.Context) error {
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	pods := w.n.cfg.Client.CoreV1().Pods(w.pod().Namespace)
	first := true
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		base := w.pod()
		if !first {
			fresh, err := pods.Get(ctx, base.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if fresh.UID != w.uid {
				return apierrors.NewNotFound(corev1.Resource("pods"), base.Name)
			}
			base = fresh
		}
		first = false
		p := base.DeepCopy()
		w.mu.Lock()
		p.Status = w.buildStatus(p)
		w.mu.Unlock()
		got, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if err == nil {
			// Build the next write on this version unless the informer
			// already brought a newer one.
			w.mu.Lock()
			if newerVersion(got.ResourceVersion, w.latest.ResourceVersion) {
				w.latest = got
			}
			w.mu.Unlock()
		}
		return err
	})
}

// signal sends sig to the container's main process (SIGKILL to its whole
// cgroup, as a runtime stopping a container does) and records it.
func (w *podWorker) signal(c *container, sig syscall.Signal) {
	pid, comm := c.process()
	if pid == 0 {
		return
	}
	now := time.Now()
	var err error
	w.mu.Lock()
	g := c.group
	w.mu.Unlock()
	if sig == syscall.SIGKILL && g != nil {
		err = g.Kill()
	} else {
		err = syscall.Kill(pid, sig)
	}
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		w.logger().Warn("signalling container", "signal", sig, "err", err)
		return
	}
	w.logger().Info("signalled container", "container", c.spec.Name, "signal", sig.String(), "pid", pid)
	i := w.info()
	i.Ref.Container = c.spec.Name
	w.n.record(event.Event{
		Time: now.UnixNano(), Kind: event.Signal, Pod: i.Ref, Workload: i.Workload,
		PID: int32(pid), Comm: comm, PeerPID: int32(os.Getpid()), PeerComm: selfComm(),
		Signal: int32(sig),
	})
}

// newerVersion compares resource versions. They are opaque to clients, but
// etcd's are increasing integers; anything else counts as not newer.
func newerVersion(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && x > y
}

func selfComm() string {
	b, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		return filepath.Base(os.Args[0])
	}
	return string(trimNL(b))
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
