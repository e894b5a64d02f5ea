package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/drainscope/drainscope/internal/pgtest"
)

func TestMigrateRolesUsage(t *testing.T) {
	sqlite := filepath.Join(t.TempDir(), "events.db")
	for _, args := range [][]string{
		{"migrate", "--store", sqlite, "--roles", "agent=a"},
		{"migrate", "--store", sqlite, "--roles", "agent=a,reader=b"},
		{"migrate", "--store", sqlite, "--roles", "agent=a,server=b"},
	} {
		if code, _, stderr := runCLI(t, args...); code != 2 {
			t.Errorf("%q: exit %d, stderr %q; want a usage error", args, code, stderr)
		}
	}
}

func TestMigrateRoles(t *testing.T) {
	ctx := context.Background()
	owner := pgtest.Schema(t)
	suffix := fmt.Sprint(time.Now().UnixNano())
	agent, server, definer := "cli_agent_"+suffix, "cli_server_"+suffix, "cli_definer_"+suffix
	t.Cleanup(func() {
		if c, err := pgx.Connect(ctx, owner); err == nil {
			for _, r := range []string{agent, server, definer} {
				c.Exec(ctx, "DROP OWNED BY "+r)
				c.Exec(ctx, "DROP ROLE "+r)
			}
			c.Close(ctx)
		}
	})
	t.Setenv("DRAINSCOPE_AGENT_PASSWORD", "agent-password-of-32-characters!")
	// The throwaway cluster's user is a superuser: without --roles,
	// migrate says what that leaves behind.
	code, _, stderr := runCLI(t, "migrate", "--store", owner)
	if code != 0 || !strings.Contains(stderr, "superuser") {
		t.Errorf("migrate as a superuser without --roles: exit %d, stderr %q; want a warning naming the superuser", code, stderr)
	}
	code, stdout, stderr := runCLI(t, "migrate", "--store", owner, "--roles", "agent="+agent+",server="+server+",definer="+definer)
	if code != 0 || !strings.Contains(stdout, "roles granted") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if strings.Contains(stdout+stderr, "agent-password") {
		t.Errorf("the password is printed: %q %q", stdout, stderr)
	}
	for role, q := range map[string]string{
		agent:  "SELECT count(*) FROM events",
		server: "UPDATE events SET kind = 'x'",
	} {
		u, _ := url.Parse(owner)
		u.User = url.User(role)
		c, err := pgx.Connect(ctx, u.String())
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Exec(ctx, q)
		c.Close(ctx)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "42501" {
			t.Errorf("%s ran %q: %v; want insufficient_privilege", role, q, err)
		}
	}
	// With --roles, nothing that runs as its owner is a superuser's.
	c, err := pgx.Connect(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner
		WHERE p.prosecdef AND p.pronamespace = current_schema()::regnamespace AND (r.rolsuper OR r.rolcanlogin)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d SECURITY DEFINER functions owned by a superuser or a login role after migrate --roles", n)
	}
}
