package watcher

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Auto chooses the mode from the cluster's size at start (ChooseMode):
// EveryNode up to LeaderAboveNodes nodes, Leader past it.
const Auto Mode = "auto"

// LeaderAboveNodes is the default cluster size past which Auto chooses
// Leader. In EveryNode mode each node stores every EndpointSlice
// transition of the cluster (about 7 events per pod started and ended,
// per Service port), so the store takes nodes × churn × 7 of them; past
// 50 nodes one recorder is worth more than the spread between nodes.
const LeaderAboveNodes = 50

// ModeChoice is what ChooseMode decided, and why.
type ModeChoice struct {
	Mode   Mode
	Nodes  int    // the cluster's nodes at start; 0 when they could not be counted
	Reason string // for the log
}

// ChooseMode resolves Auto: Leader when the cluster has more than above
// nodes (LeaderAboveNodes when above <= 0), EveryNode otherwise. When the
// nodes cannot be counted (no RBAC to list them) it chooses Leader, the
// mode whose volume does not grow with the cluster, and says so. An
// explicit mode is returned as it is, with the count when it is cheap to
// get (it also sizes the observer sample, SampledNode).
func ChooseMode(ctx context.Context, cs kubernetes.Interface, m Mode, above int) ModeChoice {
	if above <= 0 {
		above = LeaderAboveNodes
	}
	n, err := CountNodes(ctx, cs)
	if m != Auto {
		c := ModeChoice{Mode: m, Nodes: n, Reason: "--endpoints-mode " + string(m)}
		if err != nil {
			c.Nodes = 0
		}
		return c
	}
	switch {
	case err != nil:
		return ModeChoice{Mode: Leader, Reason: fmt.Sprintf("auto: the nodes could not be counted (%v); leader keeps the volume independent of the cluster's size", err)}
	case n > above:
		return ModeChoice{Mode: Leader, Nodes: n, Reason: fmt.Sprintf("auto: %d nodes > %d (--leader-above-nodes)", n, above)}
	default:
		return ModeChoice{Mode: EveryNode, Nodes: n, Reason: fmt.Sprintf("auto: %d nodes <= %d (--leader-above-nodes)", n, above)}
	}
}

// CountNodes counts the cluster's nodes with a list of one: the API
// server's remainingItemCount gives the rest, so a 5,000-node cluster
// costs one Node object, not 5,000. A server that does not give the
// count is paged through.
func CountNodes(ctx context.Context, cs kubernetes.Interface) (int, error) {
	opts := metav1.ListOptions{Limit: 1}
	total := 0
	for {
		l, err := cs.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return 0, fmt.Errorf("listing nodes: %w", err)
		}
		total += len(l.Items)
		if rem := l.RemainingItemCount; rem != nil && opts.Continue == "" {
			return total + int(*rem), nil
		}
		if l.Continue == "" {
			return total, nil
		}
		opts = metav1.ListOptions{Limit: 500, Continue: l.Continue}
	}
}

// SampledNode reports whether node is in the deterministic sample of
// about k of the cluster's nodes: a node is in it when the hash of its
// name falls in the lowest k/nodes of the hash space. Every node decides
// alone, from its name and the count, with no coordination: the sample
// holds k nodes on average (binomial; none with probability about e^-k,
// 0.7 % for k = 5), and every node when nodes <= k or the count is
// unknown (nodes <= 0) with k > 0. k <= 0 samples no node.
func SampledNode(node string, nodes, k int) bool {
	switch {
	case k <= 0:
		return false
	case nodes <= k:
		return true
	}
	h := sha256.Sum256([]byte(node))
	return float64(binary.BigEndian.Uint64(h[:8])) < float64(k)/float64(nodes)*math.MaxUint64
}
