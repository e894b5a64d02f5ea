package ebpf

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"

	"github.com/drainscope/drainscope/event"
)

// The refused-connection fallback. Before Linux 6.10 tcp_send_reset fires
// only for resets sent on a socket, so the reset answering a SYN to a port
// nobody listens on (conn_refused, the endpoint race's signature) and the
// reset for a segment of a connection the kernel already forgot leave no
// trace there. On such kernels Open loads one of two programs from
// bpf/refused.c instead, the first that the kernel's BTF offers and that
// loads and attaches:
//
//  1. fentry on tcp_v4_send_reset and tcp_v6_send_reset, taking the calls
//     with no socket (FeatureResetFentry): every kernel with BTF, where the
//     architecture has BPF trampolines (x86-64 from 5.5, arm64 from 6.0).
//  2. tp_btf/kfree_skb with SKB_DROP_REASON_NO_SOCKET
//     (FeatureDropReasonNoSocket): 5.17 and later, any architecture.
//
// Both write the record tcp_send_reset's no-socket path writes, into the
// same ring buffer and counters, so a node on 5.15–6.9 sees conn_refused
// as one on 6.10 does. Config.WithoutFeatures withholds either, and
// FeatureNoSocketResets withheld on a 6.10+ kernel forces the fallback (the
// tests compare both paths side by side on the same SYNs).
const (
	// FeatureResetFentry: tcp_v4_send_reset is a function in the kernel's
	// BTF that fentry can attach to.
	FeatureResetFentry Feature = "reset_fentry"
	// FeatureDropReasonNoSocket: kfree_skb passes the drop reason (Linux
	// 5.17) and enum skb_drop_reason has SKB_DROP_REASON_NO_SOCKET.
	FeatureDropReasonNoSocket Feature = "drop_reason_no_socket"
)

// fallbackDef is one program of a fallback; a fallback runs when its first
// program attaches, and the others add what they can (IPv6).
type fallbackDef struct {
	name, target string // program in bpf/refused.c; kernel function or tracepoint
	attach       ebpf.AttachType
}

var refusedFallbacks = []struct {
	feature  Feature
	programs []fallbackDef
}{
	{FeatureResetFentry, []fallbackDef{
		{"reset_v4_fentry", "tcp_v4_send_reset", ebpf.AttachTraceFEntry},
		{"reset_v6_fentry", "tcp_v6_send_reset", ebpf.AttachTraceFEntry},
	}},
	{FeatureDropReasonNoSocket, []fallbackDef{
		{"kfree_skb_no_socket", "kfree_skb", ebpf.AttachTraceRawTp},
	}},
}

// probeRefusedFeatures adds the fallback's features to f. It returns
// SKB_DROP_REASON_NO_SOCKET's value on this kernel (0 when absent).
func probeRefusedFeatures(kernel *btf.Spec, f kernelFeatures, without []Feature) uint32 {
	var fn *btf.Func
	f[FeatureResetFentry] = kernel.TypeByName("tcp_v4_send_reset", &fn) == nil
	var reason uint32
	var en *btf.Enum
	if tracepointArgs(kernel, "kfree_skb") >= 3 && kernel.TypeByName("skb_drop_reason", &en) == nil {
		for _, v := range en.Values {
			if v.Name == "SKB_DROP_REASON_NO_SOCKET" {
				reason = uint32(v.Value)
			}
		}
	}
	f[FeatureDropReasonNoSocket] = reason != 0
	for _, w := range without {
		if w == FeatureResetFentry || w == FeatureDropReasonNoSocket {
			f[w] = false
		}
	}
	return reason
}

// needRefusedFallback: the main program does not see resets without a
// socket, because the kernel is older than 6.10 (or the feature is
// withheld) or because tcp_send_reset could not run at all.
func (c *Collector) needRefusedFallback() bool {
	if !c.features[FeatureNoSocketResets] {
		return true
	}
	for _, p := range c.programs {
		if p.Name == "tcp_send_reset" && !p.Loaded {
			return true
		}
	}
	return false
}

// loadRefusedFallback loads and attaches the first fallback that works and
// records its programs in c.programs; it sets c.refusedBy to the program
// that sees IPv4 refusals. Nothing is loaded when the kernel's own
// tracepoint sees them.
func (c *Collector) loadRefusedFallback(kernel *btf.Spec, cache *btf.Cache, filter bool, wakeupBytes uint64, without []Feature) {
	reason := probeRefusedFeatures(kernel, c.features, without)
	if !c.needRefusedFallback() {
		return
	}
	var tried []string
	for _, fb := range refusedFallbacks {
		if !c.features[fb.feature] {
			tried = append(tried, fmt.Sprintf("%s: not in this kernel", fb.feature))
			continue
		}
		spec, err := loadRefused()
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", fb.feature, err))
			continue
		}
		spec.Maps["events"].MaxEntries = c.events.MaxEntries()
		vars := map[string]any{
			"filter_enabled":        boolByte(filter),
			"wakeup_bytes":          wakeupBytes,
			"drop_reason_no_socket": reason,
		}
		for name, v := range vars {
			if err := spec.Variables[name].Set(v); err != nil {
				tried = append(tried, fmt.Sprintf("%s: setting %s: %v", fb.feature, name, err))
				spec = nil
				break
			}
		}
		if spec == nil {
			continue
		}
		var progs []Program
		for i, def := range fb.programs {
			p := Program{Name: def.name, Tracepoint: fallbackTarget(def), Kinds: []event.Kind{event.ConnRefused, event.RSTSent}}
			p.Err = c.loadFallbackProgram(spec, kernel, cache, def)
			p.Loaded = p.Err == nil
			if i == 0 && !p.Loaded {
				tried = append(tried, fmt.Sprintf("%s: %s: %v", fb.feature, def.name, p.Err))
				progs = nil
				break
			}
			if !p.Loaded {
				c.log.Warn("refused-connection fallback program dropped", "program", def.name, "err", p.Err)
			}
			progs = append(progs, p)
		}
		if progs == nil {
			// The first program failed (nothing of this fallback is
			// attached): try the next.
			continue
		}
		c.programs = append(c.programs, progs...)
		c.refusedBy = progs[0].Name
		c.refusedFeature = fb.feature
		c.refusedTried = tried
		c.log.Info("refused connections seen through the fallback", "program", c.refusedBy, "feature", fb.feature, "passed_over", tried)
		return
	}
	c.refusedTried = tried
	c.refusedErr = fmt.Errorf("no refused-connection fallback runs: %v", tried)
	c.log.Warn("refused connections cannot be seen on this kernel", "tried", tried)
}

func fallbackTarget(def fallbackDef) string {
	if def.attach == ebpf.AttachTraceFEntry {
		return "fentry/" + def.target
	}
	return "tp_btf/" + def.target
}

// refusedAttach is how each fallback program is attached again after
// detach.
var refusedAttach = map[string]ebpf.AttachType{
	"reset_v4_fentry":     ebpf.AttachTraceFEntry,
	"reset_v6_fentry":     ebpf.AttachTraceFEntry,
	"kfree_skb_no_socket": ebpf.AttachTraceRawTp,
}

func (c *Collector) loadFallbackProgram(spec *ebpf.CollectionSpec, kernel *btf.Spec, cache *btf.Cache, def fallbackDef) error {
	sub, err := oneProgram(spec, def.name)
	if err != nil {
		return err
	}
	opts := ebpf.CollectionOptions{
		MapReplacements: map[string]*ebpf.Map{
			"events":        c.maps.Maps["events"],
			"tracked_netns": c.maps.Maps["tracked_netns"],
			"counters":      c.maps.Maps["counters"],
		},
		Cache: cache,
	}
	if def.attach != ebpf.AttachTraceFEntry {
		// fentry targets may live in a module (ipv6 built as one): leave
		// the library to search the modules' BTF too.
		opts.Programs.KernelTypes = kernel
	}
	coll, err := ebpf.NewCollectionWithOptions(sub, opts)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fmt.Errorf("verifier rejected it: %s", verifierTail(ve))
		}
		if errors.Is(err, os.ErrPermission) {
			if def.attach == ebpf.AttachTraceFEntry {
				return fmt.Errorf("the kernel refused an fentry program (no verifier log: root without CAP_BPF/CAP_PERFMON, or a kernel that forbids BPF trampolines): %w", err)
			}
			return fmt.Errorf("loading needs root, or CAP_BPF and CAP_PERFMON: %w", err)
		}
		return fmt.Errorf("loading: %w", err)
	}
	prog := coll.DetachProgram(def.name)
	coll.Close()
	l, err := link.AttachTracing(link.TracingOptions{Program: prog, AttachType: def.attach})
	if err != nil {
		prog.Close()
		return fmt.Errorf("attaching to %s: %w", fallbackTarget(def), err)
	}
	c.progs[def.name] = prog
	c.links[def.name] = l
	return nil
}

// refusedEvidence marks refused connections and resets without a socket
// as seen when a fallback runs, and names the fallbacks tried when none
// does.
func (c *Collector) refusedEvidence(st []EvidenceStatus) []EvidenceStatus {
	for i := range st {
		if st[i].Evidence != EvidenceRefused && st[i].Evidence != EvidenceResetsWithoutSock {
			continue
		}
		switch {
		case c.refusedBy != "":
			st[i].Available, st[i].Why = true, ""
		case !st[i].Available && c.refusedErr != nil:
			st[i].Why += " (" + c.refusedErr.Error() + ")"
		}
	}
	return st
}

// RefusedBy names the program that sees refused connections: the
// tracepoint tcp_send_reset (Linux 6.10+), a fallback (reset_v4_fentry,
// kfree_skb_no_socket), or "" when nothing does.
func (c *Collector) RefusedBy() string {
	if c.refusedBy != "" {
		return c.refusedBy
	}
	if c.needRefusedFallback() {
		return ""
	}
	return "tcp_send_reset"
}

// RefusedPassedOver says why each fallback tried before the one that runs
// (or every one, when none does) could not run.
func (c *Collector) RefusedPassedOver() []string { return slices.Clone(c.refusedTried) }
