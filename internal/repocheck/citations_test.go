package repocheck_test

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A comment names a place of this module in one of three forms: the
// module's import path and a path in it; a path whose first element is a
// top-level directory (store/roles.go, lab/fleet, `internal/pgtest`,
// lab/fleet.Run); or the name of a package of the module with "test"
// after it, as Go names a package of test helpers (net/http's httptest).
// Words that only might be packages (store, event) are not read: they are
// also English. A path with a placeholder in capitals (deploy/NAME, as
// kubectl names a Deployment) names nothing.
var (
	citedPath   = regexp.MustCompile(`(?:^|[\s(\x60"'\[])((?:github\.com/drainscope/drainscope/)?[a-z][a-z0-9_-]*(?:/[A-Za-z0-9_.-]+)+)`)
	citedHelper = regexp.MustCompile(`\b([a-z][a-z0-9]*)test\b`)
	identAfter  = regexp.MustCompile(`\.[A-Z][A-Za-z0-9_]*$`)
	placeholder = regexp.MustCompile(`/[A-Z][A-Z_]*(/|$)`)
)

// goComment is one comment of a Go file, with its position.
type goComment struct {
	pos  string // file:line
	text string
}

// staleCitations lists, as pos: messages, each place of this module that
// a comment names and that is not there. topDirs are the module's
// top-level directories, pkgNames the names of its packages; exists says
// whether a path (relative to the module's root) is there.
func staleCitations(comments []goComment, topDirs, pkgNames map[string]bool, exists func(string) bool) []string {
	var bad []string
	for _, c := range comments {
		for _, m := range citedPath.FindAllStringSubmatch(c.text, -1) {
			p := strings.TrimRight(m[1], ".,;:)")
			p = identAfter.ReplaceAllString(p, "") // lab/fleet.Run is lab/fleet
			p, inModule := strings.CutPrefix(p, "github.com/drainscope/drainscope/")
			first, _, _ := strings.Cut(p, "/")
			if !inModule && !topDirs[first] || placeholder.MatchString(p) {
				continue
			}
			if !exists(p) {
				bad = append(bad, fmt.Sprintf("%s: the comment cites %s, which is not in the module", c.pos, p))
			}
		}
		for _, m := range citedHelper.FindAllStringSubmatch(c.text, -1) {
			if pkgNames[m[1]] && !pkgNames[m[1]+"test"] {
				bad = append(bad, fmt.Sprintf("%s: the comment cites package %stest, which the module does not have", c.pos, m[1]))
			}
		}
	}
	return bad
}

// moduleComments reads the comments of every Go file of the module
// (hack/'s modules, testdata and generated files apart).
func moduleComments(t *testing.T) []goComment {
	t.Helper()
	var out []goComment
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel(p) == "hack") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, g := range f.Comments {
			if strings.HasPrefix(g.List[0].Text, "// Code generated") {
				continue
			}
			for _, c := range g.List {
				if strings.HasPrefix(c.Text, "//go:") {
					continue
				}
				out = append(out, goComment{fmt.Sprintf("%s:%d", rel(p), fset.Position(c.Pos()).Line), c.Text})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCommentsCiteWhatIs: no comment names a package, directory or file of
// this module that is not there: a reader sent to it finds nothing.
func TestCommentsCiteWhatIs(t *testing.T) {
	topDirs := map[string]bool{}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			topDirs[e.Name()] = true
		}
	}
	pkgNames := map[string]bool{}
	for p := range importGraph(t) {
		pkgNames[p[strings.LastIndex(p, "/")+1:]] = true
	}
	exists := func(p string) bool {
		_, err := os.Stat(filepath.Join(root, filepath.FromSlash(p)))
		return err == nil
	}
	comments := moduleComments(t)
	for _, b := range staleCitations(comments, topDirs, pkgNames, exists) {
		t.Error(b)
	}
	t.Logf("%d comments read", len(comments))
}

// TestStaleCitationsFound: a missing package by the module's path, by a
// top-level directory's path (backquoted, and as pkg.Ident) and as a
// test-helper name, and a missing file, are found; what is there, a
// placeholder, a path outside the module, a word that is only English and
// the helper package that exists are not.
func TestStaleCitationsFound(t *testing.T) {
	topDirs := map[string]bool{"store": true, "lab": true, "internal": true, "docs": true, "deploy": true}
	pkgNames := map[string]bool{"store": true, "fleet": true, "pg": true, "pgtest": true}
	there := map[string]bool{"store": true, "store/store.go": true, "lab": true, "lab/fleet": true, "internal/pgtest": true, "docs/scale.md": true}
	exists := func(p string) bool { return there[p] }
	comments := []goComment{
		{"a.go:1", "// Both pass the contract tests in storetest."},
		{"a.go:2", "// See github.com/drainscope/drainscope/store/memstore for a fake."},
		{"a.go:3", "// The helpers are in `internal/storetest`."},
		{"a.go:4", "// lab/fleets.Run times the report (docs/scale.md, docs/scales.md)."},
		{"a.go:5", "// Fine: store/store.go, lab/fleet.Run, `internal/pgtest`, pgtest and docs/scale.md."},
		{"a.go:6", "// Fine: kubectl drainscope report deploy/NAME; k8s.io/api/core/v1; read/write."},
		{"a.go:7", "// Fine: the latest, the fastest; contest; github.com/cilium/ebpf/link."},
	}
	got := staleCitations(comments, topDirs, pkgNames, exists)
	want := []string{
		"a.go:1: the comment cites package storetest",
		"a.go:2: the comment cites store/memstore,",
		"a.go:3: the comment cites internal/storetest,",
		"a.go:3: the comment cites package storetest",
		"a.go:4: the comment cites lab/fleets,",
		"a.go:4: the comment cites docs/scales.md,",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d findings, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("finding %d: %q, want %q", i, got[i], want[i])
		}
	}
}
