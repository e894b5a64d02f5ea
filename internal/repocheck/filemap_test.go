package repocheck_test

import (
	"go/build"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// fileMapped are the packages whose doc comment maps their files by job:
// the map must name every file, and only files there are.
var fileMapped = []string{"analysis"}

var goFileName = regexp.MustCompile(`\b[a-z0-9_]+\.go\b`)

// fileMapGaps compares the file map in a package's doc comment with the
// package's non-test files: each file but doc.go must be named, and each
// name must be a file.
func fileMapGaps(pkg, doc string, files []string) []string {
	named := map[string]bool{}
	for _, n := range goFileName.FindAllString(doc, -1) {
		named[n] = true
	}
	var bad []string
	for _, f := range files {
		if f != "doc.go" && !named[f] {
			bad = append(bad, pkg+"/doc.go's file map does not name "+f)
		}
	}
	var stale []string
	for n := range named {
		if !slices.Contains(files, n) {
			stale = append(stale, pkg+"/doc.go's file map names "+n+", which is no file of the package")
		}
	}
	slices.Sort(stale)
	return append(bad, stale...)
}

// TestFileMaps: the file maps of fileMapped name every file of their
// package (build.ImportDir's GoFiles: no tests) and no other.
func TestFileMaps(t *testing.T) {
	for _, pkg := range fileMapped {
		dir := filepath.Join(root, filepath.FromSlash(pkg))
		bp, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, "doc.go"), nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc == nil || !strings.Contains(f.Doc.Text(), ".go") {
			t.Fatalf("%s/doc.go has no file map", pkg)
		}
		for _, b := range fileMapGaps(pkg, f.Doc.Text(), bp.GoFiles) {
			t.Error(b)
		}
		t.Logf("%s: %d files", pkg, len(bp.GoFiles))
	}
}

// TestFileMapGapsFound: a file the map leaves out and a name of no file
// are found; doc.go need not name itself; a file named twice is named.
func TestFileMapGapsFound(t *testing.T) {
	files := []string{"aligner.go", "doc.go", "pod.go", "rules.go"}
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"whole", "  - aligner.go: the Aligner.\n  - pod.go, rules.go: pods; the rules (rules.go).", nil},
		{"a file left out", "  - aligner.go: the Aligner.\n  - rules.go: the rules.",
			[]string{"x/doc.go's file map does not name pod.go"}},
		{"a file gone", "  - aligner.go, pod.go, rules.go.\n  - render.go: the reports.",
			[]string{"x/doc.go's file map names render.go, which is no file"}},
		{"both", "  - aligner.go, pod.go: the Aligner.\n  - ruels.go: the rules.",
			[]string{"x/doc.go's file map does not name rules.go", "x/doc.go's file map names ruels.go"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fileMapGaps("x", tc.doc, files)
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %d findings %q", got, len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Errorf("finding %d: %q, want %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}
