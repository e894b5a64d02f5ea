package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainscope/drainscope/internal/pgtest"
)

const (
	uiToken     = "ui-token-0123456789abcdef0123456789"
	ingestToken = "ingest-token-0123456789abcdef01234"
)

func TestServeTokenRules(t *testing.T) {
	db := filepath.Join(t.TempDir(), "e.db")
	for _, tc := range []struct {
		env  string
		args []string
		want string
	}{
		{"", []string{"--auth-token", "short"}, "--auth-token (env DRAINSCOPE_AUTH_TOKEN) is 5 characters; want at least 32"},
		{"", []string{"--auth-token", strings.Repeat("x", 31)}, "is 31 characters"},
		{"short", nil, "--auth-token (env DRAINSCOPE_AUTH_TOKEN) is 5 characters"},
		{"", []string{"--auth-token", uiToken, "--ingest-token", "short"}, "--ingest-token (env DRAINSCOPE_INGEST_TOKEN) is 5 characters"},
		{"", []string{"--ingest-token", "short"}, "--ingest-token (env DRAINSCOPE_INGEST_TOKEN) is 5"},
		{"", []string{"--auth-token", uiToken, "--ingest-token", uiToken}, "equals --auth-token"},
	} {
		t.Setenv("DRAINSCOPE_AUTH_TOKEN", tc.env)
		code, _, stderr := runCLI(t, append([]string{"serve", "--listen", "127.0.0.1:0", "--store", db}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("serve %q (env %q): exit %d, stderr %q; want 2 and %q", tc.args, tc.env, code, stderr, tc.want)
		}
	}
}

// startServe runs serve on a free loopback port until the test ends.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		done <- runServe(ctx, fs, append([]string{"--listen", addr}, args...))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("serve did not stop")
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; {
		res, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			res.Body.Close()
			return addr
		}
		select {
		case err := <-done:
			t.Fatalf("serve: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not come up: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestIngestTokenIsItsOwn: the UI's token does not open ingest, with or
// without an ingest token; without one, ingest is off.
func TestIngestTokenIsItsOwn(t *testing.T) {
	post := func(addr, tok string) int {
		req, _ := http.NewRequest("POST", "http://"+addr+"/api/v1/client-failures", strings.NewReader(""))
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	off := startServe(t, "--auth-token", uiToken, "--store", filepath.Join(t.TempDir(), "e.db"))
	if code := post(off, uiToken); code == http.StatusOK || code == http.StatusBadRequest {
		t.Errorf("no --ingest-token, the UI's token: ingest answered %d, want it off", code)
	}
	on := startServe(t, "--auth-token", uiToken, "--ingest-token", ingestToken, "--store", filepath.Join(t.TempDir(), "e.db"))
	if code := post(on, uiToken); code != http.StatusUnauthorized {
		t.Errorf("the UI's token at ingest: %d, want 401", code)
	}
	if code := post(on, ingestToken); code != http.StatusOK {
		t.Errorf("the ingest token: %d, want 200", code)
	}
}

// secretDSNs hold a password in each form; secretWords are its pieces.
var secretDSNs = []string{
	"postgres://u:Pw0rdSecret@127.0.0.1:1/events?connect_timeout=5",
	"postgres://u@127.0.0.1:1/events?connect_timeout=5&password=QuerySecret",
	"host=127.0.0.1 port=1 user=u password=KwSecret dbname=events connect_timeout=5",
	"postgres://u:left@right-secret@127.0.0.1:1/events",
	"postgres://u@127.0.0.1:bad/events?password=QuerySecret",
}

var secretWords = []string{"Pw0rdSecret", "QuerySecret", "KwSecret", "right-secret"}

// TestCommandErrorsRedacted: a command that cannot open the store names
// it without its password.
func TestCommandErrorsRedacted(t *testing.T) {
	for _, dsn := range secretDSNs {
		for _, cmd := range []string{"report", "migrate"} {
			code, _, stderr := runCLI(t, cmd, "--store", dsn)
			if code == 0 {
				t.Fatalf("%s --store %q succeeded on a closed port", cmd, dsn)
			}
			for _, w := range secretWords {
				if strings.Contains(stderr, w) {
					t.Errorf("%s --store %q: stderr holds %q: %s", cmd, dsn, w, stderr)
				}
			}
		}
	}
}

// TestLogsRedacted: whatever a package logs, string or error, leaves the
// password out.
func TestLogsRedacted(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: redactAttr}))
	for _, dsn := range secretDSNs {
		log.Info("opening "+dsn, "store", dsn, "err", errors.New("store "+dsn+": refused"),
			slog.Group("g", "dsn", dsn))
	}
	for _, w := range secretWords {
		if strings.Contains(buf.String(), w) {
			t.Errorf("the log holds %q: %s", w, buf.String())
		}
	}
	if !strings.Contains(buf.String(), "127.0.0.1") {
		t.Errorf("the log lost the host: %s", buf.String())
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeStartupLogPostgres: the start-up log names the Postgres store
// without the password given in the DSN's query (the log here does not
// redact: Describe must not need it).
func TestServeStartupLogPostgres(t *testing.T) {
	dsn := pgtest.Schema(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	dsn += sep + "password=QuerySecret" // trust authentication ignores it
	var buf lockedBuffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(old)
	startServe(t, "--store", dsn)
	log := buf.String()
	if !strings.Contains(log, "msg=serving") || !strings.Contains(log, "store=postgres://") {
		t.Fatalf("no start-up line naming the store: %s", log)
	}
	if strings.Contains(log, "QuerySecret") {
		t.Errorf("the start-up log holds the password: %s", log)
	}
}
