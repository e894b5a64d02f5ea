package sampleapp_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/lab/load"
	"github.com/drainscope/drainscope/lab/sampleapp"
)

// The test binary doubles as the service process, so the behaviours are
// tested with real signals, a real exit and the kernel closing the sockets.
func TestMain(m *testing.M) {
	if os.Getenv("SAMPLEAPP_CHILD") == "1" {
		os.Exit(sampleapp.Main(os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

var listening = regexp.MustCompile(`msg=listening .*addr=(\S+)`)

// start runs the service as a child process on a loopback port and returns
// it with its address once it listens.
func start(t *testing.T, args ...string) (*exec.Cmd, netip.AddrPort) {
	t.Helper()
	return startWith(t, nil, args...)
}

// startWith is start with the child's process attributes.
func startWith(t *testing.T, attr *syscall.SysProcAttr, args ...string) (*exec.Cmd, netip.AddrPort) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "SAMPLEAPP_CHILD=1", "POD_NAME=test-pod")
	cmd.SysProcAttr = attr
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := make(chan netip.AddrPort, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			t.Log("app:", sc.Text())
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				a, _ := netip.ParseAddrPort(m[1])
				addr <- a
			}
		}
	}()
	select {
	case a := <-addr:
		return cmd, a
	case <-time.After(10 * time.Second):
		t.Fatal("service did not start listening")
	}
	return nil, netip.AddrPort{}
}

// loadWhile runs keep-alive clients against target, sends SIGTERM to cmd
// after warm-up, and stops the load once the process has exited plus a
// little. It returns the load's result, the SIGTERM time and the process
// state.
func loadWhile(t *testing.T, cmd *exec.Cmd, target netip.AddrPort, warm time.Duration) (load.Result, time.Time, *os.ProcessState) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resc := make(chan load.Result, 1)
	go func() {
		r, err := load.Run(ctx, load.Config{
			Target: target, Clients: 5, Interval: 20 * time.Millisecond,
			Timeout: time.Second, Source: netip.MustParseAddr("127.0.0.1"),
		})
		if err != nil {
			t.Error(err)
		}
		resc <- r
	}()
	time.Sleep(warm)
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	time.Sleep(200 * time.Millisecond)
	cancel()
	return <-resc, sent, cmd.ProcessState
}

func TestExitAtSIGTERM(t *testing.T) {
	cmd, addr := start(t, "-behaviour", "exit")
	res, _, st := loadWhile(t, cmd, addr, 300*time.Millisecond)
	ws := st.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("process ended with %v, want killed by SIGTERM", st)
	}
	if res.OK == 0 {
		t.Fatalf("no request succeeded before SIGTERM: %+v", res)
	}
	// After the exit every request fails; before it none did.
	if res.FailedTotal() == 0 {
		t.Fatalf("no failure after the process died: %+v", res)
	}
	for _, f := range res.Failures {
		if f.Class != event.FailRefused && f.Class != event.FailEOF && f.Class != event.FailReset {
			t.Errorf("failure class %s (%s): want refused, eof or reset", f.Class, f.Err)
		}
	}
	t.Logf("requests=%d ok=%d failed=%v", res.Requests, res.OK, res.Failed)
}

func TestGracefulClosesListenerThenExits(t *testing.T) {
	const delay = 500 * time.Millisecond
	cmd, addr := start(t, "-behaviour", "graceful", "-exit-delay", delay.String())
	res, sent, st := loadWhile(t, cmd, addr, 300*time.Millisecond)
	if code := st.ExitCode(); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	if res.FailedTotal() == 0 {
		t.Fatalf("the keep-alive connections open at exit failed no request: %+v", res)
	}
	// The clients kept their connections: nothing failed before the exit.
	for _, f := range res.Failures {
		if f.Time.Before(sent.Add(delay - 50*time.Millisecond)) {
			t.Errorf("failure %s at SIGTERM%+v, before the exit at +%v: %s", f.Class, f.Time.Sub(sent), delay, f.Err)
		}
	}
	// The first failures are the keep-alive connections cut by the exit.
	first := res.Failures[0]
	if !first.Reused || (first.Class != event.FailEOF && first.Class != event.FailReset) {
		t.Errorf("first failure %+v: want eof or reset on a reused connection", first)
	}
	t.Logf("requests=%d ok=%d failed=%v", res.Requests, res.OK, res.Failed)
}

func TestDrainAnswersWithConnectionClose(t *testing.T) {
	s, err := sampleapp.New(sampleapp.Config{
		Behaviour: sampleapp.Drain, DrainMin: 100 * time.Millisecond,
		DrainIdle: 100 * time.Millisecond, DrainMax: 5 * time.Second, Pod: "p",
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	defer ln.Close()
	target := netip.MustParseAddrPort(ln.Addr().String())

	ctx, cancel := context.WithCancel(context.Background())
	resc := make(chan load.Result, 1)
	go func() {
		r, _ := load.Run(ctx, load.Config{Target: target, Clients: 5, Interval: 20 * time.Millisecond, Timeout: time.Second})
		resc <- r
	}()
	// A prober on its own connections, as the kubelet's: it must not keep
	// the draining server from being idle.
	probeCtx, stopProbes := context.WithCancel(context.Background())
	defer stopProbes()
	go func() {
		for probeCtx.Err() == nil {
			if c, err := net.Dial("tcp4", ln.Addr().String()); err == nil {
				_, _ = c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
				_, _ = bufio.NewReader(c).ReadString('\n')
				c.Close()
			}
			time.Sleep(30 * time.Millisecond)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	done := make(chan time.Time)
	go func() { s.Terminate(context.Background()); done <- time.Now() }()
	// While draining the server keeps serving: each client reconnects
	// after every answer. Then the clients go (to other pods, in a
	// cluster) and the server exits once idle.
	time.Sleep(300 * time.Millisecond)
	stopped := time.Now()
	cancel()
	res := <-resc
	var exited time.Time
	select {
	case exited = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("drain did not finish after the clients left")
	}
	if res.FailedTotal() != 0 {
		t.Errorf("drain failed %d requests: %+v", res.FailedTotal(), res.Failures)
	}
	if res.Conns <= 5+5 {
		t.Errorf("%d connections: want the clients to reconnect after Connection: close", res.Conns)
	}
	if d := exited.Sub(stopped); d < 50*time.Millisecond || d > 5*time.Second { // the upper bound only catches a drain that never ends
		t.Errorf("exit %v after the last client left, want about the idle time (100ms)", d)
	}
	if s.Open() > 1 {
		t.Errorf("%d connections open at exit", s.Open())
	}
}

func TestHealthFailsWhileDraining(t *testing.T) {
	s, _ := sampleapp.New(sampleapp.Config{Behaviour: sampleapp.Drain, DrainMin: time.Second, DrainIdle: time.Second})
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { _ = s.Serve(ln) }()
	get := func() int {
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
		line, _ := bufio.NewReader(c).ReadString('\n')
		if len(line) < 12 {
			t.Fatalf("bad status line %q", line)
		}
		switch line[9:12] {
		case "200":
			return 200
		case "503":
			return 503
		}
		return 0
	}
	if c := get(); c != 200 {
		t.Errorf("healthz before SIGTERM: %d", c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go s.Terminate(ctx)
	defer cancel()
	time.Sleep(50 * time.Millisecond)
	if c := get(); c != 503 {
		t.Errorf("healthz while draining: %d, want 503", c)
	}
}

func TestParseBehaviour(t *testing.T) {
	for _, b := range sampleapp.Behaviours {
		if got, err := sampleapp.ParseBehaviour(string(b)); err != nil || got != b {
			t.Errorf("%s: %v %v", b, got, err)
		}
	}
	if _, err := sampleapp.ParseBehaviour("prestop"); err == nil {
		t.Error("want an error")
	}
	if _, err := sampleapp.New(sampleapp.Config{Behaviour: "x"}); err == nil || errors.Is(err, nil) {
		t.Error("New with an unknown behaviour: want an error")
	}
}

// TestExitBehaviourAsPID1: the exit behaviour leaves SIGTERM at its
// default. Outside a pid namespace the kernel ends the process by the
// signal; as PID 1 of its own pid namespace, as in a container (the lab's
// process node and a real node alike), the kernel does not kill an init by
// a signal it has no handler for: the Go runtime re-raises it, survives,
// and exits with status 2. The process ends at SIGTERM either way.
func TestExitBehaviourAsPID1(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "a pid namespace needs root")
	}
	for _, c := range []struct {
		name     string
		attr     *syscall.SysProcAttr
		signaled bool
		code     int
	}{
		{"host", nil, true, -1},
		{"pid namespace", &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}, false, 2},
	} {
		cmd, _ := startWith(t, c.attr, "-behaviour", "exit")
		sent := time.Now()
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		took := time.Since(sent)
		ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ok {
			t.Fatalf("%s: %v", c.name, err)
		}
		if ws.Signaled() != c.signaled || (!c.signaled && ws.ExitStatus() != c.code) || (c.signaled && ws.Signal() != syscall.SIGTERM) {
			t.Errorf("%s: wait status %v (signaled %v, exit %d), want signaled %v, exit %d", c.name, ws, ws.Signaled(), ws.ExitStatus(), c.signaled, c.code)
		}
		if took > 2*time.Second {
			t.Errorf("%s: exited %v after SIGTERM, want at once", c.name, took)
		}
	}
}
