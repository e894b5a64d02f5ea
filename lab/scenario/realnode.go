package scenario

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/ebpf"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/lab/cgroup"
	"github.com/drainscope/drainscope/lab/lock"
	"github.com/drainscope/drainscope/lab/realnode"
)

// The real node's images and places.
const (
	// SandboxImage is the pause image the real node's containerd starts
	// every pod with: the drainscope binary's "lab pause".
	SandboxImage = "drainscope.dev/pause:lab"
	// AgentImage is drainscope's own image, as deploy/Dockerfile builds it.
	AgentImage = "drainscope.dev/drainscope:lab"
)

// busybox is Debian's busybox-static: the real node's ShipperImage is
// this one static file as /bin/sh, whose shell runs its own applets
// (sleep) without a file for each.
const busybox = "/bin/busybox"

var (
	realDir = filepath.Join(lock.Dir, "node") // containerd, CNI and kubelet state
	// realCgroupRoot is the kubelet's cgroupRoot: the lab's own cgroup, in
	// every hierarchy, so the pods live at
	// <hierarchy>/drainscope-lab/kubepods/<qos>/pod<uid>/<container id>.
	realCgroupRoot = "/" + cgroup.Base
)

// PreflightKubelet reports what this host lacks for the real node.
func PreflightKubelet(binDir, binary string) error {
	if binDir == "" {
		binDir = controlplane.BinDir()
	}
	if err := realnode.Available(filepath.Join(binDir, "kubelet")); err != nil {
		return err
	}
	if binary == "" {
		return errors.New("scenario: the real node needs a static drainscope binary for its images (Options.Binary)")
	}
	if err := realnode.CheckStatic(binary); err != nil {
		return err
	}
	if _, err := os.Stat(busybox); err != nil {
		return fmt.Errorf("the real node's %s image needs %s (Debian package busybox-static): %w", ShipperImage, busybox, err)
	}
	return realnode.CheckStatic(busybox)
}

// appEntrypoint runs the sample service in its image.
var appEntrypoint = []string{"/drainscope", "lab", "sampleapp"}

// Images are the real node's images: the sandbox, the sample service and
// drainscope's own, each the one static binary on an empty base (as
// deploy/Dockerfile builds drainscope's), with the CA bundle when the host
// has one; and the log shipper's, busybox as /bin/sh.
func Images(binary string) []realnode.Image {
	files := []realnode.File{{Path: "/drainscope", From: binary, Mode: 0o755}}
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		files = append(files, realnode.File{Path: "/etc/ssl/certs/ca-certificates.crt", From: "/etc/ssl/certs/ca-certificates.crt"})
	}
	return []realnode.Image{
		{Ref: SandboxImage, Files: files, Entrypoint: []string{"/drainscope", "lab", "pause"}, User: "65535:65535"},
		{Ref: AppImage, Files: files, Entrypoint: appEntrypoint, User: "65532:65532"},
		{Ref: AgentImage, Files: files, Entrypoint: []string{"/drainscope"}, Cmd: []string{"serve", "--listen=0.0.0.0:8080"}, User: "65532:65532"},
		{Ref: ShipperImage, Files: []realnode.File{{Path: "/bin/sh", From: busybox, Mode: 0o755}}, Entrypoint: shipperEntrypoint, User: "65532:65532"},
	}
}

// upKubelet is Up's second half on a real node: the watcher first (its pod
// cache attributes the kernel's events), then the kernel capture,
// containerd and the kubelet, and kube-proxy.
func (c *Cluster) upKubelet(ctx context.Context, node *realNode, start time.Time) error {
	o := c.opts
	if err := c.startWatchers(ctx); err != nil {
		return err
	}
	binDir := o.BinDir
	if binDir == "" {
		binDir = controlplane.BinDir()
	}
	if !o.NoKernel {
		if err := c.startKernelReal(ctx); err != nil {
			c.KernelErr = err
			o.progress("kernel capture off: %v (only the watches are recorded)", err)
		}
	} else {
		c.KernelErr = errors.New("turned off")
	}
	api, err := url.Parse(c.CP.Host())
	if err != nil {
		return err
	}
	apiAddr, err := netip.ParseAddrPort(api.Host)
	if err != nil {
		return fmt.Errorf("the API server's address %s: %w", api.Host, err)
	}
	stop, err := Forward(context.WithoutCancel(ctx), netip.AddrPortFrom(c.net.Gateway.Addr(), apiAddr.Port()), apiAddr)
	if err != nil {
		return fmt.Errorf("relaying the API server to the pod network: %w", err)
	}
	c.stops = append(c.stops, stop)
	images := Images(o.Binary)
	if o.Sidecar {
		more, err := SidecarImages()
		if err != nil {
			return err
		}
		images = append(images, more...)
	}
	o.progress("starting containerd and the kubelet (%s) …", controlplane.Version)
	node.n, err = realnode.Start(ctx, realnode.Config{
		Dir:          realDir,
		Kubelet:      filepath.Join(binDir, "kubelet"),
		Kubeconfig:   c.CP.Kubeconfig(),
		Client:       c.Client,
		NodeName:     NodeName,
		NodeIP:       c.net.Gateway.Addr(),
		Bridge:       c.net.Bridge,
		PodCIDR:      c.net.PodCIDR(),
		CgroupRoot:   realCgroupRoot,
		SandboxImage: SandboxImage,
		Images:       images,
		Log:          c.log,
	})
	if err != nil {
		return fmt.Errorf("starting the real node: %w", err)
	}
	if c.kernel != nil {
		go c.trackRealNetNS(ctx)
		o.progress("kernel capture on: %d programs, cgroups under %s", loaded(c.kernel.Programs()), filepath.Join(c.kernel.CgroupRoot(), realCgroupRoot))
	}
	if err := c.startKubeProxy(ctx); err != nil {
		return err
	}
	o.progress("real node %s (%s) and kube-proxy (nftables) running, %.1fs after start", NodeName, node.n.Runtime(), time.Since(start).Seconds())
	return nil
}

// startKernelReal opens the eBPF capture with the watcher's pods and
// tracks the lab's cgroup, under which the kubelet puts every pod.
func (c *Cluster) startKernelReal(ctx context.Context) error {
	k, err := ebpf.Open(ebpf.Config{Node: NodeName, Pods: c.watcher.Pods(), Logger: c.log})
	if err != nil {
		return err
	}
	if _, err := k.TrackCgroupPath(filepath.Join(k.CgroupRoot(), realCgroupRoot)); err != nil {
		k.Close()
		return err
	}
	c.kernel = k
	c.kernelCh = make(chan error, 1)
	go func() {
		c.kernelCh <- k.Run(context.WithoutCancel(ctx), func(e *event.Event) { c.rec.Add(*e) })
	}()
	c.recordCapabilities(k)
	return nil
}

// trackRealNetNS keeps the capture's network namespaces in step with
// containerd's, so that what the kernel does to a pod's sockets outside
// any of its processes (an RST answering a SYN to a closed port) is seen.
func (c *Cluster) trackRealNetNS(ctx context.Context) {
	dir := realnode.Config{Dir: realDir}.NetNSDir()
	seen := map[string]uint64{}
	for !c.quiet.Load() && ctx.Err() == nil {
		ents, _ := os.ReadDir(dir)
		now := map[string]bool{}
		for _, e := range ents {
			now[e.Name()] = true
			if _, ok := seen[e.Name()]; ok {
				continue
			}
			ino, err := ebpf.NetNSInode(filepath.Join(dir, e.Name()))
			if err != nil {
				continue
			}
			if err := c.kernel.TrackNetNS(ino); err == nil {
				seen[e.Name()] = ino
			}
		}
		for n, ino := range seen {
			if !now[n] {
				_ = c.kernel.UntrackNetNS(ino)
				delete(seen, n)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// NodeDescription says which node ran the pods, for the report.
func (c *Cluster) NodeDescription() string { return c.Node.Description() }

// KernelPrograms lists the lab's own kernel capture's programs and whether
// each loaded; nil when the capture is off.
func (c *Cluster) KernelPrograms() []ebpf.Program {
	if c.kernel == nil {
		return nil
	}
	return c.kernel.Programs()
}

// RealNodeDir is the real node's working directory (containerd, CNI, the
// kubelet's pods and their logs).
func RealNodeDir() string { return realDir }
