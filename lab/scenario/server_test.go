package scenario

import (
	"os"
	"path/filepath"
	"testing"
)

// TestServerStore checks the store the server's pod is given: read-only
// SQLite by absolute path on either node, and on a real node the file's
// directory and owner for the hostPath mount; Postgres unchanged.
func TestServerStore(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "events.db")
	if err := os.WriteFile(db, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link.db")
	if err := os.Symlink(db, link); err != nil {
		t.Fatal(err)
	}
	uid, gid := int64(os.Getuid()), int64(os.Getgid())
	for _, tc := range []struct {
		dsn      string
		realNode bool
		want     podStore
	}{
		{db, false, podStore{DSN: "sqlite:" + db + "?mode=ro"}},
		{"sqlite:" + db + "?mode=ro", false, podStore{DSN: "sqlite:" + db + "?mode=ro"}},
		{"file:" + db + "?_txlock=immediate", false, podStore{DSN: "sqlite:" + db + "?_txlock=immediate&mode=ro"}},
		{db, true, podStore{DSN: "sqlite:" + db + "?mode=ro", Dir: dir, UID: uid, GID: gid}},
		// The mount is of the file's own directory, not the link's.
		{link, true, podStore{DSN: "sqlite:" + db + "?mode=ro", Dir: dir, UID: uid, GID: gid}},
		{"postgres://u@127.0.0.1/db", true, podStore{DSN: "postgres://u@127.0.0.1/db"}},
	} {
		got, err := serverStore(tc.dsn, tc.realNode)
		if err != nil || got != tc.want {
			t.Errorf("serverStore(%q, real node %v) = %+v, %v; want %+v", tc.dsn, tc.realNode, got, err, tc.want)
		}
	}
	if _, err := serverStore(filepath.Join(dir, "missing.db"), true); err == nil {
		t.Errorf("serverStore of a missing file on a real node: no error")
	}
	// A relative path is made absolute: the pod's process runs elsewhere.
	t.Chdir(dir)
	if got, err := serverStore("events.db", false); err != nil || got.DSN != "sqlite:"+db+"?mode=ro" {
		t.Errorf("serverStore(events.db) = %+v, %v", got, err)
	}
}
