package ebpf

import (
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/drainscope/drainscope/event"
)

// KindStats counts one kind's records in the kernel.
type KindStats struct {
	Produced uint64 // passed the filter
	Dropped  uint64 // ... but found the ring buffer full
}

// ProgramStats is one program's kernel-side statistics. RunCount and
// RunTime stay zero unless BPF statistics are enabled
// (kernel.bpf_stats_enabled=1, or EnableRunStats).
type ProgramStats struct {
	Name            string
	Loaded          bool
	RunCount        uint64
	RunTime         time.Duration
	RecursionMisses uint64 // runs skipped because another BPF program was running on the CPU
}

// AvgRunTime is the average run time per invocation.
func (p ProgramStats) AvgRunTime() time.Duration {
	if p.RunCount == 0 {
		return 0
	}
	return p.RunTime / time.Duration(p.RunCount)
}

// Stats are the collector's counters. Once the ring buffer is drained,
// Produced == Delivered + DecodeErrors + Dropped + DuplicateExits.
type Stats struct {
	Produced       uint64 // records the kernel programs produced, summed over CPUs
	Dropped        uint64 // of which lost because the ring buffer was full
	Delivered      uint64 // records decoded and passed to emit
	DecodeErrors   uint64 // records read but not understood
	DuplicateExits uint64 // second exits of one process, on kernels without group_dead
	ByKind         map[event.Kind]KindStats

	UnresolvedCgroups uint64        // cgroup ids whose path could not be found
	CgroupWalks       uint64        // rebuilds of the cgroup index, one per tracked subtree walked
	CgroupFullWalks   uint64        // of which walked the whole hierarchy (nothing tracked by path)
	ClockOffset       time.Duration // wall = monotonic + offset
	ClockUncertainty  time.Duration // half-width of the offset's sampling window
	Programs          []ProgramStats
}

// Stats reads the counters. It is safe to call while Run is active.
func (c *Collector) Stats() (Stats, error) {
	s := Stats{
		Delivered:         c.delivered.Load(),
		DecodeErrors:      c.decodeErrors.Load(),
		DuplicateExits:    c.duplicateExits.Load(),
		UnresolvedCgroups: c.unresolved.Load(),
		ClockOffset:       time.Duration(c.clock.offset.Load()),
		ClockUncertainty:  time.Duration(c.clock.uncertainty.Load()),
		ByKind:            map[event.Kind]KindStats{},
	}
	if c.cgroups != nil {
		s.CgroupWalks, s.CgroupFullWalks = c.cgroups.walks.Load(), c.cgroups.fullWalks.Load()
	}
	var perCPU []uint64
	for k := uint32(1); k < uint32(kindMax); k++ {
		var ks KindStats
		for i, dst := range []*uint64{&ks.Produced, &ks.Dropped} {
			if err := c.counters.Lookup(k*2+uint32(i), &perCPU); err != nil {
				return s, fmt.Errorf("reading counters: %w", err)
			}
			for _, v := range perCPU {
				*dst += v
			}
		}
		s.Produced += ks.Produced
		s.Dropped += ks.Dropped
		s.ByKind[kinds[k]] = ks
	}
	for _, p := range c.programs {
		ps := ProgramStats{Name: p.Name, Loaded: p.Loaded}
		if prog := c.progs[p.Name]; prog != nil {
			st, err := prog.Stats()
			if err != nil {
				return s, fmt.Errorf("reading statistics of %s: %w", p.Name, err)
			}
			ps.RunCount, ps.RunTime, ps.RecursionMisses = st.RunCount, st.Runtime, st.RecursionMisses
		}
		s.Programs = append(s.Programs, ps)
	}
	return s, nil
}

// EnableRunStats turns on the kernel's BPF run-time statistics (the effect
// of kernel.bpf_stats_enabled=1) until the returned closer is closed. They
// cost two clock reads per program run.
func EnableRunStats() (interface{ Close() error }, error) {
	cl, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("enabling BPF run-time statistics: %w", err)
	}
	return cl, nil
}
