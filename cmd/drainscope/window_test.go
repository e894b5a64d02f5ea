package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// import refuses failures far from the clock line by line, naming the
// field; --max-past and --max-ahead move the bounds, 0 lifts them.
func TestImportTimeWindow(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "client.jsonl")
	now := time.Now()
	os.WriteFile(f, []byte(fmt.Sprintf(`{"time_ns":%d,"error":"EOF"}
{"time":"1971-01-01T00:00:00Z","error":"EOF"}
{"time":"2261-06-01T00:00:00Z","error":"EOF"}
{"time_ns":%d,"error":"EOF"}
`, now.Add(-time.Hour).UnixNano(), now.Add(-10*24*time.Hour).UnixNano())), 0o644)
	db := filepath.Join(dir, "events.db")

	code, stdout, stderr := runCLI(t, "import", "--format", "jsonl", "--store", db, f)
	if code != 0 || !strings.Contains(stdout, "4 lines read: 0 succeeded, 2 failed (2 stored") ||
		!strings.Contains(stdout, "client.jsonl:2: field time: 1971-01-01T00:00:00Z is") ||
		!strings.Contains(stdout, "client.jsonl:3: field time: 2261-06-01T00:00:00Z is") {
		t.Fatalf("default window: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "import", "--format", "jsonl", "--dry-run", "--max-past", "5d", f)
	if code != 0 || !strings.Contains(stdout, "1 failed") || !strings.Contains(stdout, "client.jsonl:4: field time:") {
		t.Fatalf("--max-past 5d: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "import", "--format", "jsonl", "--dry-run", "--max-past", "0", "--max-ahead", "0", f)
	if code != 0 || !strings.Contains(stdout, "4 failed") {
		t.Fatalf("no window: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	if code, _, stderr := runCLI(t, "import", "--format", "jsonl", "--max-past", "-1h", f); code == 0 || !strings.Contains(stderr, "0 lifts the bound") {
		t.Errorf("--max-past -1h: exit %d, stderr %s", code, stderr)
	}
}
