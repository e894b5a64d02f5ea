package analysis

import (
	"bytes"
	"strings"
	"testing"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
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

// controlBytes lists the bytes below 0x20 other than newline and tab, and
// DEL, that out holds.
func controlBytes(out []byte) []byte {
	var bad []byte
	for _, c := range out {
		if (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
			bad = append(bad, c)
		}
	}
	return bad
}

// The report's text and markdown, with hostile names everywhere: no control
// byte reaches the output, the escapes show what was there, no forged line
// starts with the attacker's text, and no line is longer than the bound.
// The outputs are golden files too (testdata/hostile_names.*).
func TestHostileNamesReport(t *testing.T) {
	r := hostile(exitAtSigterm())
	q := store.Query{Window: event.Window{From: r.t0 - 2*60*s, To: r.t0 + 2*60*s}}
	res, err := AnalyzeEvents(r.events, q, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name  string
		write func(*bytes.Buffer) error
	}{
		{"hostile_names.txt", func(b *bytes.Buffer) error { return WriteText(b, res) }},
		{"hostile_names.md", func(b *bytes.Buffer) error { return WriteMarkdown(b, res) }},
	} {
		var b bytes.Buffer
		if err := f.write(&b); err != nil {
			t.Fatal(err)
		}
		out := b.Bytes()
		if bad := controlBytes(out); len(bad) > 0 {
			t.Errorf("%s: %d control bytes reached the output (%q)", f.name, len(bad), bad)
		}
		if !bytes.Contains(out, []byte(`\x1b]0;owned`)) {
			t.Errorf("%s: the escape sequence is not shown escaped", f.name)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "FORGED LINE") {
				t.Errorf("%s: a name forged a line: %q", f.name, line)
			}
			if len(line) > event.MaxDisplayLine+64 {
				t.Errorf("%s: a line of %d bytes", f.name, len(line))
			}
		}
		golden(t, f.name, out)
	}
}
