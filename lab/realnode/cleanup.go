package realnode

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// containerLogsDir is where the kubelet links every container's log, on
// any node; it is not configurable.
const containerLogsDir = "/var/log/containers"

// markerNoLogsDir in Dir says containerLogsDir did not exist before.
const markerNoLogsDir = "created-var-log-containers"

func rememberContainerLogsDir(dir string) error {
	if _, err := os.Stat(containerLogsDir); errors.Is(err, os.ErrNotExist) {
		return os.WriteFile(filepath.Join(dir, markerNoLogsDir), nil, 0o644)
	}
	return nil
}

// cgroupMounts lists every cgroup hierarchy's mount point (v1 controllers
// and the unified one).
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, x := range fields {
			if x == "-" && i+1 < len(fields) && (fields[i+1] == "cgroup" || fields[i+1] == "cgroup2") && len(fields) > 4 {
				out = append(out, fields[4])
			}
		}
	}
	return out, sc.Err()
}

// createCgroupRoot makes the kubelet's cgroupRoot in every hierarchy (the
// kubelet requires it to exist), with the parent's CPUs and memory nodes
// for cpuset, which starts a v1 child with none.
func createCgroupRoot(root string) error {
	ms, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, m := range ms {
		d := filepath.Join(m, root)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", d, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(m, f)); err == nil {
				if cur, _ := os.ReadFile(filepath.Join(d, f)); len(bytes.TrimSpace(cur)) == 0 {
					_ = os.WriteFile(filepath.Join(d, f), b, 0o644)
				}
			}
		}
	}
	return nil
}

// Leftovers describes what a real node left behind: processes, mounts and
// files under dir, cgroups under root, the kubelet's log links.
func Leftovers(dir, root string) []string {
	var out []string
	if pids := processes(dir, root); len(pids) > 0 {
		out = append(out, fmt.Sprintf("%d processes of the real node", len(pids)))
	}
	if ms := mountsUnder(dir); len(ms) > 0 {
		out = append(out, fmt.Sprintf("%d mounts under %s", len(ms), dir))
	}
	if _, err := os.Stat(dir); err == nil {
		out = append(out, "directory "+dir)
	}
	ms, _ := cgroupMounts()
	for _, m := range ms {
		if root == "" || root == "/" {
			break
		}
		// The unified hierarchy's part is the process lab's own tree,
		// reported by it.
		if _, err := os.Stat(filepath.Join(m, root, "kubepods")); err == nil {
			out = append(out, "cgroups "+filepath.Join(m, root))
		}
	}
	if links := logLinks(dir); len(links) > 0 {
		out = append(out, fmt.Sprintf("%d links in %s", len(links), containerLogsDir))
	}
	return out
}

// Cleanup kills the pods' processes, containerd's shims and anything else
// running from dir, unmounts what is mounted under it (root file systems,
// network namespaces, volumes), removes it, the cgroups under root in every
// hierarchy and the kubelet's links to dir's logs.
func Cleanup(dir, root string) error {
	if !filepath.IsAbs(dir) || len(dir) < 5 {
		return fmt.Errorf("kubelet cleanup: refusing directory %q", dir)
	}
	var errs []error
	for range 50 {
		pids := processes(dir, root)
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if pids := processes(dir, root); len(pids) > 0 {
		errs = append(errs, fmt.Errorf("processes %v survived SIGKILL", pids))
	}
	ms := mountsUnder(dir)
	// Deepest first.
	slices.SortFunc(ms, func(a, b string) int { return len(b) - len(a) })
	for _, m := range ms {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
		}
	}
	created := false
	if _, err := os.Stat(filepath.Join(dir, markerNoLogsDir)); err == nil {
		created = true
	}
	for _, l := range logLinks(dir) {
		_ = os.Remove(l)
	}
	if created {
		_ = os.Remove(containerLogsDir) // only when empty
	}
	if len(mountsUnder(dir)) == 0 {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if root != "" && root != "/" {
		cms, _ := cgroupMounts()
		for _, m := range cms {
			if err := removeTree(filepath.Join(m, root)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeTree removes a cgroup directory and its descendants, deepest first
// (cgroup directories are removed with rmdir, their files go with them).
func removeTree(d string) error {
	if _, err := os.Stat(d); err != nil {
		return nil
	}
	var dirs []string
	_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
	var last error
	for range 20 {
		last = nil
		for _, x := range dirs {
			if err := syscall.Rmdir(x); err != nil && !errors.Is(err, syscall.ENOENT) {
				last = fmt.Errorf("removing cgroup %s: %w", x, err)
			}
		}
		if last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return last
}

// processes finds processes in the cgroups under root (any hierarchy) or
// whose command line names a path under dir (containerd, its shims, the
// kubelet), other than this one.
func processes(dir, root string) []int {
	self := os.Getpid()
	seen := map[int]bool{}
	if root != "" && root != "/" {
		ms, _ := cgroupMounts()
		for _, m := range ms {
			_ = filepath.WalkDir(filepath.Join(m, root), func(p string, e os.DirEntry, err error) error {
				if err != nil || !e.IsDir() {
					return nil
				}
				b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil && pid != self {
						seen[pid] = true
					}
				}
				return nil
			})
		}
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(dir+"/")) {
			seen[pid] = true
		}
	}
	var out []int
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 {
			mp := unescape(fields[4])
			if mp == dir || strings.HasPrefix(mp, dir+"/") {
				out = append(out, mp)
			}
		}
	}
	return out
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// logLinks are the kubelet's links in /var/log/containers to logs under dir.
func logLinks(dir string) []string {
	ents, err := os.ReadDir(containerLogsDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		p := filepath.Join(containerLogsDir, e.Name())
		if t, err := os.Readlink(p); err == nil && strings.HasPrefix(t, dir+"/") {
			out = append(out, p)
		}
	}
	return out
}
