// Package realnode runs a real Kubernetes node for the lab. It runs containerd
// (Debian's package, with its CRI plugin), runc, the CNI bridge plugin and the
// kubelet built from the same Kubernetes release as the control plane. Images
// come from archives built on this host (Image) and imported into containerd;
// no registry is contacted.
//
// Everything it writes lives under one working directory (containerd's
// root and state, its network namespaces, the CNI configuration and IP
// allocations, the kubelet's root, pod logs and plugin directories) except
// what the kubelet and runc write outside it on any node: the pods' cgroups
// under CgroupRoot in every cgroup hierarchy, and the kubelet's links in
// /var/log/containers. Cleanup removes all of it, also after a crash.
package realnode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Config sets the node up.
type Config struct {
	Dir        string // working directory; created, and removed by Cleanup
	Kubelet    string // the kubelet binary
	Kubeconfig string // the kubelet's credentials for the API server
	Client     kubernetes.Interface
	NodeName   string
	NodeIP     netip.Addr   // the bridge's address: the Node's InternalIP
	Bridge     string       // an existing bridge the pods' veths join
	PodCIDR    netip.Prefix // pod addresses are allocated from it
	// CgroupRoot is the kubelet's cgroupRoot: pods live in
	// <hierarchy>/<CgroupRoot>/kubepods/<qos>/pod<uid>/<container id>.
	CgroupRoot string
	// SandboxImage is the pause image's reference; it must be among Images.
	SandboxImage string
	Images       []Image
	Log          *slog.Logger
}

// Node is a running containerd and kubelet.
type Node struct {
	cfg        Config
	containerd *proc
	kubelet    *proc
	runtime    string // as the Node reports it
	stopBind   context.CancelFunc
	bindDone   chan struct{}
}

// Binaries the node runs besides the kubelet, from Debian's containerd,
// runc and containernetworking-plugins packages.
var (
	containerdBin = "containerd"
	ctrBin        = "ctr"
	runcBin       = "runc"
	cniDir        = "/usr/lib/cni"
)

// Available reports what this host lacks for a real node, or nil.
func Available(kubelet string) error {
	var missing []string
	for _, b := range []string{containerdBin, ctrBin, runcBin, "containerd-shim-runc-v2"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b+" (Debian packages containerd, runc)")
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniDir, p)); err != nil {
			missing = append(missing, filepath.Join(cniDir, p)+" (Debian package containernetworking-plugins)")
		}
	}
	if _, err := os.Stat(kubelet); err != nil {
		missing = append(missing, "the kubelet: "+err.Error()+" (scripts/k8s-binaries.sh kubelet builds it)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("a real node needs: %s", strings.Join(missing, "; "))
	}
	return nil
}

func (c Config) sock() string { return filepath.Join(c.Dir, "containerd", "containerd.sock") }

// NetNSDir is where containerd keeps the pods' network namespaces.
func (c Config) NetNSDir() string {
	return filepath.Join(c.Dir, "containerd", "state", "io.containerd.grpc.v1.cri", "netns")
}

// Start runs containerd, imports the images and runs the kubelet, and
// returns once the Node is Ready. On error whatever it started is stopped;
// the caller still runs Cleanup.
func Start(ctx context.Context, cfg Config) (n *Node, err error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if err := Available(cfg.Kubelet); err != nil {
		return nil, err
	}
	n = &Node{cfg: cfg}
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	for _, d := range []string{"containerd", "cni/net.d", "cni/ipam", "kubelet/root", "kubelet/pods", "kubelet/volume-plugins", "kubelet/path", "images"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o755); err != nil {
			return n, err
		}
	}
	if err := rememberContainerLogsDir(cfg.Dir); err != nil {
		return n, err
	}
	if err := n.writeCNI(); err != nil {
		return n, err
	}
	if err := sharedNetNSDir(cfg.NetNSDir()); err != nil {
		return n, err
	}
	if err := createCgroupRoot(cfg.CgroupRoot); err != nil {
		return n, err
	}
	if err := n.startContainerd(ctx); err != nil {
		return n, err
	}
	for _, img := range cfg.Images {
		if err := n.importImage(ctx, img); err != nil {
			return n, err
		}
	}
	if err := n.startKubelet(ctx); err != nil {
		return n, err
	}
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.stopBind, n.bindDone = cancel, make(chan struct{})
	go func() {
		defer close(n.bindDone)
		n.bind(bctx)
	}()
	return n, nil
}

// sharedNetNSDir makes dir a mount point of its own with shared
// propagation, as /run is on a systemd host: a pod that mounts it with
// HostToContainer propagation (the chart's agent does) then sees the
// network namespaces containerd adds later. The runtime refuses that
// propagation from a private mount, and this host's / is private.
func sharedNetNSDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s: %w", dir, err)
	}
	if err := syscall.Mount("", dir, "", syscall.MS_SHARED|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("making %s a shared mount: %w", dir, err)
	}
	return nil
}

func (n *Node) writeCNI() error {
	c := n.cfg
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "drainscope-lab",
		"plugins": []any{map[string]any{
			"type":   "bridge",
			"bridge": c.Bridge,
			// The bridge already has the gateway address and the route
			// to the Service network (the lab's network set them up):
			// isGateway would also switch on the host's IP forwarding,
			// which nothing here needs.
			"isGateway": false,
			"ipMasq":    false,
			"ipam": map[string]any{
				"type": "host-local",
				"ranges": [][]map[string]string{{{
					"subnet":     c.PodCIDR.String(),
					"gateway":    c.NodeIP.String(),
					"rangeStart": c.PodCIDR.Addr().Next().Next().String(),
				}}},
				"routes":  []map[string]string{{"dst": "0.0.0.0/0", "gw": c.NodeIP.String()}},
				"dataDir": filepath.Join(c.Dir, "cni", "ipam"),
			},
		}},
	}
	b, _ := json.MarshalIndent(conf, "", "  ")
	return os.WriteFile(filepath.Join(c.Dir, "cni", "net.d", "10-drainscope-lab.conflist"), b, 0o644)
}

func (n *Node) startContainerd(ctx context.Context) error {
	c := n.cfg
	d := filepath.Join(c.Dir, "containerd")
	conf := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  # The pods' network namespaces under state, not /run/netns.
  netns_mounts_under_state_dir = true
  enable_cdi = false
  # Where lowering a process's oom_score_adj is refused (CAP_SYS_RESOURCE
  # withheld, as in some sandboxes), runc would fail to start the pause
  # container, which the CRI plugin gives -998: keep every score at or
  # above containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[7]q
    conf_dir = %[8]q
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
`, filepath.Join(d, "root"), filepath.Join(d, "state"), c.sock(), c.sock()+".ttrpc",
		filepath.Join(d, "opt"), c.SandboxImage, cniDir, filepath.Join(c.Dir, "cni", "net.d"))
	cf := filepath.Join(d, "config.toml")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		return err
	}
	n.containerd = &proc{name: "containerd", path: containerdBin, args: []string{"--config", cf},
		log: filepath.Join(c.Dir, "containerd.log")}
	if err := n.containerd.start(nil); err != nil {
		return err
	}
	return waitUntil(ctx, 30*time.Second, n.containerd, "containerd's socket", func() error {
		_, err := n.ctr(ctx, "version")
		return err
	})
}

func (n *Node) ctr(ctx context.Context, args ...string) ([]byte, error) {
	args = append([]string{"--address", n.cfg.sock(), "--namespace", "k8s.io"}, args...)
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, ctrBin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args[4:], " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func (n *Node) importImage(ctx context.Context, img Image) error {
	path := filepath.Join(n.cfg.Dir, "images", strings.NewReplacer("/", "_", ":", "_").Replace(img.Ref)+".tar")
	if err := img.Write(path); err != nil {
		return err
	}
	if _, err := n.ctr(ctx, "images", "import", "--snapshotter", "overlayfs", path); err != nil {
		return fmt.Errorf("importing image %s: %w", img.Ref, err)
	}
	n.cfg.Log.Info("image imported", "ref", img.Ref)
	return os.Remove(path)
}

func (n *Node) startKubelet(ctx context.Context) error {
	c := n.cfg
	k := filepath.Join(c.Dir, "kubelet")
	conf := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine's cgroup hierarchy is v1 (hybrid): the kubelet refuses to
# start on cgroup v1 unless told not to.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]q
failSwapOn: false
containerRuntimeEndpoint: unix://%[2]s
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
podLogsDir: %[3]q
volumePluginDir: %[4]q
podCIDR: %[5]q
resolvConf: ""
makeIPTablesUtilChains: false
# Nothing is evicted for the host's disk or memory, and images stay.
evictionHard: {memory.available: "0%%", nodefs.available: "0%%", imagefs.available: "0%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
enforceNodeAllocatable: []
# With every threshold off, the eviction manager runs (every 10 s) only
# for the pods' own ephemeral-storage limits and emptyDir sizes: a pod
# past its limit is evicted, as the long-lived lab's kubelet eviction
# needs. Its volumes are measured every 5 to 10 s instead of 1 to 2 min,
# so the eviction follows the write within half a minute.
localStorageCapacityIsolation: true
volumeStatsAggPeriod: 5s
nodeStatusReportFrequency: 10s
serializeImagePulls: false
`, c.CgroupRoot, c.sock(), filepath.Join(k, "pods"), filepath.Join(k, "volume-plugins"), c.PodCIDR.String())
	cf := filepath.Join(k, "config.yaml")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		return err
	}
	// The kubelet writes iptables rules into the host's filter table
	// whenever an iptables command is on its PATH; it gets a PATH with
	// only the tools it runs for volumes.
	pathDir := filepath.Join(k, "path")
	for _, tool := range []string{"mount", "umount", "nsenter", "du", "find", "nice", "ionice"} {
		if p, err := exec.LookPath(tool); err == nil {
			_ = os.Symlink(p, filepath.Join(pathDir, tool))
		}
	}
	n.kubelet = &proc{name: "kubelet", path: c.Kubelet, args: []string{
		"--config=" + cf,
		"--kubeconfig=" + c.Kubeconfig,
		"--root-dir=" + filepath.Join(k, "root"),
		"--cert-dir=" + filepath.Join(k, "root", "pki"),
		"--hostname-override=" + c.NodeName,
		"--node-ip=" + c.NodeIP.String(),
		"--v=2",
	}, log: filepath.Join(c.Dir, "kubelet.log")}
	if err := n.kubelet.start([]string{"PATH=" + pathDir}); err != nil {
		return err
	}
	return waitUntil(ctx, 90*time.Second, n.kubelet, "the Node "+c.NodeName+" Ready", func() error {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status == corev1.ConditionTrue {
					n.runtime = node.Status.NodeInfo.ContainerRuntimeVersion + ", kubelet " + node.Status.NodeInfo.KubeletVersion
					return nil
				}
				return fmt.Errorf("not ready: %s", cond.Message)
			}
		}
		return errors.New("no Ready condition yet")
	})
}

// Runtime is what the Node reported as its container runtime and kubelet
// version when it became Ready, e.g. "containerd://1.6.20, kubelet v1.37.2".
func (n *Node) Runtime() string { return n.runtime }

// Logs returns the last lines of the kubelet's or containerd's log.
func (n *Node) Logs(which string, lines int) string {
	return tail(filepath.Join(n.cfg.Dir, which+".log"), lines)
}

// Stop stops the kubelet, then containerd. The pods' processes and the
// shims stay: Cleanup kills them (the lab is going away, nothing drains).
func (n *Node) Stop() {
	if n.stopBind != nil {
		n.stopBind()
		<-n.bindDone
	}
	if n.kubelet != nil {
		n.kubelet.stop(10 * time.Second)
	}
	if n.containerd != nil {
		n.containerd.stop(10 * time.Second)
	}
}

// proc is a child process with its output in a log file.
type proc struct {
	name, path string
	args       []string
	log        string
	cmd        *exec.Cmd
	done       chan struct{}
	err        error
}

func (p *proc) start(env []string) error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.cmd = exec.Command(p.path, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if env != nil {
		p.cmd.Env = slices.DeleteFunc(os.Environ(), func(s string) bool { return strings.HasPrefix(s, "PATH=") })
		p.cmd.Env = append(p.cmd.Env, env...)
	}
	// Its own process group, so a Ctrl-C at the terminal reaches the lab,
	// which stops it in order.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	p.done = make(chan struct{})
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return nil
}

func (p *proc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v\n%s", p.name, p.err, tail(p.log, 15))
	default:
		return nil
	}
}

func (p *proc) stop(wait time.Duration) {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(wait):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func waitUntil(ctx context.Context, limit time.Duration, p *proc, what string, ok func() error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last error
	for {
		if err := p.exited(); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if last = ok(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)\n%s", what, ctx.Err(), last, tail(p.log, 15))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func tail(path string, lines int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var all []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		all = append(all, sc.Text())
		if len(all) > lines {
			all = all[1:]
		}
	}
	return strings.Join(all, "\n")
}
