package web

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/drainscope/drainscope/analysis"
)

// TestDigestKeyFollowsTheAnalysis: a digest made by another analysis is
// never served. A rule whose text changed, or a rule added, changes the
// key without a version bump; the running binary's hash is part of it.
func TestDigestKeyFollowsTheAnalysis(t *testing.T) {
	k := analysis.DisruptionKey{Namespace: "default", Kind: "Deployment", Name: "web", Start: 1}
	base := (&Server{}).digestKey(k)
	if base != (&Server{}).digestKey(k) {
		t.Fatal("the same build and options gave two keys")
	}
	if binaryHash() == "" {
		t.Error("the running binary could not be hashed: the key would not follow a changed analysis")
	}
	changed := slices.Clone(analysis.Rules)
	changed[0].Fix += " (changed)"
	if (&Server{opts: Options{Analysis: analysis.Options{Rules: changed}}}).digestKey(k) == base {
		t.Error("a rule's changed fix kept the digest key")
	}
	added := append(slices.Clone(analysis.Rules[:len(analysis.Rules)-1]), analysis.Rules[0], analysis.Rules[len(analysis.Rules)-1])
	if (&Server{opts: Options{Analysis: analysis.Options{Rules: added}}}).digestKey(k) == base {
		t.Error("an added rule kept the digest key")
	}
}

// The digest key names the binary by the build ID read from its ELF note,
// which must be the toolchain's own: `go tool buildid` of the same file.
func TestGoBuildID(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH to read the build ID with: %v", err)
	}
	out, err := exec.Command(goTool, "tool", "buildid", exe).Output()
	if err != nil {
		t.Fatalf("go tool buildid %s: %v", exe, err)
	}
	want := strings.TrimSpace(string(out))
	if got := goBuildID(exe); got != want || want == "" {
		t.Fatalf("goBuildID = %q, go tool buildid says %q", got, want)
	}
	if got := binaryHash(); got != "go build ID "+want {
		t.Errorf("binaryHash = %q, want the build ID", got)
	}
	// A file that is not ELF has none: binaryHash would hash it whole.
	text := filepath.Join(t.TempDir(), "not-elf")
	if err := os.WriteFile(text, []byte("#!/bin/sh\necho\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := goBuildID(text); got != "" {
		t.Errorf("goBuildID of a shell script = %q, want none", got)
	}
}
