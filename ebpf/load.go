package ebpf

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/drainscope/drainscope/event"
)

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

// oneProgram is spec with only its program name, and every map, variable
// and type: each program is loaded on its own, so that one the kernel
// refuses leaves the others running.
func oneProgram(spec *ebpf.CollectionSpec, name string) (*ebpf.CollectionSpec, error) {
	ps, found := spec.Programs[name]
	if !found {
		return nil, fmt.Errorf("program %s missing from the object", name)
	}
	return &ebpf.CollectionSpec{
		Maps:      spec.Maps,
		Programs:  map[string]*ebpf.ProgramSpec{name: ps},
		Variables: spec.Variables,
		Types:     spec.Types,
		ByteOrder: spec.ByteOrder,
	}, nil
}

func (c *Collector) loadProgram(spec *ebpf.CollectionSpec, kernel *btf.Spec, cache *btf.Cache, def programDef) error {
	var tp *btf.Typedef
	if err := kernel.TypeByName("btf_trace_"+def.name, &tp); err != nil {
		return fmt.Errorf("tracepoint %s not in this kernel (no btf_trace_%s in its BTF): %w", def.tracepoint, def.name, err)
	}
	sub, err := oneProgram(spec, def.name)
	if err != nil {
		return err
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
