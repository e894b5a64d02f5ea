package web

import (
	"fmt"
	"net/url"
	"strconv"

	"github.com/drainscope/drainscope/event"
)

// RolloutKey identifies a rollout: its workload and the start of its first
// termination. The start does not move while a rollout goes on (later
// terminations only extend its end), so links stay valid.
type RolloutKey struct {
	Namespace string
	Kind      string
	Name      string
	Start     int64 // UTC ns
}

func keyOf(r event.Rollout) RolloutKey {
	return RolloutKey{Namespace: r.Namespace, Kind: r.Workload.Kind, Name: r.Workload.Name, Start: r.From}
}

// Workload is the key's workload.
func (k RolloutKey) Workload() event.Workload { return event.Workload{Kind: k.Kind, Name: k.Name} }

// seg renders one path segment; "-" stands for an empty one (no Kubernetes
// name can be "-": names start with a letter or digit).
func seg(s string) string {
	if s == "" {
		return "-"
	}
	return url.PathEscape(s)
}

func unseg(s string) (string, error) {
	if s == "-" {
		return "", nil
	}
	return url.PathUnescape(s)
}

// ID is the key as four escaped path segments: ns/kind/name/start.
func (k RolloutKey) ID() string {
	return seg(k.Namespace) + "/" + seg(k.Kind) + "/" + seg(k.Name) + "/" + strconv.FormatInt(k.Start, 10)
}

// parseKey reads the four route parameters (escaped, as routed).
func parseKey(ns, kind, name, start string) (RolloutKey, error) {
	var k RolloutKey
	var err error
	if k.Namespace, err = unseg(ns); err != nil {
		return k, fmt.Errorf("namespace: %w", err)
	}
	if k.Kind, err = unseg(kind); err != nil {
		return k, fmt.Errorf("workload kind: %w", err)
	}
	if k.Name, err = unseg(name); err != nil {
		return k, fmt.Errorf("workload name: %w", err)
	}
	if k.Start, err = strconv.ParseInt(start, 10, 64); err != nil || k.Start <= 0 {
		return k, fmt.Errorf("start %q: want UTC nanoseconds", start)
	}
	return k, nil
}

// String is for logs.
func (k RolloutKey) String() string {
	return fmt.Sprintf("%s/%s/%s@%d", k.Namespace, k.Kind, k.Name, k.Start)
}
