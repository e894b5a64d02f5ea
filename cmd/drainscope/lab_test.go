//go:build !nolab

package main

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/drainscope/drainscope/lab/scenario"
)

// TestLabSidecarFlags: --profile sidecar selects the sidecar runs and only
// them, on the real node only, without an ingress.
func TestLabSidecarFlags(t *testing.T) {
	parse := func(args ...string) (scenario.Profile, []scenario.Run, error) {
		fs := flag.NewFlagSet("drainscope lab", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := defineLabFlags(fs)
		if err := parseFlags(fs, args, false); err != nil {
			return scenario.Profile{}, nil, err
		}
		return f.profile()
	}
	p, runs, err := parse("--profile", "sidecar", "--node", "kubelet")
	if err != nil {
		t.Fatal(err)
	}
	if !p.Sidecar || runNames(runs) != "sidecar-exit,sidecar-native,sidecar-drain" {
		t.Errorf("profile %+v, runs %s", p, runNames(runs))
	}
	if _, runs, err := parse("--profile", "sidecar", "--node", "kubelet", "--runs", "sidecar-drain"); err != nil || runNames(runs) != "sidecar-drain" {
		t.Errorf("--runs sidecar-drain: %s, %v", runNames(runs), err)
	}
	for _, args := range [][]string{
		{"--profile", "sidecar"},
		{"--profile", "sidecar", "--node", "kubelet", "--runs", "exit"},
		{"--profile", "sidecar", "--node", "kubelet", "--ingress", "haproxy"},
		{"--profile", "short", "--runs", "sidecar-exit"},
	} {
		if _, _, err := parse(args...); !errors.Is(err, errUsage) {
			t.Errorf("%s: %v, want a usage error", strings.Join(args, " "), err)
		}
	}
}
