package store

import (
	"context"
	"errors"
)

// OpenPostgres opens the Postgres store at dsn.
func OpenPostgres(ctx context.Context, dsn string) (Store, error) {
	return nil, errors.New("postgres store: not built yet")
}
