package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2"
)

// TestMain lets a test run this binary as drainscope itself: a command's
// whole stderr, from its first line to its exit, as a container logs it.
func TestMain(m *testing.M) {
	if os.Getenv("DRAINSCOPE_TEST_AS_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// process is drainscope running as a child process.
type process struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []string
	closed chan struct{}
}

func startDrainscope(t *testing.T, args ...string) *process {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: exec.Command(exe, args...), closed: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "DRAINSCOPE_TEST_AS_MAIN=1", "HOME="+t.TempDir(), "KUBERNETES_SERVICE_HOST=")
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
	go func() {
		defer close(p.closed)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *process) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// waitLine waits until a line contains want.
func (p *process) waitLine(t *testing.T, want string, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, l := range p.output() {
			if strings.Contains(l, want) {
				return
			}
		}
	}
	t.Fatalf("no line with %q within %v:\n%s", want, within, strings.Join(p.output(), "\n"))
}

// stop sends SIGTERM and returns the exit code.
func (p *process) stop(t *testing.T) int {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	return p.wait(t)
}

// wait returns the exit code once the process has ended.
func (p *process) wait(t *testing.T) int {
	t.Helper()
	done := make(chan struct{})
	go func() { <-p.closed; p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%v did not end within 30 s", p.cmd.Args[1:])
	}
	return p.cmd.ProcessState.ExitCode()
}

// jsonLines checks that every line is one JSON object with time, level and
// msg, and returns the objects.
func jsonLines(t *testing.T, what string, lines []string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Errorf("%s: a log line is not JSON (%v): %s", what, err, l)
			continue
		}
		for _, k := range []string{"time", "level", "msg"} {
			if s, _ := rec[k].(string); s == "" {
				t.Errorf("%s: a log line lacks %q: %s", what, k, l)
			}
		}
		if ts, _ := rec["time"].(string); ts != "" {
			if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
				t.Errorf("%s: time %q is not RFC 3339", what, ts)
			}
		}
		out = append(out, rec)
	}
	return out
}

func hasMsg(recs []map[string]any, level, msg string) bool {
	for _, r := range recs {
		if r["level"] == level && strings.Contains(fmt.Sprint(r["msg"]), msg) {
			return true
		}
	}
	return false
}

// unreachableKubeconfig names an API server on a loopback port nothing
// listens on: the agent starts, its watches retrying.
func unreachableKubeconfig(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	f := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://%s", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, addr)
	if err := os.WriteFile(f, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestLogFormatJSON: with --log-format json every line a command writes to
// stderr is a JSON object with time, level and msg: the long-running
// commands' logs and a command's final error. Every command takes the flag.
func TestLogFormatJSON(t *testing.T) {
	dir := t.TempDir()
	tested := map[string]bool{}

	t.Run("serve", func(t *testing.T) {
		tested["serve"] = true
		p := startDrainscope(t, "serve", "--log-format=json", "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
			"--store", filepath.Join(dir, "serve.db"))
		p.waitLine(t, `"msg":"serving"`, time.Minute)
		if code := p.stop(t); code != 0 {
			t.Errorf("serve exited %d after SIGTERM", code)
		}
		recs := jsonLines(t, "serve", p.output())
		if !hasMsg(recs, "INFO", "serving") || !hasMsg(recs, "INFO", "metrics") {
			t.Errorf("serve's start-up lines are missing: %v", recs)
		}
	})

	agentArgs := []string{"agent", "--node=n1", "--no-kernel", "--metrics-listen=127.0.0.1:0",
		"--kubeconfig", unreachableKubeconfig(t), "--store", filepath.Join(dir, "agent.db")}
	t.Run("agent", func(t *testing.T) {
		tested["agent"] = true
		p := startDrainscope(t, append(agentArgs, "--log-format", "json")...)
		p.waitLine(t, `"msg":"agent starting"`, time.Minute)
		p.stop(t)
		recs := jsonLines(t, "agent", p.output())
		if !hasMsg(recs, "INFO", "agent starting") || !hasMsg(recs, "INFO", "agent stopped") {
			t.Errorf("no agent starting and stopped lines: %v", recs)
		}
	})
	t.Run("agent text", func(t *testing.T) {
		// The default is text (logfmt), client-go's lines too.
		p := startDrainscope(t, agentArgs...)
		p.waitLine(t, "agent starting", time.Minute)
		p.stop(t)
		for _, l := range p.output() {
			if !strings.HasPrefix(l, "time=") || !strings.Contains(l, " level=") {
				t.Errorf("a text log line is not logfmt: %s", l)
			}
		}
	})

	// The short commands: their failure is a JSON record too.
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"report", "--store", "mysql://x/y"}, 1, "unknown scheme"},
		{[]string{"check", "--store", "mysql://x/y"}, 1, "unknown scheme"},
		{[]string{"migrate", "--store", "mysql://x/y"}, 1, "unknown scheme"},
		{[]string{"migrate", "--store", filepath.Join(dir, "migrate.db")}, 0, ""},
		{[]string{"import", "--format", "jsonl", filepath.Join(dir, "missing.jsonl")}, 1, "no such file"},
		{[]string{"lab", "--profile", "nope"}, 2, `unknown profile "nope"`},
		{[]string{"lab", "--ingress", "nginx"}, 2, `--ingress "nginx": want one of haproxy`},
		{[]string{"lab", "--ingress", "haproxy", "--keep"}, 2, "--keep's Deployment has none"},
		{[]string{"lab", "--ingress", "haproxy", "--ingress-sync", "-1s"}, 2, "--ingress-sync -1s: want 0 or more"},
		{[]string{"version"}, 0, ""},
	} {
		name := tc.args[0]
		tested[name] = true
		p := startDrainscope(t, append([]string{tc.args[0], "--log-format=json"}, tc.args[1:]...)...)
		code := p.wait(t)
		recs := jsonLines(t, strings.Join(tc.args, " "), p.output())
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d", tc.args, code, tc.code)
		}
		if tc.msg != "" && !hasMsg(recs, "ERROR", tc.msg) {
			t.Errorf("%v: no ERROR record saying %q: %v", tc.args, tc.msg, p.output())
		}
		if tc.msg == "" && len(recs) > 0 {
			t.Logf("%v: %v", tc.args, recs)
		}
	}

	// Every command takes the flag, and refuses a bad value as a usage
	// error naming the flag.
	for name := range commands {
		code, _, stderr := runCLI(t, name, "--log-format=xml")
		if code != 2 || !strings.Contains(stderr, `invalid value "xml" for flag -log-format: want text or json`) {
			t.Errorf("%s --log-format=xml: exit %d, stderr %q", name, code, stderr)
		}
		if !tested[name] {
			t.Errorf("drainscope %s has no JSON log case here", name)
		}
	}
	code, _, stderr := runCLI(t, "import", "--log-format", "$remote_addr $status")
	if code != 2 || !strings.Contains(stderr, "--nginx-format") {
		t.Errorf("import with an nginx format in --log-format: exit %d, stderr %q", code, stderr)
	}
}

// TestLogFormatRoutesKlog: client-go logs through klog, which --log-format
// points at the same handler, so its lines are JSON too.
func TestLogFormatRoutesKlog(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	defer func() { slog.SetDefault(old); klog.SetSlogLogger(old) }()
	if err := (&logFormat{w: &buf}).Set("json"); err != nil {
		t.Fatal(err)
	}
	klog.ErrorS(errors.New("connection refused"), "Failed to watch", "reflector", "pods")
	klog.InfoS("Caches populated")
	klog.Flush()
	recs := jsonLines(t, "klog", strings.Split(strings.TrimSpace(buf.String()), "\n"))
	if !hasMsg(recs, "ERROR", "Failed to watch") || !hasMsg(recs, "INFO", "Caches populated") {
		t.Errorf("klog's lines did not reach the JSON handler: %q", buf.String())
	}
}
