package store

import (
	"context"
	"embed"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
)

//go:embed migrations
var migrationFS embed.FS

// migration is one numbered SQL file, applied once in a transaction that
// also records its version in schema_migrations.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations lists the backend's migrations in order. File names are
// NNNN_name.sql; the numbers must run 1, 2, 3 … without gaps.
func migrations(backend string) ([]migration, error) {
	dir := path.Join("migrations", backend)
	entries, err := migrationFS.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		num, name, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || !strings.HasSuffix(e.Name(), ".sql") {
			return nil, fmt.Errorf("%s/%s: want NNNN_name.sql", dir, e.Name())
		}
		b, err := migrationFS.ReadFile(path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: name, sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("%s: migration %d missing (found %d)", dir, i+1, m.version)
		}
	}
	return ms, nil
}

// migrator is what a backend offers to apply migrations.
type migrator interface {
	// lock serialises migrations between processes until unlock.
	lock(ctx context.Context) (unlock func(), err error)
	// version creates the version table if needed and returns the newest
	// applied version (0 for an empty database).
	version(ctx context.Context) (int, error)
	// apply runs m and records it, atomically.
	apply(ctx context.Context, m migration) error
}

// migrateUp brings the database to LatestVersion. It refuses a database
// that a newer drainscope migrated, rather than writing into a schema it
// does not understand.
func migrateUp(ctx context.Context, backend string, m migrator) error {
	ms, err := migrations(backend)
	if err != nil {
		return err
	}
	unlock, err := m.lock(ctx)
	if err != nil {
		return fmt.Errorf("locking for migration: %w", err)
	}
	defer unlock()
	cur, err := m.version(ctx)
	if err != nil {
		return fmt.Errorf("reading schema version: %w", err)
	}
	if err := checkSchema(cur, len(ms), false); err != nil {
		return err
	}
	for _, mg := range ms[cur:] {
		if err := m.apply(ctx, mg); err != nil {
			return fmt.Errorf("applying migration %04d_%s: %w", mg.version, mg.name, err)
		}
	}
	return nil
}

// checkSchema says whether a database at schema version v can be used by
// this binary, which knows versions up to latest; readOnly: it cannot be
// migrated, so it must be at latest already.
func checkSchema(v, latest int, readOnly bool) error {
	switch {
	case v > latest:
		return fmt.Errorf("%w: database at version %d, this binary knows up to %d; upgrade drainscope", ErrSchemaTooNew, v, latest)
	case readOnly && v < latest:
		return fmt.Errorf("database is read-only and at schema version %d, older than %d; run 'drainscope migrate' with write access", v, latest)
	}
	return nil
}
