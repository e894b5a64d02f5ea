package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/drainscope/drainscope/store"
)

func runMigrate(ctx context.Context, fs *flag.FlagSet, args []string) error {
	dsn := fs.String("store", os.Getenv("DRAINSCOPE_STORE"), "store DSN: postgres://… or a SQLite file path (default: "+store.DefaultPath()+"; env DRAINSCOPE_STORE)")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	s, err := store.Open(ctx, *dsn)
	if err != nil {
		return err
	}
	defer s.Close()
	v, err := s.Version(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "%s: schema version %d (latest known %d)\n", s.Describe(), v, store.LatestVersion)
	return nil
}
