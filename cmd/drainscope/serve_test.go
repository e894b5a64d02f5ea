package main

import (
	"context"
	"flag"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestServeRefusesAnOpenAddressWithoutAToken(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "0.0.0.0:8080"}, "--auth-token"},
		{[]string{"--listen", ":8080"}, "--auth-token"},
		{[]string{"--listen", "10.0.0.5:8080"}, "--auth-token"},
		{[]string{"--listen", "localhost"}, "host:port"},
		{[]string{"stray"}, "unexpected argument"},
	} {
		code, _, stderr := runCLI(t, append([]string{"serve", "--store", filepath.Join(t.TempDir(), "e.db")}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("serve %q: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.1.2.3": true, "::1": true, "localhost": true, "LOCALHOST": true,
		"": false, "0.0.0.0": false, "::": false, "10.0.0.1": false, "example.com": false,
	} {
		if got := isLoopback(host); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", host, got, want)
		}
	}
}

// TestServe starts the server on a loopback port: it answers, refuses a
// foreign Host header (DNS rebinding), serves the UI, and stops cleanly
// when its context ends.
func TestServe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		done <- runServe(ctx, fs, []string{"--listen", addr, "--store", filepath.Join(t.TempDir(), "e.db")})
	}()
	get := func(host, path string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if host != "" {
			req.Host = host
		}
		return http.DefaultClient.Do(req)
	}
	var res *http.Response
	for deadline := time.Now().Add(20 * time.Second); ; {
		if res, err = get("", "/healthz"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not come up: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	res.Body.Close()
	for _, tc := range []struct {
		host, path string
		code       int
	}{
		{"", "/rollouts", 200},
		{"localhost", "/api/v1/rollouts", 200},
		{"attacker.example", "/api/v1/rollouts", http.StatusMisdirectedRequest},
	} {
		res, err := get(tc.host, tc.path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tc.code {
			t.Errorf("Host %q GET %s: %d, want %d", tc.host, tc.path, res.StatusCode, tc.code)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve returned %v after its context ended", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
}
