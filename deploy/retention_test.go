package deploy_test

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// containerArgs returns the first container's args of the Deployment and
// of the DaemonSet in a rendering.
func containerArgs(t *testing.T, b []byte) (server, agent []string) {
	t.Helper()
	for _, d := range docs(b) {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(d, &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "Deployment":
			var dep appsv1.Deployment
			if err := yaml.Unmarshal(d, &dep); err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(dep.Name, "-server") {
				server = dep.Spec.Template.Spec.Containers[0].Args
			}
		case "DaemonSet":
			var ds appsv1.DaemonSet
			if err := yaml.Unmarshal(d, &ds); err != nil {
				t.Fatal(err)
			}
			agent = ds.Spec.Template.Spec.Containers[0].Args
		}
	}
	return server, agent
}

// TestChartRetention: store.retention reaches the one process that prunes,
// the server, or the agents when there is no server.
func TestChartRetention(t *testing.T) {
	helm := tool(t, "helm")
	has := func(args []string, flag string) bool { return slices.Contains(args, flag) }
	server, agent := containerArgs(t, render(t, helm, variant{}))
	if !has(server, "--retention=336h") {
		t.Errorf("defaults: server args %v lack --retention=336h", server)
	}
	if slices.ContainsFunc(agent, func(a string) bool { return strings.HasPrefix(a, "--retention") }) {
		t.Errorf("defaults: agents are given --retention (%v); the server prunes", agent)
	}
	if server, _ := containerArgs(t, render(t, helm, variant{set: []string{"store.retention=7d"}})); !has(server, "--retention=7d") {
		t.Errorf("store.retention=7d: server args %v", server)
	}
	server, agent = containerArgs(t, render(t, helm, variant{set: []string{"server.enabled=false", "agent.server=false"}}))
	if server != nil || !has(agent, "--retention=336h") {
		t.Errorf("server.enabled=false: server args %v, agent args %v; want only the agents to prune", server, agent)
	}
}

func TestKustomizeRetention(t *testing.T) {
	kubectl := tool(t, "kubectl")
	for _, dir := range []string{"kustomize/overlays/try", "kustomize/overlays/external-postgres"} {
		out, err := run(t, kubectl, "kustomize", dir)
		if err != nil {
			t.Fatal(err)
		}
		if server, _ := containerArgs(t, out); !slices.Contains(server, "--retention=336h") {
			t.Errorf("%s: server args %v lack --retention=336h", dir, server)
		}
	}
}
