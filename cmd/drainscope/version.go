package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
)

// version is set at link time: -ldflags "-X main.version=v0.1.0".
var version = "dev"

func runVersion(_ context.Context, fs *flag.FlagSet, args []string) error {
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	rev := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				rev = " " + s.Value
			}
		}
	}
	fmt.Fprintf(os.Stdout, "drainscope %s%s %s %s/%s\n", version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}
