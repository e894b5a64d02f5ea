package store

import (
	"context"
	"fmt"
)

// Open connects to the store dsn names (see Backend), applies any pending
// migrations and returns it ready for use.
func Open(ctx context.Context, dsn string) (Store, error) {
	backend, target, err := Backend(dsn)
	if err != nil {
		return nil, err
	}
	// Each branch returns a nil interface on error, never a typed nil.
	if backend == BackendPostgres {
		s, err := OpenPostgres(ctx, target)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	s, err := OpenSQLite(ctx, target)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// LatestVersion is the newest schema version this drainscope knows.
var LatestVersion = len(mustMigrations(BackendSQLite))

func mustMigrations(backend string) []migration {
	ms, err := migrations(backend)
	if err != nil {
		panic(fmt.Sprintf("embedded migrations: %v", err))
	}
	return ms
}
