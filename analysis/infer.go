package analysis

import (
	"strings"

	"github.com/drainscope/drainscope/event"
)

// Proofs of inferred failures: the pod-side kernel evidence behind each.
const (
	ProofRefusedSYN    = "refused_syn"     // a SYN answered by a no-socket RST while the endpoint was in rotation
	ProofRSTAfterClose = "rst_after_close" // a RST answering data on a connection this side closed
	ProofRSTUnread     = "rst_unread_data" // a RST at close with a request unread
	ProofStored        = "stored"          // an inferred failure read back from the store

	// The likely ones, not proven:
	//
	// ProofInUseAtExit: a keep-alive connection in use (a packet within
	// Options.InUseWithin) that the exit closed. Its client fails on its
	// next request unless it notices the close first; the request may
	// never reach the pod, whose network goes with it.
	ProofInUseAtExit = "in_use_at_exit"
	// ProofRefusedLagging: a refused SYN after the endpoint left rotation
	// everywhere but within Options.ProxyLag: a proxy that had not caught
	// up yet, or the kubelet's readiness probe, which the pod side cannot
	// tell apart.
	ProofRefusedLagging = "refused_syn_proxy_lag"
)

// LikelyProof reports whether an inferred failure's proof makes it likely
// rather than proven.
func LikelyProof(proof string) bool {
	return proof == ProofInUseAtExit || proof == ProofRefusedLagging
}

// seenInference is the inferred failure of one connection: when, and its
// place in the pending queue while it waits there.
type seenInference struct {
	t, seq int64
}

// inferMark is an inferred failure on a client address, for matching
// client-reported failures.
type inferMark struct {
	t      int64
	likely bool
}

func (a *Aligner) markInferred(client addrKey, t int64, likely bool) {
	ms, _ := a.inferredAt.get(client)
	a.inferredAt.set(client, append(ms, inferMark{t, likely}))
}

// infer turns pod-side kernel evidence of a failed request into an inferred
// client failure: a refused SYN while the endpoint could still be routed
// to, a RST answering data on a connection this side had closed, a RST at
// close with unread data; and, as likely rather than proven, a keep-alive
// connection in use that the exit closed. p is the pod e belongs to.
func (a *Aligner) infer(e *event.Event, p *podState) {
	var proof, class string
	switch e.Kind {
	case event.ConnRefused:
		proof, class = ProofRefusedSYN, event.FailRefused
		if p != nil {
			switch p.routing(e.Time, &a.opts) {
			case lagging:
				proof = ProofRefusedLagging
			case unrouted:
				a.stats.RefusedOutOfRotation++
				p.refusedOutOfRotation++
				return
			}
		}
	case event.RSTSent:
		r := normReason(e.Reason)
		switch {
		case e.Flags.Has(event.FlagUnreadData) || r == "TCP_ABORT_ON_CLOSE":
			proof, class = ProofRSTUnread, event.FailReset
		case r == "TCP_ABORT_ON_DATA" || r == "NO_SOCKET" || a.closedBefore(e):
			proof, class = ProofRSTAfterClose, event.FailReset
		}
	case event.ConnClosed:
		// Only a close in the kernel's exit path: one that came just
		// before the exit (FlagNearExit) may be the app's own clean close
		// after a response with Connection: close, and nothing but its
		// timing would name it a cut.
		if e.Flags.Has(event.FlagAtExit) && !e.Flags.Has(event.FlagNearExit) && e.Reason != "peer" && e.Duration > 0 &&
			e.Duration <= int64(a.opts.InUseWithin) && (p == nil || p.appHeld(e)) {
			proof, class = ProofInUseAtExit, event.FailEOF
		}
	}
	if proof == "" {
		return
	}
	client := unmapAP(e.Remote)
	k := connKey{keyOf(client), keyOf(e.Local)}
	if seen, ok := a.inferredSeen[k]; ok && e.Time-seen.t <= int64(a.opts.KernelWindow) {
		// One failure per connection. A reset that follows the close of a
		// connection in use proves what the close made likely.
		if !LikelyProof(proof) {
			if q := a.pending.at(seen.seq); q != nil && LikelyProof(q.proof) {
				q.proof, q.ev.Reason = proof, class
				ms, _ := a.inferredAt.get(k.local)
				for i, m := range ms {
					if m.t == seen.t {
						ms[i].likely = false
					}
				}
			}
		}
		return
	}
	likely := LikelyProof(proof)
	a.markInferred(k.local, e.Time, likely)
	seq, q := a.addPending()
	q.ev = event.Event{
		Time: e.Time, Kind: event.ClientFailure, Node: e.Node, Source: event.SourceKernel,
		Pod: e.Pod, Workload: e.Workload, Local: client, Remote: unmapAP(e.Local),
		Reason: class, Flags: event.FlagInferred,
	}
	q.inferred, q.proof = true, proof
	a.inferredSeen[k] = seenInference{t: e.Time, seq: seq}
}

// closedBefore reports whether this side closed e's connection earlier.
func (a *Aligner) closedBefore(e *event.Event) bool {
	found := false
	a.kernelFor(keyOf(e.Remote), e.Time-int64(a.opts.KernelWindow), e.Time, func(c *event.Event, _ *podState) bool {
		if c.Kind == event.ConnClosed && c.Reason != "peer" && c.Local == e.Local {
			found = true
			return false
		}
		return true
	})
	return found
}

// normReason reduces a kernel reset reason to the enum's bare name:
// "SK_RST_REASON_NO_SOCKET", "no_socket" and "NO_SOCKET" all read NO_SOCKET.
func normReason(r string) string {
	r = strings.ToUpper(strings.TrimSpace(r))
	return strings.TrimPrefix(r, "SK_RST_REASON_")
}
