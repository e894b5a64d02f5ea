// Package ebpf records what the kernel does to a pod's processes and
// sockets during a rollout: the signals they receive (and who sent them),
// when the process really exits, when its listener closes, and every
// connection it closes or resets, including the reset that refuses a
// connection to a closed port. Programs on BTF-enabled tracepoints filter
// in the kernel to the cgroups and network namespaces the agent tracks and
// write fixed-size records to a ring buffer; the Collector decodes them
// into event.Event without allocating, converts kernel time to UTC wall
// time and attributes each event to a pod.
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
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/drainscope/drainscope/event"
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

// Program describes one of the kernel programs and whether it runs.
type Program struct {
	Name       string // e.g. "tcp_send_reset"
	Tracepoint string // e.g. "tcp/tcp_send_reset"
	Kinds      []event.Kind
	Loaded     bool
	Err        error // why it was dropped when not Loaded
}

type programDef struct {
	name, tracepoint string
	kinds            []event.Kind
}

var programDefs = []programDef{
	{"signal_generate", "signal/signal_generate", []event.Kind{event.Signal}},
	{"sched_process_exit", "sched/sched_process_exit", []event.Kind{event.ProcessExit}},
	{"inet_sock_set_state", "sock/inet_sock_set_state", []event.Kind{event.ListenerClosed, event.ConnClosed}},
	{"tcp_send_reset", "tcp/tcp_send_reset", []event.Kind{event.RSTSent, event.ConnRefused}},
	{"tcp_receive_reset", "tcp/tcp_receive_reset", []event.Kind{event.RSTReceived}},
}

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

// Open checks what the kernel offers, loads and attaches every program it
// can and opens the ring buffer. Programs the kernel cannot run (a missing
// tracepoint, a verifier rejection) are dropped with a logged reason, see
// Programs; Open fails only when none can run or a requirement shared by
// all is missing (BTF, ring buffer, privileges).
func Open(cfg Config) (*Collector, error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	log := s.log

	layout, err := detectCgroups(cfg.Cgroups)
	if err != nil {
		return nil, err
	}

	kernel, err := probeKernel(log)
	if err != nil {
		return nil, err
	}

	spec, err := loadProbes()
	if err != nil {
		return nil, err
	}
	spec.Maps["events"].MaxEntries = uint32(s.size)

	feats, reasonNames, err := setVariables(spec, kernel, cfg, layout, s)
	if err != nil {
		return nil, err
	}

	c := &Collector{unsealed: cfg.Unsealed, log: log, layout: layout, progs: map[string]*ebpf.Program{}, links: map[string]link.Link{}, flush: s.flush, exitWindow: s.exitWindow,
		features: feats, release: kernelRelease()}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()

	if err := c.createMaps(spec); err != nil {
		return nil, err
	}
	if err := c.loadPrograms(spec, kernel, cfg, s.wakeupBytes); err != nil {
		return nil, err
	}

	c.evidence = c.refusedEvidence(evidenceFor(feats, c.programs, c.release))

	c.rd, err = ringbuf.NewReader(c.events)
	if err != nil {
		return nil, fmt.Errorf("opening ring buffer: %w", err)
	}

	c.cgroups, err = openCgroupHierarchy(layout.root)
	if err != nil {
		log.Warn("cgroup paths will not be resolved", "err", err)
		c.cgroups = nil
	}
	c.hostNet = hostNetNS(spec, kernel, log)
	c.resolver = newResolver(cfg.Pods, c.cgroups, c.hostNet, log)
	c.decoder = decoder{node: cfg.Node, rstReasons: reasonNames}
	c.clock = newWallClock(s.interval)
	ok = true
	return c, nil
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

// probeKernel loads the kernel's BTF, checks that BPF ring buffers can be
// made and raises RLIMIT_MEMLOCK for kernels that charge maps to it.
func probeKernel(log *slog.Logger) (*btf.Spec, error) {
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, fmt.Errorf("kernel BTF is required (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF=y): %w", err)
	}
	if err := features.HaveMapType(ebpf.RingBuf); err != nil {
		switch {
		case errors.Is(err, os.ErrPermission):
			return nil, fmt.Errorf("loading BPF programs needs root, or CAP_BPF and CAP_PERFMON: %w", err)
		case errors.Is(err, ebpf.ErrNotSupported):
			return nil, fmt.Errorf("BPF ring buffer not available (Linux 5.8 or later is needed): %w", err)
		}
		return nil, fmt.Errorf("probing for the BPF ring buffer: %w", err)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		log.Warn("could not raise RLIMIT_MEMLOCK; loading may fail on kernels before 5.11", "err", err)
	}
	return kernel, nil
}

// setVariables probes the kernel's features and sets the programs'
// constants from them and the settings; it returns the features and the
// kernel's names of reset reasons.
func setVariables(spec *ebpf.CollectionSpec, kernel *btf.Spec, cfg Config, layout cgroupLayout, s openSettings) (kernelFeatures, []string, error) {
	v1 := int32(-1)
	if layout.v1Subsys != "" {
		id, err := cgroupSubsysID(kernel, layout.v1Subsys)
		if err != nil {
			return nil, nil, err
		}
		v1 = id
	}
	feats := probeFeatures(kernel, cfg.WithoutFeatures)
	reasonArg, reasonNames := rstReasons(kernel)
	feats[FeatureResetReason] = feats[FeatureResetReason] && reasonArg
	vars := map[string]any{
		"signal_mask":         s.mask,
		"filter_enabled":      boolByte(!cfg.TrackAll),
		"v1_subsys_id":        v1,
		"rst_reason_arg":      boolByte(feats[FeatureResetReason]),
		"no_socket_resets":    boolByte(feats[FeatureNoSocketResets]),
		"have_task_btf":       boolByte(feats[FeatureTaskBTF]),
		"exit_group_dead_arg": boolByte(feats[FeatureExitGroupDead]),
		"wakeup_bytes":        s.wakeupBytes,
	}
	for name, v := range vars {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, nil, fmt.Errorf("setting %s: %w", name, err)
		}
	}
	return feats, reasonNames, nil
}

// createMaps creates the maps on their own: a program that fails to load
// must not take the maps (or the other programs) with it.
func (c *Collector) createMaps(spec *ebpf.CollectionSpec) error {
	mapSpec := &ebpf.CollectionSpec{Maps: spec.Maps, Variables: spec.Variables, Types: spec.Types, ByteOrder: spec.ByteOrder}
	var err error
	c.maps, err = ebpf.NewCollection(mapSpec)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return fmt.Errorf("creating BPF maps needs root, or CAP_BPF and CAP_PERFMON: %w", err)
		}
		return fmt.Errorf("creating BPF maps: %w", err)
	}
	c.events = c.maps.Maps["events"]
	c.counters = c.maps.Maps["counters"]
	c.cgroupsMap = c.maps.Maps["tracked_cgroups"]
	c.netnsMap = c.maps.Maps["tracked_netns"]
	c.generation = c.maps.Maps["generation"]
	return nil
}

// loadPrograms loads and attaches each program, dropping with a warning
// those the kernel refuses, then the fallback for refused ones; it fails
// only when no program could run.
func (c *Collector) loadPrograms(spec *ebpf.CollectionSpec, kernel *btf.Spec, cfg Config, wakeupBytes uint64) error {
	cache := btf.NewCache()
	for _, def := range programDefs {
		p := Program{Name: def.name, Tracepoint: def.tracepoint, Kinds: def.kinds}
		p.Err = c.loadProgram(spec, kernel, cache, def)
		p.Loaded = p.Err == nil
		if p.Err != nil {
			c.log.Warn("kernel program dropped", "program", def.name, "tracepoint", def.tracepoint,
				"missing", kindNames(def.kinds), "err", p.Err)
		}
		c.programs = append(c.programs, p)
	}
	c.loadRefusedFallback(kernel, cache, !cfg.TrackAll, wakeupBytes, cfg.WithoutFeatures)
	if len(c.links) == 0 {
		var why []string
		for _, p := range c.programs {
			why = append(why, p.Name+": "+p.Err.Error())
		}
		return fmt.Errorf("no kernel program could run: %s", strings.Join(why, "; "))
	}
	return nil
}

func (c *Collector) loadProgram(spec *ebpf.CollectionSpec, kernel *btf.Spec, cache *btf.Cache, def programDef) error {
	var tp *btf.Typedef
	if err := kernel.TypeByName("btf_trace_"+def.name, &tp); err != nil {
		return fmt.Errorf("tracepoint %s not in this kernel (no btf_trace_%s in its BTF): %w", def.tracepoint, def.name, err)
	}
	ps, found := spec.Programs[def.name]
	if !found {
		return fmt.Errorf("program %s missing from the object", def.name)
	}
	sub := &ebpf.CollectionSpec{
		Maps:      spec.Maps,
		Programs:  map[string]*ebpf.ProgramSpec{def.name: ps},
		Variables: spec.Variables,
		Types:     spec.Types,
		ByteOrder: spec.ByteOrder,
	}
	coll, err := ebpf.NewCollectionWithOptions(sub, ebpf.CollectionOptions{
		MapReplacements: c.maps.Maps,
		Programs:        ebpf.ProgramOptions{KernelTypes: kernel},
		Cache:           cache,
	})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fmt.Errorf("verifier rejected it: %s", verifierTail(ve))
		}
		if errors.Is(err, os.ErrPermission) {
			return fmt.Errorf("loading needs root, or CAP_BPF and CAP_PERFMON: %w", err)
		}
		return fmt.Errorf("loading: %w", err)
	}
	prog := coll.DetachProgram(def.name)
	coll.Close()
	l, err := link.AttachTracing(link.TracingOptions{Program: prog, AttachType: ebpf.AttachTraceRawTp})
	if err != nil {
		prog.Close()
		return fmt.Errorf("attaching to %s: %w", def.tracepoint, err)
	}
	c.progs[def.name] = prog
	c.links[def.name] = l
	return nil
}

// hostNetNS returns the inode of the host's network namespace. An agent in
// a pod without hostNetwork (or hostPID) sees its own namespace at
// /proc/self/ns/net and the pod's at /proc/1/ns/net, so the kernel is asked
// instead: host_netns follows the current task's parents to init_task and
// returns its namespace, init_net. Kernels before 5.10 cannot test-run it;
// there /proc/self/ns/net is all there is, right only with hostNetwork.
func hostNetNS(spec *ebpf.CollectionSpec, kernel *btf.Spec, log *slog.Logger) uint64 {
	own, _ := NetNSInode("/proc/self/ns/net")
	ps := spec.Programs["host_netns"]
	if ps == nil {
		return own
	}
	prog, err := ebpf.NewProgramWithOptions(ps, ebpf.ProgramOptions{KernelTypes: kernel})
	if err == nil {
		defer prog.Close()
		var ret uint32
		if ret, err = prog.Run(&ebpf.RunOptions{}); err == nil && ret != 0 {
			if uint64(ret) != own {
				log.Info("this process is not in the host network namespace; resets there are not a pod's", "host_netns", ret, "own_netns", own)
			}
			return uint64(ret)
		}
	}
	log.Warn("cannot ask the kernel for the host network namespace; taking this process's own, which is the host's only with hostNetwork",
		"netns", own, "err", err)
	return own
}

// HostNetNS is the inode of the host's network namespace, which the
// collector never attributes to a pod.
func (c *Collector) HostNetNS() uint64 { return c.hostNet }

// detach detaches the programs but keeps them loaded, with their maps;
// attach attaches them again. The overhead benchmark uses them to switch
// the probes off and on without reloading.
func (c *Collector) detach() error {
	var errs []error
	for name, l := range c.links {
		errs = append(errs, l.Close())
		delete(c.links, name)
	}
	return errors.Join(errs...)
}

func (c *Collector) attach() error {
	for name, prog := range c.progs {
		if c.links[name] != nil {
			continue
		}
		at, ok := refusedAttach[name]
		if !ok {
			at = ebpf.AttachTraceRawTp
		}
		l, err := link.AttachTracing(link.TracingOptions{Program: prog, AttachType: at})
		if err != nil {
			return fmt.Errorf("attaching %s: %w", name, err)
		}
		c.links[name] = l
	}
	return nil
}

func verifierTail(ve *ebpf.VerifierError) string {
	log := ve.Log
	if len(log) > 3 {
		log = log[len(log)-3:]
	}
	return fmt.Sprintf("%v: %s", ve.Cause, strings.Join(log, " | "))
}

// rstReasons reports whether tcp_send_reset passes the reset reason (Linux
// 6.10+) and the names of enum sk_rst_reason, "SK_RST_REASON_NO_SOCKET"
// becoming "no_socket".
func rstReasons(kernel *btf.Spec) (bool, []string) {
	var tp *btf.Typedef
	hasArg := false
	if kernel.TypeByName("btf_trace_tcp_send_reset", &tp) == nil {
		if ptr, ok := tp.Type.(*btf.Pointer); ok {
			if fp, ok := ptr.Target.(*btf.FuncProto); ok {
				// void *ctx, sk, skb, reason
				hasArg = len(fp.Params) >= 4
			}
		}
	}
	var names []string
	var en *btf.Enum
	if kernel.TypeByName("sk_rst_reason", &en) == nil {
		for _, v := range en.Values {
			if v.Value > 255 {
				continue
			}
			for uint64(len(names)) <= v.Value {
				names = append(names, "")
			}
			names[v.Value] = strings.ToLower(strings.TrimPrefix(v.Name, "SK_RST_REASON_"))
		}
	}
	return hasArg && names != nil, names
}

// cgroupSubsysID finds a v1 controller's index in the kernel's enum
// cgroup_subsys_id ("memory" is memory_cgrp_id).
func cgroupSubsysID(kernel *btf.Spec, ctrl string) (int32, error) {
	var en *btf.Enum
	if err := kernel.TypeByName("cgroup_subsys_id", &en); err != nil {
		return 0, fmt.Errorf("finding cgroup controller ids in kernel BTF: %w", err)
	}
	for _, v := range en.Values {
		if v.Name == ctrl+"_cgrp_id" {
			return int32(v.Value), nil
		}
	}
	return 0, fmt.Errorf("cgroup v1 controller %q is not built into this kernel", ctrl)
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func kindNames(ks []event.Kind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ",")
}

// Programs lists the kernel programs, loaded or dropped with the reason.
func (c *Collector) Programs() []Program { return slices.Clone(c.programs) }

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

// Run reads events until ctx is done or the collector is closed, and then
// returns nil. Events are emitted in the kernel's order, ExitWindow after
// they happened (plus up to FlushInterval while the kernel batches them).
// emit receives each event, complete and sealed (unless Config.Unsealed); the pointer
// and the event are reused for the next one, so emit must copy what it
// keeps. Attrs is shared between events and must not be modified. Only one
// Run may be active at a time.
func (c *Collector) Run(ctx context.Context, emit func(*event.Event)) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("collector is already running")
	}
	defer c.running.Store(false)
	c.runMu.Lock()
	defer c.runMu.Unlock()

	var (
		rec ringbuf.Record
		raw probesEvent
		ev  event.Event
		n   uint
	)
	out := func(e *event.Event) {
		emit(e)
		c.delivered.Add(1)
	}
	if c.delay == nil {
		c.delay = newDelayLine(int64(c.exitWindow), delayCapacity)
	}
	d := c.delay
	defer d.flush(out)
	c.rd.SetDeadline(time.Now().Add(c.flush))
	for {
		err := c.rd.ReadInto(&rec)
		if err != nil {
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				if ctx.Err() != nil {
					return nil
				}
				d.release(time.Now().UnixNano()-d.window, out)
				c.rd.SetDeadline(time.Now().Add(c.flush))
				continue
			case errors.Is(err, ringbuf.ErrClosed):
				return nil
			}
			return fmt.Errorf("reading ring buffer: %w", err)
		}
		if n++; n%4096 == 0 && ctx.Err() != nil {
			return nil
		}
		if err := c.handle(rec.RawSample, &raw, &ev); err != nil {
			if errors.Is(err, errDuplicateExit) {
				c.duplicateExits.Add(1)
				continue
			}
			c.decodeErrors.Add(1)
			c.log.Debug("dropping undecodable record", "err", err)
			continue
		}
		d.push(&ev, out)
		d.release(ev.Time-d.window, out)
	}
}

var errDuplicateExit = errors.New("second exit record of one process")

// recentExits remembers the last processes whose exit was emitted. Without
// sched_process_exit's group_dead (before Linux 6.16, where the tracepoint
// also comes after exit_mm) threads that exit together can each find the
// live count at zero; the second record of a process within a second is
// the same exit. A fixed ring: no allocation, bounded work per exit.
type recentExits struct {
	pid  [64]uint32
	ts   [64]uint64
	next int
}

func (r *recentExits) seen(pid uint32, ts uint64) bool {
	for i := range r.pid {
		// Records of different CPUs may arrive slightly out of order.
		if d := int64(ts - r.ts[i]); r.pid[i] == pid && pid != 0 && d < int64(time.Second) && d > -int64(time.Second) {
			return true
		}
	}
	r.pid[r.next], r.ts[r.next] = pid, ts
	r.next = (r.next + 1) % len(r.pid)
	return false
}

// delayCapacity bounds the events held for the exit window: 4096 events
// (about 1.3 MB) cover 50 ms at 80,000 events/s.
const delayCapacity = 4096

// handle decodes one record into ev.
func (c *Collector) handle(b []byte, raw *probesEvent, ev *event.Event) error {
	if err := decodeRaw(b, raw); err != nil {
		return err
	}
	if raw.Kind == kindExit && !c.features[FeatureExitGroupDead] && c.exits.seen(raw.Pid, raw.TsNs) {
		return errDuplicateExit
	}
	// Wall may resample the clock and replace attrs: call it first (Go
	// does not order a field read against a call in one argument list).
	wall := c.clock.Wall(raw.TsNs)
	if err := c.decoder.fill(ev, raw, wall, c.clock.attrs); err != nil {
		return err
	}
	c.resolver.Resolve(ev, raw.CgroupId, raw.Netns)
	if c.resolver.misses != c.unresolved.Load() {
		c.unresolved.Store(c.resolver.misses)
	}
	if !c.unsealed {
		ev.Seal()
	}
	return nil
}

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
