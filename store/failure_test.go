package store

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drainscope/drainscope/internal/eventgen"
	"github.com/drainscope/drainscope/internal/pgtest"
	"github.com/drainscope/drainscope/internal/testenv"
)

func TestPostgresStoppedKeepsBatch(t *testing.T) {
	dsn := pgtest.Schema(t)
	px := pgtest.NewProxy(t, dsn)
	ctx := context.Background()
	s, err := OpenPostgres(ctx, px.DSN(dsn))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first := eventgen.Rollout(500, day0, 20, "checkout")
	if err := s.Append(ctx, first); err != nil {
		t.Fatal(err)
	}

	px.Stop()
	second := eventgen.Rollout(500, day0.Add(1e12), 21, "checkout")
	err = s.Append(ctx, second)
	if err == nil {
		t.Fatal("Append succeeded with the server gone")
	}
	if strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "appending 500 events") {
		t.Errorf("error is not one clear line: %q", err)
	}

	px.Start()
	if err := s.Append(ctx, second); err != nil { // the caller retries the batch it kept
		t.Fatalf("retry after the server came back: %v", err)
	}
	if n := count(t, s, Query{}); n != 1000 {
		t.Fatalf("%d events stored, want 1000: something was lost or doubled", n)
	}
}

func TestBadDSNIsOneClearLine(t *testing.T) {
	ctx := context.Background()
	cases := []struct{ dsn, want string }{
		{"postgres://u:secret@127.0.0.1:1/db?connect_timeout=2&sslmode=disable", "connecting"},
		{"postgres://u:secret@127.0.0.1:notaport/db", "bad DSN"},
		{"mysql://u@h/db", `unknown scheme "mysql"`},
		{"sqlite:", "needs a file path"},
	}
	// A file where the store's directory should be.
	blocker := filepath.Join(t.TempDir(), "blocker")
	if err := os.WriteFile(blocker, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases = append(cases, struct{ dsn, want string }{"sqlite:" + filepath.Join(blocker, "x.db"), "creating its directory"})
	for _, tc := range cases {
		_, err := Open(ctx, tc.dsn)
		if err == nil {
			t.Errorf("Open(%q) succeeded", tc.dsn)
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") || !strings.Contains(msg, tc.want) {
			t.Errorf("Open(%q) = %q; want one line containing %q", tc.dsn, msg, tc.want)
		}
		if strings.Contains(msg, "secret") {
			t.Errorf("Open(%q) error shows the password: %q", tc.dsn, msg)
		}
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, dsn := b.open(t)
		var err error
		switch s := s.(type) {
		case *SQLite:
			_, err = s.db.ExecContext(ctx, "INSERT INTO schema_migrations VALUES (99, 'future', datetime('now'))")
		case *Postgres:
			_, err = s.pool.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES (99, 'future')")
		}
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		_, err = Open(ctx, dsn)
		if !errors.Is(err, ErrSchemaTooNew) {
			t.Fatalf("Open on a version-99 schema = %v, want ErrSchemaTooNew", err)
		}
		if !strings.Contains(err.Error(), "version 99") || strings.Contains(err.Error(), "\n") {
			t.Fatalf("error %q should name version 99 on one line", err)
		}
	})
}

func TestReadOnlyDatabase(t *testing.T) {
	ctx := context.Background()
	batch := eventgen.Rollout(10, day0, 22, "checkout")
	check := func(t *testing.T, s Store) {
		t.Helper()
		err := s.Append(ctx, batch)
		if err == nil || !strings.Contains(err.Error(), "read-only") || strings.Contains(err.Error(), "\n") {
			t.Fatalf("Append on a read-only database = %v; want one line saying read-only", err)
		}
		if _, err := Events(ctx, s, Query{}); err != nil {
			t.Fatalf("reading a read-only database: %v", err)
		}
	}
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.Schema(t)
		s, err := OpenPostgres(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		ro := pgtest.WithParam(t, dsn, "default_transaction_read_only", "on")
		s, err = OpenPostgres(ctx, ro)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		check(t, s)
		// An empty schema that cannot be migrated is refused at Open.
		_, err = OpenPostgres(ctx, pgtest.WithParam(t, pgtest.Schema(t), "default_transaction_read_only", "on"))
		if err == nil || !strings.Contains(err.Error(), "read-only") {
			t.Fatalf("Open of an unmigrated read-only schema = %v", err)
		}
	})
	t.Run("sqlite-mode-ro", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "events.db")
		s, err := OpenSQLite(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		s, err = OpenSQLite(ctx, path+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		check(t, s)
	})
	t.Run("sqlite-readonly-mount", func(t *testing.T) {
		// Root ignores file modes, so a real read-only file system is the
		// honest test of what a user with a read-only volume meets.
		testenv.RequireRoot(t)
		dir := t.TempDir()
		path := filepath.Join(dir, "events.db")
		s, err := OpenSQLite(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, batch); err != nil {
			t.Fatal(err)
		}
		s.Close()
		mnt := t.TempDir()
		if out, err := exec.Command("mount", "--bind", "-o", "ro", dir, mnt).CombinedOutput(); err != nil {
			testenv.Unavailable(t, "bind mount: "+strings.TrimSpace(string(out)))
		}
		defer exec.Command("umount", mnt).Run()
		if out, err := exec.Command("mount", "-o", "remount,ro,bind", mnt).CombinedOutput(); err != nil {
			t.Fatalf("remount read-only: %v %s", err, out)
		}
		// The store opens a database on a read-only file system immutable,
		// so it can be read.
		s2, err := OpenSQLite(ctx, filepath.Join(mnt, "events.db"))
		if err != nil {
			t.Fatalf("Open on a read-only mount: %v", err)
		}
		defer s2.Close()
		check(t, s2)
		if n := count(t, s2, Query{}); n != len(batch) {
			t.Fatalf("read %d events from the read-only copy, want %d", n, len(batch))
		}
	})
}
