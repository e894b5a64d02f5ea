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
	switch backend {
	case BackendPostgres:
		return OpenPostgres(ctx, target)
	default:
		return OpenSQLite(ctx, target)
	}
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
