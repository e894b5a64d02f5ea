package main

import (
	"strings"
	"testing"
)

func TestAgentRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--endpoints-mode=some-nodes"}, "want all-nodes or leader"},
		{[]string{"--buffer-events=0"}, "must be positive"},
		{[]string{"--flight-lead=0s"}, "--flight-lead and --flight-calm must be positive"},
		{[]string{"--metrics-listen=9090"}, "want host:port"},
		{[]string{"--node="}, "--node is empty"},
		{[]string{"stray"}, "unexpected argument"},
		{[]string{"--dataplane=ipvs"}, "want auto or off"},
		{[]string{"--kernel-without=no_socket_reset"}, "unknown feature"},
		{[]string{"--server=http://127.0.0.1:8080", "--store=/tmp/x.db"}, "choose one"},
		{[]string{"--server=http://127.0.0.1:8080", "--retention=1d"}, "drainscope serve prunes"},
		{[]string{"--server=127.0.0.1:8080"}, "want http(s)://host"},
	} {
		code, _, stderr := runCLI(t, append([]string{"agent"}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("agent %v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}

// Outside a pod and without a kubeconfig the agent says what it lacks.
func TestAgentWithoutACluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBECONFIG", t.TempDir()+"/none")
	t.Setenv("HOME", t.TempDir())
	code, _, stderr := runCLI(t, "agent", "--node=n1", "--no-kernel", "--metrics-listen=")
	if code != 1 || !strings.Contains(stderr, "no Kubernetes configuration") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}
