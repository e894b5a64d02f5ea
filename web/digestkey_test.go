package web

import (
	"slices"
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
