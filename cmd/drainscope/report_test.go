package main

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/kubectl"
	"github.com/drainscope/drainscope/store"
)

func TestReportFlags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.db")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--format", "yaml"}, 2, `--format "yaml"`},
		{[]string{"--since", "yesterday"}, 2, "--since"},
		{[]string{"--since", "1h", "--until", "2h"}, 2, "window is empty"},
		{[]string{"--workload", "web"}, 2, "NAMESPACE/NAME"},
		{[]string{"--store", "mysql://x/y"}, 1, "unknown scheme"},
		{[]string{"--store", path, "stray"}, 2, "unexpected argument"},
	} {
		code, _, stderr := runCLI(t, append([]string{"report"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("report %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
	code, stdout, stderr := runCLI(t, "report", "--store", path, "--since", "2h")
	if code != 0 || !strings.Contains(stdout, "DISRUPTIONS") || !strings.Contains(stdout, "none") {
		t.Fatalf("empty store: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestReportExplainsAKeepAliveCut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.db")
	st, err := store.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC).UnixNano()
	pod := event.PodRef{Namespace: "shop", Name: "web-1", UID: "u1"}
	wl := event.Workload{Kind: "Deployment", Name: "web"}
	ip := netip.MustParseAddrPort("10.244.0.11:8080")
	client := netip.MustParseAddrPort("10.244.0.1:40001")
	evs := []event.Event{
		{Time: t0, Kind: event.PodDeletion, Node: "n", Source: event.SourceWatcher, Pod: pod, Workload: wl, Duration: int64(30 * time.Second)},
		{Time: t0 + 400e6, Kind: event.EndpointNotReady, Node: "n", Source: event.SourceWatcher, Pod: pod, Workload: wl, Local: ip, Service: "web"},
		{Time: t0 + 5e9, Kind: event.Signal, Node: "n", Source: event.SourceKernel, Pod: pod, PID: 7, Comm: "python3", Signal: 15, PeerPID: 1, PeerComm: "kubelet"},
		{Time: t0 + 8e9, Kind: event.ProcessExit, Node: "n", Source: event.SourceKernel, Pod: pod, PID: 7, Comm: "python3"},
		{Time: t0 + 8e9 + 1e5, Kind: event.ConnClosed, Node: "n", Source: event.SourceKernel, Pod: pod, Local: ip, Remote: client, Reason: "local", Flags: event.FlagAtExit},
		{Time: t0 + 8e9 + 3e6, Kind: event.ClientFailure, Source: event.SourceClient, Local: client, Remote: netip.MustParseAddrPort("10.96.0.10:80"), Reason: event.FailEOF},
	}
	for i := range evs {
		evs[i].Seal()
	}
	if err := st.Append(t.Context(), evs); err != nil {
		t.Fatal(err)
	}
	st.Close()
	since := time.Unix(0, t0-60e9).UTC().Format(time.RFC3339)
	until := time.Unix(0, t0+60e9).UTC().Format(time.RFC3339)
	for _, format := range []string{"text", "markdown", "json"} {
		code, stdout, stderr := runCLI(t, "report", "--store", path, "--since", since, "--until", until, "--workload", "shop/web", "--format", format)
		if code != 0 {
			t.Fatalf("%s: exit %d, stderr %q", format, code, stderr)
		}
		want := "keep-alive connection cut at exit"
		if !strings.Contains(stdout, want) || !strings.Contains(stdout, "3.0 s after SIGTERM") {
			t.Errorf("%s: output lacks %q or the 3.0 s exit delay:\n%s", format, want, stdout)
		}
	}
}

// TestCheckArguments: check takes one workload as kubectl names it,
// before or after its flags, and names what is wrong with any other.
func TestCheckArguments(t *testing.T) {
	for in, want := range map[string]event.Workload{
		"deploy/web": {Kind: "Deployment", Name: "web"}, "sts/db": {Kind: "StatefulSet", Name: "db"}, "DaemonSet/agent": {Kind: "DaemonSet", Name: "agent"},
	} {
		if got, err := kubectl.ParseWorkload(in); err != nil || got != want {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	for _, bad := range []string{"web", "pod/web", "deploy/", "deploy/a/b"} {
		if _, err := kubectl.ParseWorkload(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	dir := t.TempDir()
	code, _, stderr := runCLI(t, "check", "cronjob/x", "--store", filepath.Join(dir, "s.db"))
	if code != 2 || !strings.Contains(stderr, `unknown workload kind "cronjob"`) {
		t.Errorf("check cronjob/x: exit %d, %q", code, stderr)
	}
	code, stdout, stderr := runCLI(t, "check", "deploy/web", "--store", filepath.Join(dir, "s.db"))
	if code != 0 || !strings.Contains(stdout, "no workload's pods with a recorded spec in the window") || !strings.Contains(stdout, "0 of 0 workloads") {
		t.Errorf("check of an empty store: exit %d, %q %q", code, stdout, stderr)
	}
}
