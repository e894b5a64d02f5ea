package scenario

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/drainscope/drainscope/ingest"
	"github.com/drainscope/drainscope/lab/ingress"
	"github.com/drainscope/drainscope/lab/realnode"
	"github.com/drainscope/drainscope/lab/sampleapp"
)

// The sidecar profile puts a mesh's inbound proxy in every pod of the
// sample Deployment, as meshes do: Debian's HAProxy 2.6 in a container of
// its own, and an init container that redirects the pod's inbound traffic
// to it with iptables in the pod's network namespace. Client traffic to
// podIP:8080 (what the EndpointSlice names) lands on the proxy, which
// forwards it to the app on 127.0.0.1:8080. The runs differ only in how
// the proxy ends (SidecarKind). It needs the real node: the proxy and the
// redirect are images of this host's programs, run by containerd and runc.

// SidecarKind is how a run's proxy is put into the pod, and so how it ends.
type SidecarKind string

// The proxy's kinds.
const (
	// SidecarClassic is a regular container beside the app. The kubelet
	// stops it with the app, at the pod's deletion: SIGTERM, on which
	// HAProxy stops at once (its hard stop) and closes every connection.
	SidecarClassic SidecarKind = "classic"
	// SidecarNative is an init container with restartPolicy Always, a
	// native sidecar: the kubelet runs its preStop at the deletion, as
	// for every container, but stops it only once the app has exited.
	// Its preStop starts its drain (Connection: close on every answer,
	// still accepting), as Istio's injection does for its native sidecar
	// (pilot-agent request POST drain).
	SidecarNative SidecarKind = "native"
	// SidecarDraining is a regular container whose stop signal is
	// SIGUSR1 (its image's STOPSIGNAL, as in HAProxy's official image):
	// HAProxy keeps listening and serving for its grace time, answering
	// Connection: close, then stops listening and exits once its
	// connections are done, as Istio's terminationDrainDuration keeps
	// its proxy up after SIGTERM.
	SidecarDraining SidecarKind = "draining"
)

// The sidecar profile's images, containers and ports.
const (
	// ProxyImage is HAProxy with its libraries and configuration.
	ProxyImage = "drainscope.dev/proxy:lab"
	// ProxyDrainImage is the same files with STOPSIGNAL SIGUSR1.
	ProxyDrainImage = "drainscope.dev/proxy-drain:lab"
	// RedirectImage is iptables (iptables-nft) with its libraries.
	RedirectImage = "drainscope.dev/iptables:lab"

	ProxyContainer    = "proxy"
	RedirectContainer = "redirect"

	// ProxyInboundPort is where the redirect sends the pod's inbound
	// traffic: Istio's inbound port.
	ProxyInboundPort = 15006
	// ProxyAdminPort serves /drain, which the native sidecar's preStop
	// asks; it is not redirected.
	ProxyAdminPort = 15000
	// appPort is the port the app declares (named http), the Service's
	// targetPort and the EndpointSlice's.
	appPort = 8080
	// proxyUser runs the proxy, as Istio runs its proxy as 1337.
	proxyUser = "1337:1337"
)

// SidecarRuns are the sidecar profile's runs, in order. The app drains
// properly in each (Connection: close while draining, exits when idle,
// behind a preStop sleep): what differs is the proxy beside it.
var SidecarRuns = []Run{
	{Name: "sidecar-exit", Behaviour: sampleapp.Drain, PreStop: true, Rollout: true, Sidecar: SidecarClassic,
		What: "classic sidecar proxy, stopped at once at SIGTERM, beside an app that drains"},
	{Name: "sidecar-native", Behaviour: sampleapp.Drain, PreStop: true, Rollout: true, Sidecar: SidecarNative,
		What: "native sidecar proxy, draining from its preStop, stopped after the app"},
	{Name: "sidecar-drain", Behaviour: sampleapp.Drain, PreStop: true, Rollout: true, Sidecar: SidecarDraining,
		What: "classic sidecar proxy that drains at its stop signal and outlives the app"},
}

// ProxyGrace is how long the draining proxy keeps listening and serving
// after its stop signal: longer than the app's preStop sleep and its
// shortest drain (5 s), and 5 s more, so the proxy outlives the app.
func ProxyGrace(p Profile) time.Duration { return p.PreStop + 10*time.Second }

// ProxyConfig is the proxy's haproxy.cfg. Its drain grace time comes from
// the environment (PROXY_DRAIN_GRACE), which the pod spec sets from the
// profile.
func ProxyConfig() string {
	return proxyConfig(fmt.Sprintf(":%d", ProxyInboundPort), fmt.Sprintf(":%d", ProxyAdminPort), fmt.Sprintf("127.0.0.1:%d", appPort))
}

// proxyConfig is ProxyConfig with its inbound and admin listeners and the
// app's address as given.
func proxyConfig(inbound, admin, app string) string {
	return fmt.Sprintf(`global
  log stdout format raw local0
  maxconn 4096
  # On SIGUSR1 (the drain image's stop signal) keep listening and serving
  # this long, "stopping" true, then stop listening and leave once the
  # last connection is done. SIGTERM stops HAProxy at once whatever this
  # says (its hard stop).
  grace "${PROXY_DRAIN_GRACE}"
defaults
  mode http
  log global
  timeout connect 2s
  timeout client 60s
  timeout server 60s
  retries 0
frontend inbound
  bind %[1]s
  # Failed requests only, in the format drainscope imports.
  option dontlog-normal
  log-format "%[2]s"
  # Draining, after SIGUSR1 or /drain: every answer tells the client to
  # leave. The app's own Connection: close ends only the proxy's
  # connection to it (hop-by-hop), as with any proxy.
  acl draining stopping
  acl draining var(proc.draining) -m int 1
  http-after-response set-header Connection close if draining
  default_backend app
frontend admin
  bind %[3]s
  http-request set-var(proc.draining) int(1) if { path /drain }
  http-request return status 200 content-type text/plain string "draining" if { path /drain }
  http-request return status 404
backend app
  # One connection to the app per client connection, closed with it, so
  # the app's drain sees the clients leave: a shared pool of idle
  # connections would keep it from ever being idle.
  http-reuse never
  # The app on loopback: the redirect (PREROUTING) sees only what comes
  # into the pod, so this connection is not sent back to the proxy.
  server app %[4]s
`, inbound, ingest.HAProxyLogFormat, admin, app)
}

// proxyConfigPath is the configuration's place in the proxy's image.
const proxyConfigPath = "/etc/haproxy/haproxy.cfg"

// haproxyFlags run HAProxy in the foreground (-db) in master-worker mode
// (-W), as HAProxy's official image does. The container's PID 1 gets no
// default signal actions from the kernel, and HAProxy alone has no
// SIGTERM handler (its hard stop is SIGTERM's default action): run as
// PID 1 without -W it ignored the kubelet's SIGTERM and lived until the
// SIGKILL at the grace period's end. Its master catches SIGTERM and
// SIGUSR1 and passes them to the worker, which then stops as HAProxy
// does anywhere.
var haproxyFlags = []string{"-W", "-db", "-f", proxyConfigPath}

// iptablesProgram is Debian's iptables-nft, a multi-call binary: its
// first argument names the tool.
const iptablesProgram = "/usr/sbin/xtables-nft-multi"

// iptablesExtensions are the extensions the redirect's rule loads (the
// tcp match, the REDIRECT target, the standard verdicts), from Debian's
// compiled-in extension directory.
var iptablesExtensions = []string{"libxt_tcp.so", "libxt_REDIRECT.so", "libxt_standard.so"}

const xtablesDir = "/usr/lib/x86_64-linux-gnu/xtables"

// PreflightSidecar reports what this host lacks for the sidecar profile's
// images: HAProxy, iptables-nft with its extensions, ldd.
func PreflightSidecar() error {
	var missing []string
	if _, err := ingress.Binary(); err != nil {
		missing = append(missing, err.Error())
	}
	if _, err := os.Stat(iptablesProgram); err != nil {
		missing = append(missing, iptablesProgram+" (Debian package iptables)")
	}
	for _, x := range iptablesExtensions {
		if _, err := os.Stat(filepath.Join(xtablesDir, x)); err != nil {
			missing = append(missing, filepath.Join(xtablesDir, x)+" (Debian package iptables)")
		}
	}
	if _, err := os.Stat("/usr/bin/ldd"); err != nil {
		missing = append(missing, "ldd (Debian package libc-bin)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("the sidecar profile needs: %s", strings.Join(missing, "; "))
	}
	return nil
}

// SidecarImages are the sidecar profile's images, built from this host's
// programs: HAProxy (twice: stopped by SIGTERM, and by SIGUSR1) and
// iptables, each with the shared libraries ldd names for it.
func SidecarImages() ([]realnode.Image, error) {
	if err := PreflightSidecar(); err != nil {
		return nil, err
	}
	haproxy, _ := ingress.Binary()
	proxy, err := realnode.LinkedFiles(haproxy)
	if err != nil {
		return nil, err
	}
	proxy = append(proxy, realnode.File{Path: proxyConfigPath, Data: []byte(ProxyConfig())})
	entry := append([]string{haproxy}, haproxyFlags...)
	ipt, err := realnode.LinkedFiles(iptablesProgram)
	if err != nil {
		return nil, err
	}
	for _, x := range iptablesExtensions {
		p := filepath.Join(xtablesDir, x)
		ipt = append(ipt, realnode.File{Path: p, From: p, Mode: 0o644})
	}
	return []realnode.Image{
		{Ref: ProxyImage, Files: proxy, Entrypoint: entry, User: proxyUser},
		{Ref: ProxyDrainImage, Files: proxy, Entrypoint: entry, User: proxyUser, StopSignal: "SIGUSR1"},
		// Root, with NET_ADMIN from the pod spec: iptables in the pod's
		// network namespace.
		{Ref: RedirectImage, Files: ipt, Entrypoint: []string{iptablesProgram, "iptables"}},
	}, nil
}

// addSidecar puts r's proxy and the redirect into the pod spec: the init
// container that redirects the Service's targetPort to the proxy's inbound
// port, as Istio's init container does, and the proxy, a container beside
// the app or a native sidecar.
func addSidecar(spec *corev1.PodSpec, r Run, p Profile) {
	redirect := corev1.Container{
		Name:  RedirectContainer,
		Image: RedirectImage,
		Args: []string{"-t", "nat", "-A", "PREROUTING", "-p", "tcp", "--dport", strconv.Itoa(appPort),
			"-j", "REDIRECT", "--to-ports", strconv.Itoa(ProxyInboundPort)},
		SecurityContext: &corev1.SecurityContext{
			RunAsUser: new(int64),
			Capabilities: &corev1.Capabilities{
				Add:  []corev1.Capability{"NET_ADMIN", "NET_RAW"},
				Drop: []corev1.Capability{"ALL"},
			},
		},
	}
	image := ProxyImage
	if r.Sidecar == SidecarDraining {
		image = ProxyDrainImage
	}
	proxy := corev1.Container{
		Name:  ProxyContainer,
		Image: image,
		Env:   []corev1.EnvVar{{Name: "PROXY_DRAIN_GRACE", Value: fmt.Sprintf("%ds", int(ProxyGrace(p)/time.Second))}},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("10m"),
			corev1.ResourceMemory: resource.MustParse("32Mi"),
		}},
	}
	// No port declared: the proxy serves no port of the Service's; the
	// app declares 8080 and is the app.
	switch r.Sidecar {
	case SidecarNative:
		always := corev1.ContainerRestartPolicyAlways
		proxy.RestartPolicy = &always
		proxy.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			HTTPGet: &corev1.HTTPGetAction{Path: "/drain", Port: intstr.FromInt32(ProxyAdminPort)},
		}}
		spec.InitContainers = append(spec.InitContainers, redirect, proxy)
	default:
		spec.InitContainers = append(spec.InitContainers, redirect)
		spec.Containers = append(spec.Containers, proxy)
	}
}

// checkSidecar reports why r cannot run on c's cluster.
func checkSidecar(c *Cluster, r Run) error {
	if r.Sidecar == "" {
		return nil
	}
	if !slices.Contains([]SidecarKind{SidecarClassic, SidecarNative, SidecarDraining}, r.Sidecar) {
		return fmt.Errorf("run %s: unknown sidecar kind %q", r.Name, r.Sidecar)
	}
	if c.Node.Kind() != NodeKubelet {
		return fmt.Errorf("run %s: the sidecar runs need the real node (--node kubelet): the proxy and its redirect are containers", r.Name)
	}
	if !c.opts.Sidecar {
		return errors.New("run " + r.Name + ": the cluster was brought up without the sidecar images (Options.Sidecar)")
	}
	return nil
}
