//go:build nolab

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
)

// A build with -tags nolab, as the image's (deploy/Dockerfile), holds no
// lab package: the agent and the server ship without a control-plane
// launcher, a simulated kubelet or the fleet simulation. Its lab command
// only says where the lab is.

func init() {
	commands["lab"] = command{"not in this build (-tags nolab): build drainscope without the tag for the lab", runNoLab}
}

func runNoLab(_ context.Context, fs *flag.FlagSet, args []string) error {
	fs.Usage = func() { fmt.Fprintf(fs.Output(), "usage: drainscope lab: %s\n", errNoLab) }
	if err := fs.Parse(args); err != nil {
		return err
	}
	return errNoLab
}

var errNoLab = errors.New("this drainscope was built without the lab (-tags nolab, as the image is): " +
	"the lab runs from a build without the tag, e.g. scripts/lab.sh in a checkout")
