package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/drainscope/drainscope/ebpf"
	"github.com/drainscope/drainscope/event"
)

// startKernel opens the capture with the watcher's pod cache as resolver,
// tracks the pod cgroup roots and the pods' network namespaces, and reads
// events until the collector is closed.
func (a *Agent) startKernel(ctx context.Context, wg *sync.WaitGroup, errc chan<- error) error {
	kc := a.cfg.Kernel.Collector
	kc.Node = a.cfg.Node
	if kc.Pods == nil {
		kc.Pods = a.w.Pods()
	}
	if kc.Logger == nil {
		kc.Logger = a.log
	}
	kc.Unsealed = true // persist seals what the flight recorder hands on
	k, err := ebpf.Open(kc)
	if err != nil {
		return fmt.Errorf("kernel capture (run with --no-kernel to record only the watches): %w", err)
	}
	var loaded []string
	for _, p := range k.Programs() {
		if p.Loaded {
			loaded = append(loaded, p.Name)
		}
	}
	a.log.Info("kernel programs loaded", "programs", loaded, "cgroup_mount", k.CgroupRoot(),
		"kernel", k.KernelRelease(), "features", k.Features())
	a.kernelMu.Lock()
	a.kernel = k
	if a.cfg.Kernel.NetNSDir != "-" {
		a.netns = &netnsTracker{dir: a.cfg.Kernel.NetNSDir, glob: a.cfg.Kernel.NetNSGlob, k: k, seen: map[string]uint64{}}
	}
	a.kernelMu.Unlock()
	a.reportEvidence(k) // after a.kernel is set: see recordCapabilitiesFor

	a.trackRoots(k)
	wg.Add(2)
	go func() {
		defer wg.Done()
		a.rescan(ctx, k)
	}()
	go func() {
		defer wg.Done()
		err := k.Run(context.WithoutCancel(ctx), func(e *event.Event) {
			// The collector reuses e; Attrs is one shared read-only map.
			a.record(*e)
		})
		if err != nil {
			errc <- fmt.Errorf("kernel capture: %w", err)
		}
	}()
	return nil
}

// trackRoots tracks the configured or detected pod cgroup roots once; the
// probes count as loaded when at least one is tracked.
func (a *Agent) trackRoots(k *ebpf.Collector) {
	if a.probes.Load() {
		return
	}
	roots := a.cfg.Kernel.CgroupRoots
	if len(roots) == 0 {
		found, err := FindPodCgroupRoots(k.CgroupRoot())
		if err != nil {
			a.log.Warn("no pod cgroups found yet; retrying", "err", err)
			return
		}
		roots = found
	}
	var tracked []string
	for _, r := range roots {
		if _, err := k.TrackCgroupPath(r); err != nil {
			a.log.Warn("tracking pod cgroup root", "path", r, "err", err)
			continue
		}
		tracked = append(tracked, r)
	}
	if len(tracked) > 0 {
		a.kernelMu.Lock()
		a.roots = tracked
		a.kernelMu.Unlock()
		a.log.Info("tracking pod cgroups", "roots", tracked)
		a.probes.Store(true)
	}
}

// rescan looks for the cgroup roots until found and keeps the tracked
// network namespaces in step with NetNSDir.
func (a *Agent) rescan(ctx context.Context, k *ebpf.Collector) {
	t := time.NewTicker(a.cfg.Kernel.Rescan)
	defer t.Stop()
	lastCaps := time.Now()
	for {
		if time.Since(lastCaps) >= capabilitiesEvery {
			a.recordCapabilitiesFor(k, capsPeriodic)
			lastCaps = time.Now()
		}
		a.trackRoots(k)
		if a.netns != nil {
			if err := a.netns.sync(); err != nil {
				a.log.Debug("scanning network namespaces", "dir", a.netns.dir, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// FindPodCgroupRoots returns the kubelet's parent cgroups of all pods
// under a cgroup mount (v2, or one v1 controller's): kubepods.slice for the
// systemd driver, kubepods for cgroupfs, and the same one or two levels
// down (kind's kubelet.slice/kubelet-kubepods.slice, a kubelet in its own
// slice). Their descendants are the QoS classes, the pods and the
// containers, whatever the runtime (containerd, CRI-O) names them.
func FindPodCgroupRoots(mount string) ([]string, error) {
	for _, c := range []string{"kubepods.slice", "kubepods"} {
		p := filepath.Join(mount, c)
		if isDir(p) {
			return []string{p}, nil
		}
	}
	var found []string
	err := walkDepth(mount, 3, func(p, name string) bool {
		if name == "kubepods" || name == "kubepods.slice" || strings.HasSuffix(name, "-kubepods.slice") {
			found = append(found, p)
			return false // its descendants are covered
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("no kubepods cgroup under %s (is this a Kubernetes node? set --cgroup-root)", mount)
	}
	slices.Sort(found)
	return found, nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// walkDepth calls fn for each directory below root, at most depth levels
// down, descending where fn returns true.
func walkDepth(root string, depth int, fn func(path, name string) bool) error {
	if depth == 0 {
		return nil
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("reading %s: %w", root, err)
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		p := filepath.Join(root, e.Name())
		if fn(p, e.Name()) {
			if err := walkDepth(p, depth-1, fn); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// netnsTracker keeps the kernel's set of tracked network namespaces equal
// to the namespaces bind-mounted in dir.
type netnsTracker struct {
	dir, glob string
	k         *ebpf.Collector

	mu   sync.Mutex
	seen map[string]uint64 // file name → inode
}

func (n *netnsTracker) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.seen)
}

func (n *netnsTracker) sync() error {
	now, err := ScanNetNS(n.dir, n.glob)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for name, ino := range n.seen {
		if now[name] != ino {
			errs = append(errs, n.k.UntrackNetNS(ino))
			delete(n.seen, name)
		}
	}
	for name, ino := range now {
		if _, ok := n.seen[name]; ok {
			continue
		}
		if err := n.k.TrackNetNS(ino); err != nil {
			errs = append(errs, err)
			continue
		}
		n.seen[name] = ino
	}
	return errors.Join(errs...)
}

// ScanNetNS returns the network namespaces bind-mounted in dir whose names
// match glob, by name, with their inodes. Files that are not namespaces (a
// leftover of one already gone) are skipped.
func ScanNetNS(dir, glob string) (map[string]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return map[string]uint64{}, nil
		}
		return nil, err
	}
	out := make(map[string]uint64, len(ents))
	for _, e := range ents {
		if ok, _ := filepath.Match(glob, e.Name()); !ok {
			continue
		}
		p := filepath.Join(dir, e.Name())
		var sfs unix.Statfs_t
		if err := unix.Statfs(p, &sfs); err != nil || sfs.Type != unix.NSFS_MAGIC {
			continue
		}
		ino, err := ebpf.NetNSInode(p)
		if err != nil {
			continue
		}
		out[e.Name()] = ino
	}
	return out, nil
}

// reportEvidence says what this node's kernel keeps the capture from
// seeing: a warning per missing kind of evidence, the
// drainscope_kernel_evidence_available gauge, and a kernel_capabilities
// event, so that a report over this node's pods can say "refused
// connections cannot be seen on this node's kernel" rather than show none.
func (a *Agent) reportEvidence(k *ebpf.Collector) {
	st := k.Evidence()
	avail := make(map[string]bool, len(st))
	for _, s := range st {
		avail[string(s.Evidence)] = s.Available
		if !s.Available {
			a.log.Warn("kernel evidence not available on this node", "evidence", s.Evidence, "why", s.Why)
		}
	}
	a.m.SetKernelEvidence(avail)
	a.recordCapabilitiesFor(k, capsStart)
}

// capabilitiesEvery is how often the kernel_capabilities event is recorded
// again: more often than a report reads history before its window
// (analysis.Options.Lead, 15 minutes), so that every report sees each
// running node's, and retention never prunes the last one.
const capabilitiesEvery = 10 * time.Minute

// capsWhy is what records a kernel_capabilities event.
type capsWhy int

const (
	capsPeriodic    capsWhy = iota // every capabilitiesEvery
	capsStart                      // the capture started
	capsProxyChange                // the proxy mode was detected, or changed
)

// recordCapabilitiesFor records the node's kernel_capabilities event. The
// capture's start and the first detection of the proxy mode race, and the
// event should carry the mode: at the start it is left to the detection
// when dataplane recording is on and the mode is not known yet (the
// detection, which takes at most a second or two, finds the capture up
// and records it), and a detection records only when the mode differs
// from the one the last event carried. One event, with the mode, however
// the two are ordered: a.kernel is set before the start's call, and the
// mode before the detection looks at a.kernel.
func (a *Agent) recordCapabilitiesFor(k *ebpf.Collector, why capsWhy) {
	a.capsMu.Lock()
	defer a.capsMu.Unlock()
	if why == capsStart && a.dp != nil && a.proxyMode.Load() == nil {
		return
	}
	missing := ebpf.MissingEvidence(k.Evidence())
	var feats []string
	for _, f := range k.Features() {
		feats = append(feats, string(f))
	}
	// The programs mark main processes on every kernel they load on (a
	// CO-RE read of the task's pid namespace level).
	feats = append(feats, event.FeatureMainProcess)
	e := event.Event{
		Time:   time.Now().UnixNano(),
		Kind:   event.KernelCapabilities,
		Node:   a.cfg.Node,
		Source: event.SourceKernel,
		Reason: strings.Join(missing, ","),
		Attrs: map[string]string{
			event.AttrKernelRelease:  k.KernelRelease(),
			event.AttrKernelFeatures: strings.Join(feats, ","),
		},
	}
	a.proxyAttrs(e.Attrs)
	proxy := e.Attrs[event.AttrProxyMode] + "/" + e.Attrs[event.AttrProxyRecorded] + "/" + e.Attrs[event.AttrProxyEvidence]
	if why == capsProxyChange && proxy == a.capsProxy {
		return
	}
	a.capsProxy = proxy
	e.Seal()
	a.record(e)
}
