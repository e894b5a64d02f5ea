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
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/drainscope/drainscope/event"
)

// Feature is a kernel facility the programs use when the kernel has it.
// Each is probed in the kernel's BTF at Open, not inferred from the kernel
// version, since distributions backport.
type Feature string

const (
	// FeatureTaskBTF: the bpf_get_current_task_btf helper (Linux 5.11).
	// Without it the socket programs read the current task through
	// bpf_get_current_task and CO-RE probes: the same evidence, a few more
	// instructions per socket event.
	FeatureTaskBTF Feature = "current_task_btf"
	// FeatureNoSocketResets: tcp_send_reset also fires for resets sent with
	// no socket (Linux 6.10, which made it a tracepoint of its own). Before
	// that a SYN to a closed port (a refused connection) and a segment of a
	// connection the kernel already forgot leave no trace.
	FeatureNoSocketResets Feature = "no_socket_resets"
	// FeatureResetReason: tcp_send_reset passes enum sk_rst_reason (Linux
	// 6.10). Without it resets carry no reason, and a reset because the
	// process exited with unread data cannot be told from another.
	FeatureResetReason Feature = "reset_reason"
	// FeatureExitGroupDead: sched_process_exit passes group_dead (Linux
	// 6.16). Without it the exit of the process is recognised by its live
	// thread count, which threads exiting at the same moment can all read as
	// zero: such a process may be reported as exiting more than once.
	FeatureExitGroupDead Feature = "exit_group_dead"
)

// Features lists every feature, in the order of the README's table.
var Features = []Feature{FeatureTaskBTF, FeatureNoSocketResets, FeatureResetReason, FeatureExitGroupDead,
	FeatureResetFentry, FeatureDropReasonNoSocket}

// Evidence names a kind of kernel evidence the analysis uses. A node whose
// kernel cannot produce one says so (Collector.Evidence), so that its
// absence in a report is not read as "it did not happen".
type Evidence string

const (
	EvidenceSignals           Evidence = "signals"             // signal: SIGTERM, SIGKILL and their sender
	EvidenceProcessExits      Evidence = "process_exits"       // process_exit
	EvidenceListenerCloses    Evidence = "listener_closes"     // listener_closed
	EvidenceConnectionCloses  Evidence = "connection_closes"   // conn_closed, with the keep-alive idle time
	EvidenceResets            Evidence = "resets"              // rst_sent on a socket: data on a closed connection
	EvidenceResetsReceived    Evidence = "resets_received"     // rst_received
	EvidenceRefused           Evidence = "refused_connections" // conn_refused: the endpoint race's signature
	EvidenceResetsWithoutSock Evidence = "resets_without_socket"
	EvidenceUnreadDataResets  Evidence = "unread_data_resets" // rst_sent with FlagUnreadData: an in-flight request cut
)

// AllEvidence lists every kind of evidence.
var AllEvidence = []Evidence{
	EvidenceSignals, EvidenceProcessExits, EvidenceListenerCloses, EvidenceConnectionCloses,
	EvidenceResets, EvidenceResetsReceived, EvidenceRefused, EvidenceResetsWithoutSock, EvidenceUnreadDataResets,
}

// EvidenceStatus says whether this node's capture can see one kind of
// evidence, and why not.
type EvidenceStatus struct {
	Evidence  Evidence
	Available bool
	Why       string // when not available
}

// kernelFeatures are the probed features, minus those withheld by
// Config.WithoutFeatures.
type kernelFeatures map[Feature]bool

// probeFeatures reads the kernel's BTF for each feature.
func probeFeatures(kernel *btf.Spec, without []Feature) kernelFeatures {
	f := kernelFeatures{}
	var fn *btf.Enum
	if kernel.TypeByName("bpf_func_id", &fn) == nil {
		for _, v := range fn.Values {
			if v.Name == "BPF_FUNC_get_current_task_btf" {
				f[FeatureTaskBTF] = true
			}
		}
	}
	// From 6.10 tcp_send_reset is its own TRACE_EVENT, which handles a
	// NULL socket; before, it was an instance of the tcp_event_sk_skb class,
	// called only with a socket.
	var st *btf.Struct
	f[FeatureNoSocketResets] = kernel.TypeByName("trace_event_raw_tcp_send_reset", &st) == nil
	f[FeatureResetReason] = tracepointArgs(kernel, "tcp_send_reset") >= 3
	f[FeatureExitGroupDead] = tracepointArgs(kernel, "sched_process_exit") >= 2
	for _, w := range without {
		f[w] = false
	}
	return f
}

// tracepointArgs counts a raw tracepoint's arguments (its btf_trace_ typedef
// without the leading void *ctx); 0 when the tracepoint is not there.
func tracepointArgs(kernel *btf.Spec, name string) int {
	var tp *btf.Typedef
	if kernel.TypeByName("btf_trace_"+name, &tp) != nil {
		return 0
	}
	ptr, ok := tp.Type.(*btf.Pointer)
	if !ok {
		return 0
	}
	fp, ok := ptr.Target.(*btf.FuncProto)
	if !ok || len(fp.Params) == 0 {
		return 0
	}
	return len(fp.Params) - 1
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

func (f kernelFeatures) list() []Feature {
	var out []Feature
	for _, x := range Features {
		if f[x] {
			out = append(out, x)
		}
	}
	return out
}

// evidenceFor derives what the node can see from the features and the
// programs that loaded.
func evidenceFor(f kernelFeatures, programs []Program, release string) []EvidenceStatus {
	dropped := map[event.Kind]string{}
	for _, p := range programs {
		if !p.Loaded {
			for _, k := range p.Kinds {
				dropped[k] = fmt.Sprintf("kernel program %s was dropped: %v", p.Name, p.Err)
			}
		}
	}
	kernel := "this node's kernel (" + release + ")"
	need := map[Evidence]struct {
		kind    event.Kind
		feature Feature
		why     string
	}{
		EvidenceSignals:           {kind: event.Signal},
		EvidenceProcessExits:      {kind: event.ProcessExit},
		EvidenceListenerCloses:    {kind: event.ListenerClosed},
		EvidenceConnectionCloses:  {kind: event.ConnClosed},
		EvidenceResets:            {kind: event.RSTSent},
		EvidenceResetsReceived:    {kind: event.RSTReceived},
		EvidenceRefused:           {event.ConnRefused, FeatureNoSocketResets, "refused connections cannot be seen on " + kernel + ": tcp_send_reset fires for resets without a socket from Linux 6.10"},
		EvidenceResetsWithoutSock: {event.RSTSent, FeatureNoSocketResets, "resets for connections the kernel already forgot cannot be seen on " + kernel + ": tcp_send_reset fires without a socket from Linux 6.10"},
		EvidenceUnreadDataResets:  {event.RSTSent, FeatureResetReason, "resets with unread data (in-flight requests cut) cannot be told apart on " + kernel + ": tcp_send_reset passes the reset reason from Linux 6.10"},
	}
	out := make([]EvidenceStatus, 0, len(AllEvidence))
	for _, ev := range AllEvidence {
		n := need[ev]
		s := EvidenceStatus{Evidence: ev, Available: true}
		if why, ok := dropped[n.kind]; ok {
			s.Available, s.Why = false, why
		} else if n.feature != "" && !f[n.feature] {
			s.Available, s.Why = false, n.why
		}
		out = append(out, s)
	}
	return out
}

// MissingEvidence returns the names of the evidence not available.
func MissingEvidence(st []EvidenceStatus) []string {
	var out []string
	for _, s := range st {
		if !s.Available {
			out = append(out, string(s.Evidence))
		}
	}
	return out
}

// kernelRelease is uname -r.
func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return "unknown"
	}
	return strings.TrimRight(string(u.Release[:]), "\x00")
}

// Features lists the kernel features the loaded programs use.
func (c *Collector) Features() []Feature { return c.features.list() }

// Evidence says, for every kind of evidence, whether this node's capture
// can see it.
func (c *Collector) Evidence() []EvidenceStatus { return slices.Clone(c.evidence) }

// KernelRelease is the release of the running kernel (uname -r).
func (c *Collector) KernelRelease() string { return c.release }
