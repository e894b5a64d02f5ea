package scenario

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/lab/ingress"
	"github.com/drainscope/drainscope/lab/sampleapp"
)

// The pod spec of each sidecar run: the app as in every run (port 8080
// named http, which the Service's targetPort names), the redirect as an
// init container with NET_ADMIN sending that port to the proxy's inbound
// port, and the proxy a regular container (classic, draining: with the
// SIGUSR1 image) or a native sidecar draining from its preStop.
func TestSidecarPodSpec(t *testing.T) {
	p := Profiles["sidecar"]
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, r := range SidecarRuns {
		spec := deployment("sample-"+r.Name, r, p).Spec.Template.Spec
		var names, inits []string
		for _, c := range spec.Containers {
			names = append(names, c.Name)
		}
		for _, c := range spec.InitContainers {
			inits = append(inits, c.Name)
		}
		app := spec.Containers[0]
		if app.Name != "app" || len(app.Ports) != 1 || app.Ports[0].Name != "http" || app.Ports[0].ContainerPort != appPort {
			t.Errorf("%s: app container %s with ports %+v, want app declaring %d named http", r.Name, app.Name, app.Ports, appPort)
		}
		if app.Lifecycle == nil || app.Lifecycle.PreStop == nil || app.Lifecycle.PreStop.Sleep == nil || !slices.Contains(app.Args, "--behaviour=drain") {
			t.Errorf("%s: the app must drain behind a preStop sleep: %v %+v", r.Name, app.Args, app.Lifecycle)
		}
		redirect := spec.InitContainers[0]
		if redirect.Name != RedirectContainer || redirect.Image != RedirectImage ||
			!strings.Contains(strings.Join(redirect.Args, " "), fmt.Sprintf("-t nat -A PREROUTING -p tcp --dport %d -j REDIRECT --to-ports %d", appPort, ProxyInboundPort)) ||
			!slices.Contains(redirect.SecurityContext.Capabilities.Add, "NET_ADMIN") || redirect.RestartPolicy != nil {
			t.Errorf("%s: redirect %+v", r.Name, redirect)
		}
		var proxy corev1.Container
		switch r.Sidecar {
		case SidecarNative:
			if !slices.Equal(names, []string{"app"}) || !slices.Equal(inits, []string{RedirectContainer, ProxyContainer}) {
				t.Fatalf("%s: containers %v, init containers %v", r.Name, names, inits)
			}
			proxy = spec.InitContainers[1]
			if proxy.RestartPolicy == nil || *proxy.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				t.Errorf("%s: the proxy is no native sidecar: restart policy %v", r.Name, proxy.RestartPolicy)
			}
			if h := proxy.Lifecycle; h == nil || h.PreStop == nil || h.PreStop.HTTPGet == nil || h.PreStop.HTTPGet.Path != "/drain" ||
				h.PreStop.HTTPGet.Port.IntValue() != ProxyAdminPort {
				t.Errorf("%s: the native proxy's preStop %+v, want GET /drain on %d", r.Name, h, ProxyAdminPort)
			}
		default:
			if !slices.Equal(names, []string{"app", ProxyContainer}) || !slices.Equal(inits, []string{RedirectContainer}) {
				t.Fatalf("%s: containers %v, init containers %v", r.Name, names, inits)
			}
			proxy = spec.Containers[1]
			if proxy.Lifecycle != nil {
				t.Errorf("%s: a classic proxy with a lifecycle %+v", r.Name, proxy.Lifecycle)
			}
		}
		want := ProxyImage
		if r.Sidecar == SidecarDraining {
			want = ProxyDrainImage
		}
		if proxy.Image != want || len(proxy.Ports) != 0 {
			t.Errorf("%s: proxy image %s ports %v, want %s and no port", r.Name, proxy.Image, proxy.Ports, want)
		}
		if len(proxy.Env) != 1 || proxy.Env[0].Value != "15s" {
			t.Errorf("%s: proxy env %+v, want PROXY_DRAIN_GRACE=15s", r.Name, proxy.Env)
		}
	}
	svc := service("sample-sidecar-exit", SidecarRuns[0])
	if svc.Spec.Ports[0].TargetPort.String() != "http" {
		t.Errorf("the Service's targetPort %s, want the app's port by its name", svc.Spec.Ports[0].TargetPort.String())
	}
	if _, err := SelectProfileRuns(p, "sidecar-native,sidecar-exit"); err != nil {
		t.Error(err)
	}
	if _, err := SelectProfileRuns(p, "exit"); err == nil {
		t.Error("the sidecar profile selected the short profile's exit run")
	}
	short := p
	short.Grace = 10 * time.Second
	if short.Validate() == nil {
		t.Error("a grace period shorter than the draining proxy's passed")
	}
}

// TestProxyBehaviour runs the proxy's configuration in a real HAProxy on
// loopback, in front of the sample service, and checks what the runs rely
// on: keep-alive to the client; the app's own Connection: close ends only
// the proxy's connection to the app (hop-by-hop, as Envoy does too); after
// /drain every answer says Connection: close; SIGUSR1 keeps it accepting
// and serving, with Connection: close, for the grace time, then it leaves;
// SIGTERM ends it at once with the client's connection. HAProxy runs as
// in its image: PID 1 of its PID namespace, with the image's flags.
func TestProxyBehaviour(t *testing.T) {
	testenv.RequireRoot(t) // a PID namespace
	bin, err := ingress.Binary()
	if err != nil {
		testenv.Unavailable(t, err.Error())
	}
	dir := t.TempDir()
	serveApp := func(drain bool) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		app, err := sampleapp.New(sampleapp.Config{Behaviour: sampleapp.Drain, Pod: "p", DrainMin: time.Minute, DrainMax: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		go app.Serve(ln)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(func() { cancel(); ln.Close() })
		if drain {
			go app.Terminate(ctx)
			// Terminate closes nothing for a minute: it answers with
			// Connection: close from its first moment.
			for {
				c := dialProxy(t, ln.Addr().String())
				r := c.get(t)
				c.Close()
				if r.Close {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		return ln.Addr().String()
	}
	// exited is closed once HAProxy has exited.
	start := func(t *testing.T, app, grace string) (inbound, admin string, cmd *exec.Cmd, exited chan struct{}) {
		inbound, admin = freeLoopback(t), freeLoopback(t)
		cfg := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".cfg")
		if err := os.WriteFile(cfg, []byte(proxyConfig(inbound, admin, app)), 0o644); err != nil {
			t.Fatal(err)
		}
		// The image's flags, the configuration here.
		args := slices.Clone(haproxyFlags)
		args[len(args)-1] = cfg
		cmd = exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "PROXY_DRAIN_GRACE="+grace)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		// PID 1 of a PID namespace of its own, as in its container.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Cloneflags: syscall.CLONE_NEWPID}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited = make(chan struct{})
		go func() {
			_ = cmd.Wait()
			close(exited)
		}()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
			if t.Failed() {
				t.Logf("haproxy's output:\n%s", out.String())
			}
		})
		// The master re-executes itself once the worker runs, and catches
		// signals again only after that; until then, as PID 1, it ignores
		// them. In a pod that is over long before a stop signal comes.
		for i := 0; ; i++ {
			if masterWaiting(cmd.Process.Pid) {
				if c, err := net.DialTimeout("tcp", inbound, time.Second); err == nil {
					c.Close()
					return inbound, admin, cmd, exited
				}
			}
			if i > 500 {
				t.Fatalf("haproxy's master does not wait with its signal handlers, or its worker does not listen on %s:\n%s", inbound, out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	serving, draining := serveApp(false), serveApp(true)

	t.Run("keep-alive", func(t *testing.T) {
		inbound, _, _, _ := start(t, serving, "15s")
		c := dialProxy(t, inbound)
		defer c.Close()
		for range 2 {
			if r := c.get(t); r.Close || r.Header.Get(sampleapp.HeaderPod) != "p" {
				t.Errorf("answer %s close %v pod %q, want the app's, keep-alive", r.Status, r.Close, r.Header.Get(sampleapp.HeaderPod))
			}
		}
	})
	t.Run("app close is hop-by-hop", func(t *testing.T) {
		inbound, _, _, _ := start(t, draining, "15s")
		c := dialProxy(t, inbound)
		defer c.Close()
		for range 3 {
			if r := c.get(t); r.Close {
				t.Fatalf("the app's Connection: close reached the client through the proxy")
			}
		}
	})
	t.Run("drain", func(t *testing.T) {
		inbound, admin, _, _ := start(t, serving, "15s")
		c := dialProxy(t, inbound)
		defer c.Close()
		if r := c.get(t); r.Close {
			t.Fatal("Connection: close before the drain")
		}
		a := dialProxy(t, admin)
		resp, err := a.do("/drain")
		a.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /drain: %v %v", resp, err)
		}
		if r := c.get(t); !r.Close {
			t.Error("no Connection: close after /drain")
		}
		if _, err := c.do("/"); err == nil {
			t.Error("the proxy kept the connection open after its Connection: close")
		}
		n := dialProxy(t, inbound)
		defer n.Close()
		if r := n.get(t); !r.Close {
			t.Error("a new connection while draining: no Connection: close")
		}
	})
	t.Run("SIGUSR1", func(t *testing.T) {
		inbound, _, cmd, exited := start(t, serving, "2s")
		c := dialProxy(t, inbound)
		defer c.Close()
		c.get(t)
		if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		if r := c.get(t); !r.Close {
			t.Error("after SIGUSR1: no Connection: close on the open connection")
		}
		// Within the grace time it still accepts and serves.
		time.Sleep(500 * time.Millisecond)
		n := dialProxy(t, inbound)
		if r := n.get(t); !r.Close || r.StatusCode != http.StatusOK {
			t.Errorf("a new connection in the grace time: %s close %v, want 200 with Connection: close", r.Status, r.Close)
		}
		n.Close()
		// No connection left: the first was answered with Connection:
		// close; closing it here too keeps a busy machine's late close
		// from holding the soft stop (one CI run waited 10 s on it).
		c.Close()
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			t.Error("still running 20 s after SIGUSR1 with a 2 s grace and no connection")
		}
	})
	t.Run("SIGTERM", func(t *testing.T) {
		inbound, _, cmd, exited := start(t, serving, "15s")
		c := dialProxy(t, inbound)
		defer c.Close()
		c.get(t)
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			t.Fatal("still running 5 s after SIGTERM: want HAProxy's hard stop")
		}
		if _, err := c.do("/"); err == nil {
			t.Error("the client's connection outlived the proxy's SIGTERM")
		}
	})
}

// TestProxyConfigChecks runs haproxy -c over the configuration the image
// holds, with the grace time the pod spec sets.
func TestProxyConfigChecks(t *testing.T) {
	bin, err := ingress.Binary()
	if err != nil {
		testenv.Unavailable(t, err.Error())
	}
	cfg := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(ProxyConfig()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", "-f", cfg)
	cmd.Env = append(os.Environ(), "PROXY_DRAIN_GRACE=15s")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("haproxy -c: %v\n%s", err, out)
	}
}

// masterWaiting reports whether HAProxy's master at pid has re-executed
// itself to wait on its worker (HAPROXY_MWORKER_WAIT_ONLY in its
// environment) and catches SIGTERM again.
func masterWaiting(pid int) bool {
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil || !strings.Contains(string(env), "HAPROXY_MWORKER_WAIT_ONLY=1") {
		return false
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(syscall.SIGTERM-1)) != 0
		}
	}
	return false
}

// proxyConn is one keep-alive HTTP/1.1 connection.
type proxyConn struct {
	net.Conn
	br *bufio.Reader
}

func dialProxy(t *testing.T, addr string) *proxyConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return &proxyConn{Conn: c, br: bufio.NewReader(c)}
}

func (c *proxyConn) do(path string) (*http.Response, error) {
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: sample\r\n\r\n"); err != nil {
		return nil, err
	}
	r, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return nil, err
	}
	_, err = io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return r, err
}

func (c *proxyConn) get(t *testing.T) *http.Response {
	t.Helper()
	r, err := c.do("/")
	if err != nil {
		t.Fatalf("GET / through %s: %v", c.RemoteAddr(), err)
	}
	return r
}

func freeLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
