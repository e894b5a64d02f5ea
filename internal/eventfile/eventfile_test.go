package eventfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadNamesTheLine: a recording's bad line is named by file and line;
// a good one reads sealed.
func TestReadNamesTheLine(t *testing.T) {
	dir := t.TempDir()
	good := `{"Time":1772355600000000000,"Kind":"pod_ready","Node":"node-a","Source":"watcher","Pod":{"Namespace":"shop","Name":"web-1","UID":"u1"},"Local":"10.244.0.5:0"}`
	path := filepath.Join(dir, "run.jsonl")
	if err := os.WriteFile(path, []byte(good+"\n"+good+"\n{\"time\":\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(path); err == nil || !strings.Contains(err.Error(), "run.jsonl:3") {
		t.Errorf("err %v; want line 3 named", err)
	}
	if err := os.WriteFile(path, []byte(good+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	evs, err := Read(path)
	if err != nil || len(evs) != 1 || evs[0].ID == 0 {
		t.Fatalf("%v, %+v; want one sealed event", err, evs)
	}
}
