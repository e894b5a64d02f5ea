// Package ebpf records what the kernel does to a pod's processes and sockets.
// During a rollout that is the signals they receive (and who sent them), when
// the process really exits, when its listener closes, and every connection it
// closes or resets, including the reset that refuses a connection to a closed
// port. Programs on BTF-enabled tracepoints filter in the kernel to the
// cgroups and network namespaces the agent tracks and write fixed-size records
// to a ring buffer; the Collector decodes them into event.Event without
// allocating, converts kernel time to UTC wall time and attributes each event
// to a pod.
//
// Typical use:
//
//	c, err := ebpf.Open(ebpf.Config{Node: node, Pods: lookup})
//	...
//	defer c.Close()
//	c.TrackCgroupPath("/sys/fs/cgroup/kubepods.slice/...pod<uid>.slice")
//	err = c.Run(ctx, func(e *event.Event) { batch = append(batch, *e) })
package ebpf

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
)

// Config configures a Collector. The zero value works except for Node.
type Config struct {
	// Node is set on every event.
	Node string
	// Pods attributes events to pods. Without it events carry only the pod
	// UID and container ID read from the cgroup path.
	Pods PodLookup
	// RingBufferSize is the ring buffer's size in bytes: a power of two and
	// a multiple of the page size. Default 8 MiB (about 65,000 events).
	RingBufferSize int
	// Signals to record. Default SIGTERM, SIGKILL, SIGINT, SIGQUIT.
	Signals []syscall.Signal
	// TrackAll turns the in-kernel filter off: every process and TCP
	// socket on the node is reported. For debugging; costly on busy nodes.
	TrackAll bool
	// Cgroups selects the hierarchy that identifies tasks: "" (the unified
	// hierarchy when mounted, at /sys/fs/cgroup or /sys/fs/cgroup/unified,
	// else cgroup v1 "pids"), "v2", or "v1:<controller>" for nodes whose
	// kubelet uses cgroup v1 only. IDs passed to Track are of that hierarchy.
	Cgroups string
	// Unsealed leaves sealing (event.Event.Seal) to the receiver of Run's
	// events, for a receiver that keeps only some: the agent's flight
	// recorder holds most connection closes and stores few of them.
	Unsealed bool
	// WakeupEvents is how many events may wait in the ring buffer before
	// the kernel wakes the reader; below that the reader finds them when it
	// polls, every FlushInterval. Waking per event costs the kernel an
	// irq_work each time. Default 64; 1 wakes on every event.
	WakeupEvents int
	// FlushInterval bounds how long an event waits in the ring buffer, and
	// how long Run takes to notice a cancelled context. Default 100 ms.
	FlushInterval time.Duration
	// ExitWindow is how long before its process's exit a socket close or
	// reset by that process still counts as closed at exit (FlagAtExit):
	// runtimes that close their sockets during their own teardown do it
	// before the kernel's exit path. Events are held this long before Run
	// emits them. Default 50 ms; negative turns it off.
	ExitWindow time.Duration
	// ClockInterval is how often the monotonic-to-wall offset is
	// re-sampled. Default 1 s.
	ClockInterval time.Duration
	// Logger receives load and resolution diagnostics. Default slog.Default().
	Logger *slog.Logger
	// WithoutFeatures makes Open act as if the kernel lacked these
	// features: the programs take the path they take on an older kernel
	// and Evidence reports what that costs. For tests of the degraded
	// modes, and to step around a kernel bug in one feature.
	WithoutFeatures []Feature
}

// DefaultSignals are recorded when Config.Signals is empty.
var DefaultSignals = []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL, syscall.SIGINT, syscall.SIGQUIT}

const defaultRingBufferSize = 8 << 20

// Collector owns the loaded programs, their maps and the ring buffer reader.
type Collector struct {
	unsealed bool
	log      *slog.Logger
	programs []Program
	progs    map[string]*ebpf.Program
	links    map[string]link.Link
	maps     *ebpf.Collection

	events, counters, cgroupsMap, netnsMap, generation *ebpf.Map

	trackMu sync.Mutex // serialises changes to tracked_cgroups and generation
	flush   time.Duration

	exitWindow time.Duration
	delay      *delayLine // Run's, kept between runs

	rd       *ringbuf.Reader
	layout   cgroupLayout
	cgroups  *cgroupHierarchy
	resolver *resolver
	decoder  decoder
	clock    *wallClock

	features kernelFeatures
	hostNet  uint64 // the host's network namespace (init_net), never a pod's
	evidence []EvidenceStatus
	release  string
	exits    recentExits // without group_dead: exits already emitted

	// The refused-connection fallback (refused.go), before Linux 6.10.
	refusedBy      string
	refusedFeature Feature
	refusedErr     error
	refusedTried   []string // fallbacks passed over, and why

	duplicateExits atomic.Uint64

	running      atomic.Bool
	runMu        sync.Mutex // held by Run, so that Close can wait for it
	delivered    atomic.Uint64
	decodeErrors atomic.Uint64
	unresolved   atomic.Uint64
	closeOnce    sync.Once
}

// openSettings are a Config's settings with their defaults applied.
type openSettings struct {
	log         *slog.Logger
	size        int
	mask        uint64
	interval    time.Duration
	flush       time.Duration
	exitWindow  time.Duration
	wakeupBytes uint64
}

// settings checks cfg and applies the defaults of what it leaves unset.
func (cfg Config) settings() (openSettings, error) {
	var s openSettings
	s.log = cfg.Logger
	if s.log == nil {
		s.log = slog.Default()
	}
	if cfg.Node == "" {
		return s, errors.New("config: Node is empty (every event names the node that observed it)")
	}
	s.size = cfg.RingBufferSize
	if s.size == 0 {
		s.size = defaultRingBufferSize
	}
	if page := os.Getpagesize(); s.size < page || s.size%page != 0 || s.size&(s.size-1) != 0 {
		return s, fmt.Errorf("ring buffer size %d: must be a power of two and a multiple of the page size (%d)", s.size, page)
	}
	signals := cfg.Signals
	if len(signals) == 0 {
		signals = DefaultSignals
	}
	for _, sig := range signals {
		if sig <= 0 || sig >= 64 {
			return s, fmt.Errorf("signal %d out of range 1-63", sig)
		}
		s.mask |= 1 << uint(sig)
	}
	s.interval = cfg.ClockInterval
	if s.interval <= 0 {
		s.interval = time.Second
	}
	s.flush = cfg.FlushInterval
	if s.flush <= 0 {
		s.flush = 100 * time.Millisecond
	}
	s.exitWindow = cfg.ExitWindow
	switch {
	case s.exitWindow == 0:
		s.exitWindow = 50 * time.Millisecond
	case s.exitWindow < 0:
		s.exitWindow = 0
	}
	wakeup := cfg.WakeupEvents
	if wakeup <= 0 {
		wakeup = 64
	}
	if wakeup > 1 {
		// Each record carries an 8-byte header in the ring.
		s.wakeupBytes = uint64(wakeup * (eventSize + 8))
		if s.wakeupBytes > uint64(s.size/2) {
			s.wakeupBytes = uint64(s.size / 2)
		}
	}
	return s, nil
}

// Close detaches the programs and frees the maps; a running Run returns.
func (c *Collector) Close() error {
	var errs []error
	c.closeOnce.Do(func() {
		if c.rd != nil {
			errs = append(errs, c.rd.Close())
		}
		c.runMu.Lock() // Run returns once the reader is closed
		defer c.runMu.Unlock()
		errs = append(errs, c.detach())
		for _, p := range c.progs {
			errs = append(errs, p.Close())
		}
		if c.maps != nil {
			c.maps.Close()
		}
		if c.cgroups != nil {
			errs = append(errs, c.cgroups.Close())
		}
	})
	return errors.Join(errs...)
}
