package metrics

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/drainscope/drainscope/store"
)

// TestWrapStoreKeepsDigests: the web server finds a store's digests by a
// type assertion; the wrapped SQLite store still offers them, and a store
// without them is not made to look as if it had.
func TestWrapStoreKeepsDigests(t *testing.T) {
	m := New("test", "dev")
	sq, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	if _, ok := m.WrapStore(sq).(store.Digests); !ok {
		t.Error("the wrapped SQLite store hides its digests")
	}
	if _, ok := m.WrapStore(&fakeStore{}).(store.Digests); ok {
		t.Error("a store without digests offers them once wrapped")
	}
}
