package simnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"golang.org/x/sys/unix"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/lab/cgroup"
)

// container is one container of a pod and its current process. Fields
// that change while the pod runs are guarded by the worker's mu.
type container struct {
	mu   *sync.Mutex // the worker's
	spec corev1.Container

	id         string // 64 hex digits, new for every start
	group      *cgroup.Group
	logf       *os.File
	cmd        *exec.Cmd
	pid        int
	comm       string
	startedAt  time.Time
	exited     chan struct{} // closed when the current process has exited
	state      *os.ProcessState
	finishedAt time.Time
	restarts   int
	ready      bool
	waiting    string // reason while not running (ContainerCreating, CrashLoopBackOff …)
	waitingMsg string
	lastTerm   *corev1.ContainerStateTerminated
}

func (c *container) running() bool {
	c.mu.Lock()
	ch := c.exited
	c.mu.Unlock()
	return ch != nil && !isClosed(ch)
}

// exitedCh is closed once the current process has exited (at once if none
// was started).
func (c *container) exitedCh() <-chan struct{} {
	c.mu.Lock()
	ch := c.exited
	c.mu.Unlock()
	if ch == nil {
		ch = make(chan struct{})
		close(ch)
	}
	return ch
}

func (c *container) process() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pid, c.comm
}

// lastExitCode is exitCode for callers not holding the lock.
func (c *container) lastExitCode() int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exitCode()
}

// exitCode is the code the kubelet reports: the exit status, or 128 plus
// the signal that ended the process. Call with the lock held.
func (c *container) exitCode() int32 {
	if c.state == nil {
		return 0
	}
	if ws, ok := c.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int32(ws.Signal())
	}
	return int32(c.state.ExitCode())
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func newContainerID() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startContainer runs the container's process in the pod's network
// namespace and in a fresh container cgroup. A failure leaves the
// container waiting with the reason, as a runtime error would.
func (w *podWorker) startContainer(ctx context.Context, c *container) {
	log := w.logger().With("container", c.spec.Name)
	fail := func(reason string, err error) {
		log.Warn("starting container", "reason", reason, "err", err)
		w.mu.Lock()
		c.waiting, c.waitingMsg = reason, err.Error()
		w.mu.Unlock()
		w.markDirty()
	}
	p := w.pod()
	argv, env, err := w.n.command(p, c.spec, w.ipAddr())
	if err != nil {
		fail("ErrImagePull", err)
		return
	}
	id := newContainerID()
	w.mu.Lock()
	podDir := w.podDir
	np := w.net
	w.mu.Unlock()
	g, err := cgroup.Create(filepath.Join(podDir, id))
	if err != nil {
		fail("CreateContainerError", err)
		return
	}
	logDir := filepath.Join(w.n.cfg.LogDir, p.Namespace+"_"+p.Name+"_"+string(p.UID))
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		g.Close()
		fail("CreateContainerError", err)
		return
	}
	logf, err := os.OpenFile(filepath.Join(logDir, c.spec.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		g.Close()
		fail("CreateContainerError", err)
		return
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid: true,
		// Containers die with the lab even if it is killed outright.
		Pdeathsig: syscall.SIGKILL,
		// A pid namespace of its own, as a container runtime gives: the
		// app is PID 1 there, which is how the kernel program tells the
		// container's main process from one exec'd into it. As on a real
		// node, PID 1 is not killed by a signal it has no handler for
		// (SIGKILL aside): a Go app whose SIGTERM is at its default
		// re-raises it, survives, and exits with status 2.
		Cloneflags: syscall.CLONE_NEWPID,
	}
	g.Place(cmd.SysProcAttr)
	if err := np.Start(cmd); err != nil {
		g.Close()
		logf.Close()
		_ = cgroup.Remove(g.Path, time.Second)
		fail("StartError", err)
		return
	}
	exited := make(chan struct{})
	comm := readComm(cmd.Process.Pid, argv[0])
	w.mu.Lock()
	old, oldLog := c.group, c.logf
	if c.state != nil {
		c.lastTerm = c.terminated()
	}
	c.id, c.group, c.logf, c.cmd, c.pid, c.comm = id, g, logf, cmd, cmd.Process.Pid, comm
	c.startedAt, c.exited, c.state, c.finishedAt = time.Now(), exited, nil, time.Time{}
	// Without a readiness probe a running container is ready (the exit
	// clears it); with one, the probe decides.
	c.ready, c.waiting, c.waitingMsg = c.spec.ReadinessProbe == nil, "", ""
	w.phase = corev1.PodRunning
	w.mu.Unlock()
	if old != nil {
		old.Close()
		_ = cgroup.Remove(old.Path, time.Second)
	}
	if oldLog != nil {
		oldLog.Close() // the previous run's: a restart opens the log again
	}
	log.Info("container started", "pid", cmd.Process.Pid, "cgroup", g.Path)
	w.markDirty()
	go func() {
		_ = cmd.Wait()
		now := time.Now()
		w.mu.Lock()
		c.state, c.finishedAt, c.ready = cmd.ProcessState, now, false
		w.mu.Unlock()
		close(exited)
		w.recordExit(c, now)
		log.Info("container exited", "pid", cmd.Process.Pid, "state", cmd.ProcessState.String())
		select {
		case w.exits <- c:
		default:
		}
	}()
}

func (w *podWorker) recordExit(c *container, at time.Time) {
	w.mu.Lock()
	pid, comm, st := c.pid, c.comm, c.state
	w.mu.Unlock()
	i := w.info()
	i.Ref.Container = c.spec.Name
	e := event.Event{Time: at.UnixNano(), Kind: event.ProcessExit, Pod: i.Ref, Workload: i.Workload, PID: int32(pid), Comm: comm}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		e.Signal = int32(ws.Signal())
	} else {
		e.Code = int32(st.ExitCode())
	}
	w.n.record(e)
}

func (w *podWorker) ipAddr() netip.Addr {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ip
}

func readComm(pid int, fallback string) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return filepath.Base(fallback)
	}
	return string(trimNL(b))
}

// command resolves a container's argv and environment the way a runtime
// combines an image with a container spec: command replaces the image's
// entrypoint, args follow.
func (n *Node) command(p *corev1.Pod, spec corev1.Container, ip netip.Addr) ([]string, []string, error) {
	img, ok := n.cfg.Images[spec.Image]
	var argv []string
	switch {
	case len(spec.Command) > 0:
		argv = append(argv, spec.Command...)
	case ok:
		argv = append(argv, img.Entrypoint...)
	default:
		return nil, nil, fmt.Errorf("image %q is not known to the lab node (known: %s)", spec.Image, strings.Join(n.imageNames(), ", "))
	}
	argv = append(argv, spec.Args...)
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOSTNAME=" + p.Name,
	}
	env = append(env, img.Env...)
	for _, e := range spec.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			v = fieldValue(p, e.ValueFrom.FieldRef.FieldPath, ip, n.IP())
		}
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			var err error
			if v, err = n.secretValue(p.Namespace, e.ValueFrom.SecretKeyRef); err != nil {
				return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
		}
		env = append(env, e.Name+"="+v)
	}
	return argv, env, nil
}

// secretValue reads a secretKeyRef, as the kubelet does when it starts
// the container.
func (n *Node) secretValue(ns string, ref *corev1.SecretKeySelector) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sec, err := n.cfg.Client.CoreV1().Secrets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("secret %s/%s: %w", ns, ref.Name, err)
	}
	v, ok := sec.Data[ref.Key]
	if !ok {
		return "", fmt.Errorf("secret %s/%s has no key %q", ns, ref.Name, ref.Key)
	}
	return string(v), nil
}

func (n *Node) imageNames() []string {
	var out []string
	for k := range n.cfg.Images {
		out = append(out, k)
	}
	return out
}

// fieldValue answers the downward API's fieldRef paths.
func fieldValue(p *corev1.Pod, path string, podIP, hostIP netip.Addr) string {
	switch path {
	case "metadata.name":
		return p.Name
	case "metadata.namespace":
		return p.Namespace
	case "metadata.uid":
		return string(p.UID)
	case "spec.nodeName":
		return p.Spec.NodeName
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName
	case "status.podIP", "status.podIPs":
		return podIP.String()
	case "status.hostIP", "status.hostIPs":
		return hostIP.String()
	}
	if k, ok := strings.CutPrefix(path, "metadata.labels['"); ok {
		return p.Labels[strings.TrimSuffix(k, "']")]
	}
	if k, ok := strings.CutPrefix(path, "metadata.annotations['"); ok {
		return p.Annotations[strings.TrimSuffix(k, "']")]
	}
	return ""
}

func preStop(spec corev1.Container) *corev1.LifecycleHandler {
	if spec.Lifecycle == nil {
		return nil
	}
	return spec.Lifecycle.PreStop
}

// runHook runs a lifecycle handler: sleep, exec in the container's
// namespace and cgroup, or an HTTP GET to the pod.
func (w *podWorker) runHook(ctx context.Context, c *container, h *corev1.LifecycleHandler) error {
	switch {
	case h.Sleep != nil:
		t := time.NewTimer(time.Duration(h.Sleep.Seconds) * time.Second)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	case h.Exec != nil:
		return w.exec(ctx, c, h.Exec.Command)
	case h.HTTPGet != nil:
		return w.httpGet(ctx, c, h.HTTPGet)
	case h.TCPSocket != nil:
		return errors.New("tcpSocket lifecycle handlers are deprecated and not run")
	}
	return errors.New("empty lifecycle handler")
}

// exec runs argv inside the container: its network namespace, its cgroup,
// its environment.
func (w *podWorker) exec(ctx context.Context, c *container, argv []string) error {
	if len(argv) == 0 {
		return errors.New("exec: empty command")
	}
	w.mu.Lock()
	np, g, cmdEnv, mainPID := w.net, c.group, []string(nil), c.pid
	if c.cmd != nil {
		cmdEnv = c.cmd.Env
	}
	w.mu.Unlock()
	if np == nil || g == nil {
		return errors.New("exec: container not running")
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = cmdEnv
	cmd.Dir = "/"
	// No Pdeathsig: it fires when the thread that forked the process
	// exits, and forked from the thread that entered the container's pid
	// namespace every probe died of it (SIGKILL) at once. The context
	// ends the process instead.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	g.Place(cmd.SysProcAttr)
	w.mu.Lock()
	if c.logf != nil {
		cmd.Stdout, cmd.Stderr = c.logf, c.logf
	}
	w.mu.Unlock()
	// Into the container's pid namespace too, as a runtime's exec joins
	// the container: the process is not PID 1 there, not the main one.
	pidns, err := os.Open(fmt.Sprintf("/proc/%d/ns/pid", mainPID))
	if err != nil {
		return fmt.Errorf("exec: the container's pid namespace: %w", err)
	}
	defer pidns.Close()
	own, err := os.Open("/proc/self/ns/pid")
	if err != nil {
		return fmt.Errorf("exec: own pid namespace: %w", err)
	}
	defer own.Close()
	err = np.Do(func() error {
		// Do runs this on a locked thread: setns(CLONE_NEWPID) sets the
		// namespace of that thread's next children only.
		if err := unix.Setns(int(pidns.Fd()), unix.CLONE_NEWPID); err != nil {
			return fmt.Errorf("exec: entering the container's pid namespace: %w", err)
		}
		startErr := cmd.Start()
		if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWPID); err != nil {
			return errors.Join(startErr, fmt.Errorf("exec: leaving the container's pid namespace: %w", err))
		}
		return startErr
	})
	if err != nil {
		if cmd.Process != nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		return err
	}
	return cmd.Wait()
}

func (w *podWorker) httpGet(ctx context.Context, c *container, h *corev1.HTTPGetAction) error {
	port, err := resolvePort(h.Port.String(), c.spec)
	if err != nil {
		return err
	}
	status, err := w.n.get(ctx, w.ipAddr(), port, h.Path, h.HTTPHeaders)
	if err != nil {
		return err
	}
	if status < 200 || status >= 400 {
		return fmt.Errorf("HTTP %d", status)
	}
	return nil
}

// probeClient makes a new connection for every probe, as the kubelet's
// prober does, so probes never hold a keep-alive connection to a pod.
var probeClient = &http.Client{
	Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
	CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	},
}

// get sends GET to the pod's address; only pod addresses are ever asked.
func (n *Node) get(ctx context.Context, ip netip.Addr, port int, path string, headers []corev1.HTTPHeader) (int, error) {
	if !n.cfg.Network.PodCIDR().Contains(ip) {
		return 0, fmt.Errorf("refusing to probe %s: not a lab pod address", ip)
	}
	if path == "" || path[0] != '/' {
		path = "/" + path
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+netip.AddrPortFrom(ip, uint16(port)).String()+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("User-Agent", "kube-probe/1.37")
	for _, h := range headers {
		req.Header.Set(h.Name, h.Value)
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 10<<10))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// resolvePort turns a port number or a named container port into a number.
func resolvePort(p string, spec corev1.Container) (int, error) {
	if n, err := strconv.Atoi(p); err == nil {
		return n, nil
	}
	for _, cp := range spec.Ports {
		if cp.Name == p {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("container %s has no port named %q", spec.Name, p)
}

// terminated is the container's terminated state as the kubelet reports it.
// Call with the worker's mu held.
func (c *container) terminated() *corev1.ContainerStateTerminated {
	if c.state == nil {
		return nil
	}
	code := c.exitCode()
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	return &corev1.ContainerStateTerminated{
		ExitCode:    code,
		Reason:      reason,
		StartedAt:   metav1.NewTime(c.startedAt),
		FinishedAt:  metav1.NewTime(c.finishedAt),
		ContainerID: runtimeName + "://" + c.id,
	}
}
