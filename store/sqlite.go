package store

import (
	"context"
	"errors"
)

// OpenSQLite opens (creating if needed) the SQLite store at path.
func OpenSQLite(ctx context.Context, path string) (Store, error) {
	return nil, errors.New("sqlite store: not built yet")
}
