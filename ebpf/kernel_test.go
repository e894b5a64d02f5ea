package ebpf

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
)

// These tests load the real programs, make real processes and connections
// in a cgroup and a network namespace of their own, and assert on the
// events the kernel reports. They need root.

func wallNow() int64 { return time.Now().UnixNano() }

// assertPod checks that e is attributed to p (through the fake lookup, so
// with namespace, name, workload) and carries the node and source.
func assertPod(t *testing.T, e event.Event, p *testPod, wantContainer bool) {
	t.Helper()
	if e.Pod.UID != p.UID || e.Pod.Name != p.Ref().Name || e.Pod.Namespace != "default" {
		t.Errorf("%s attributed to %+v, want pod %s", e.Kind, e.Pod, p.UID)
	}
	if wantContainer && e.Pod.Container != p.ContainerID {
		t.Errorf("%s container %q, want %q", e.Kind, e.Pod.Container, p.ContainerID)
	}
	if e.Workload != (event.Workload{Kind: "Deployment", Name: "web"}) {
		t.Errorf("%s workload %+v", e.Kind, e.Workload)
	}
	if e.Node != "test-node" || e.Source != event.SourceKernel {
		t.Errorf("%s node %q source %q", e.Kind, e.Node, e.Source)
	}
	if err := e.Validate(); err != nil {
		t.Errorf("%s: %v", e.Kind, err)
	}
	if e.Attrs[event.AttrClockUncertainty] == "" {
		t.Errorf("%s: no clock uncertainty in Attrs", e.Kind)
	}
}

// assertOrder checks that the events' times increase in the order given.
func assertOrder(t *testing.T, es ...event.Event) {
	t.Helper()
	for i := 1; i < len(es); i++ {
		if es[i].Time < es[i-1].Time {
			t.Errorf("%s at %d precedes %s at %d", es[i].Kind, es[i].Time, es[i-1].Kind, es[i-1].Time)
		}
	}
}

// assertWithin checks that the event happened between two wall-clock
// readings the test took around the action, allowing for the conversion's
// uncertainty plus a millisecond.
func assertWithin(t *testing.T, e event.Event, before, after int64, c *Collector) {
	t.Helper()
	s, _ := c.Stats()
	slack := int64(s.ClockUncertainty) + int64(time.Millisecond)
	if e.Time < before-slack || e.Time > after+slack {
		t.Errorf("%s at %d, outside the window [%d, %d] the test observed", e.Kind, e.Time, before, after)
	}
}

func TestSignalAndExit(t *testing.T) {
	pods := &fakePods{}
	p := newTestPod(t, false)
	pods.add(p)
	c := openCollector(t, Config{Pods: pods})
	if err := c.Track(p.PodCgroupID); err != nil {
		t.Fatal(err)
	}
	r := record(t, c)

	h := p.start(t, "exit-on-term")
	before := wallNow()
	if err := syscall.Kill(h.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := h.Wait(t); code != 3 {
		t.Fatalf("helper exited with %d, want 3", code)
	}
	after := wallNow()

	sig := r.waitFor(t, "signal", func(e *event.Event) bool {
		return e.Kind == event.Signal && e.PID == int32(h.Pid())
	})
	exit := r.waitFor(t, "process_exit", func(e *event.Event) bool {
		return e.Kind == event.ProcessExit && e.PID == int32(h.Pid())
	})
	if sig.Signal != int32(syscall.SIGTERM) || sig.PeerPID != int32(syscall.Getpid()) || sig.Reason != "delivered" {
		t.Errorf("signal event: %s", describe(&sig))
	}
	if sig.PeerComm == "" || sig.Comm == "" {
		t.Errorf("signal event without command names: %s", describe(&sig))
	}
	if exit.Code != 3 || exit.Signal != 0 {
		t.Errorf("exit event: code %d signal %d, want code 3", exit.Code, exit.Signal)
	}
	assertPod(t, sig, p, true)
	assertPod(t, exit, p, true)
	assertOrder(t, sig, exit)
	assertWithin(t, sig, before, after, c)
	assertWithin(t, exit, before, after, c)
	if sig.ID == 0 || exit.ID == 0 || sig.ID == exit.ID {
		t.Errorf("events not sealed with distinct IDs: %v %v", sig.ID, exit.ID)
	}
}

func TestSignalKillExit(t *testing.T) {
	pods := &fakePods{}
	p := newTestPod(t, false)
	pods.add(p)
	c := openCollector(t, Config{Pods: pods})
	if err := c.Track(p.PodCgroupID); err != nil {
		t.Fatal(err)
	}
	r := record(t, c)

	h := p.start(t, "exit-on-term")
	if err := syscall.Kill(h.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.Wait(t)
	sig := r.waitFor(t, "signal", func(e *event.Event) bool {
		return e.Kind == event.Signal && e.PID == int32(h.Pid())
	})
	exit := r.waitFor(t, "process_exit", func(e *event.Event) bool {
		return e.Kind == event.ProcessExit && e.PID == int32(h.Pid())
	})
	if sig.Signal != int32(syscall.SIGKILL) || exit.Signal != int32(syscall.SIGKILL) || exit.Code != 0 {
		t.Errorf("SIGKILL: signal %s, exit %s", describe(&sig), describe(&exit))
	}
	assertOrder(t, sig, exit)
	assertPod(t, exit, p, true)
}

func TestUntrackedIsFiltered(t *testing.T) {
	pods := &fakePods{}
	p := newTestPod(t, false)
	pods.add(p)
	c := openCollector(t, Config{Pods: pods})
	r := record(t, c)
	h := p.start(t, "exit-on-term") // its cgroup is not tracked
	syscall.Kill(h.Pid(), syscall.SIGTERM)
	h.Wait(t)
	time.Sleep(200 * time.Millisecond)
	for _, e := range r.all() {
		if e.PID == int32(h.Pid()) {
			t.Errorf("event of an untracked process: %s", describe(&e))
		}
	}
	s, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.Produced != 0 {
		t.Errorf("kernel produced %d events with nothing tracked", s.Produced)
	}
}

// serve starts the HTTP helper in p's namespace on port 8080 and returns it
// with the address clients dial.
func serve(t *testing.T, p *testPod, onTerm string, linger time.Duration) (*helperProc, netip.AddrPort) {
	t.Helper()
	h := p.start(t, "serve", "DRAINSCOPE_HELPER_ADDR=0.0.0.0:8080",
		"DRAINSCOPE_HELPER_ON_TERM="+onTerm, "DRAINSCOPE_HELPER_LINGER="+linger.String())
	return h, netip.AddrPortFrom(p.IP, 8080)
}

// request sends one HTTP/1.1 keep-alive request on conn and reads the response.
func request(t *testing.T, conn net.Conn, br *bufio.Reader) {
	t.Helper()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprint(conn, "GET / HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Status line, headers, then the 3-byte body "ok\n".
	status, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 200") {
		t.Fatalf("response: %q %v", status, err)
	}
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if l == "\r\n" {
			break
		}
	}
	body := make([]byte, 3)
	if _, err := br.Read(body); err != nil {
		t.Fatal(err)
	}
}

func dial(t *testing.T, addr netip.AddrPort) (*net.TCPConn, *bufio.Reader) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr.String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn.(*net.TCPConn), bufio.NewReader(conn)
}

func localAddr(c net.Conn) netip.AddrPort {
	return c.LocalAddr().(*net.TCPAddr).AddrPort()
}

// socketCollector opens a collector tracking the pod's cgroup (its sockets)
// and its network namespace (resets no socket owns).
func socketCollector(t *testing.T, p *testPod) (*Collector, *recorder) {
	t.Helper()
	pods := &fakePods{}
	pods.add(p)
	c := openCollector(t, Config{Pods: pods})
	if err := c.Track(p.PodCgroupID); err != nil {
		t.Fatal(err)
	}
	if err := c.TrackNetNS(p.NetNSIno); err != nil {
		t.Fatal(err)
	}
	return c, record(t, c)
}

func TestListenerClosedBeforeExit(t *testing.T) {
	p := newTestPod(t, true)
	c, r := socketCollector(t, p)
	h, addr := serve(t, p, "close-listener", 200*time.Millisecond)

	before := wallNow()
	syscall.Kill(h.Pid(), syscall.SIGTERM)
	h.Wait(t)
	after := wallNow()

	sig := r.waitFor(t, "signal", func(e *event.Event) bool { return e.Kind == event.Signal && e.PID == int32(h.Pid()) })
	lc := r.waitFor(t, "listener_closed", func(e *event.Event) bool { return e.Kind == event.ListenerClosed })
	exit := r.waitFor(t, "process_exit", func(e *event.Event) bool { return e.Kind == event.ProcessExit })
	if lc.Local.Port() != addr.Port() || lc.NetNS != p.NetNSIno || lc.PID != int32(h.Pid()) {
		t.Errorf("listener_closed: %s", describe(&lc))
	}
	if lc.Flags.Has(event.FlagAtExit) {
		t.Errorf("listener closed by the application flagged as closed at exit")
	}
	assertPod(t, lc, p, true)
	assertOrder(t, sig, lc, exit)
	assertWithin(t, lc, before, after, c)
}

func TestListenerClosedAtExit(t *testing.T) {
	p := newTestPod(t, true)
	_, r := socketCollector(t, p)
	h, addr := serve(t, p, "exit", 0)

	syscall.Kill(h.Pid(), syscall.SIGTERM)
	h.Wait(t)
	exit := r.waitFor(t, "process_exit", func(e *event.Event) bool { return e.Kind == event.ProcessExit })
	lc := r.waitFor(t, "listener_closed", func(e *event.Event) bool { return e.Kind == event.ListenerClosed })
	if !lc.Flags.Has(event.FlagAtExit) || lc.Local.Port() != addr.Port() || lc.PID != int32(h.Pid()) {
		t.Errorf("listener_closed at exit: %s", describe(&lc))
	}
	assertPod(t, lc, p, true)
	assertOrder(t, exit, lc)
}

func TestKeepAliveClosedByExit(t *testing.T) {
	p := newTestPod(t, true)
	c, r := socketCollector(t, p)
	h, addr := serve(t, p, "exit", 0)

	conn, br := dial(t, addr)
	sent := time.Now()
	request(t, conn, br) // the connection is established and idle
	const idle = 300 * time.Millisecond
	time.Sleep(idle)
	before := wallNow()
	syscall.Kill(h.Pid(), syscall.SIGTERM)
	h.Wait(t)
	after := wallNow()
	sinceSent := time.Since(sent)

	client := localAddr(conn)
	cc := r.waitFor(t, "conn_closed", func(e *event.Event) bool {
		return e.Kind == event.ConnClosed && e.Remote == client
	})
	exit := r.waitFor(t, "process_exit", func(e *event.Event) bool { return e.Kind == event.ProcessExit })
	sig := r.waitFor(t, "signal", func(e *event.Event) bool { return e.Kind == event.Signal })
	if cc.Reason != ReasonLocal || !cc.Flags.Has(event.FlagAtExit) || cc.Local != addr ||
		cc.NetNS != p.NetNSIno || cc.PID != int32(h.Pid()) {
		t.Errorf("conn_closed: %s", describe(&cc))
	}
	assertPod(t, cc, p, true)
	assertOrder(t, sig, exit, cc)
	assertWithin(t, cc, before, after, c)
	// How long the connection had been idle: at least the sleep (less the
	// client's delayed ACK of the response), at most the time since the
	// request went out.
	if got := time.Duration(cc.Duration); got < idle-100*time.Millisecond || got > sinceSent {
		t.Errorf("conn_closed idle for %v, want between %v and %v", got, idle-100*time.Millisecond, sinceSent)
	}
	t.Logf("connection idle %v at the exit (slept %v)", time.Duration(cc.Duration), idle)

	// The client sees the FIN: its read returns EOF.
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Errorf("client read data after the server exited")
	}
}

func TestRequestOnClosedConnectionGetsRST(t *testing.T) {
	p := newTestPod(t, true)
	_, r := socketCollector(t, p)
	// Graceful shutdown closes idle keep-alive connections; the process
	// stays alive a while, as a draining server does.
	h, addr := serve(t, p, "shutdown", 2*time.Second)

	conn, br := dial(t, addr)
	request(t, conn, br)
	syscall.Kill(h.Pid(), syscall.SIGTERM)
	client := localAddr(conn)
	cc := r.waitFor(t, "conn_closed", func(e *event.Event) bool {
		return e.Kind == event.ConnClosed && e.Remote == client
	})
	// The client has not noticed the FIN and sends its next request.
	fmt.Fprint(conn, "GET / HTTP/1.1\r\nHost: test\r\n\r\n")
	rst := r.waitFor(t, "rst_sent", func(e *event.Event) bool {
		return e.Kind == event.RSTSent && e.Remote == client
	})
	if cc.Reason != ReasonLocal || cc.Flags.Has(event.FlagAtExit) {
		t.Errorf("conn_closed: %s", describe(&cc))
	}
	if rst.Local != addr || rst.NetNS != p.NetNSIno || rst.Reason == "" {
		t.Errorf("rst_sent: %s", describe(&rst))
	}
	assertPod(t, cc, p, true)
	assertPod(t, rst, p, false)
	assertOrder(t, cc, rst)
	t.Logf("reset reason %q", rst.Reason)
	// The client's next read fails with a reset.
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var err error
	for err == nil {
		_, err = br.ReadByte()
	}
	h.Wait(t)
}

func TestConnectionRefused(t *testing.T) {
	p := newTestPod(t, true)
	c, r := socketCollector(t, p)
	h, addr := serve(t, p, "exit", 0)
	closed := netip.AddrPortFrom(p.IP, 8081) // nobody listens here

	// A served request first: the collector learns the pod's namespace from it.
	conn, br := dial(t, addr)
	request(t, conn, br)

	before := wallNow()
	_, err := net.DialTimeout("tcp", closed.String(), 5*time.Second)
	after := wallNow()
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("dial %s: %v, want connection refused", closed, err)
	}
	ref := r.waitFor(t, "conn_refused", func(e *event.Event) bool { return e.Kind == event.ConnRefused })
	if ref.Local != closed || ref.Remote.Addr() != p.HostIP || ref.NetNS != p.NetNSIno || ref.PID != 0 {
		t.Errorf("conn_refused: %s", describe(&ref))
	}
	if ref.Reason != "no_socket" {
		t.Errorf("conn_refused reason %q, want no_socket", ref.Reason)
	}
	assertPod(t, ref, p, false)
	assertWithin(t, ref, before, after, c)
	syscall.Kill(h.Pid(), syscall.SIGTERM)
	h.Wait(t)
	sig := r.waitFor(t, "signal", func(e *event.Event) bool { return e.Kind == event.Signal })
	exit := r.waitFor(t, "process_exit", func(e *event.Event) bool { return e.Kind == event.ProcessExit })
	assertOrder(t, ref, sig, exit)
}

func TestRSTReceived(t *testing.T) {
	p := newTestPod(t, true)
	c, r := socketCollector(t, p)
	h, addr := serve(t, p, "exit", 0)

	conn, br := dial(t, addr)
	request(t, conn, br)
	client := localAddr(conn)
	// Closing with SO_LINGER 0 aborts: the client sends RST instead of FIN.
	conn.SetLinger(0)
	before := wallNow()
	conn.Close()
	rr := r.waitFor(t, "rst_received", func(e *event.Event) bool {
		return e.Kind == event.RSTReceived && e.Remote == client
	})
	after := wallNow()
	if rr.Local != addr || rr.NetNS != p.NetNSIno {
		t.Errorf("rst_received: %s", describe(&rr))
	}
	assertPod(t, rr, p, false)
	assertWithin(t, rr, before, after, c)

	syscall.Kill(h.Pid(), syscall.SIGTERM)
	h.Wait(t)
	exit := r.waitFor(t, "process_exit", func(e *event.Event) bool { return e.Kind == event.ProcessExit })
	assertOrder(t, rr, exit)
	// The server's own socket was aborted by the reset: no close of it at exit.
	for _, e := range r.all() {
		if e.Kind == event.ConnClosed && e.Remote == client {
			t.Errorf("reset connection reported closed: %s", describe(&e))
		}
	}
}

// TestTrackUntrack checks that tracking takes effect for a cgroup whose
// "untracked" verdict the kernel has already cached, and that untracking
// stops the events again.
func TestTrackUntrack(t *testing.T) {
	pods := &fakePods{}
	p := newTestPod(t, false)
	pods.add(p)
	c := openCollector(t, Config{Pods: pods, Signals: []syscall.Signal{syscall.SIGUSR1, syscall.SIGTERM}})
	r := record(t, c)
	h := p.start(t, "exit-on-term")
	count := func() int {
		n := 0
		for _, e := range r.all() {
			if e.Kind == event.Signal && e.PID == int32(h.Pid()) && e.Signal == int32(syscall.SIGUSR1) {
				n++
			}
		}
		return n
	}
	settle := func() { time.Sleep(3 * c.flush) }

	syscall.Kill(h.Pid(), syscall.SIGUSR1) // untracked: the verdict is cached
	settle()
	if n := count(); n != 0 {
		t.Fatalf("%d events before tracking", n)
	}
	if err := c.Track(p.PodCgroupID); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(h.Pid(), syscall.SIGUSR1)
	r.waitFor(t, "signal after Track", func(e *event.Event) bool {
		return e.Kind == event.Signal && e.PID == int32(h.Pid())
	})
	if err := c.Untrack(p.PodCgroupID); err != nil {
		t.Fatal(err)
	}
	if err := c.Untrack(p.PodCgroupID); err != nil {
		t.Errorf("second Untrack: %v", err)
	}
	syscall.Kill(h.Pid(), syscall.SIGUSR1)
	settle()
	if n := count(); n != 1 {
		t.Errorf("%d SIGUSR1 events, want only the one sent while tracked", n)
	}

	// Tracking the container's own cgroup (not the pod's) works too.
	if _, err := c.TrackCgroupPath(p.Cgroup); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(h.Pid(), syscall.SIGTERM)
	h.Wait(t)
	r.waitFor(t, "exit", func(e *event.Event) bool { return e.Kind == event.ProcessExit && e.PID == int32(h.Pid()) })
}

// TestTrackNetNSOnly: a server whose cgroup is not tracked, but whose
// network namespace is, still has its sockets reported (and attributed by
// their cgroup path all the same).
func TestTrackNetNSOnly(t *testing.T) {
	p := newTestPod(t, true)
	pods := &fakePods{}
	pods.add(p)
	c := openCollector(t, Config{Pods: pods})
	if err := c.TrackNetNS(p.NetNSIno); err != nil {
		t.Fatal(err)
	}
	r := record(t, c)
	h, addr := serve(t, p, "exit", 0)
	conn, br := dial(t, addr)
	request(t, conn, br)
	syscall.Kill(h.Pid(), syscall.SIGTERM)
	h.Wait(t)
	cc := r.waitFor(t, "conn_closed", func(e *event.Event) bool {
		return e.Kind == event.ConnClosed && e.Remote == localAddr(conn)
	})
	assertPod(t, cc, p, false)
	if !cc.Flags.Has(event.FlagAtExit) || cc.PID != int32(h.Pid()) {
		t.Errorf("conn_closed: %s", describe(&cc))
	}
	if err := c.UntrackNetNS(p.NetNSIno); err != nil {
		t.Fatal(err)
	}
}

func TestMissingTracepointIsDropped(t *testing.T) {
	requireKernel(t)
	c := openCollector(t, Config{})
	spec, err := loadProbes()
	if err != nil {
		t.Fatal(err)
	}
	kernel, err := btfKernel()
	if err != nil {
		t.Fatal(err)
	}
	err = c.loadProgram(spec, kernel, nil, programDef{name: "no_such_event", tracepoint: "none/no_such_event"})
	if err == nil || !strings.Contains(err.Error(), "not in this kernel") || !strings.Contains(err.Error(), "none/no_such_event") {
		t.Errorf("loading a program for a missing tracepoint: %v", err)
	}
	for _, p := range c.Programs() {
		if !p.Loaded || p.Err != nil {
			t.Errorf("%s not loaded on this kernel: %v", p.Name, p.Err)
		}
	}
}

// TestCgroupV1 runs a pod laid out in a cgroup v1 controller hierarchy only
// (kubelet with cgroup v1 and the cgroupfs driver), identified by the
// controller's cgroup ids.
func TestCgroupV1(t *testing.T) {
	requireKernel(t)
	const ctrl = "/sys/fs/cgroup/pids"
	if _, err := os.Stat(ctrl + "/cgroup.procs"); err != nil {
		// Not a missing install but a host that is cgroup v2 only: nothing
		// scripts/test.sh could add, so a skip rather than testenv's CI failure.
		t.Skipf("skipped: no cgroup v1 pids hierarchy at %s: this host is cgroup v2 only, the v1 path cannot be exercised here", ctrl)
	}
	p := newTestPod(t, false) // for the UID, container ID and a v2 cgroup to start in
	dir := filepath.Join(ctrl, fmt.Sprintf("drainscope-test-%d", os.Getpid()), "kubepods", "pod"+p.UID, p.ContainerID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for d := dir; d != ctrl; d = filepath.Dir(d) {
			removeCgroup(d)
		}
	})
	pods := &fakePods{}
	pods.add(p)
	c := openCollector(t, Config{Pods: pods, Cgroups: "v1:pids"})
	if c.CgroupRoot() != ctrl {
		t.Fatalf("cgroup root %s", c.CgroupRoot())
	}
	if _, err := c.TrackCgroupPath(filepath.Dir(dir)); err != nil {
		t.Fatal(err)
	}
	r := record(t, c)
	h := p.start(t, "exit-on-term")
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(h.Pid())), 0o644); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(h.Pid(), syscall.SIGTERM)
	h.Wait(t)
	sig := r.waitFor(t, "signal", func(e *event.Event) bool { return e.Kind == event.Signal && e.PID == int32(h.Pid()) })
	exit := r.waitFor(t, "exit", func(e *event.Event) bool { return e.Kind == event.ProcessExit && e.PID == int32(h.Pid()) })
	assertPod(t, sig, p, true)
	assertPod(t, exit, p, true)
	assertOrder(t, sig, exit)
	if exit.Code != 3 {
		t.Errorf("exit code %d", exit.Code)
	}
}

// TestResetWithUnreadDataAtExit: a request the server never read when it
// exited (an in-flight request cut) makes the kernel reset the connection
// instead of closing it.
func TestResetWithUnreadDataAtExit(t *testing.T) {
	p := newTestPod(t, true)
	_, r := socketCollector(t, p)
	h := p.start(t, "hold", "DRAINSCOPE_HELPER_ADDR=0.0.0.0:8080")
	addr := netip.AddrPortFrom(p.IP, 8080)
	conn, br := dial(t, addr)
	fmt.Fprint(conn, "POST /pay HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n\r\n")
	time.Sleep(100 * time.Millisecond) // the data reaches the server's receive queue
	syscall.Kill(h.Pid(), syscall.SIGTERM)
	h.Wait(t)
	rst := r.waitFor(t, "rst_sent", func(e *event.Event) bool {
		return e.Kind == event.RSTSent && e.Remote == localAddr(conn)
	})
	exit := r.waitFor(t, "process_exit", func(e *event.Event) bool { return e.Kind == event.ProcessExit })
	if !rst.Flags.Has(event.FlagUnreadData|event.FlagAtExit) || rst.PID != int32(h.Pid()) || rst.Local != addr {
		t.Errorf("rst_sent: %s", describe(&rst))
	}
	if rst.Reason != "tcp_abort_on_close" {
		t.Errorf("reason %q, want tcp_abort_on_close", rst.Reason)
	}
	assertPod(t, rst, p, true)
	assertOrder(t, exit, rst)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil || !strings.Contains(err.Error(), "reset") {
		t.Errorf("client read: %v, want connection reset", err)
	}
}

// TestListenerClosedMomentsBeforeExit: an application that closes its
// listener during its own teardown, just before exiting, has the close
// flagged as at exit (the exit window), unlike one that closes it and keeps
// running (TestListenerClosedBeforeExit).
func TestListenerClosedMomentsBeforeExit(t *testing.T) {
	p := newTestPod(t, true)
	_, r := socketCollector(t, p)
	h, _ := serve(t, p, "close-listener", 5*time.Millisecond)
	syscall.Kill(h.Pid(), syscall.SIGTERM)
	h.Wait(t)
	lc := r.waitFor(t, "listener_closed", func(e *event.Event) bool { return e.Kind == event.ListenerClosed })
	exit := r.waitFor(t, "process_exit", func(e *event.Event) bool { return e.Kind == event.ProcessExit })
	if !lc.Flags.Has(event.FlagAtExit) {
		t.Errorf("listener closed %v before exit not flagged: %s", time.Duration(exit.Time-lc.Time), describe(&lc))
	}
	assertOrder(t, lc, exit)
}

// TestOpenWithoutPrivileges: an unprivileged Open says what it lacks.
func TestOpenWithoutPrivileges(t *testing.T) {
	requireKernel(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Root without capabilities: an empty bounding set.
	setpriv := testenv.RequireBinary(t, "setpriv")
	cmd := exec.Command(setpriv, "--bounding-set=-all", "--inh-caps=-all", self)
	cmd.Env = append(os.Environ(), helperEnv+"=open")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "needs root, or CAP_BPF and CAP_PERFMON") {
		t.Errorf("unprivileged Open: %s", out)
	}
	// Each of the chart's two BPF capabilities withheld in turn: Open
	// fails and names what is missing, rather than loading nothing quietly.
	for _, tc := range []struct{ caps, want string }{
		{"-all,+perfmon,+sys_resource", "loading BPF programs needs root, or CAP_BPF and CAP_PERFMON"},
		{"-all,+bpf,+sys_resource", "no kernel program could run: signal_generate: loading needs root, or CAP_BPF and CAP_PERFMON"},
	} {
		cmd := exec.Command(setpriv, "--bounding-set="+tc.caps, "--inh-caps=-all", self)
		cmd.Env = append(os.Environ(), helperEnv+"=open")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("helper with %s: %v\n%s", tc.caps, err, out)
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("Open with capabilities %s: %s, want %q", tc.caps, out, tc.want)
		}
	}
	if _, err := Open(Config{}); err == nil || !strings.Contains(err.Error(), "Node is empty") {
		t.Errorf("Open without a node: %v", err)
	}
}

// childOf returns the one child process of pid (nsenter's helper).
func childOf(t *testing.T, pid int) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if err != nil {
			t.Fatalf("children of %d: %v", pid, err)
		}
		if f := strings.Fields(string(b)); len(f) == 1 {
			n, err := strconv.Atoi(f[0])
			if err == nil {
				return n
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("process %d has no child", pid)
	return 0
}

// TestMainProcess: the container's main process (PID 1 of the container's
// pid namespace, as a runtime starts it) is flagged main in its signal,
// its listener's close and its exit; a process exec'd into the same cgroup
// and pid namespace later (a probe, kubectl exec) is not, and its events
// name the container all the same.
func TestMainProcess(t *testing.T) {
	p := newTestPod(t, true)
	_, r := socketCollector(t, p)
	p.PidNS = true
	main, _ := serve(t, p, "close-listener", 200*time.Millisecond)
	p.PidNS = false

	// A probe exec'd into the container: same cgroup, same pid
	// namespace, and the network namespace through ip netns exec.
	p.JoinPidNS = main.Pid()
	probe := p.start(t, "exit-on-term")
	p.JoinPidNS = 0
	probePID := childOf(t, probe.Pid())
	if err := syscall.Kill(probePID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	probe.Wait(t)
	psig := r.waitFor(t, "the probe's signal", func(e *event.Event) bool { return e.Kind == event.Signal && e.PID == int32(probePID) })
	pexit := r.waitFor(t, "the probe's exit", func(e *event.Event) bool { return e.Kind == event.ProcessExit && e.PID == int32(probePID) })
	for _, e := range []event.Event{psig, pexit} {
		if e.Flags.Has(event.FlagMain) {
			t.Errorf("the exec'd probe's %s is flagged main: %s", e.Kind, describe(&e))
		}
		if e.Attrs[event.AttrContainerID] != p.ContainerID {
			t.Errorf("the probe's %s: container_id %q, want %q", e.Kind, e.Attrs[event.AttrContainerID], p.ContainerID)
		}
		assertPod(t, e, p, true)
	}
	if pexit.Code != 3 {
		t.Errorf("probe exit code %d, want 3", pexit.Code)
	}

	syscall.Kill(main.Pid(), syscall.SIGTERM)
	main.Wait(t)
	sig := r.waitFor(t, "the main process's signal", func(e *event.Event) bool { return e.Kind == event.Signal && e.PID == int32(main.Pid()) })
	lc := r.waitFor(t, "listener_closed", func(e *event.Event) bool { return e.Kind == event.ListenerClosed && e.PID == int32(main.Pid()) })
	exit := r.waitFor(t, "the main process's exit", func(e *event.Event) bool { return e.Kind == event.ProcessExit && e.PID == int32(main.Pid()) })
	for _, e := range []event.Event{sig, lc, exit} {
		if !e.Flags.Has(event.FlagMain) {
			t.Errorf("the main process's %s is not flagged main: %s", e.Kind, describe(&e))
		}
		if e.Attrs[event.AttrContainerID] != p.ContainerID {
			t.Errorf("%s: container_id %q, want %q", e.Kind, e.Attrs[event.AttrContainerID], p.ContainerID)
		}
	}
	// The collector's own clock attributes are still there.
	if exit.Attrs[event.AttrClockUncertainty] == "" {
		t.Errorf("exit lost the clock attributes: %v", exit.Attrs)
	}
}
