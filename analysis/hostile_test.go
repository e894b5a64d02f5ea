package analysis

import (
	"strings"
	"testing"

	"github.com/drainscope/drainscope/event"
)

// hostileSuffix is what a name or an error posted to ingest or met in a
// proxy's snapshot may carry: a window title change ended by a bell, a
// screen clear, a CSI written as a C1 control, a bidirectional override, a
// carriage return and a newline that would forge a line of the report.
const hostileSuffix = "\x1b]0;owned\x07\x1b[2J\u009b31m\u202e\r\nFORGED LINE"

// hostile returns the scenario's events with every name and text of the
// cluster's (nodes, namespaces, pods, workloads, Services, slices,
// commands, extras) given hostileSuffix, the same way everywhere so the
// analysis joins them as before; errors also get 10 kB of padding.
func hostile(r *rec) *rec {
	h := func(s string) string {
		if s == "" {
			return s
		}
		return s + hostileSuffix
	}
	for i := range r.events {
		e := &r.events[i]
		named := namedService(e)
		for _, p := range []*string{&e.Node, &e.Pod.Namespace, &e.Pod.Name, &e.Workload.Name, &e.Service, &e.Slice, &e.Comm} {
			*p = h(*p)
		}
		if e.Kind == event.ClientFailure && named != "" {
			// The Service the client named is named the same way: a
			// DNS name cannot carry the suffix, its Service field can.
			ns, name, _ := strings.Cut(named, "/")
			e.Service = h(ns) + "/" + h(name)
		}
		if e.Attrs != nil {
			a := make(map[string]string, len(e.Attrs))
			for k, v := range e.Attrs {
				a[k] = h(v)
			}
			if e.Kind == event.ClientFailure {
				a["error"] = "read: connection reset" + hostileSuffix + strings.Repeat("x", 10_000)
			}
			e.Attrs = a
		}
	}
	for i := range r.nodes {
		r.nodes[i] = h(r.nodes[i])
	}
	return r
}

// TestHostileNamesScenario keeps the hostile scenario's events in
// testdata/hostile_names.events.json, from which analysis/textreport's
// TestHostileNamesReport shows that no name reaches a report raw.
func TestHostileNamesScenario(t *testing.T) {
	r := hostile(exitAtSigterm())
	w := event.Window{From: r.t0 - 2*60*s, To: r.t0 + 2*60*s}
	golden(t, "hostile_names.events.json", scenarioFile(t, w, r.events))
}
