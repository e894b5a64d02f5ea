package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/ingest"
	"github.com/drainscope/drainscope/store"
)

const importLog = `10.0.0.9 - - [10/Oct/2025:13:55:36 +0200] "GET /ok HTTP/1.1" 200 12 "-" "curl/8.5" 10.244.0.5:8080 200 0.003
10.0.0.9 - - [10/Oct/2025:13:55:37 +0200] "GET /a HTTP/1.1" 502 157 "-" "curl/8.5" 10.244.0.6:8080 502 0.001
10.0.0.9 - - [10/Oct/2025:13:55:38 +0200] "GET /b HTTP/1.1" 503 157 "-" "curl/8.5" 10.244.0.6:8080 503 0.001
`

func TestImportCommand(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "access.log")
	bad := filepath.Join(dir, "bad.log")
	os.WriteFile(good, []byte(importLog), 0o644)
	os.WriteFile(bad, []byte(strings.ReplaceAll(importLog, "13:55", "14:55")+"10.0.0.9 - - [10/Oct/2025:14:55:39 +0200] \"GET /c HTTP/1.1\" 5x\n"), 0o644)
	// The log is of a fixed, long past date: lift the window around the clock.
	db := filepath.Join(dir, "events.db")

	code, stdout, stderr := runCLI(t, "import", "--max-past", "0", "--format", "nginx", "--store", db, good)
	if code != 0 || !strings.Contains(stdout, "access.log: 3 lines read: 1 succeeded, 2 failed (2 stored") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	// Flags after the files; strict refuses the bad file and stores none of it.
	code, stdout, stderr = runCLI(t, "import", "--max-past", "0", bad, "--format", "nginx", "--strict", "--store", db)
	if code != 1 || !strings.Contains(stderr, "bad.log:4: field status") || !strings.Contains(stderr, "nothing from it was stored") {
		t.Fatalf("strict: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	// Without --strict the good lines go in and the bad one is listed.
	code, stdout, stderr = runCLI(t, "import", "--max-past", "0", "--format", "nginx", "--store", db, bad, good)
	if code != 0 || !strings.Contains(stdout, "bad.log: 4 lines read: 1 succeeded, 2 failed (2 stored") ||
		!strings.Contains(stdout, "bad.log:4: field status:") || !strings.Contains(stdout, "total: 2 files, 7 lines read") {
		t.Fatalf("default: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	// A dry run of several files says so in the total too.
	code, stdout, stderr = runCLI(t, "import", "--max-past", "0", "--format", "nginx", "--dry-run", bad, good)
	if code != 0 || !strings.Contains(stdout, "total: 2 files, 7 lines read: 2 succeeded, 4 failed (dry run: none stored") {
		t.Fatalf("dry run: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	s, err := store.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := store.Events(context.Background(), s, store.Query{Kinds: []event.Kind{event.ClientFailure}})
	s.Close()
	if err != nil || len(evs) != 4 {
		t.Fatalf("%d client failures in the store (want 4: two per file, the good file's once): %v", len(evs), err)
	}

	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"import", good}, 2, "--format is required"},
		{[]string{"import", "--format", "nginx"}, 2, "name the files"},
		{[]string{"import", "--format", "apache", good}, 2, `unknown format "apache"`},
		{[]string{"import", "--format", "jsonl", "--nginx-format", "$status", good}, 2, "applies to nginx and ingress-nginx only"},
		{[]string{"import", "--format", "nginx", "--nginx-format", "$status", good}, 2, "no time"},
		{[]string{"import", "--format", "nginx", "--fail-status", "5xx", good}, 2, "--fail-status"},
		{[]string{"import", "--format", "nginx", "-", "-"}, 2, "named once"},
		{[]string{"import", "--format", "vegeta-json", "--dry-run", good}, 1, "no line could be read"},
		{[]string{"import", "--format", "nginx", "--dry-run", filepath.Join(dir, "missing.log")}, 1, "no such file"},
	} {
		code, stdout, stderr := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(stderr, c.stderr) {
			t.Errorf("%v: exit %d, stderr %q, stdout %q; want %d and %q", c.args, code, stderr, stdout, c.code, c.stderr)
		}
	}
}

func TestImportFromStdin(t *testing.T) {
	f, _ := ingest.LookupFormat("nginx")
	parse, err := f.Parser(ingest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	im := &ingest.Importer{Parser: parse, Progress: &ingest.Progress{}}
	var out, errOut bytes.Buffer
	if err := importFiles(context.Background(), im, []string{"-"}, strings.NewReader(importLog), &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "(stdin): 3 lines read: 1 succeeded, 2 failed") {
		t.Errorf("summary %q", out.String())
	}
	if errOut.Len() != 0 {
		t.Errorf("progress drawn on a non-terminal: %q", errOut.String())
	}
}

// envoy-clusters names each file's proxy after the file unless
// --proxy-name says otherwise.
func TestImportEnvoyClusters(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "events.db")
	in := filepath.Join(dir, "gw-east.log")
	snaps := "# 2026-03-01T09:00:00Z\nweb::10.244.0.6:8080::health_flags::healthy\n" +
		"# 2026-03-01T09:00:01Z\nweb::10.244.0.7:8080::health_flags::healthy\n"
	os.WriteFile(in, []byte(snaps), 0o644)
	code, stdout, stderr := runCLI(t, "import", "--max-past", "0", "--format", "envoy-clusters", "--baseline-added=false", "--store", db, in)
	if code != 0 || !strings.Contains(stdout, "gw-east.log: 2 proxy endpoint changes (2 stored)") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "import", "--max-past", "0", "--format", "envoy-clusters", "--proxy-name", "node-a", "--store", db, in)
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	s, err := store.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := store.Events(context.Background(), s, store.Query{Kinds: []event.Kind{event.DataplaneEndpointRemoved}})
	s.Close()
	if err != nil || len(evs) != 2 {
		t.Fatalf("%d removals in the store (want one per proxy name): %v", len(evs), err)
	}
	nodes := evs[0].Node + "," + evs[1].Node
	if nodes != "gw-east,node-a" && nodes != "node-a,gw-east" {
		t.Errorf("removals on %s, want gw-east and node-a", nodes)
	}
}

// TestImportClientTimeout: --client-timeout gives a timeout logged with no
// duration the client's timeout, so it is aligned at its start.
func TestImportClientTimeout(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "client.jsonl")
	os.WriteFile(in, []byte(`{"time":"2026-03-01T09:00:05Z","target":"http://web/","error":"context deadline exceeded"}
{"time":"2026-03-01T09:00:06Z","target":"http://web/","error":"EOF"}
`), 0o644)
	db := filepath.Join(dir, "events.db")
	code, stdout, stderr := runCLI(t, "import", "--max-past", "0", "--format", "jsonl", "--client-timeout", "5s", "--store", db, in)
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	s, err := store.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := store.Events(context.Background(), s, store.Query{Kinds: []event.Kind{event.ClientFailure}})
	s.Close()
	if err != nil || len(evs) != 2 {
		t.Fatalf("%d failures stored: %v", len(evs), err)
	}
	for _, e := range evs {
		want := int64(0)
		if e.Reason == event.FailTimeout {
			want = int64(5 * time.Second)
		}
		if e.Duration != want {
			t.Errorf("%s: duration %d, want %d", e.Reason, e.Duration, want)
		}
	}
	if code, _, stderr := runCLI(t, "import", "--format", "jsonl", "--client-timeout", "-1s", "--dry-run", in); code == 0 || !strings.Contains(stderr, "--client-timeout") {
		t.Errorf("a negative --client-timeout: exit %d, %s", code, stderr)
	}
}

// TestImportedTimeoutsAtNoReadyEndpoints: an independent client logs each
// timeout at its end with no duration. Given its timeout, the timeouts
// that began while the Service had no ready endpoint are named so, and
// one that began after an endpoint was back is not; without it, each is
// judged at its end, when the Service had one again, and none is.
func TestImportedTimeoutsAtNoReadyEndpoints(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	at := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	wl := event.Workload{Kind: "Deployment", Name: "web"}
	old := event.PodRef{Namespace: "shop", Name: "web-1", UID: "u1", Container: "app"}
	repl := event.PodRef{Namespace: "shop", Name: "web-2", UID: "u2", Container: "app"}
	ep := func(d time.Duration, k event.Kind, p event.PodRef, ip string, f event.Flags) event.Event {
		return event.Event{Time: at(d), Kind: k, Node: "node-a", Source: event.SourceWatcher, Pod: p, Workload: wl,
			Local: netip.MustParseAddrPort(ip + ":8080"), Service: "web", Slice: "web-abcde", Flags: f}
	}
	pod := func(d time.Duration, k event.Kind, p event.PodRef, f event.Flags) event.Event {
		return event.Event{Time: at(d), Kind: k, Node: "node-a", Source: event.SourceWatcher, Pod: p, Workload: wl, Flags: f}
	}
	// One replica, ready two hours before the read; evicted at t0; its
	// replacement ready 2.5 s later.
	evict := pod(0, event.PodDeletion, old, 0)
	evict.Duration = int64(30 * time.Second)
	evict.Attrs = map[string]string{event.AttrDisruption: "EvictionByEvictionAPI"}
	evs := []event.Event{
		pod(-2*time.Hour, event.PodReady, old, event.FlagObserved),
		ep(-2*time.Hour, event.EndpointReady, old, "10.244.0.11", event.FlagObserved),
		evict,
		ep(100*time.Millisecond, event.EndpointNotReady, old, "10.244.0.11", 0),
		pod(2*time.Second, event.PodReady, repl, 0),
		ep(2500*time.Millisecond, event.EndpointReady, repl, "10.244.0.12", 0),
	}
	for i := range evs {
		evs[i].Seal()
	}
	// Logged at their ends: the first began at t0+1s (no ready endpoint),
	// the second at t0+4s (web-2 ready).
	dir := t.TempDir()
	in := filepath.Join(dir, "client.jsonl")
	os.WriteFile(in, []byte(`{"time":"2026-03-01T09:00:06Z","target":"http://web.shop.svc.cluster.local/","error":"context deadline exceeded"}
{"time":"2026-03-01T09:00:09Z","target":"http://web.shop.svc.cluster.local/","error":"context deadline exceeded"}
`), 0o644)
	for _, timeout := range []string{"5s", ""} {
		db := filepath.Join(dir, "events"+timeout+".db")
		s, err := store.Open(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, evs); err != nil {
			t.Fatal(err)
		}
		s.Close()
		args := []string{"import", "--max-past", "0", "--format", "jsonl", "--store", db}
		if timeout != "" {
			args = append(args, "--client-timeout", timeout)
		}
		if code, stdout, stderr := runCLI(t, append(args, in)...); code != 0 {
			t.Fatalf("import: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
		}
		code, stdout, stderr := runCLI(t, "report", "--store", db, "--since", "2026-03-01T08:59:00Z", "--until", "2026-03-01T09:01:00Z", "--format", "json")
		if code != 0 {
			t.Fatalf("report: exit %d, stderr %s", code, stderr)
		}
		var res analysis.Result
		if err := json.Unmarshal([]byte(stdout), &res); err != nil {
			t.Fatalf("report's JSON: %v", err)
		}
		causes := map[int64]analysis.Cause{}
		for _, f := range res.Failures {
			causes[f.Failure.Time] = f.Cause
		}
		first, second := causes[at(6*time.Second)], causes[at(9*time.Second)]
		if len(causes) != 2 {
			t.Fatalf("--client-timeout %q: %d failures in the report, want 2: %v", timeout, len(causes), causes)
		}
		if timeout != "" && (first != analysis.CauseNoReadyEndpoints || second == analysis.CauseNoReadyEndpoints) {
			t.Errorf("--client-timeout %s: begun at no ready endpoint %q, begun after web-2 was ready %q; want %q and another",
				timeout, first, second, analysis.CauseNoReadyEndpoints)
		}
		if timeout == "" && (first == analysis.CauseNoReadyEndpoints || second == analysis.CauseNoReadyEndpoints) {
			t.Errorf("no --client-timeout: %q and %q; a timeout judged at its end had a ready endpoint", first, second)
		}
	}
}
