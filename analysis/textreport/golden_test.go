package textreport

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

var update = flag.Bool("update", false, "rewrite the golden reports under testdata/")

// scenario reads one of package analysis's test scenarios: its window and
// events, which analysis's golden tests keep in ../testdata/<name>.events.json
// and hold equal to the scenario.
func scenario(t *testing.T, name string) ([]event.Event, store.Query) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", name+".events.json"))
	if err != nil {
		t.Fatalf("%v (go test ./analysis -run TestGolden -update writes it)", err)
	}
	var f struct {
		Window event.Window
		Events []event.Event
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s.events.json: %v", name, err)
	}
	return f.Events, store.Query{Window: f.Window}
}

// report renders res with write and compares it with testdata/name, or
// rewrites that with -update.
func report(t *testing.T, name string, write func(*bytes.Buffer) error) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := write(&b); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if want, err := os.ReadFile(path); err != nil {
		t.Fatalf("%v (go test ./analysis/textreport -run %s -update writes it)", err, t.Name())
	} else if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("%s differs from the golden file; run with -update after checking the change.\n--- got:\n%s", path, b.Bytes())
	}
	return b.Bytes()
}

// TestGolden: the text and markdown reports of analysis's scenarios.
func TestGolden(t *testing.T) {
	for _, name := range []string{"seed000_graceful_prestop", "exit_at_sigterm", "kernel_only", "dataplane_lag"} {
		t.Run(name, func(t *testing.T) {
			events, q := scenario(t, name)
			res, err := analysis.AnalyzeEvents(events, q, analysis.Options{})
			if err != nil {
				t.Fatal(err)
			}
			txt := report(t, name+".txt", func(b *bytes.Buffer) error { return WriteText(b, res) })
			md := report(t, name+".md", func(b *bytes.Buffer) error { return WriteMarkdown(b, res) })
			// The text and markdown print no timeline's events: without
			// their views they are the same.
			bare, err := analysis.AnalyzeEvents(events, q, analysis.Options{NoEventViews: true})
			if err != nil {
				t.Fatal(err)
			}
			for i, tl := range res.Timelines {
				if len(tl.Events) == 0 || len(bare.Timelines[i].Events) != 0 {
					t.Errorf("timeline %d: %d events with views, %d without; want some, then none", i, len(tl.Events), len(bare.Timelines[i].Events))
				}
			}
			var btxt, bmd bytes.Buffer
			if err := WriteText(&btxt, bare); err != nil {
				t.Fatal(err)
			}
			if err := WriteMarkdown(&bmd, bare); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(btxt.Bytes(), txt) || !bytes.Equal(bmd.Bytes(), md) {
				t.Errorf("the text or markdown differs without the events' views:\n%s", btxt.Bytes())
			}
		})
	}
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

// The report's text and markdown, with hostile names everywhere (analysis's
// hostile scenario: every name and text of the cluster's ends in a window
// title change, a screen clear, a C1 control, a bidirectional override and
// a newline that would forge a line): no control byte reaches the output,
// the escapes show what was there, no forged line starts with the
// attacker's text, and no line is longer than the bound. The outputs are
// golden files too (testdata/hostile_names.*).
func TestHostileNamesReport(t *testing.T) {
	events, q := scenario(t, "hostile_names")
	res, err := analysis.AnalyzeEvents(events, q, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Markdown shows the escape as the text does: its source escapes the
	// backslash and the bracket.
	for _, f := range []struct {
		name, escaped string
		write         func(*bytes.Buffer) error
	}{
		{"hostile_names.txt", `\x1b]0;owned`, func(b *bytes.Buffer) error { return WriteText(b, res) }},
		{"hostile_names.md", `\\x1b\]0;owned`, func(b *bytes.Buffer) error { return WriteMarkdown(b, res) }},
	} {
		out := report(t, f.name, f.write)
		if bad := controlBytes(out); len(bad) > 0 {
			t.Errorf("%s: %d control bytes reached the output (%q)", f.name, len(bad), bad)
		}
		if !bytes.Contains(out, []byte(f.escaped)) {
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
	}
}
