package repocheck_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/drainscope/drainscope/analysis"
)

// root is the repository's top, from this package's directory.
const root = "../.."

// readmeMaxLines keeps the README a front page; the rest goes in docs/.
const readmeMaxLines = 220

// docFiles are the Markdown files whose links must work from a clean
// clone: the README, CONTRIBUTING.md and every page under docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{filepath.Join(root, "README.md"), filepath.Join(root, "CONTRIBUTING.md")}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(more) == 0 {
		t.Fatal("no docs/*.md: the README's topics have nowhere to go")
	}
	return append(files, more...)
}

var (
	fence = regexp.MustCompile("(?m)^ {0,3}(```|~~~)")
	// An inline code span: its text is not Markdown.
	codeSpan = regexp.MustCompile("`[^`\n]*`")
	link     = regexp.MustCompile(`!?\[[^\]]*\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	scheme   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	heading  = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
)

// docLine is one line of a Markdown file outside fenced code, with its
// number.
type docLine struct {
	n    int
	text string
}

// prose returns the lines of a Markdown file outside fenced code blocks.
func prose(t *testing.T, path string) []docLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []docLine
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if fence.MatchString(l) {
			in = !in
			continue
		}
		if !in {
			out = append(out, docLine{n, l})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// slug is the anchor GitHub gives a heading: lower case, the inline
// markup's backticks and every character but letters, digits, spaces,
// hyphens and underscores dropped, spaces turned into hyphens.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the heading anchors of a Markdown file, with GitHub's -1,
// -2 … for repeated headings.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(t, path) {
		m := heading.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		// A link in a heading anchors on its text.
		text := link.ReplaceAllStringFunc(m[2], func(s string) string {
			return s[strings.Index(s, "[")+1 : strings.Index(s, "]")]
		})
		s := slug(text)
		if k := seen[s]; k > 0 {
			out[fmt.Sprintf("%s-%d", s, k)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// docLink is a relative link of a Markdown file: its line, the target as
// written, the file it names (the page itself for a bare #fragment) and
// the fragment.
type docLink struct {
	n          int
	target     string
	dest, frag string
}

// relativeLinks lists the relative links of a Markdown file, outside code.
func relativeLinks(t *testing.T, path string) []docLink {
	t.Helper()
	var out []docLink
	for _, l := range prose(t, path) {
		text := codeSpan.ReplaceAllString(l.text, "")
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if scheme.MatchString(target) {
				continue // a web address: not this repository's to keep
			}
			file, frag, _ := strings.Cut(target, "#")
			dest := path
			if file != "" {
				dest = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
			}
			out = append(out, docLink{l.n, target, dest, frag})
		}
	}
	return out
}

// brokenLinks lists, as file:line: messages, each relative link of a
// Markdown file whose file is missing or whose #fragment names no heading.
func brokenLinks(t *testing.T, path string) []string {
	t.Helper()
	var bad []string
	for _, l := range relativeLinks(t, path) {
		if _, err := os.Stat(l.dest); err != nil {
			bad = append(bad, fmt.Sprintf("%s:%d: link %s: no such file", rel(path), l.n, l.target))
			continue
		}
		if l.frag != "" && strings.HasSuffix(l.dest, ".md") && !anchors(t, l.dest)[l.frag] {
			bad = append(bad, fmt.Sprintf("%s:%d: link %s: %s has no heading #%s", rel(path), l.n, l.target, rel(l.dest), l.frag))
		}
	}
	return bad
}

func rel(p string) string {
	r, err := filepath.Rel(root, p)
	if err != nil {
		return p
	}
	return filepath.ToSlash(r)
}

// TestDocLinks: every relative link in the README and docs/ reaches a file
// of this repository, and a heading where it names one.
func TestDocLinks(t *testing.T) {
	n := 0
	for _, f := range docFiles(t) {
		for _, b := range brokenLinks(t, f) {
			t.Error(b)
		}
		n++
	}
	t.Logf("checked the links of %d files", n)
}

// TestBrokenLinksFound: the link check finds a missing file, a missing
// heading and a missing heading in the same file, and passes good links,
// web addresses and links inside code.
func TestBrokenLinksFound(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("other.md", "# Other page\n\n## The `--keep` flag\n\n## Twice\n\n## Twice\n")
	p := write("page.md", "# Page\n\n## Here\n\n"+
		"[ok](other.md) [ok](other.md#other-page) [ok](other.md#the---keep-flag) [ok](other.md#twice-1) [ok](#here)\n"+
		"[web](https://example.com/x.md#nowhere) `[code](missing.md)`\n"+
		"```\n[fenced](missing.md)\n```\n"+
		"[bad](missing.md)\n"+
		"[bad](other.md#nowhere) ![bad](other.md#twice-2)\n"+
		"[bad](#there)\n")
	got := brokenLinks(t, p)
	want := []string{"missing.md: no such file", "other.md#nowhere:", "other.md#twice-2:", "#there:"}
	if len(got) != len(want) {
		t.Fatalf("found %d broken links, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("broken link %d: %q, want it to name %q", i, got[i], want[i])
		}
	}
}

// TestREADMEIsAFrontPage: the README stays short; the depth is in docs/.
func TestREADMEIsAFrontPage(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, at most %d: move the detail into docs/ and link it", n, readmeMaxLines)
	}
}

// TestREADMECauses: the README's cause table has a row for every rule the
// analysis applies, by its id, so a new cause cannot go unexplained there.
func TestREADMECauses(t *testing.T) {
	var rows []string
	for _, l := range prose(t, filepath.Join(root, "README.md")) {
		if strings.HasPrefix(l.text, "|") {
			rows = append(rows, l.text)
		}
	}
	for _, r := range analysis.Rules {
		id := "`" + string(r.Cause) + "`"
		found := false
		for _, row := range rows {
			found = found || strings.Contains(row, "("+id+")")
		}
		if !found {
			t.Errorf("README.md's cause table has no row for %s (%s), a rule in analysis.Rules", id, r.Title)
		}
	}
}
