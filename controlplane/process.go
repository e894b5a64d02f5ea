package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one component running as a child process, its output appended
// to a log file.
type process struct {
	name string
	path string
	args []string
	env  []string // added to this process's environment
	log  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	err  error         // exit status, valid once done is closed
}

func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s already running", p.name)
	}
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening %s log: %w", p.name, err)
	}
	fmt.Fprintf(out, "==== %s starting at %s: %s %q\n", p.name, time.Now().UTC().Format(time.RFC3339Nano), p.path, p.args)
	cmd := exec.Command(p.path, p.args...)
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// A test binary killed by a timeout must not leave an API server
		// behind holding its ports.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		err := cmd.Wait()
		out.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// exited returns a channel closed when the process has exited, or nil when
// it is not running.
func (p *process) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *process) stop(grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	p.mu.Lock()
	p.cmd, p.done = nil, nil
	p.mu.Unlock()
	return nil
}

// signal sends sig to the process group; an error when it is not running.
func (p *process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("%s is not running", p.name)
	}
	return syscall.Kill(-cmd.Process.Pid, sig)
}

// tail returns the end of the process's log, for error messages.
func (p *process) tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

func freePorts(n int) ([]int, error) {
	// Hold all listeners open until every port is chosen, so none repeats.
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// portFreeOn returns a port free on 127.0.0.1 and on each of also, below
// the kernel's ephemeral range (ephemeralStart): the ports of outgoing
// connections and of listeners on port 0 come from that range, so none
// of them can take it later.
func portFreeOn(also []netip.Addr) (int, error) {
	low := ephemeralStart()
	const from = 10000
	if low-from < 1000 {
		return 0, fmt.Errorf("choosing the API server's port: the ephemeral range starts at %d, leaving too few ports from %d", low, from)
	}
	free := func(a netip.AddrPort) bool {
		l, err := net.Listen("tcp", a.String())
		if err != nil {
			return false
		}
		l.Close()
		return true
	}
	for range 200 {
		p := from + rand.IntN(low-from)
		ok := free(netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(p)))
		for _, a := range also {
			ok = ok && free(netip.AddrPortFrom(a, uint16(p)))
		}
		if ok {
			return p, nil
		}
	}
	return 0, fmt.Errorf("choosing the API server's port: none of 200 tries in %d-%d was free on 127.0.0.1 and %v", from, low-1, also)
}

// ephemeralStart is the first port of the kernel's ephemeral range
// (ip_local_port_range), or 32768 when it cannot be read.
func ephemeralStart() int {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 32768
}

// waitFor polls check until it succeeds, the process exits, or ctx ends.
func waitFor(ctx context.Context, p *process, what string, check func(context.Context) error) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	exited := p.exited()
	var last error
	for {
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last error: %v)\n--- %s log (tail) ---\n%s", what, ctx.Err(), last, p.name, p.tail(4000))
		case <-exited:
			p.mu.Lock()
			err := p.err
			p.mu.Unlock()
			return fmt.Errorf("%s exited while waiting for %s: %v\n--- %s log (tail) ---\n%s", p.name, what, err, p.name, p.tail(4000))
		case <-t.C:
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
