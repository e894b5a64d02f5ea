package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	// Commands print results to os.Stdout; capture it through a pipe.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// Read while the command writes: a report longer than the pipe's
	// buffer would block it.
	var out bytes.Buffer
	read := make(chan struct{})
	go func() {
		out.ReadFrom(r)
		close(read)
	}()
	old := os.Stdout
	os.Stdout = w
	code = run(args, &o, &e)
	os.Stdout = old
	w.Close()
	<-read
	return code, out.String() + o.String(), e.String()
}

func TestUnknownCommandIsAUsageError(t *testing.T) {
	code, _, stderr := runCLI(t, "frobnicate")
	if code != 2 || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

// Every command answers -h with its usage and exits 0.
func TestEveryCommandAnswersHelp(t *testing.T) {
	for name := range commands {
		code, _, stderr := runCLI(t, name, "-h")
		if code != 0 || !strings.Contains(stderr, "drainscope "+name) && !strings.Contains(stderr, "usage") {
			t.Errorf("%s -h: exit %d, stderr %q", name, code, stderr)
		}
	}
}

func TestMigrateReportsVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.db")
	code, stdout, stderr := runCLI(t, "migrate", "--store", path)
	// A fresh store is at the latest version, whatever number that is.
	if m := regexp.MustCompile(`schema version (\d+) \(latest known (\d+)\)`).FindStringSubmatch(stdout); code != 0 || m == nil || m[1] != m[2] {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, _, stderr = runCLI(t, "migrate", "--store", "mysql://x/y")
	if code != 1 || !strings.Contains(stderr, "unknown scheme") {
		t.Fatalf("bad store: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runCLI(t, "migrate", "stray")
	if code != 2 || !strings.Contains(stderr, `unexpected argument "stray"`) {
		t.Fatalf("stray argument: exit %d, stderr %q", code, stderr)
	}
}

func TestVersion(t *testing.T) {
	code, stdout, _ := runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(stdout, "drainscope ") {
		t.Fatalf("exit %d, %q", code, stdout)
	}
}
