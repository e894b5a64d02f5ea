// Package ingress runs a real ingress proxy in front of the lab's pods. It
// drives it as ingress controllers do: Debian's HAProxy 2.6 with a fixed set
// of server slots, each slot pointed at an endpoint through HAProxy's runtime
// API (set server … addr/state) as the EndpointSlices change, with no reload.
// It also reads the proxy's own view back (show servers state) as dataplane
// events of that proxy, so its lag behind the EndpointSlice is measured as
// kube-proxy's is.
package ingress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/ingest"
)

// HAProxy is one running HAProxy with one frontend and one backend of
// server slots.
type HAProxy struct {
	Listen    netip.AddrPort
	Backend   string // ns_service_port, as HAProxy ingress controllers name backends
	Slots     int
	AccessLog string // its access log, in ingest.HAProxyLogFormat
	dir, sock string
	cmd       *exec.Cmd
	exited    chan error

	mu    sync.Mutex
	slots []netip.AddrPort // per slot (srv1 …): its endpoint, zero when free
}

// Binary finds haproxy (Debian puts it in /usr/sbin).
func Binary() (string, error) {
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/haproxy"); err == nil {
		return "/usr/sbin/haproxy", nil
	}
	return "", errors.New("haproxy not found (Debian package haproxy)")
}

// StartHAProxy starts HAProxy in the foreground in dir, listening on
// listen, with slots server slots in backend, all in maintenance until
// SetEndpoints points them somewhere. Connections to a server are not
// retried (retries 0, no redispatch): a refused connect reaches the client
// as HAProxy's 503 with termination state SC, as it does for an ingress
// whose backend list still holds a pod that stopped listening.
func StartHAProxy(ctx context.Context, dir string, listen netip.AddrPort, backend string, slots int) (*HAProxy, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	h := &HAProxy{Listen: listen, Backend: backend, Slots: slots, dir: dir,
		sock: filepath.Join(dir, "admin.sock"), AccessLog: filepath.Join(dir, "access.log"),
		slots: make([]netip.AddrPort, slots), exited: make(chan error, 1)}
	var servers strings.Builder
	for i := 1; i <= slots; i++ {
		// A placeholder address; every slot is put in maintenance before
		// the frontend is used.
		fmt.Fprintf(&servers, "  server srv%d 127.0.0.1:9 weight 1\n", i)
	}
	cfg := fmt.Sprintf(`global
  stats socket %s mode 600 level admin
  log stdout format raw local0
defaults
  mode http
  log global
  timeout connect 2s
  timeout client 30s
  timeout server 30s
  retries 0
frontend fe_http
  bind %s
  log-format "%s"
  default_backend %s
backend %s
  balance roundrobin
%s`, h.sock, listen, ingest.HAProxyLogFormat, backend, backend, servers.String())
	cfgPath := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(h.AccessLog)
	if err != nil {
		return nil, err
	}
	h.cmd = exec.Command(bin, "-db", "-f", cfgPath)
	h.cmd.Stdout = logf
	var stderr strings.Builder
	h.cmd.Stderr = &stderr
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := h.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting haproxy: %w", err)
	}
	go func() { h.exited <- h.cmd.Wait(); logf.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := h.Command("show info"); err == nil {
			break
		}
		select {
		case err := <-h.exited:
			return nil, fmt.Errorf("haproxy exited: %v: %s", err, stderr.String())
		case <-ctx.Done():
			h.Close()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			h.Close()
			return nil, fmt.Errorf("haproxy's runtime API did not answer within 10 s: %s", stderr.String())
		}
	}
	for i := 1; i <= slots; i++ {
		if err := h.set(fmt.Sprintf("set server %s/srv%d state maint", backend, i)); err != nil {
			h.Close()
			return nil, err
		}
	}
	return h, nil
}

// Close stops HAProxy (SIGUSR1: a soft stop that lets it flush its log).
func (h *HAProxy) Close() error {
	if h.cmd == nil || h.cmd.Process == nil {
		return nil
	}
	h.cmd.Process.Signal(syscall.SIGUSR1)
	select {
	case <-h.exited:
	case <-time.After(5 * time.Second):
		h.cmd.Process.Kill()
		<-h.exited
	}
	h.cmd = nil
	return nil
}

// Command sends one command to the runtime API and returns its answer.
func (h *HAProxy) Command(cmd string) (string, error) {
	c, err := net.DialTimeout("unix", h.sock, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(cmd + "\n")); err != nil {
		return "", err
	}
	var b strings.Builder
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	return b.String(), sc.Err()
}

// set sends a command whose answer is empty unless it failed.
func (h *HAProxy) set(cmd string) error {
	out, err := h.Command(cmd)
	if err != nil {
		return fmt.Errorf("haproxy %q: %w", cmd, err)
	}
	if s := strings.TrimSpace(out); s != "" && !strings.Contains(s, "changed from") && !strings.Contains(s, "no need to change") {
		return fmt.Errorf("haproxy %q: %s", cmd, s)
	}
	return nil
}

// SetEndpoints makes the backend's slots the ready endpoints eps, as an
// ingress controller does on an EndpointSlice change: an endpoint keeps its
// slot, a new one takes a free slot (address first, then ready), a gone
// one's slot goes to maintenance. No reload.
func (h *HAProxy) SetEndpoints(eps []netip.AddrPort) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	want := map[netip.AddrPort]bool{}
	for _, e := range eps {
		want[e] = true
	}
	var errs []error
	for i, cur := range h.slots {
		if cur.IsValid() && !want[cur] {
			errs = append(errs, h.set(fmt.Sprintf("set server %s/srv%d state maint", h.Backend, i+1)))
			h.slots[i] = netip.AddrPort{}
		}
	}
	for _, e := range eps {
		if slices.Contains(h.slots, e) {
			continue
		}
		i := slices.Index(h.slots, netip.AddrPort{})
		if i < 0 {
			errs = append(errs, fmt.Errorf("no free server slot for %s (%d slots)", e, h.Slots))
			continue
		}
		errs = append(errs, h.set(fmt.Sprintf("set server %s/srv%d addr %s port %d", h.Backend, i+1, e.Addr(), e.Port())))
		errs = append(errs, h.set(fmt.Sprintf("set server %s/srv%d state ready", h.Backend, i+1)))
		h.slots[i] = e
	}
	return errors.Join(errs...)
}

// ServersState reads HAProxy's own view of the backend (show servers
// state): the endpoints its servers route new connections to, those
// running and in no maintenance or drain.
func (h *HAProxy) ServersState() (map[netip.AddrPort]bool, error) {
	out, err := h.Command("show servers state " + h.Backend)
	if err != nil {
		return nil, err
	}
	return parseServersState(out)
}

// parseServersState reads show servers state's version 1 output: a
// version line, a # header naming the columns, then one line per server.
func parseServersState(out string) (map[netip.AddrPort]bool, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 || strings.TrimSpace(lines[0]) != "1" || !strings.HasPrefix(lines[1], "# ") {
		return nil, fmt.Errorf("show servers state: unexpected answer %q", clip(out))
	}
	col := map[string]int{}
	for i, name := range strings.Fields(lines[1][2:]) {
		col[name] = i
	}
	for _, name := range []string{"srv_addr", "srv_op_state", "srv_admin_state", "srv_port"} {
		if _, ok := col[name]; !ok {
			return nil, fmt.Errorf("show servers state: no %s column in %q", name, lines[1])
		}
	}
	in := map[netip.AddrPort]bool{}
	for _, l := range lines[2:] {
		f := strings.Fields(l)
		if len(f) <= col["srv_port"] {
			continue
		}
		a, err := netip.ParseAddr(f[col["srv_addr"]])
		port, perr := strconv.ParseUint(f[col["srv_port"]], 10, 16)
		if err != nil || perr != nil {
			continue
		}
		// op state 2 is running; an admin state other than 0 is some
		// maintenance or drain.
		if f[col["srv_op_state"]] == "2" && f[col["srv_admin_state"]] == "0" {
			in[netip.AddrPortFrom(a, uint16(port))] = true
		}
	}
	return in, nil
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// Watch polls HAProxy's own view every interval until ctx ends and emits
// each change as a dataplane event of node (the proxy's name) for the
// Service ns/name: dataplane_endpoint_added when a server starts routing
// to an endpoint, _removed when it stops, at the poll that saw it (so the
// times are as fine as interval).
func (h *HAProxy) Watch(ctx context.Context, interval time.Duration, node, ns, name string, emit func(event.Event)) error {
	prev := map[netip.AddrPort]bool{}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		cur, err := h.ServersState()
		at := time.Now().UnixNano()
		if err == nil {
			for _, ep := range sortedKeys(prev, cur) {
				if prev[ep] == cur[ep] {
					continue
				}
				k := event.DataplaneEndpointRemoved
				if cur[ep] {
					k = event.DataplaneEndpointAdded
				}
				emit(event.Event{Time: at, Kind: k, Node: node, Source: event.SourceDataplane,
					Pod: event.PodRef{Namespace: ns}, Service: name, Local: ep,
					Attrs: map[string]string{event.AttrProxy: event.ProxyHAProxy}})
			}
			prev = cur
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func sortedKeys(a, b map[netip.AddrPort]bool) []netip.AddrPort {
	var out []netip.AddrPort
	for k := range a {
		out = append(out, k)
	}
	for k := range b {
		if !a[k] {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(x, y netip.AddrPort) int { return x.Compare(y) })
	return out
}
