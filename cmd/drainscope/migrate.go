package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/drainscope/drainscope/store"
)

func runMigrate(ctx context.Context, fs *flag.FlagSet, args []string) error {
	dsn := fs.String("store", os.Getenv("DRAINSCOPE_STORE"), "store DSN: postgres://… or a SQLite file path (default: "+store.DefaultPath()+"; env DRAINSCOPE_STORE)")
	roles := fs.String("roles", "", "Postgres only: agent=ROLE,server=ROLE[,definer=ROLE] — create these login roles if missing and grant each only what it needs (the agent writes, the server reads, ingests and prunes); the tables and the functions that run as their owner go to the NOLOGIN definer role (default "+store.DefaultDefiner+"), never a superuser. Roles that can become more (superuser, CREATEROLE, BYPASSRLS, REPLICATION, members of the owner, of predefined roles or of roles with rights on the tables or the schema) are refused; what other roles granted them on the tables is revoked. Passwords from env DRAINSCOPE_AGENT_PASSWORD and DRAINSCOPE_SERVER_PASSWORD when set. Run as the role that owns the schema")
	retention := registerRetention(fs, "with --roles: the server's --retention; the agents' partition function creates days no older than this (0: the default, 14d) and at most two days ahead")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if *roles != "" {
		r, err := parseRoles(*roles)
		if err != nil {
			return err
		}
		if backend, _, err := store.Backend(*dsn); err != nil {
			return err
		} else if backend != store.BackendPostgres {
			return fmt.Errorf("%w: --roles needs a Postgres store", errUsage)
		}
		r.Keep = retention.keep
		if err := store.SetupRoles(ctx, *dsn, r.FromEnv()); err != nil {
			return err
		}
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
	if pg, ok := s.(*store.Postgres); ok && *roles == "" {
		if role, super, err := pg.CurrentRole(ctx); err == nil && super {
			slog.Warn("migrate ran as a superuser without --roles: the tables are owned by a superuser, and an agent or server given this DSN can do anything on the database server; run migrate --roles so that a NOLOGIN role owns them and each component logs in as a role of its own",
				"role", role)
		}
	}
	if *roles != "" {
		fmt.Fprintf(os.Stdout, "roles granted: %s\n", *roles)
	}
	return nil
}

// parseRoles reads --roles: agent=NAME,server=NAME.
func parseRoles(s string) (store.Roles, error) {
	var r store.Roles
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		switch {
		case !ok || v == "":
			return r, fmt.Errorf("%w: --roles %q: want agent=ROLE,server=ROLE", errUsage, s)
		case k == "agent":
			r.Agent = v
		case k == "server":
			r.Server = v
		case k == "definer":
			r.Definer = v
		default:
			return r, fmt.Errorf("%w: --roles: unknown role %q (want agent and server)", errUsage, k)
		}
	}
	if r.Agent == "" || r.Server == "" {
		return r, fmt.Errorf("%w: --roles %q: want agent=ROLE,server=ROLE", errUsage, s)
	}
	return r, nil
}
