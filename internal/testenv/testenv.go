// Package testenv holds the checks tests use to decide whether they can run
// here. A test that cannot run says why; in CI (CI=true, run as root with
// every dependency installed by scripts/test.sh) it fails instead, so a
// missing capability never hides behind a skip.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// InCI reports whether the tests run under CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable skips t with reason, or fails it in CI.
func Unavailable(t testing.TB, reason string) {
	t.Helper()
	if InCI() {
		t.Fatalf("required in CI but unavailable: %s", reason)
	}
	t.Skipf("skipped: %s (CI=true turns this into a failure)", reason)
}

// RequireRoot skips (or fails in CI) unless the test runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "needs root (CAP_BPF, CAP_NET_ADMIN, cgroups); run scripts/test.sh as root")
	}
}

// RequireBinary returns the path of the named program, or skips (fails in CI).
func RequireBinary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Unavailable(t, name+" is not installed (scripts/test.sh installs it)")
	}
	return p
}

// Env returns the value of the environment variable, or skips (fails in CI)
// when it is empty, naming what it is for.
func Env(t testing.TB, name, what string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		Unavailable(t, name+" is not set ("+what+"; scripts/test.sh sets it)")
	}
	return v
}
