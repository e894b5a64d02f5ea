package main

import (
	"context"
	"flag"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
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
		{[]string{"--otlp-endpoint", "collector:4318"}, "--otlp-endpoint"},
		{[]string{"--public-url", "drainscope.example.com"}, "--public-url"},
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

// TestServeExportsRolloutSignals: with --metrics-listen the server tails
// the store and exports the rollout signals of what the agents store, here
// a pod on node-b whose endpoint node-a (the leader) recorded leaving
// rotation 250 ms after node-b's SIGTERM: the endpoint race.
func TestServeExportsRolloutSignals(t *testing.T) {
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	addr, maddr := free(), free()
	db := filepath.Join(t.TempDir(), "e.db")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		done <- runServe(ctx, fs, []string{"--listen", addr, "--metrics-listen", maddr, "--store", db,
			"--signals-delay", "500ms", "--signals-after", "1s"})
	}()
	scrape := func() string {
		res, err := http.Get("http://" + maddr + "/metrics")
		if err != nil {
			return ""
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return string(b)
	}
	for deadline := time.Now().Add(20 * time.Second); scrape() == ""; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no /metrics")
		}
	}

	// The agents' events, stored as they happen (the store is the server's).
	st, err := store.OpenSQLite(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	base := time.Now().Add(200 * time.Millisecond).UnixNano()
	pod := event.PodRef{Namespace: "shop", Name: "web-b1", UID: "uid-b1"}
	wl := event.Workload{Kind: "Deployment", Name: "web"}
	ep := netip.MustParseAddrPort("10.244.1.11:8080")
	var batch []event.Event
	for _, x := range []struct {
		ms   int64
		kind event.Kind
		node string
	}{
		{0, event.PodDeletion, "node-b"}, {50, event.Signal, "node-b"}, {61, event.ProcessExit, "node-b"},
		{300, event.EndpointNotReady, "node-a"}, {310, event.EndpointTerminating, "node-a"}, {1000, event.EndpointRemoved, "node-a"},
	} {
		e := event.Event{Time: base + x.ms*int64(time.Millisecond), Kind: x.kind, Node: x.node, Source: event.SourceWatcher, Pod: pod, Workload: wl}
		switch {
		case x.kind.IsKernel():
			e.Source, e.PID = event.SourceKernel, 42
			if x.kind == event.Signal {
				e.Signal = 15
			}
		case x.kind.IsEndpoint():
			e.Local, e.Service, e.Slice = ep, "web", "web-abcde"
		case x.kind == event.PodDeletion:
			e.Duration = int64(30 * time.Second)
		}
		e.Seal()
		batch = append(batch, e)
	}
	if err := st.Append(ctx, batch); err != nil {
		t.Fatal(err)
	}
	want := `drainscope_rollout_sigterm_minus_endpoint_removal_seconds_bucket{namespace="shop",workload="Deployment/web",le="0"} 1`
	var body string
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(body, want); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server's metrics never showed the race:\n%s", body)
		}
		body = scrape()
	}
	if !strings.Contains(body, `drainscope_rollout_pod_terminations_total{namespace="shop",workload="Deployment/web"} 1`) {
		t.Errorf("no termination counted")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve returned %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// A dataplane format needs a token of its own; a format that does not
// exist is a usage error naming the flag.
func TestCheckIngestFormats(t *testing.T) {
	a, b, c := strings.Repeat("a", 32), strings.Repeat("b", 32), strings.Repeat("c", 32)
	for _, tc := range []struct {
		list, dataplane string
		ok              bool
	}{
		{"jsonl,nginx", "", true},
		{"jsonl,envoy-clusters", "", false},
		{"jsonl,envoy-clusters", c, true},
		{"jsonl,envoy-clusters", b, false}, // the ingest token
		{"jsonl,nope", c, false},
		{"", "", false},
	} {
		_, err := checkIngestFormats(tc.list, a, b, tc.dataplane)
		if (err == nil) != tc.ok {
			t.Errorf("--ingest-formats %q with dataplane token %q: %v; want ok %v", tc.list, tc.dataplane, err, tc.ok)
		}
	}
}

func TestServeRefusesABadAgentServiceAccount(t *testing.T) {
	for _, v := range []string{"drainscope", "/agent", "drainscope/", "a/b/c"} {
		code, _, stderr := runCLI(t, "serve", "--agent-service-account="+v)
		if code != 2 || !strings.Contains(stderr, "want NAMESPACE/NAME") {
			t.Errorf("--agent-service-account=%s: exit %d, stderr %q; want exit 2 naming the form", v, code, stderr)
		}
	}
}

// TestServeRefusesBadAgentTLSFlags: the agents' TLS listener needs its
// three flags and the agents' service account, and names a certificate
// or key that does not read.
func TestServeRefusesBadAgentTLSFlags(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "bad.crt"), []byte("not PEM"), 0o600)
	sa := "--agent-service-account=drainscope/drainscope-agent"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{sa, "--agent-listen=:8443"}, "go together"},
		{[]string{sa, "--agent-tls-cert=a.crt", "--agent-tls-key=a.key"}, "go together"},
		{[]string{"--agent-listen=:8443", "--agent-tls-cert=a.crt", "--agent-tls-key=a.key"}, "needs --agent-service-account"},
		{[]string{sa, "--agent-listen=8443", "--agent-tls-cert=a.crt", "--agent-tls-key=a.key"}, "want host:port"},
		{[]string{sa, "--agent-listen=:8443", "--agent-tls-cert=" + filepath.Join(dir, "bad.crt"), "--agent-tls-key=" + filepath.Join(dir, "bad.crt")}, "--agent-tls-cert " + filepath.Join(dir, "bad.crt")},
	} {
		code, _, stderr := runCLI(t, append([]string{"serve"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 saying %q", c.args, code, stderr, c.want)
		}
	}
}
