package deploy_test

import (
	"bufio"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// manifest is a rendering's objects of the kinds these tests look into.
type manifest struct {
	secrets  map[string]map[string]string // name → key → value
	pods     map[string]corev1.PodTemplateSpec
	policies []networkingv1.NetworkPolicy
	pdbs     []policyv1.PodDisruptionBudget
}

func parseManifest(t *testing.T, b []byte) manifest {
	t.Helper()
	m := manifest{secrets: map[string]map[string]string{}, pods: map[string]corev1.PodTemplateSpec{}}
	for _, d := range docs(b) {
		var obj struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
			Spec     struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
			StringData map[string]string `json:"stringData"`
		}
		if err := yaml.Unmarshal(d, &obj); err != nil {
			t.Fatalf("%v in\n%s", err, d)
		}
		switch obj.Kind {
		case "Secret":
			m.secrets[obj.Metadata.Name] = obj.StringData
		case "Deployment", "DaemonSet", "StatefulSet", "Job":
			m.pods[obj.Kind+"/"+obj.Metadata.Name] = obj.Spec.Template
		case "NetworkPolicy":
			var np networkingv1.NetworkPolicy
			if err := yaml.UnmarshalStrict(d, &np); err != nil {
				t.Fatal(err)
			}
			m.policies = append(m.policies, np)
		case "PodDisruptionBudget":
			var pdb policyv1.PodDisruptionBudget
			if err := yaml.UnmarshalStrict(d, &pdb); err != nil {
				t.Fatal(err)
			}
			m.pdbs = append(m.pdbs, pdb)
		}
	}
	return m
}

// secretRefs lists the Secret keys a pod's containers read, as name/key.
func secretRefs(p corev1.PodTemplateSpec) []string {
	var out []string
	for _, c := range p.Spec.Containers {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				out = append(out, e.ValueFrom.SecretKeyRef.Name+"/"+e.ValueFrom.SecretKeyRef.Key)
			}
		}
	}
	return out
}

func envKey(t *testing.T, p corev1.PodTemplateSpec, name string) string {
	t.Helper()
	for _, e := range p.Spec.Containers[0].Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			return e.ValueFrom.SecretKeyRef.Key
		}
	}
	return ""
}

// TestChartSecretKeysExist: every key a pod reads from a Secret the chart
// makes is in that Secret, or the pod would not start
// (CreateContainerConfigError).
func TestChartSecretKeysExist(t *testing.T) {
	helm := tool(t, "helm")
	vs := append(slices.Clone(variants),
		variant{"ingest key", []string{"server.ingestTokenKey=push-token"}},
		variant{"ingest key in an existing Secret", []string{"server.existingSecret=mine", "server.ingestTokenKey=push-token"}})
	for _, v := range vs {
		m := parseManifest(t, render(t, helm, v))
		for name, p := range m.pods {
			for _, ref := range secretRefs(p) {
				secret, key, _ := strings.Cut(ref, "/")
				data, made := m.secrets[secret]
				if made {
					if _, ok := data[key]; !ok {
						t.Errorf("%s: %s reads %s, which the chart's Secret %s lacks", v.name, name, ref, secret)
					}
				}
			}
		}
	}
	m := parseManifest(t, render(t, helm, variant{set: []string{"server.ingestTokenKey=push-token"}}))
	if k := envKey(t, m.pods["Deployment/drainscope-server"], "DRAINSCOPE_INGEST_TOKEN"); k != "push-token" {
		t.Errorf("with server.ingestTokenKey=push-token the server reads its ingest token from %q", k)
	}
	// The server refuses an ingest token equal to the UI's: so does the chart.
	_, err := run(t, helm, "template", "drainscope", chart, "--set", "server.ingestTokenKey=auth-token")
	if err == nil || !strings.Contains(err.Error(), "a token of its own") {
		t.Errorf("server.ingestTokenKey=auth-token: %v", err)
	}
}

// TestChartGeneratesSecrets: no secret is fixed in the chart: each is
// random (two renders differ), at least 32 characters, the ingest token is
// not the UI's, and the agents and the server log in to the bundled
// Postgres as roles of their own, not as its superuser.
func TestChartGeneratesSecrets(t *testing.T) {
	helm := tool(t, "helm")
	a, b := parseManifest(t, render(t, helm, variant{})), parseManifest(t, render(t, helm, variant{}))
	checked := 0
	for name, data := range a.secrets {
		for key, v := range data {
			if strings.HasSuffix(key, "dsn") {
				continue // made of the passwords below
			}
			checked++
			if len(v) < 32 {
				t.Errorf("%s/%s: %d characters", name, key, len(v))
			}
			if b.secrets[name][key] == v {
				t.Errorf("%s/%s: the same in two renders: fixed", name, key)
			}
		}
	}
	if checked != 5 {
		t.Errorf("%d generated secrets, want 5 (postgres, agent and server passwords, auth and ingest tokens)", checked)
	}
	server := a.secrets["drainscope-server"]
	if server["auth-token"] == server["ingest-token"] {
		t.Error("the ingest token is the UI's token")
	}
	store, pg := a.secrets["drainscope-store"], a.secrets["drainscope-postgres"]
	for who, want := range map[string]string{"agent": "drainscope_agent", "server": "drainscope_server"} {
		dsn := store[who+"-dsn"]
		if !strings.HasPrefix(dsn, "postgres://"+want+":"+pg[who+"-password"]+"@") {
			t.Errorf("%s DSN %q: want role %s with its generated password", who, dsn, want)
		}
	}
	if k := envKey(t, a.pods["DaemonSet/drainscope-agent"], "DRAINSCOPE_STORE"); k != "" {
		t.Errorf("the agents, which write through the server, use the store key %q", k)
	}
	direct := parseManifest(t, render(t, helm, variant{set: []string{"agent.server=false"}}))
	if k := envKey(t, direct.pods["DaemonSet/drainscope-agent"], "DRAINSCOPE_STORE"); k != "agent-dsn" {
		t.Errorf("with agent.server=false the agents use the store key %q, want agent-dsn", k)
	}
	if k := envKey(t, a.pods["Deployment/drainscope-server"], "DRAINSCOPE_STORE"); k != "server-dsn" {
		t.Errorf("the server uses the store key %q, want server-dsn", k)
	}
	// Without a server the agents prune, which the agent role may not.
	noServer := parseManifest(t, render(t, helm, variant{set: []string{"server.enabled=false", "agent.server=false"}}))
	if k := envKey(t, noServer.pods["DaemonSet/drainscope-agent"], "DRAINSCOPE_STORE"); k != "server-dsn" {
		t.Errorf("with server.enabled=false the agents, which then prune, use the store key %q, want server-dsn", k)
	}
	job, ok := a.pods["Job/drainscope-migrate-1"]
	if !ok {
		t.Fatal("no migrate Job making the roles")
	}
	// The definer owns the tables and functions, never the superuser the
	// Job runs as; the partition function takes the store's retention.
	if args := job.Spec.Containers[0].Args; !slices.Contains(args, "--roles=agent=drainscope_agent,server=drainscope_server,definer=drainscope_definer") ||
		!slices.Contains(args, "--retention=336h") {
		t.Errorf("migrate Job args %v", args)
	}

	_, err := run(t, helm, "template", "drainscope", chart, "--set", "postgres.password=short-password")
	if err == nil || !strings.Contains(err.Error(), "at least 32 characters") {
		t.Errorf("a short postgres.password: %v", err)
	}
}

// TestChartNetworkPolicies: every pod the chart runs is selected by a
// NetworkPolicy limiting both directions; Postgres takes connections only
// from the release's agents, server and migrate Job; an external store is
// reached on its port.
func TestChartNetworkPolicies(t *testing.T) {
	helm := tool(t, "helm")
	for _, v := range variants {
		m := parseManifest(t, render(t, helm, v))
		// With agent.server (the default) the agents reach the server's
		// TLS port, not the store.
		through := !slices.Contains(v.set, "agent.server=false")
		for name, p := range m.pods {
			var types []networkingv1.PolicyType
			for _, np := range m.policies {
				sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
				if err != nil {
					t.Fatal(err)
				}
				if sel.Matches(labels.Set(p.Labels)) {
					types = append(types, np.Spec.PolicyTypes...)
				}
			}
			if !slices.Contains(types, networkingv1.PolicyTypeIngress) || !slices.Contains(types, networkingv1.PolicyTypeEgress) {
				t.Errorf("%s: %s is not limited both ways by a NetworkPolicy (%v)", v.name, name, types)
			}
		}
		for _, np := range m.policies {
			switch np.Spec.PodSelector.MatchLabels["app.kubernetes.io/component"] {
			case "postgres":
				if len(np.Spec.Egress) != 0 || len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 {
					t.Fatalf("%s: postgres policy %+v", v.name, np.Spec)
				}
				sel, _ := metav1.LabelSelectorAsSelector(np.Spec.Ingress[0].From[0].PodSelector)
				for comp, want := range map[string]bool{"agent": !through, "server": true, "migrate": true, "other": false} {
					if got := sel.Matches(labels.Set{"app.kubernetes.io/instance": "drainscope", "app.kubernetes.io/component": comp}); got != want {
						t.Errorf("%s: postgres reachable from %s: %v", v.name, comp, got)
					}
				}
				if sel.Matches(labels.Set{"app.kubernetes.io/instance": "other", "app.kubernetes.io/component": "server"}) {
					t.Errorf("%s: postgres reachable from another release", v.name)
				}
			case "agent":
				var ports []int32
				for _, r := range np.Spec.Egress {
					for _, p := range r.Ports {
						ports = append(ports, p.Port.IntVal)
					}
				}
				want, not := []int32{443, 5432, 53}, int32(8443)
				if through {
					want, not = []int32{443, 8443, 53}, 5432
				}
				for _, want := range want {
					if !slices.Contains(ports, want) {
						t.Errorf("%s: the agents may not reach port %d (egress ports %v)", v.name, want, ports)
					}
				}
				if slices.Contains(ports, not) {
					t.Errorf("%s: the agents may reach port %d (egress ports %v)", v.name, not, ports)
				}
			}
		}
	}
	m := parseManifest(t, render(t, helm, variant{set: []string{"networkPolicy.enabled=false"}}))
	if len(m.policies) != 0 {
		t.Errorf("networkPolicy.enabled=false renders %d policies", len(m.policies))
	}
}

// TestChartImageDigests: every image of the chart can be pinned by digest.
func TestChartImageDigests(t *testing.T) {
	helm := tool(t, "helm")
	const d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	m := parseManifest(t, render(t, helm, variant{set: []string{"image.digest=" + d, "postgres.image.digest=" + d}}))
	n := 0
	for name, p := range m.pods {
		for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			n++
			if !strings.HasSuffix(c.Image, "@"+d) {
				t.Errorf("%s: %s runs %s, not by digest", name, c.Name, c.Image)
			}
		}
	}
	if n < 4 {
		t.Errorf("%d containers checked", n)
	}
}

// TestChartServerPDB: a PodDisruptionBudget covers the server's pods.
func TestChartServerPDB(t *testing.T) {
	helm := tool(t, "helm")
	m := parseManifest(t, render(t, helm, variant{set: []string{"server.replicas=2"}}))
	server := m.pods["Deployment/drainscope-server"]
	found := false
	for _, pdb := range m.pdbs {
		sel, _ := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if sel.Matches(labels.Set(server.Labels)) {
			found = true
			if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
				t.Errorf("server PDB %+v", pdb.Spec)
			}
		}
	}
	if !found {
		t.Error("no PodDisruptionBudget for the server")
	}
}

// TestKustomizeNoFixedSecrets: the overlays ship no secret: the Secrets are
// made by the commands deploy/README.md gives, from random bytes.
func TestKustomizeNoFixedSecrets(t *testing.T) {
	err := filepath.WalkDir("kustomize", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		low := strings.ToLower(string(b))
		for _, bad := range []string{"change-me", "try-only", "secretgenerator", "password=", "auth-token="} {
			if strings.Contains(low, bad) {
				t.Errorf("%s: %q", p, bad)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	kubectl := tool(t, "kubectl")
	for _, dir := range []string{"kustomize/overlays/try", "kustomize/overlays/external-postgres"} {
		out, err := run(t, kubectl, "kustomize", dir)
		if err != nil {
			t.Fatal(err)
		}
		m := parseManifest(t, out)
		if len(m.secrets) > 0 {
			t.Errorf("%s renders Secrets %v", dir, m.secrets)
		}
		for name, p := range m.pods {
			selected := false
			for _, np := range m.policies {
				sel, _ := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
				selected = selected || sel.Matches(labels.Set(p.Labels))
			}
			if !selected {
				t.Errorf("%s: no NetworkPolicy selects %s", dir, name)
			}
		}
		if len(m.pdbs) != 1 {
			t.Errorf("%s: %d PodDisruptionBudgets, want the server's", dir, len(m.pdbs))
		}
		// A DSN each: the agents' role may only write (drainscope migrate --roles).
		if k := envKey(t, m.pods["DaemonSet/drainscope-agent"], "DRAINSCOPE_STORE"); k != "agent-dsn" {
			t.Errorf("%s: the agents use the store key %q, want agent-dsn", dir, k)
		}
		if k := envKey(t, m.pods["Deployment/drainscope-server"], "DRAINSCOPE_STORE"); k != "server-dsn" {
			t.Errorf("%s: the server uses the store key %q, want server-dsn", dir, k)
		}
		job, ok := m.pods["Job/drainscope-migrate"]
		if withPostgres := dir == "kustomize/overlays/try"; withPostgres != ok {
			t.Errorf("%s: a migrate Job: %v", dir, ok)
		} else if ok && !slices.Contains(job.Spec.Containers[0].Args, "--roles=agent=drainscope_agent,server=drainscope_server") {
			t.Errorf("%s: migrate Job args %v", dir, job.Spec.Containers[0].Args)
		}
	}
}

// TestDockerignore: .git and build output stay out of the image build's
// context, and nothing the binary is built from is left out.
func TestDockerignore(t *testing.T) {
	f, err := os.Open("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var patterns []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, strings.TrimPrefix(l, "/"))
		}
	}
	// Docker's rule for a path: a pattern matches it or one of its parents;
	// **/ matches any number of leading directories.
	ignored := func(rel string) bool {
		parts := strings.Split(rel, "/")
		for _, p := range patterns {
			for i := 1; i <= len(parts); i++ {
				prefix := strings.Join(parts[:i], "/")
				cands := []string{prefix}
				if rest, ok := strings.CutPrefix(p, "**/"); ok {
					for j := 0; j < i; j++ {
						if m, _ := path.Match(rest, strings.Join(parts[j:i], "/")); m {
							return true
						}
					}
					continue
				}
				for _, c := range cands {
					if m, _ := path.Match(p, c); m {
						return true
					}
				}
			}
		}
		return false
	}
	for _, rel := range []string{".git", ".git/config", "drainscope", "bin/drainscope", "store/store.test", ".cache/x"} {
		if !ignored(rel) {
			t.Errorf("%s enters the build context", rel)
		}
	}
	out, err := exec.Command("go", "list", "-deps", "-f", `{{if .Module}}{{if .Module.Main}}{{.Dir}}|{{join .GoFiles ","}},{{join .EmbedFiles ","}}{{end}}{{end}}`, "../cmd/drainscope").Output()
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs("..")
	needed := []string{"go.mod", "go.sum"}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		dir, files, _ := strings.Cut(l, "|")
		rel, _ := filepath.Rel(root, dir)
		for _, f := range strings.Split(files, ",") {
			if f != "" {
				needed = append(needed, filepath.ToSlash(filepath.Join(rel, f)))
			}
		}
	}
	for _, rel := range needed {
		if ignored(rel) {
			t.Errorf("%s is needed for the build but left out of the context", rel)
		}
	}
	t.Logf("%d files the build needs, all in the context", len(needed))
}

// TestChartServerEvents: the server's DroppedRequests Events are on by
// default, with its token mounted, its one ClusterRole (checked by
// checkRBAC) and a way out to the API server; off, the server has no token,
// no role and no such egress.
func TestChartServerEvents(t *testing.T) {
	helm := tool(t, "helm")
	for _, on := range []bool{true, false} {
		set := []string{"server.publicURL=https://drainscope.example.com"}
		if !on {
			// The agents' TLS port reviews their tokens, which needs the
			// API server too: off here, to see the Events' own needs.
			set = append(set, "server.events.enabled=false", "agent.server=false")
		} else {
			set = append(set, "server.otlp.endpoint=http://otel-collector.observability:4318")
		}
		out := render(t, helm, variant{set: set})
		m := parseManifest(t, out)
		server := m.pods["Deployment/drainscope-server"]
		args := server.Spec.Containers[0].Args
		mounted := server.Spec.AutomountServiceAccountToken
		if slices.Contains(args, "--events") != on || mounted == nil || *mounted != on {
			t.Errorf("events %v: server args %v, token mounted %v", on, args, mounted)
		}
		if !slices.Contains(args, "--public-url=https://drainscope.example.com") {
			t.Errorf("server.publicURL: args %v", args)
		}
		if slices.Contains(args, "--otlp-endpoint=http://otel-collector.observability:4318") != on {
			t.Errorf("server.otlp.endpoint set %v: args %v", on, args)
		}
		o := parse(t, out)
		if _, ok := o.roles["drainscope-server-events"]; ok != on {
			t.Errorf("events %v: ClusterRoles %v", on, o.kinds["ClusterRole"])
		}
		for _, np := range m.policies {
			if np.Name != "drainscope-server" {
				continue
			}
			api, collector := false, false
			for _, e := range np.Spec.Egress {
				for _, p := range e.Ports {
					api = api || p.Port != nil && p.Port.IntValue() == 6443
					collector = collector || p.Port != nil && p.Port.IntValue() == 4318
				}
			}
			if api != on || collector != on {
				t.Errorf("events and OTLP %v: the server's egress reaches the API server: %v, the collector: %v", on, api, collector)
			}
		}
	}
}

// TestChartAgentDataplane: agent.dataplane, and only it, runs the agent in
// the host's network namespace with CAP_NET_ADMIN, which reading
// kube-proxy's nftables rules needs; without the kernel capture it is off.
func TestChartAgentDataplane(t *testing.T) {
	helm := tool(t, "helm")
	for _, tc := range []struct {
		set []string
		on  bool
	}{
		{nil, false},
		{[]string{"agent.dataplane=true"}, true},
		{[]string{"agent.dataplane=true", "agent.kernel=false"}, false},
	} {
		m := parseManifest(t, render(t, helm, variant{set: tc.set}))
		agent := m.pods["DaemonSet/drainscope-agent"]
		c := agent.Spec.Containers[0]
		netAdmin := false
		if sc := c.SecurityContext; sc != nil && sc.Capabilities != nil {
			netAdmin = slices.Contains(sc.Capabilities.Add, "NET_ADMIN")
		}
		want := "--dataplane=off"
		if tc.on {
			want = "--dataplane=auto"
		}
		if agent.Spec.HostNetwork != tc.on || netAdmin != tc.on || !slices.Contains(c.Args, want) {
			t.Errorf("%v: hostNetwork %v, NET_ADMIN %v, args %v; want the dataplane %v", tc.set, agent.Spec.HostNetwork, netAdmin, c.Args, tc.on)
		}
		if tc.on && agent.Spec.DNSPolicy != "ClusterFirstWithHostNet" {
			t.Errorf("%v: dnsPolicy %q on the host network; the agent would not resolve cluster names", tc.set, agent.Spec.DNSPolicy)
		}
	}
}

// TestChartNetworkPolicyPeers checks that the policies name their peers by
// default: every ingress rule of the agents and the server has a from (the
// in-cluster Prometheus's selector on the metrics ports, the release's
// namespace on the server's HTTP port), and the API server's and the
// store's addresses, given as values, become the egress rules' ipBlocks.
func TestChartNetworkPolicyPeers(t *testing.T) {
	helm := tool(t, "helm")
	prom := labels.Set{"app.kubernetes.io/name": "prometheus"}
	check := func(where string, m manifest, wantAPI, wantStore []string) {
		t.Helper()
		for _, np := range m.policies {
			comp := np.Spec.PodSelector.MatchLabels["app.kubernetes.io/component"]
			if comp != "agent" && comp != "server" {
				continue
			}
			for _, r := range np.Spec.Ingress {
				if len(r.From) == 0 {
					t.Errorf("%s: %s admits anyone on %v", where, comp, r.Ports)
					continue
				}
				metrics := false
				for _, p := range r.Ports {
					metrics = metrics || p.Port.IntVal == 9090
				}
				if metrics {
					sel, err := metav1.LabelSelectorAsSelector(r.From[0].PodSelector)
					if err != nil || r.From[0].NamespaceSelector == nil || !sel.Matches(prom) || sel.Matches(labels.Set{"app": "other"}) {
						t.Errorf("%s: %s's metrics admit %+v; want the in-cluster Prometheus's pods", where, comp, r.From)
					}
				}
			}
			var api, st []string
			for _, r := range np.Spec.Egress {
				for _, p := range r.Ports {
					for _, to := range r.To {
						if to.IPBlock == nil {
							continue
						}
						switch p.Port.IntVal {
						case 6443:
							api = append(api, to.IPBlock.CIDR)
						case 5432:
							st = append(st, to.IPBlock.CIDR)
						}
					}
				}
			}
			if comp == "agent" && !slices.Equal(api, wantAPI) {
				t.Errorf("%s: the agents reach the API server at %v, want %v", where, api, wantAPI)
			}
			if wantStore != nil && !slices.Equal(st, wantStore) {
				t.Errorf("%s: %s reaches the store at %v, want %v", where, comp, st, wantStore)
			}
		}
	}
	check("defaults", parseManifest(t, render(t, helm, variant{})), nil, nil)
	check("addresses given", parseManifest(t, render(t, helm, variant{set: []string{
		"networkPolicy.apiServerCIDRs={10.0.0.1/32}", "postgres.enabled=false", "store.dsn=postgres://u:p@db/x", "agent.server=false",
		"networkPolicy.storeCIDRs={10.1.2.3/32}"}})), []string{"10.0.0.1/32"}, []string{"10.1.2.3/32"})
}

// With agent.dataplane the agent is on the host network: its metrics port
// is bound to the node's loopback (the probes ask there), or to the node's
// own address when told, never to every address of the node.
func TestChartHostNetworkMetrics(t *testing.T) {
	helm := tool(t, "helm")
	for _, tc := range []struct {
		set       []string
		listen    string
		probeHost string
		hostIPEnv bool
	}{
		{nil, "--metrics-listen=:9090", "", false},
		{[]string{"agent.dataplane=true"}, "--metrics-listen=127.0.0.1:9090", "127.0.0.1", false},
		{[]string{"agent.dataplane=true", "agent.hostNetworkMetricsAddress=hostIP"}, "--metrics-listen=$(HOST_IP):9090", "", true},
		{[]string{"agent.dataplane=true", "agent.hostNetworkMetricsAddress=10.0.0.7"}, "--metrics-listen=10.0.0.7:9090", "10.0.0.7", false},
	} {
		agent := parseManifest(t, render(t, helm, variant{set: tc.set})).pods["DaemonSet/drainscope-agent"]
		c := agent.Spec.Containers[0]
		if !slices.Contains(c.Args, tc.listen) {
			t.Errorf("%v: args %v, want %s", tc.set, c.Args, tc.listen)
		}
		for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Host != tc.probeHost {
				t.Errorf("%v: probe %+v, want host %q", tc.set, p, tc.probeHost)
			}
		}
		hasEnv := slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == "HOST_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.hostIP"
		})
		if hasEnv != tc.hostIPEnv {
			t.Errorf("%v: HOST_IP from status.hostIP %v, want %v", tc.set, hasEnv, tc.hostIPEnv)
		}
	}
}
