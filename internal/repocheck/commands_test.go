package repocheck_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// testedCommands is the Markdown file whose shell commands the tests run
// or check (deploy's TestImageBuildCommand reads its image build against
// the Dockerfile); a page that copies one of its blocks must copy it
// whole, to the byte.
const testedCommands = "deploy/README.md"

var fenceOpen = regexp.MustCompile("^ {0,3}(```|~~~)\\s*(\\S*)")

// shellBlock is a fenced block of shell commands: the line of its opening
// fence and its text, without the fences.
type shellBlock struct {
	n    int
	text string
}

// shellBlocks lists the fenced blocks of md whose info string is sh,
// shell, bash or console.
func shellBlocks(md string) []shellBlock {
	var out []shellBlock
	var cur *shellBlock
	inside := false
	for i, l := range strings.Split(md, "\n") {
		m := fenceOpen.FindStringSubmatch(l)
		switch {
		case m != nil && !inside:
			inside = true
			if slices.Contains([]string{"sh", "shell", "bash", "console"}, m[2]) {
				cur = &shellBlock{n: i + 1}
			}
		case m != nil:
			inside = false
			if cur != nil {
				out = append(out, *cur)
				cur = nil
			}
		case cur != nil:
			cur.text += l + "\n"
		}
	}
	return out
}

// commandKey is the first three words of a block's first command (blank
// lines and comments apart): what the block runs, whatever its arguments.
func commandKey(block string) string {
	for _, l := range strings.Split(block, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			f := strings.Fields(l)
			return strings.Join(f[:min(3, len(f))], " ")
		}
	}
	return ""
}

// driftedCopies lists, as file:line: messages, each shell block of pages
// (file → text) that begins with the command a block of tested begins
// with and differs from that block; and counts those blocks, the copies.
func driftedCopies(pages map[string]string, testedName, tested string) (bad []string, copies int) {
	originals := map[string]shellBlock{}
	for _, b := range shellBlocks(tested) {
		if k := commandKey(b.text); k != "" {
			originals[k] = b
		}
	}
	for _, f := range slices.Sorted(maps.Keys(pages)) {
		for _, b := range shellBlocks(pages[f]) {
			o, ok := originals[commandKey(b.text)]
			if ok {
				copies++
			}
			if ok && b.text != o.text {
				bad = append(bad, fmt.Sprintf("%s:%d: the block copies %s:%d (%s …) but differs from it: copy it to the byte, or link it",
					f, b.n, testedName, o.n, commandKey(b.text)))
			}
		}
	}
	return bad, copies
}

// TestCopiedCommandsAreTheTested: a page of docs/ that copies a block of
// commands from deploy/README.md, where the tests check them, copies it
// exactly; a copy that drifted would give the reader an untested command.
func TestCopiedCommandsAreTheTested(t *testing.T) {
	tested, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(testedCommands)))
	if err != nil {
		t.Fatal(err)
	}
	if len(shellBlocks(string(tested))) == 0 {
		t.Fatalf("%s has no shell block", testedCommands)
	}
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pages[rel(f)] = string(b)
	}
	bad, copies := driftedCopies(pages, testedCommands, string(tested))
	for _, b := range bad {
		t.Error(b)
	}
	t.Logf("%d blocks of docs/ copy %s's", copies, testedCommands)
}

// TestDriftedCopiesFound: a copy that lost an argument and a copy that
// lost a line are found; an exact copy, a block that runs another
// command, a block that is not shell and a block whose command the tested
// file only mentions in prose are not.
func TestDriftedCopiesFound(t *testing.T) {
	tested := "# Deploy\n\n```sh\ndocker buildx build -f deploy/Dockerfile \\\n  --build-arg VERSION=$(git describe) --push .\nhelm install drainscope deploy/helm/drainscope\n```\n\n" +
		"Then `kubectl apply -k deploy/kustomize`.\n\n```sh\nkubectl create namespace drainscope\nkubectl apply -k overlays/try\n```\n"
	pages := map[string]string{
		"docs/a.md": "# A\n\n```sh\ndocker buildx build -f deploy/Dockerfile --push .\nhelm install drainscope deploy/helm/drainscope\n```\n",
		"docs/b.md": "# B\n\n```sh\n# first the namespace\nkubectl create namespace drainscope\n```\n\n```sh\ndocker buildx build -f deploy/Dockerfile \\\n  --build-arg VERSION=$(git describe) --push .\nhelm install drainscope deploy/helm/drainscope\n```\n",
		"docs/c.md": "# C\n\n```sh\ngo test ./deploy/\n```\n\n```yaml\nkubectl create namespace other\n```\n\n```sh\nkubectl apply -k deploy/kustomize\n```\n",
	}
	got, copies := driftedCopies(pages, "deploy/README.md", tested)
	if copies != 3 {
		t.Errorf("%d copies counted, want 3 (two that drifted, one exact)", copies)
	}
	want := []string{"docs/a.md:3: the block copies deploy/README.md:3 (docker buildx build …)", "docs/b.md:3: the block copies deploy/README.md:11 (kubectl create namespace …)"}
	if len(got) != len(want) {
		t.Fatalf("got %d findings, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("finding %d: %q, want %q", i, got[i], want[i])
		}
	}
}
