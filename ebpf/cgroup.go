package ebpf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// CgroupPod is what a kubelet cgroup path says about the pod it belongs to.
type CgroupPod struct {
	PodUID      string // with dashes, as the API server writes it
	ContainerID string // runtime container ID; empty for the pod-level cgroup and runtime helpers
}

// ParseCgroupPath extracts the pod UID and container ID from a cgroup path
// the kubelet created, with either cgroup driver and either cgroup version:
//
//	cgroupfs: .../kubepods/burstable/pod<uid>/<container-id>
//	          .../kubepods/pod<uid>/crio-<container-id>
//	systemd:  .../kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope
//	          .../kubepods-pod<uid>.slice/crio-<id>.scope, docker-<id>.scope
//
// Whatever comes before the kubepods part (a mount point, kind's
// kubelet.slice, a test prefix) is ignored. ok is false for paths outside any
// pod.
func ParseCgroupPath(path string) (p CgroupPod, ok bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, part := range parts {
		uid, found := podUIDFromComponent(part)
		if !found {
			continue
		}
		p.PodUID = uid
		if i+1 < len(parts) {
			p.ContainerID = containerIDFromComponent(parts[i+1])
		}
		return p, true
	}
	return CgroupPod{}, false
}

// podUIDFromComponent recognises "pod<uid>" (cgroupfs) and
// "...kubepods...-pod<uid_with_underscores>.slice" (systemd).
func podUIDFromComponent(c string) (string, bool) {
	if strings.HasSuffix(c, ".slice") {
		if !strings.Contains(c, "kubepods") {
			return "", false
		}
		c = strings.TrimSuffix(c, ".slice")
		i := strings.LastIndex(c, "-pod")
		if i < 0 {
			return "", false
		}
		uid := strings.ReplaceAll(c[i+len("-pod"):], "_", "-")
		return uid, validPodUID(uid)
	}
	if !strings.HasPrefix(c, "pod") {
		return "", false
	}
	uid := c[len("pod"):]
	return uid, validPodUID(uid)
}

// validPodUID accepts a UUID (8-4-4-4-12 hex) or the 32 hex digits of a
// static pod's config hash.
func validPodUID(s string) bool {
	switch len(s) {
	case 36:
		for i := 0; i < len(s); i++ {
			if i == 8 || i == 13 || i == 18 || i == 23 {
				if s[i] != '-' {
					return false
				}
			} else if !isHex(s[i]) {
				return false
			}
		}
		return true
	case 32:
		return allHex(s)
	}
	return false
}

// containerIDFromComponent turns "<id>", "crio-<id>",
// "cri-containerd-<id>.scope", "docker-<id>.scope" into <id>. Runtime helper
// cgroups such as crio-conmon-<id>.scope are not containers and give "".
func containerIDFromComponent(c string) string {
	c = strings.TrimSuffix(c, ".scope")
	if strings.Contains(c, "conmon") {
		return ""
	}
	if i := strings.LastIndexAny(c, "-:"); i >= 0 {
		c = c[i+1:]
	}
	if len(c) < 12 || !allHex(c) {
		return ""
	}
	return c
}

func isHex(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'a' && b <= 'f' || b >= 'A' && b <= 'F'
}

func allHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return s != ""
}

// cgroupHierarchy finds the path of a cgroup from its ID (the inode number of
// its directory, which is what the kernel's kernfs node id is on 64-bit
// systems).
//
// With CAP_DAC_READ_SEARCH a file handle opens the cgroup directly. The
// chart does not grant it, so an agent mostly resolves ids from an index of
// the directories under the tracked cgroups (the kubelet's kubepods
// subtree), never the whole host hierarchy: Path rebuilds that index for an
// unknown id at most once per reindexInterval, and ids still unknown after
// that are the resolver's to give up on (see resolver.cgroupPod).
type cgroupHierarchy struct {
	root    string // mount point, e.g. /sys/fs/cgroup or /sys/fs/cgroup/unified
	mountFD int    // -1 when open_by_handle_at cannot be used

	mu        sync.Mutex
	scope     []string // tracked subtrees, relative to root; empty: the whole hierarchy
	index     map[uint64]string
	lastIndex time.Time
	gen       uint64 // index builds so far

	walks, fullWalks atomic.Uint64
}

// reindexInterval bounds how often an unknown id rebuilds the index.
const reindexInterval = 250 * time.Millisecond

func openCgroupHierarchy(root string) (*cgroupHierarchy, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening cgroup hierarchy %s: %w", root, err)
	}
	h := &cgroupHierarchy{root: root, mountFD: fd, index: map[uint64]string{}}
	// Probe file handles on the root: kernfs encodes the cgroup id in them
	// (FILEID_KERNFS). Without support, fall back to the index.
	if _, _, err := unix.NameToHandleAt(unix.AT_FDCWD, root, 0); err != nil {
		unix.Close(fd)
		h.mountFD = -1
	}
	return h, nil
}

func (h *cgroupHierarchy) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mountFD >= 0 {
		fd := h.mountFD
		h.mountFD = -1
		return unix.Close(fd)
	}
	return nil
}

// addScope adds a tracked cgroup directory to the subtrees the index
// covers. Directories outside the hierarchy are ignored.
func (h *cgroupHierarchy) addScope(dir string) {
	rel, err := filepath.Rel(h.root, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.scope {
		if s == rel || strings.HasPrefix(rel, s+"/") {
			return // already covered
		}
	}
	h.scope = append(h.scope, rel)
}

// generation counts the index builds; the resolver uses it to give up on
// an id only after the index has been rebuilt since it was first missed.
func (h *cgroupHierarchy) generation() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gen
}

const fileIDKernfs = 0xfe

// errNotIndexed: the id is not in the index as it stands; it may be once
// the index is rebuilt.
var errNotIndexed = errors.New("not in the index of the tracked cgroups")

// Path returns the cgroup's path under the hierarchy root ("/" for the root).
func (h *cgroupHierarchy) Path(id uint64) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mountFD >= 0 {
		p, err := h.pathByHandle(id)
		if err == nil {
			return p, nil
		}
		if errors.Is(err, unix.ESTALE) || errors.Is(err, unix.ENOENT) {
			return "", fmt.Errorf("cgroup %d: %w", id, fs.ErrNotExist)
		}
		// No CAP_DAC_READ_SEARCH, say: it will not come back, so stop
		// paying a failing system call per id.
		unix.Close(h.mountFD)
		h.mountFD = -1
	}
	if p, ok := h.index[id]; ok {
		return p, nil
	}
	if time.Since(h.lastIndex) < reindexInterval {
		return "", fmt.Errorf("cgroup %d: %w", id, errNotIndexed)
	}
	if err := h.reindex(); err != nil {
		return "", err
	}
	if p, ok := h.index[id]; ok {
		return p, nil
	}
	return "", fmt.Errorf("cgroup %d: %w", id, errNotIndexed)
}

func (h *cgroupHierarchy) pathByHandle(id uint64) (string, error) {
	b := make([]byte, 8)
	nativeEndian.PutUint64(b, id)
	handle := unix.NewFileHandle(fileIDKernfs, b)
	fd, err := unix.OpenByHandleAt(h.mountFD, handle, unix.O_RDONLY|unix.O_PATH|unix.O_CLOEXEC)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return "", err
	}
	// The link names the directory as mounted; make it relative to the root.
	if rel, err := filepath.Rel(h.root, p); err == nil && !strings.HasPrefix(rel, "..") {
		return "/" + strings.TrimPrefix(rel, "."), nil
	}
	return p, nil
}

// reindex rebuilds the index from the tracked subtrees (the whole
// hierarchy only while nothing is tracked by path). h.mu must be held.
func (h *cgroupHierarchy) reindex() error {
	h.lastIndex = time.Now()
	h.gen++
	dirs := []string{h.root}
	if len(h.scope) > 0 {
		dirs = dirs[:0]
		for _, s := range h.scope {
			dirs = append(dirs, filepath.Join(h.root, s))
		}
	}
	idx := make(map[uint64]string, len(h.index))
	for _, dir := range dirs {
		h.walks.Add(1)
		if dir == h.root {
			h.fullWalks.Add(1)
		}
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if p == dir && len(dirs) == 1 {
					return err
				}
				return nil // a cgroup removed while walking
			}
			if !d.IsDir() {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil
			}
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				rel, _ := filepath.Rel(h.root, p)
				idx[st.Ino] = "/" + strings.TrimPrefix(rel, ".")
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("indexing cgroups under %s: %w", dir, err)
		}
	}
	h.index = idx
	return nil
}

// CgroupID returns the ID of the cgroup directory at path: the value
// bpf_get_current_cgroup_id reports for its tasks (cgroup v2), or the
// controller hierarchy's id (cgroup v1).
func CgroupID(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("cgroup id of %s: %w", path, err)
	}
	return st.Ino, nil
}

// NetNSInode returns the inode of a network namespace file such as
// /proc/<pid>/ns/net or /run/netns/<name>.
func NetNSInode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("network namespace inode of %s: %w", path, err)
	}
	return st.Ino, nil
}

// cgroupLayout says which hierarchy identifies tasks.
type cgroupLayout struct {
	root     string // mount point of that hierarchy
	v1Subsys string // cgroup v1 controller ("" for the unified hierarchy)
}

// detectCgroups chooses the hierarchy: the configured one, else the unified
// (v2) hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified (hybrid), else
// the v1 "pids" controller.
func detectCgroups(mode string) (cgroupLayout, error) {
	const base = "/sys/fs/cgroup"
	switch {
	case mode == "" || mode == "v2":
		for _, p := range []string{base, base + "/unified"} {
			var st unix.Statfs_t
			if unix.Statfs(p, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
				return cgroupLayout{root: p}, nil
			}
		}
		if mode == "v2" {
			return cgroupLayout{}, fmt.Errorf("no cgroup v2 hierarchy at %s or %s/unified", base, base)
		}
		return detectCgroups("v1:pids")
	case strings.HasPrefix(mode, "v1:"):
		ctrl := strings.TrimPrefix(mode, "v1:")
		p := filepath.Join(base, ctrl)
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err != nil || st.Type != unix.CGROUP_SUPER_MAGIC {
			return cgroupLayout{}, fmt.Errorf("cgroup v1 controller %q is not mounted at %s", ctrl, p)
		}
		return cgroupLayout{root: p, v1Subsys: ctrl}, nil
	}
	return cgroupLayout{}, fmt.Errorf("cgroup mode %q: want \"\", \"v2\" or \"v1:<controller>\"", mode)
}
