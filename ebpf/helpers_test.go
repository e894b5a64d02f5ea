package ebpf

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
)

// The tests re-execute their own binary as the processes they observe:
// DRAINSCOPE_EBPF_HELPER names what the child does.
const helperEnv = "DRAINSCOPE_EBPF_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	os.Exit(m.Run())
}

func runHelper(mode string) int {
	switch mode {
	case "exit-on-term":
		// Wait for SIGTERM, then exit with code 3. SIGUSR1 is ignored.
		signal.Ignore(syscall.SIGUSR1)
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		fmt.Println("ready")
		<-ch
		return 3
	case "serve":
		return helperServe()
	case "threads-exit":
		return helperThreadsExit()
	case "capture":
		return helperCapture()
	case "hostnet":
		// Open a collector and print the host network namespace it found
		// and this process's own.
		c, err := Open(Config{Node: "n"})
		if err != nil {
			fmt.Println("ready error", err)
			return 1
		}
		own, _ := NetNSInode("/proc/self/ns/net")
		fmt.Println("ready", c.HostNetNS(), own)
		c.Close()
		return 0
	case "open":
		// Try to open a collector and print the error.
		c, err := Open(Config{Node: "n"})
		if err != nil {
			fmt.Println("ready", err)
			return 0
		}
		c.Close()
		fmt.Println("ready ok")
		return 0
	case "hold":
		// Accept connections on DRAINSCOPE_HELPER_ADDR and never read from
		// them; exit at SIGTERM with their data unread.
		ln, err := net.Listen("tcp", os.Getenv("DRAINSCOPE_HELPER_ADDR"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		var held []net.Conn
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				held = append(held, c)
			}
		}()
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		fmt.Println("ready", ln.Addr())
		<-ch
		return 0
	case "signal-self":
		// Send ourselves DRAINSCOPE_HELPER_N ignored SIGUSR1s, then exit.
		n, _ := strconv.Atoi(os.Getenv("DRAINSCOPE_HELPER_N"))
		signal.Ignore(syscall.SIGUSR1)
		pid := os.Getpid()
		for i := 0; i < n; i++ {
			syscall.Kill(pid, syscall.SIGUSR1)
		}
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
	return 2
}

// helperThreadsExit runs DRAINSCOPE_HELPER_N threads, each on an OS thread
// of its own, and exits the whole process at SIGTERM while all of them are
// running: the kernel then takes every thread through its exit path at once.
func helperThreadsExit() int {
	n, _ := strconv.Atoi(os.Getenv("DRAINSCOPE_HELPER_N"))
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	var started sync.WaitGroup
	var stop atomic.Bool
	for i := 0; i < n; i++ {
		started.Add(1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread is this goroutine's
			started.Done()
			for !stop.Load() {
				syscall.Nanosleep(&syscall.Timespec{Nsec: 200_000}, nil)
			}
		}()
	}
	started.Wait()
	fmt.Println("ready")
	<-ch
	os.Exit(0) // exit_group: every thread exits now
	return 0
}

// helperCapture is an agent's capture under whatever capabilities it was
// started with: it tracks the cgroup DRAINSCOPE_HELPER_CGROUP, prints
// "ready", then one line per event ("event <kind> <pod uid> <container>
// <pid>") until SIGTERM, then "stats <cgroup walks> <full walks> <host netns>".
func helperCapture() int {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	c, err := Open(Config{Node: "n", ExitWindow: -1})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer c.Close()
	for _, p := range c.Programs() {
		if !p.Loaded {
			fmt.Println("error program", p.Name, "dropped:", p.Err)
			return 1
		}
	}
	if _, err := c.TrackCgroupPath(os.Getenv("DRAINSCOPE_HELPER_CGROUP")); err != nil {
		fmt.Println("error", err)
		return 1
	}
	var mu sync.Mutex
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, func(e *event.Event) {
			mu.Lock()
			fmt.Printf("event %s %s %s %d\n", e.Kind, orDash(e.Pod.UID), orDash(e.Pod.Container), e.PID)
			mu.Unlock()
		})
	}()
	fmt.Println("ready")
	<-ch
	cancel()
	if err := <-done; err != nil {
		fmt.Println("error", err)
		return 1
	}
	s, err := c.Stats()
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("stats", s.CgroupWalks, s.CgroupFullWalks, c.HostNetNS())
	return 0
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// helperServe runs an HTTP server on DRAINSCOPE_HELPER_ADDR. On SIGTERM it
// does what DRAINSCOPE_HELPER_ON_TERM says:
//
//	exit            exit(0) at once: the kernel closes listener and connections
//	close-listener  close the listener, then exit after DRAINSCOPE_HELPER_LINGER
//	shutdown        close the listener and idle keep-alive connections (as
//	                http.Server.Shutdown does), then exit after the linger
func helperServe() int {
	ln, err := net.Listen("tcp", os.Getenv("DRAINSCOPE_HELPER_ADDR"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "ok\n")
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go srv.Serve(ln)
	linger, _ := time.ParseDuration(os.Getenv("DRAINSCOPE_HELPER_LINGER"))
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	fmt.Println("ready", ln.Addr())
	<-ch
	switch os.Getenv("DRAINSCOPE_HELPER_ON_TERM") {
	case "exit":
		os.Exit(0)
	case "close-listener":
		ln.Close()
	case "shutdown":
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}
	time.Sleep(linger)
	return 0
}

// testPod is a pod as the kubelet lays it out: a cgroup at
// .../kubepods/burstable/pod<uid>/<container-id> in the unified hierarchy
// and, optionally, a network namespace with a veth to the host.
type testPod struct {
	UID, ContainerID string
	PodCgroup        string // directory of the pod-level cgroup
	Cgroup           string // directory of the container cgroup
	PodCgroupID      uint64
	CgroupID         uint64

	NetNS    string // name under /run/netns, "" without one
	NetNSIno uint64
	IP       netip.Addr // the pod's address, inside its namespace
	HostIP   netip.Addr // the host end of the veth

	// PidNS starts each helper in a pid namespace of its own, as a
	// container runtime starts a container's init: it is PID 1 there.
	PidNS bool
	// JoinPidNS, when not 0, starts the helper in the pid namespace of
	// this (host) PID through nsenter, as an exec'd probe or kubectl exec
	// joins a running container; Pid is then nsenter's, Child the helper's.
	JoinPidNS int
}

func (p *testPod) Ref() event.PodRef {
	return event.PodRef{Namespace: "default", Name: "pod-" + p.UID[:8], UID: p.UID}
}

var netCounter atomic.Uint32

func randHex(n int) string {
	b := make([]byte, n/2)
	rand.Read(b)
	return fmt.Sprintf("%x", b)
}

func newUID() string {
	h := randHex(32)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// cgroupRoot is where tests make their cgroups: the unified hierarchy, at
// /sys/fs/cgroup (cgroup v2) or /sys/fs/cgroup/unified (hybrid); "" when
// there is none.
var cgroupRoot = func() string {
	l, err := detectCgroups("v2")
	if err != nil {
		return ""
	}
	return l.root
}()

// requireKernel skips (fails in CI) unless the tests can load programs and
// make cgroups and namespaces.
func requireKernel(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t)
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		testenv.Unavailable(t, "kernel BTF (/sys/kernel/btf/vmlinux) is missing")
	}
	if cgroupRoot == "" {
		testenv.Unavailable(t, "no cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified")
	}
}

func newTestPod(t testing.TB, withNetNS bool) *testPod {
	t.Helper()
	requireKernel(t)
	p := &testPod{UID: newUID(), ContainerID: randHex(64)}
	base := filepath.Join(cgroupRoot, fmt.Sprintf("drainscope-test-%d", os.Getpid()))
	p.PodCgroup = filepath.Join(base, "kubepods", "burstable", "pod"+p.UID)
	p.Cgroup = filepath.Join(p.PodCgroup, p.ContainerID)
	if err := os.MkdirAll(p.Cgroup, 0o755); err != nil {
		t.Fatalf("making cgroup: %v", err)
	}
	t.Cleanup(func() {
		// Children are reaped by now; remove leaf first, and the shared
		// ancestors when no other test uses them.
		for _, d := range []string{p.Cgroup, p.PodCgroup, filepath.Dir(p.PodCgroup), filepath.Dir(filepath.Dir(p.PodCgroup)), base} {
			removeCgroup(d)
		}
	})
	var err error
	if p.PodCgroupID, err = CgroupID(p.PodCgroup); err != nil {
		t.Fatal(err)
	}
	if p.CgroupID, err = CgroupID(p.Cgroup); err != nil {
		t.Fatal(err)
	}
	if withNetNS {
		p.setupNetNS(t)
	}
	return p
}

// removeCgroup removes an empty cgroup, retrying while its last process is
// being released.
func removeCgroup(dir string) {
	for i := 0; i < 50; i++ {
		err := os.Remove(dir)
		if err == nil || os.IsNotExist(err) {
			return
		}
		if !strings.Contains(err.Error(), "busy") {
			return // not empty: another test still uses it
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func run(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// setupNetNS makes a network namespace with loopback up and a veth pair
// 10.213.N.1 (host) <-> 10.213.N.2 (pod). Traffic goes only there.
func (p *testPod) setupNetNS(t testing.TB) {
	testenv.RequireBinary(t, "ip")
	n := (uint32(os.Getpid())*16 + netCounter.Add(1)) % 250
	id := fmt.Sprintf("%d%d", os.Getpid()%10000, n)
	p.NetNS = "dstest" + id
	host, peer := "dsh"+id, "dsp"+id
	p.HostIP = netip.AddrFrom4([4]byte{10, 213, byte(n), 1})
	p.IP = netip.AddrFrom4([4]byte{10, 213, byte(n), 2})
	run(t, "ip", "netns", "add", p.NetNS)
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", host).Run()
		exec.Command("ip", "netns", "del", p.NetNS).Run()
	})
	run(t, "ip", "link", "add", host, "type", "veth", "peer", "name", peer)
	run(t, "ip", "link", "set", peer, "netns", p.NetNS)
	run(t, "ip", "addr", "add", p.HostIP.String()+"/30", "dev", host)
	run(t, "ip", "link", "set", host, "up")
	run(t, "ip", "-n", p.NetNS, "addr", "add", p.IP.String()+"/30", "dev", peer)
	run(t, "ip", "-n", p.NetNS, "link", "set", peer, "up")
	run(t, "ip", "-n", p.NetNS, "link", "set", "lo", "up")
	var err error
	if p.NetNSIno, err = NetNSInode("/run/netns/" + p.NetNS); err != nil {
		t.Fatal(err)
	}
}

// helperProc is a re-executed test binary running in a test pod.
type helperProc struct {
	cmd   *exec.Cmd
	Ready string // the rest of the helper's "ready" line
	done  chan struct{}
	err   error
}

func (h *helperProc) Pid() int { return h.cmd.Process.Pid }

// Wait waits for the helper to exit and returns its exit code.
func (h *helperProc) Wait(t testing.TB) int {
	t.Helper()
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		t.Fatal("helper did not exit")
	}
	return h.cmd.ProcessState.ExitCode()
}

// start runs the helper in the pod's container cgroup (born there, through
// clone3's CLONE_INTO_CGROUP) and in its network namespace, and waits until
// it says it is ready.
func (p *testPod) start(t testing.TB, mode string, env ...string) *helperProc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{self}
	if p.NetNS != "" {
		args = append([]string{"ip", "netns", "exec", p.NetNS}, args...)
	}
	if p.JoinPidNS != 0 {
		args = append([]string{"nsenter", "-t", strconv.Itoa(p.JoinPidNS), "-p", "--"}, args...)
	}
	cgfd, err := syscall.Open(p.Cgroup, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(cgfd)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), append([]string{helperEnv + "=" + mode}, env...)...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cgfd}
	if p.PidNS {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWPID
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting helper: %v", err)
	}
	h := &helperProc{cmd: cmd, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, out)
		h.err = cmd.Wait()
		close(h.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-h.done
	})
	if mode == "signal-self" {
		return h
	}
	select {
	case l, ok := <-lines:
		if !ok || !strings.HasPrefix(l, "ready") {
			t.Fatalf("helper %s did not get ready: %q", mode, l)
		}
		h.Ready = strings.TrimSpace(strings.TrimPrefix(l, "ready"))
	case <-time.After(10 * time.Second):
		t.Fatalf("helper %s did not get ready", mode)
	}
	return h
}

// fakePods is a PodLookup over the test pods.
type fakePods struct {
	mu   sync.Mutex
	pods []*testPod
	refs []event.PodRef
}

func (f *fakePods) add(p *testPod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods = append(f.pods, p)
	f.refs = append(f.refs, p.Ref())
}

func (f *fakePods) PodByUID(uid string) (event.PodRef, event.Workload, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, p := range f.pods {
		if p.UID == uid {
			return f.refs[i], event.Workload{Kind: "Deployment", Name: "web"}, true
		}
	}
	return event.PodRef{}, event.Workload{}, false
}

func (f *fakePods) PodByIP(ip netip.Addr) (event.PodRef, event.Workload, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, p := range f.pods {
		if p.IP == ip {
			return f.refs[i], event.Workload{Kind: "Deployment", Name: "web"}, true
		}
	}
	return event.PodRef{}, event.Workload{}, false
}

// recorder runs a collector and keeps copies of its events.
type recorder struct {
	c      *Collector
	mu     sync.Mutex
	events []event.Event
	cancel context.CancelFunc
	done   chan error
}

func openCollector(t testing.TB, cfg Config) *Collector {
	t.Helper()
	requireKernel(t)
	if cfg.Node == "" {
		cfg.Node = "test-node"
	}
	c, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	for _, p := range c.Programs() {
		if !p.Loaded {
			t.Errorf("program %s dropped: %v", p.Name, p.Err)
		}
	}
	return c
}

func record(t testing.TB, c *Collector) *recorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() {
		r.done <- c.Run(ctx, func(e *event.Event) {
			r.mu.Lock()
			r.events = append(r.events, *e)
			r.mu.Unlock()
		})
	}()
	t.Cleanup(r.stop)
	return r
}

func (r *recorder) stop() {
	r.cancel()
	<-r.done
	r.done <- nil // let a second stop return
}

// waitFor returns the first recorded event matching match, waiting up to 5 s.
func (r *recorder) waitFor(t testing.TB, what string, match func(*event.Event) bool) event.Event {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		for i := range r.events {
			if match(&r.events[i]) {
				e := r.events[i]
				r.mu.Unlock()
				return e
			}
		}
		r.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no %s event; recorded:\n%s", what, r.dump())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *recorder) all() []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event.Event(nil), r.events...)
}

func (r *recorder) dump() string {
	var b strings.Builder
	for _, e := range r.all() {
		fmt.Fprintf(&b, "  %s\n", describe(&e))
	}
	return b.String()
}

func describe(e *event.Event) string {
	return fmt.Sprintf("%d %s pod=%s/%s ctr=%.12s pid=%d comm=%s peer=%d/%s sig=%d code=%d local=%s remote=%s netns=%d reason=%s flags=%#x",
		e.Time, e.Kind, e.Pod.String(), e.Pod.UID, e.Pod.Container, e.PID, e.Comm, e.PeerPID, e.PeerComm,
		e.Signal, e.Code, e.Local, e.Remote, e.NetNS, e.Reason, e.Flags)
}
