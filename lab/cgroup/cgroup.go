// Package cgroup gives each lab container a cgroup where the kubelet's
// cgroupfs driver would put it. The path is
//
//	<cgroup2 mount>/drainscope-lab/kubepods/<qos>/pod<uid>/<container-id>
//
// so that anything reading a process's cgroup path (drainscope's eBPF
// resolver, for one) finds the pod UID and container ID where it would on a
// real node. Everything lives under one lab-owned parent, which makes
// killing and removing all of it one walk. Processes are placed with
// clone3(CLONE_INTO_CGROUP), so a container's process is in its cgroup from
// its first instruction.
package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Base is the lab's parent cgroup, directly under the cgroup2 mount.
const Base = "drainscope-lab"

// QoS classes, as in a pod's status.qosClass.
const (
	Guaranteed = "Guaranteed"
	Burstable  = "Burstable"
	BestEffort = "BestEffort"
)

// Tree is the lab's part of the cgroup v2 hierarchy.
type Tree struct {
	Mount string // where cgroup2 is mounted: /sys/fs/cgroup or, in hybrid mode, /sys/fs/cgroup/unified
	Base  string // the lab's parent under Mount
}

// Detect finds the cgroup2 mount from /proc/self/mountinfo.
func Detect() (Tree, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return Tree{}, fmt.Errorf("reading mounts: %w", err)
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source superopts
		fields := strings.Fields(sc.Text())
		for i, x := range fields {
			if x == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				mounts = append(mounts, fields[4])
			}
		}
	}
	if len(mounts) == 0 {
		return Tree{}, errors.New("no cgroup2 hierarchy is mounted (the lab needs cgroup v2, unified or hybrid)")
	}
	// Prefer the canonical places when several are mounted.
	for _, want := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if slices.Contains(mounts, want) {
			return Tree{Mount: want, Base: Base}, nil
		}
	}
	return Tree{Mount: mounts[0], Base: Base}, nil
}

// Root is the lab's parent cgroup directory.
func (t Tree) Root() string { return filepath.Join(t.Mount, t.Base) }

// PodDir is the pod's cgroup directory for its QoS class.
func (t Tree) PodDir(uid, qos string) string {
	parts := []string{t.Root(), "kubepods"}
	switch qos {
	case Burstable:
		parts = append(parts, "burstable")
	case BestEffort:
		parts = append(parts, "besteffort")
	}
	return filepath.Join(append(parts, "pod"+uid)...)
}

// Group is one cgroup directory, opened for placing processes into it.
type Group struct {
	Path string
	dir  *os.File
}

// Create makes the cgroup directory (and its parents) and opens it.
func Create(path string) (*Group, error) {
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, fmt.Errorf("creating cgroup %s: %w", path, err)
	}
	d, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening cgroup %s: %w", path, err)
	}
	return &Group{Path: path, dir: d}, nil
}

// Place makes a process started with attr begin life in this cgroup.
func (g *Group) Place(attr *syscall.SysProcAttr) {
	attr.UseCgroupFD = true
	attr.CgroupFD = int(g.dir.Fd())
}

// Kill sends SIGKILL to every process in the cgroup and its children, as a
// runtime does when it stops a container for good.
func (g *Group) Kill() error { return kill(g.Path) }

// Close releases the directory handle.
func (g *Group) Close() error {
	if g.dir == nil {
		return nil
	}
	err := g.dir.Close()
	g.dir = nil
	return err
}

// Remove kills what is left in the cgroup tree at path, waits for it to be
// empty and removes the directories, deepest first. A missing path is not
// an error.
func Remove(path string, wait time.Duration) error {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := kill(path); err != nil {
		return err
	}
	deadline := time.Now().Add(wait)
	for {
		busy, err := populated(path)
		if err != nil {
			return err
		}
		if !busy {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has processes after %v", path, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var dirs []string
	err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("walking %s: %w", path, err)
	}
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// Leftovers lists the processes still in the lab's cgroups, and whether the
// lab's parent cgroup exists at all.
func (t Tree) Leftovers() (exists bool, pids []int, err error) {
	if _, err := os.Stat(t.Root()); errors.Is(err, fs.ErrNotExist) {
		return false, nil, nil
	}
	err = filepath.WalkDir(t.Root(), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			ps, err := procs(p)
			if err != nil {
				return err
			}
			pids = append(pids, ps...)
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return true, pids, err
	}
	return true, pids, nil
}

// Cleanup kills every process in the lab's cgroups and removes them.
func (t Tree) Cleanup(wait time.Duration) error { return Remove(t.Root(), wait) }

func procs(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading %s: %w", dir, err)
	}
	var out []int
	for _, l := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(l); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// populated reports whether the tree at dir has any process.
func populated(dir string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "populated "); ok {
				return v == "1", nil
			}
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(dir); errors.Is(serr, fs.ErrNotExist) {
			return false, nil
		}
	}
	// No cgroup.events: walk and count.
	busy := false
	werr := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		ps, err := procs(p)
		if len(ps) > 0 {
			busy = true
		}
		return err
	})
	if werr != nil && !errors.Is(werr, fs.ErrNotExist) {
		return false, werr
	}
	return busy, nil
}

// kill uses cgroup.kill (Linux 5.14+) and falls back to signalling each
// process of the tree.
func kill(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err == nil {
		return nil
	}
	var errs []error
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		ps, err := procs(p)
		for _, pid := range ps {
			if kerr := syscall.Kill(pid, syscall.SIGKILL); kerr != nil && !errors.Is(kerr, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("killing pid %d: %w", pid, kerr))
			}
		}
		return err
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
