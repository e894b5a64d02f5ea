package kubectl

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
	"github.com/drainscope/drainscope/web"
)

func runPluginCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Main(args, &o, &e)
	return code, o.String(), e.String()
}

func TestPluginIsChosenByItsName(t *testing.T) {
	for argv0, want := range map[string]bool{
		"/usr/local/bin/kubectl-drainscope": true, "kubectl-drainscope": true,
		"kubectl-drainscope.exe": true, "/usr/bin/drainscope": false, "kubectl": false,
	} {
		if got := IsPlugin(argv0); got != want {
			t.Errorf("IsPlugin(%q) = %v, want %v", argv0, got, want)
		}
	}
}

// Bad command lines fail before any cluster or store is asked, naming
// what is wrong.
func TestPluginFlagErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.db")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage: kubectl drainscope report TYPE/NAME"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"report"}, 2, "report takes one workload, TYPE/NAME"},
		{[]string{"report", "web"}, 2, `"web": want TYPE/NAME`},
		{[]string{"report", "pod/web"}, 2, `unknown workload kind "pod" in "pod/web": want deployment (deploy), statefulset (sts) or daemonset (ds)`},
		{[]string{"report", "deploy/web", "deploy/api"}, 2, "got 2 arguments"},
		{[]string{"report", "deploy/web", "--format", "yaml"}, 2, `--format "yaml": want text or json`},
		{[]string{"report", "deploy/web", "--since", "yesterday"}, 2, "--since"},
		{[]string{"report", "deploy/web", "-A"}, 2, "-A is for rollouts"},
		{[]string{"report", "deploy/web", "--bogus"}, 2, "unknown flag: --bogus"},
		{[]string{"rollouts", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"report", "deploy/web", "--dsn", missing}, 2, "--dsn: no store at " + missing},
		{[]string{"report", "deploy/web", "--kubeconfig", missing}, 1, "reading the kubeconfig"},
	} {
		code, _, stderr := runPluginCLI(tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
	if code, _, stderr := runPluginCLI("report", "-h"); code != 0 || !strings.Contains(stderr, "--server-namespace") {
		t.Errorf("-h: exit %d, %q", code, stderr)
	}
}

// With --dsn the plugin reads a store through the same API the server
// answers, and names the disruption, its cause and fix.
func TestPluginReportFromStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.db")
	st, err := store.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-10 * time.Minute).UnixNano()
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

	code, stdout, stderr := runPluginCLI("report", "deploy/web", "-n", "shop", "--dsn", path, "--since", "1h")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	t.Logf("report:\n%s", stdout)
	for _, want := range []string{"Deployment shop/web: 1 disruption", "\npod deletion at ", "1 pod replaced", "1 failure reported by clients",
		"keep-alive connection cut at exit (shop/web-1 1)", "fix: while draining"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = runPluginCLI("report", "deployment.apps/web", "--namespace=shop", "--dsn", path, "-o", "json")
	var out struct {
		Disruptions []web.Alignment `json:"disruptions"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); code != 0 || err != nil {
		t.Fatalf("json: exit %d, %v, stderr %q:\n%s", code, err, stderr, stdout)
	}
	if len(out.Disruptions) != 1 || len(out.Disruptions[0].Causes) != 1 || out.Disruptions[0].Causes[0].Cause != "keepalive_at_exit" {
		t.Errorf("json: want one disruption with one keep-alive cause: %+v", out.Disruptions)
	}
	// Another namespace, another kind: nothing, and no error (with --dsn
	// no cluster says whether the workload exists).
	if code, stdout, _ := runPluginCLI("report", "sts/web", "-n", "shop", "--dsn", path); code != 0 || !strings.Contains(stdout, "StatefulSet shop/web: 0 disruptions") {
		t.Errorf("sts/web: exit %d:\n%s", code, stdout)
	}
	code, stdout, _ = runPluginCLI("rollouts", "-A", "--dsn", path)
	t.Logf("rollouts:\n%s", stdout)
	if code != 0 || !strings.Contains(stdout, "Deployment/web") || !strings.Contains(stdout, "keepalive_at_exit (1)") {
		t.Errorf("rollouts: exit %d:\n%s", code, stdout)
	}
}

// Names a client's log or a snapshot may bring, in the plugin's text
// output: shown escaped, never raw (no byte below 0x20 but newline and
// tab), JSON escaping its own.
func TestPluginHostileNames(t *testing.T) {
	const hostile = "\x1b]0;owned\x07\x1b[2J\u009b31m\r\nFORGED"
	path := filepath.Join(t.TempDir(), "events.db")
	st, err := store.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-10 * time.Minute).UnixNano()
	pod := event.PodRef{Namespace: "shop", Name: "web-1" + hostile, UID: "u1"}
	wl := event.Workload{Kind: "Deployment", Name: "web"}
	other := event.PodRef{Namespace: "ns" + hostile, Name: "x" + hostile, UID: "u2"}
	ip := netip.MustParseAddrPort("10.244.0.11:8080")
	client := netip.MustParseAddrPort("10.244.0.1:40001")
	node := "n" + hostile
	evs := []event.Event{
		{Time: t0, Kind: event.PodDeletion, Node: node, Source: event.SourceWatcher, Pod: pod, Workload: wl, Duration: int64(30 * time.Second)},
		{Time: t0, Kind: event.PodDeletion, Node: node, Source: event.SourceWatcher, Pod: other, Workload: event.Workload{Kind: "Deployment", Name: "w" + hostile}, Duration: int64(30 * time.Second)},
		{Time: t0 + 400e6, Kind: event.EndpointNotReady, Node: node, Source: event.SourceWatcher, Pod: pod, Workload: wl, Local: ip, Service: "web" + hostile},
		{Time: t0 + 5e9, Kind: event.Signal, Node: node, Source: event.SourceKernel, Pod: pod, PID: 7, Comm: "python3" + hostile, Signal: 15, PeerPID: 1, PeerComm: "kubelet" + hostile},
		{Time: t0 + 8e9, Kind: event.ProcessExit, Node: node, Source: event.SourceKernel, Pod: pod, PID: 7, Comm: "python3" + hostile},
		{Time: t0 + 8e9 + 1e5, Kind: event.ConnClosed, Node: node, Source: event.SourceKernel, Pod: pod, Local: ip, Remote: client, Reason: "local", Flags: event.FlagAtExit},
		{Time: t0 + 8e9 + 3e6, Kind: event.ClientFailure, Source: event.SourceClient, Local: client, Remote: netip.MustParseAddrPort("10.96.0.10:80"), Reason: event.FailEOF,
			Attrs: map[string]string{"error": "EOF" + hostile, event.AttrTarget: "http://web" + hostile + "/"}},
	}
	for i := range evs {
		evs[i].Seal()
	}
	if err := st.Append(t.Context(), evs); err != nil {
		t.Fatal(err)
	}
	st.Close()
	for _, args := range [][]string{
		{"report", "deploy/web", "-n", "shop", "--dsn", path, "--since", "1h"},
		{"report", "deploy/web", "-n", "shop", "--dsn", path, "--since", "1h", "-o", "json"},
		{"rollouts", "-A", "--dsn", path, "--since", "1h"},
		{"rollouts", "-A", "--dsn", path, "--since", "1h", "-o", "json"},
	} {
		code, stdout, stderr := runPluginCLI(args...)
		if code != 0 {
			t.Errorf("%q: exit %d, stderr %q", args, code, stderr)
			continue
		}
		for i := 0; i < len(stdout); i++ {
			if c := stdout[i]; (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
				t.Errorf("%q: byte %#x reached the output at %d:\n%s", args, c, i, stdout)
				break
			}
		}
		if strings.Contains(stdout, "\u009b") {
			t.Errorf("%q: a C1 control reached the output", args)
		}
		for _, line := range strings.Split(stdout, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "FORGED") {
				t.Errorf("%q: a name forged a line: %q", args, line)
			}
		}
		if !strings.Contains(stdout, "owned") {
			t.Errorf("%q: the hostile names are not in the output at all:\n%s", args, stdout)
		}
		t.Logf("%q:\n%.1500s", args, stdout)
	}
}

// TestPluginCheck: kubectl drainscope check judges the workload whose app
// container's spec was recorded: no preStop against endpoints that took
// 400 ms to leave rotation is risky, with the sleep action's patch on a
// 1.33 cluster; a workload of another namespace is not listed.
func TestPluginCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.db")
	st, err := store.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-10 * time.Minute).UnixNano()
	pod := event.PodRef{Namespace: "shop", Name: "web-1", UID: "u1", Container: "app"}
	wl := event.Workload{Kind: "Deployment", Name: "web"}
	ip := netip.MustParseAddrPort("10.244.0.11:8080")
	evs := []event.Event{
		{Time: t0 - 60e9, Kind: event.NodeInfo, Node: "n", Source: event.SourceWatcher, Reason: event.ChangeObserved, Flags: event.FlagObserved,
			Attrs: map[string]string{event.AttrAPIServerVersion: "v1.33.2", event.AttrKubeletVersion: "v1.33.2"}},
		{Time: t0 - 50e9, Kind: event.ContainerStarted, Node: "n", Source: event.SourceWatcher, Pod: pod, Workload: wl,
			Attrs: map[string]string{event.AttrContainerRole: event.ContainerRoleApp, event.AttrContainerPorts: "8080/TCP", event.AttrGracePeriod: "30"}},
		{Time: t0 - 40e9, Kind: event.EndpointReady, Node: "n", Source: event.SourceWatcher, Pod: pod, Workload: wl, Local: ip, Service: "web"},
		{Time: t0, Kind: event.PodDeletion, Node: "n", Source: event.SourceWatcher, Pod: pod, Workload: wl, Duration: int64(30 * time.Second)},
		{Time: t0 + 400e6, Kind: event.EndpointNotReady, Node: "n", Source: event.SourceWatcher, Pod: pod, Workload: wl, Local: ip, Service: "web"},
		{Time: t0 + 5e6, Kind: event.Signal, Node: "n", Source: event.SourceKernel, Pod: pod, PID: 7, Comm: "app", Signal: 15, PeerPID: 1, PeerComm: "kubelet"},
		{Time: t0 + 9e6, Kind: event.ProcessExit, Node: "n", Source: event.SourceKernel, Pod: pod, PID: 7, Comm: "app"},
	}
	for i := range evs {
		evs[i].Seal()
	}
	if err := st.Append(t.Context(), evs); err != nil {
		t.Fatal(err)
	}
	st.Close()

	code, stdout, stderr := runPluginCLI("check", "deploy/web", "-n", "shop", "--dsn", path, "--since", "1h")
	t.Logf("check:\n%s", stdout)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"RISKY endpoint_race shop Deployment/web", "its preStop waits 0 s, and endpoints took 400 ms",
		`kubectl -n shop patch deployment web --type strategic -p '{"spec":{"template":{"spec":{"containers":[{"lifecycle":{"preStop":{"sleep":{"seconds":3}}},"name":"app"}]}}}}'`,
		"1 of 1 workloads"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("check lacks %q", want)
		}
	}
	if code, stdout, _ := runPluginCLI("check", "-n", "other", "--dsn", path, "--since", "1h"); code != 0 || !strings.Contains(stdout, "0 of 0 workloads") {
		t.Errorf("another namespace: exit %d:\n%s", code, stdout)
	}
	if code, _, stderr := runPluginCLI("check", "pod/web", "--dsn", path); code != 2 || !strings.Contains(stderr, "unknown workload kind") {
		t.Errorf("check pod/web: exit %d, %q", code, stderr)
	}
}
