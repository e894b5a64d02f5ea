package repocheck_test

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// orphanDocs lists each of docs (repository paths) that no chain of links
// from start reaches; links holds, for each Markdown file, the repository
// paths its relative links name.
func orphanDocs(start string, links map[string][]string, docs []string) []string {
	seen := map[string]bool{start: true}
	for queue := []string{start}; len(queue) > 0; queue = queue[1:] {
		for _, to := range links[queue[0]] {
			if !seen[to] {
				seen[to] = true
				queue = append(queue, to)
			}
		}
	}
	var out []string
	for _, d := range docs {
		if !seen[d] {
			out = append(out, d+": no page that "+start+" leads to links it")
		}
	}
	return out
}

// TestNoOrphanDocs: every file under docs/ is reached by links from the
// README, directly or through the pages it links (docs/, deploy/README.md,
// …): a page the front page does not lead to goes unread and unkept.
func TestNoOrphanDocs(t *testing.T) {
	links := map[string][]string{}
	var docs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		r := rel(p)
		if strings.HasPrefix(r, "docs/") {
			docs = append(docs, r)
		}
		if strings.HasSuffix(r, ".md") {
			for _, l := range relativeLinks(t, p) {
				links[r] = append(links[r], rel(l.dest))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 10 || len(links["README.md"]) < 10 {
		t.Fatalf("%d files under docs/, %d links in the README: not this repository", len(docs), len(links["README.md"]))
	}
	for _, o := range orphanDocs("README.md", links, docs) {
		t.Error(o)
	}
	t.Logf("%d files under docs/", len(docs))
}

// TestOrphanDocsFound: a page no page links, a page only an orphan links,
// and two pages that link only each other are orphans; a page reached
// through a page outside docs/, an image and a page linked twice are not.
func TestOrphanDocsFound(t *testing.T) {
	links := map[string][]string{
		"README.md":          {"docs/a.md", "deploy/README.md", "docs/shot.png", "docs/a.md"},
		"docs/a.md":          {"docs/b.md", "README.md"},
		"deploy/README.md":   {"docs/c.md"},
		"docs/lone.md":       {"docs/under-lone.md"},
		"docs/cycle-1.md":    {"docs/cycle-2.md"},
		"docs/cycle-2.md":    {"docs/cycle-1.md"},
		"docs/under-lone.md": nil,
	}
	docs := []string{"docs/a.md", "docs/b.md", "docs/c.md", "docs/shot.png", "docs/lone.md", "docs/under-lone.md", "docs/cycle-1.md", "docs/cycle-2.md"}
	got := orphanDocs("README.md", links, docs)
	want := []string{"docs/lone.md", "docs/under-lone.md", "docs/cycle-1.md", "docs/cycle-2.md"}
	if len(got) != len(want) {
		t.Fatalf("got %q, want the orphans %q", got, want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]+":") {
			t.Errorf("finding %d: %q, want %s", i, got[i], want[i])
		}
	}
	if got := orphanDocs("README.md", links, docs[:4]); len(got) != 0 {
		t.Errorf("the linked pages alone: %q, want none", got)
	}
}
