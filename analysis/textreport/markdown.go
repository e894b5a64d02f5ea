package textreport

import (
	"io"
	"strings"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
)

// mdEscape keeps cluster-supplied names from breaking a table, and shows
// their control characters escaped (event.Display; the writer bounds lines).
func mdEscape(s string) string {
	// A name's [text](url) or ![image](url) stays text: every bracket
	// escaped, and every backslash, so that none escapes an escape. A
	// backquote may make a code span, where no link forms.
	r := strings.NewReplacer(`\`, `\\`, "[", `\[`, "]", `\]`, "|", `\|`, "\n", " ", "<", "&lt;", ">", "&gt;")
	return r.Replace(event.Display(s, -1))
}

// WriteMarkdown writes the report as Markdown, for an incident document,
// through an event.DisplayWriter as WriteText does.
func WriteMarkdown(w io.Writer, r *analysis.Result) error {
	lw := newLineWriter(w)
	p := lw.line
	title := "# drainscope report"
	if r.Scope != "" {
		title += ": " + mdEscape(r.Scope)
	}
	p("%s", title)
	p("")
	p("%s → %s", stamp(r.From), stamp(r.To))
	p("")
	if ks := append(append(GapLines(r.RecorderGaps), KernelLines(r.Kernels)...), ProxyLines(r.Proxies)...); len(ks) > 0 {
		for _, l := range ks {
			p("- %s", mdEscape(l))
		}
		p("")
	}
	if l := LagLine(r.DataplaneLag); l != "" {
		p("%s", mdEscape(l))
		p("")
	}
	causes, label := r.Causes, "client-reported"
	if len(causes) == 0 && len(r.InferredCauses) > 0 {
		causes, label = r.InferredCauses, "inferred from kernel evidence"
	}
	p("## Failures by cause (%s)", label)
	p("")
	if len(causes) == 0 {
		p("None.")
		p("")
	} else {
		p("| cause | failures | median from exit | median from SIGTERM | fix |")
		p("|---|---:|---:|---:|---|")
		for _, c := range causes {
			fe, fs := "–", "–"
			if c.FromExit.Count > 0 {
				fe = analysis.FormatOffset(c.FromExit.P50NS)
			}
			if c.FromSigterm.Count > 0 {
				fs = analysis.FormatOffset(c.FromSigterm.P50NS)
			}
			p("| %s | %d | %s | %s | %s |", c.Title, c.Count, fe, fs, mdEscape(c.Fix))
		}
		p("")
		for _, c := range causes {
			p("- **%s**: %s.", c.Title, mdEscape(c.Explanation))
		}
		p("")
	}
	p("Kernel evidence alone:")
	p("")
	for _, line := range InferenceLines(r.Inference) {
		p("- %s", mdEscape(line))
	}
	p("")
	p("## Disruptions")
	p("")
	if len(r.Disruptions) == 0 {
		p("None.")
	} else {
		p("| workload | trigger | from | to | replaced | new ready | failures |")
		p("|---|---|---|---|---:|---:|---|")
		for _, ro := range r.Disruptions {
			trigger := string(ro.Trigger)
			if trigger == "" {
				trigger = "—"
			}
			p("| %s/%s | %s | %s | %s | %d | %d | %s |", mdEscape(ro.Namespace), mdEscape(ro.Workload()), trigger, clock(ro.From), clock(ro.To),
				len(ro.Replaced), len(ro.NewPods), causeCounts(ro.ByCause, r.Rules))
		}
		for _, ro := range r.Disruptions {
			head, cmd, lines := PatchLines(ro.Patch, r.Rules)
			if head == "" && len(lines) == 0 {
				continue
			}
			p("")
			p("### Fix of %s/%s", mdEscape(ro.Namespace), mdEscape(ro.Workload()))
			if head != "" {
				p("")
				p("%s", mdEscape(head))
				p("")
				if strings.Contains(cmd, "`") {
					p("%s", mdEscape(cmd)) // no fence a name could close
				} else {
					p("```sh")
					p("%s", event.Display(cmd, -1))
					p("```")
				}
			}
			p("")
			for _, l := range lines {
				p("- %s", mdEscape(l))
			}
		}
	}
	p("")
	p("## Pod timelines")
	for i := range r.Timelines {
		t := &r.Timelines[i]
		if !t.Ended() {
			continue
		}
		p("")
		p("### %s", mdEscape(t.Pod.String()))
		p("")
		if c := containersPhrase(t); c != "" {
			p("%s", mdEscape(c))
			p("")
		}
		p("| time | from deletion | event |")
		p("|---|---:|---|")
		for _, rw := range timelineRows(t) {
			off := ""
			if t.Deletion != 0 {
				off = analysis.FormatOffset(rw.t - t.Deletion)
			}
			p("| %s | %s | %s |", clock(rw.t), off, mdEscape(rw.text))
		}
		p("")
		if c := connPhrase(t.Connections); c != "" {
			p("- %s", c)
		}
		for _, g := range gapPhrases(t) {
			p("- %s", g)
		}
		if len(t.Failures) > 0 {
			p("- failures: %s", causeCounts(t.Failures, r.Rules))
		}
	}
	p("")
	p("## Failures")
	p("")
	n := 0
	for _, f := range r.Failures {
		if f.Inferred && len(r.Causes) > 0 {
			continue
		}
		if n == textListed {
			p("- … more in `--format json`")
			break
		}
		n++
		p("- `%s` %s", clock(f.Failure.Time), mdEscape(f.Explanation))
	}
	if n == 0 {
		p("None.")
	}
	return lw.close()
}
