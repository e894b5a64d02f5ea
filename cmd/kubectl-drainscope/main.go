// Command kubectl-drainscope is drainscope's kubectl plugin as a binary of its
// own. It runs `kubectl drainscope report deploy/NAME` and `kubectl drainscope
// rollouts` (see package kubectl). drainscope's own binary does the same when
// installed under this name; this one also builds for macOS, where the agent
// and the lab (Linux only) do not.
package main

import (
	"os"

	"github.com/drainscope/drainscope/kubectl"
)

func main() { os.Exit(kubectl.Main(os.Args[1:], os.Stdout, os.Stderr)) }
