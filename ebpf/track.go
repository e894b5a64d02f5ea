package ebpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// Track makes the kernel report the processes and sockets of a cgroup and
// of all its descendants (up to 8 levels down), e.g. a pod's cgroup.
func (c *Collector) Track(cgroupID uint64) error {
	c.trackMu.Lock()
	defer c.trackMu.Unlock()
	if err := c.cgroupsMap.Update(cgroupID, uint8(1), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("tracking cgroup %d: %w", cgroupID, err)
	}
	return c.bumpGeneration()
}

// bumpGeneration invalidates the kernel's cached per-cgroup verdicts after
// tracked_cgroups changed. trackMu must be held.
func (c *Collector) bumpGeneration() error {
	var gen uint32
	if err := c.generation.Lookup(uint32(0), &gen); err != nil {
		return fmt.Errorf("reading the tracking generation: %w", err)
	}
	if err := c.generation.Update(uint32(0), gen+1, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("advancing the tracking generation: %w", err)
	}
	return nil
}

// Untrack stops tracking a cgroup. Untracking one that is not tracked is not
// an error.
func (c *Collector) Untrack(cgroupID uint64) error {
	c.trackMu.Lock()
	defer c.trackMu.Unlock()
	if err := c.cgroupsMap.Delete(cgroupID); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		return fmt.Errorf("untracking cgroup %d: %w", cgroupID, err)
	}
	return c.bumpGeneration()
}

// TrackCgroupPath tracks the cgroup directory at path, which must be in the
// hierarchy the collector uses (see Config.Cgroups and CgroupRoot).
func (c *Collector) TrackCgroupPath(path string) (uint64, error) {
	id, err := CgroupID(path)
	if err != nil {
		return 0, err
	}
	if c.cgroups != nil {
		c.cgroups.addScope(path)
	}
	return id, c.Track(id)
}

// CgroupRoot is the mount point of the hierarchy whose ids Track expects.
func (c *Collector) CgroupRoot() string { return c.layout.root }

// TrackNetNS makes the kernel report the TCP sockets of a network namespace
// (by inode, see NetNSInode), including resets for ports nobody listens on,
// which no process or cgroup owns.
func (c *Collector) TrackNetNS(ino uint64) error {
	if err := c.netnsMap.Update(ino, uint8(1), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("tracking network namespace %d: %w", ino, err)
	}
	return nil
}

// UntrackNetNS stops tracking a network namespace.
func (c *Collector) UntrackNetNS(ino uint64) error {
	if err := c.netnsMap.Delete(ino); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("untracking network namespace %d: %w", ino, err)
	}
	return nil
}
