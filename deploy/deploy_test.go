package deploy_test

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"maps"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/metrics"
)

const chart = "helm/drainscope"

// tool returns the path of helm or kubectl in the binaries cache.
func tool(t *testing.T, name string) string {
	t.Helper()
	bins, err := controlplane.CheckBinaries("", name)
	if err != nil {
		how := "scripts/k8s-binaries.sh kubectl"
		if name == "helm" {
			how = "scripts/helm-binary.sh"
		}
		testenv.Unavailable(t, fmt.Sprintf("%v (build it with %s)", err, how))
	}
	return bins[name]
}

func run(t *testing.T, name string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// variant is one set of chart values worth checking.
type variant struct {
	name string
	set  []string
}

var variants = []variant{
	{"defaults", nil},
	{"production", []string{
		"agent.endpointsMode=leader", "postgres.enabled=false", "store.existingSecret=drainscope-dsn",
		"server.existingSecret=drainscope-token", "metrics.prometheusRule.enabled=true", "metrics.podMonitor.enabled=true",
		"server.publicURL=https://drainscope.example.com", "server.otlp.endpoint=http://otel-collector.observability:4318",
	}},
	{"watches only", []string{"agent.kernel=false", "agent.endpointsMode=all-nodes", "server.enabled=false", "agent.server=false", "postgres.enabled=false", "store.dsn=postgres://drainscope@db:5432/drainscope"}},
	{"extras", []string{"agent.mountBPFFS=true", "agent.extraCapabilities={DAC_READ_SEARCH}", "agent.netnsDir=", "postgres.persistence.enabled=false"}},
	{"monitoring extras", []string{"metrics.serviceMonitor.enabled=true", "logFormat=json", "metrics.grafanaDashboard.enabled=true"}},
	{"agents writing to the store", []string{"agent.server=false"}},
}

func (v variant) args() []string {
	var a []string
	for _, s := range v.set {
		a = append(a, "--set", s)
	}
	return a
}

func render(t *testing.T, helm string, v variant) []byte {
	t.Helper()
	out, err := run(t, helm, append([]string{"template", "drainscope", chart, "--namespace", "drainscope"}, v.args()...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestHelmLint(t *testing.T) {
	helm := tool(t, "helm")
	for _, v := range variants {
		out, err := run(t, helm, append([]string{"lint", "--strict", chart, "--namespace", "drainscope"}, v.args()...)...)
		if err != nil {
			t.Errorf("%s: %v\n%s", v.name, err, out)
		}
	}
}

func TestHelmRefusesBadValues(t *testing.T) {
	helm := tool(t, "helm")
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"agent.endpointsMode=some-nodes"}, "at '/agent/endpointsMode': value must be one of 'auto', 'all-nodes', 'leader'"},
		{[]string{"postgres.enabled=false"}, "no store"},
		{[]string{"server.enabled=false"}, "it needs server.enabled"},
	} {
		_, err := run(t, helm, append([]string{"template", "drainscope", chart}, variant{set: tc.set}.args()...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.set, err, tc.want)
		}
	}
}

// docs splits a multi-document YAML stream into its non-empty documents.
func docs(b []byte) [][]byte {
	var out [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(d, "")) != "" {
			out = append(out, []byte(d))
		}
	}
	return out
}

type objects struct {
	kinds     map[string][]string // kind → names
	daemonSet *appsv1.DaemonSet
	roles     map[string]*rbacv1.ClusterRole
	nsRoles   map[string]*rbacv1.Role
}

func parse(t *testing.T, b []byte) objects {
	t.Helper()
	o := objects{kinds: map[string][]string{}, roles: map[string]*rbacv1.ClusterRole{}, nsRoles: map[string]*rbacv1.Role{}}
	for _, d := range docs(b) {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(d, &meta); err != nil {
			t.Fatalf("%v in\n%s", err, d)
		}
		o.kinds[meta.Kind] = append(o.kinds[meta.Kind], meta.Metadata.Name)
		switch meta.Kind {
		case "DaemonSet":
			o.daemonSet = &appsv1.DaemonSet{}
			if err := yaml.UnmarshalStrict(d, o.daemonSet); err != nil {
				t.Fatal(err)
			}
		case "ClusterRole":
			var r rbacv1.ClusterRole
			if err := yaml.UnmarshalStrict(d, &r); err != nil {
				t.Fatal(err)
			}
			o.roles[r.Name] = &r
		case "Role":
			var r rbacv1.Role
			if err := yaml.UnmarshalStrict(d, &r); err != nil {
				t.Fatal(err)
			}
			o.nsRoles[r.Name] = &r
		}
	}
	return o
}

// checkAgentPod asserts the agent's privileges: no privileged mode, no
// host namespaces, exactly the capabilities the kernel capture needs.
func checkAgentPod(t *testing.T, where string, ds *appsv1.DaemonSet, kernel bool, extra ...corev1.Capability) {
	t.Helper()
	if ds == nil {
		t.Fatalf("%s: no DaemonSet", where)
	}
	spec := ds.Spec.Template.Spec
	if spec.HostPID || spec.HostNetwork || spec.HostIPC {
		t.Errorf("%s: host namespaces in use (pid %v, network %v, ipc %v)", where, spec.HostPID, spec.HostNetwork, spec.HostIPC)
	}
	sc := spec.Containers[0].SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.Capabilities == nil {
		t.Fatalf("%s: security context %+v", where, sc)
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("%s: drops %v, want ALL", where, sc.Capabilities.Drop)
	}
	var want []corev1.Capability
	if kernel {
		want = append([]corev1.Capability{"BPF", "PERFMON", "SYS_RESOURCE"}, extra...)
	}
	if !slices.Equal(sc.Capabilities.Add, want) {
		t.Errorf("%s: adds %v, want %v", where, sc.Capabilities.Add, want)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: root filesystem writable", where)
	}
	// Root only for the capabilities the capture needs: watching the API
	// server alone runs as an unprivileged user.
	if !kernel && (sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0) {
		t.Errorf("%s: without the kernel capture the agent runs as root (runAsNonRoot %v, runAsUser %v)", where, sc.RunAsNonRoot, sc.RunAsUser)
	}
	var mounts []string
	for _, m := range spec.Containers[0].VolumeMounts {
		mounts = append(mounts, m.MountPath)
		if !m.ReadOnly {
			t.Errorf("%s: %s mounted read-write", where, m.MountPath)
		}
	}
	if kernel && !slices.Contains(mounts, "/sys/kernel/btf") || kernel && !slices.Contains(mounts, "/sys/fs/cgroup") || !kernel && len(mounts) > 0 {
		t.Errorf("%s: mounts %v", where, mounts)
	}
}

// checkRBAC asserts least privilege: read-only pods, services,
// endpointslices and the apps workloads, a list of nodes and a get of one,
// a list and watch of events; leases only where leader mode may run (auto
// or leader), only in a Role.
func checkRBAC(t *testing.T, where string, o objects, leader bool) {
	t.Helper()
	// The server's one ClusterRole, with server.events.enabled: create on
	// events, nothing else (it never patches one).
	for name, r := range o.roles {
		if !strings.HasSuffix(name, "-server-events") {
			continue
		}
		if len(r.Rules) != 1 || !slices.Equal(r.Rules[0].APIGroups, []string{""}) || !slices.Equal(r.Rules[0].Resources, []string{"events"}) ||
			!slices.Equal(r.Rules[0].Verbs, []string{"create"}) || len(r.Rules[0].ResourceNames) > 0 {
			t.Errorf("%s: %s grants %+v, want create on events only", where, name, r.Rules)
		}
		delete(o.roles, name)
	}
	// With agent.server: create on tokenreviews, list and watch on pods
	// (where each pod runs), nothing else.
	for name, r := range o.roles {
		if !strings.HasSuffix(name, "-server-tokenreviews") {
			continue
		}
		if len(r.Rules) != 2 || !slices.Equal(r.Rules[0].APIGroups, []string{"authentication.k8s.io"}) || !slices.Equal(r.Rules[0].Resources, []string{"tokenreviews"}) ||
			!slices.Equal(r.Rules[0].Verbs, []string{"create"}) || len(r.Rules[0].ResourceNames) > 0 ||
			!slices.Equal(r.Rules[1].APIGroups, []string{""}) || !slices.Equal(r.Rules[1].Resources, []string{"pods"}) ||
			!slices.Equal(r.Rules[1].Verbs, []string{"list", "watch"}) || len(r.Rules[1].ResourceNames) > 0 {
			t.Errorf("%s: %s grants %+v, want create on tokenreviews and list, watch on pods only", where, name, r.Rules)
		}
		delete(o.roles, name)
	}
	if len(o.roles) != 1 {
		t.Fatalf("%s: ClusterRoles %v", where, o.kinds["ClusterRole"])
	}
	for name, r := range o.roles {
		got := map[string][]string{}
		for _, rule := range r.Rules {
			if len(rule.ResourceNames) > 0 || len(rule.NonResourceURLs) > 0 {
				t.Errorf("%s: %s rule %+v", where, name, rule)
			}
			for _, res := range rule.Resources {
				key := strings.Join(rule.APIGroups, "") + "/" + res
				got[key] = append(got[key], rule.Verbs...)
			}
		}
		for _, verbs := range got {
			slices.Sort(verbs)
		}
		read := []string{"get", "list", "watch"}
		want := map[string][]string{
			"/pods": read, "/services": read, "discovery.k8s.io/endpointslices": read,
			"apps/daemonsets": read, "apps/deployments": read, "apps/replicasets": read, "apps/statefulsets": read,
			// Nodes: a list (of one) at start, for the cluster's size;
			// a get of the agent's own, for its versions (node_info).
			"/nodes": {"get", "list"},
			// Events: the kubelet's about pods, two reasons selected by
			// field; no get (no Event's name is known), no write.
			"/events": {"list", "watch"},
		}
		if !maps.EqualFunc(got, want, slices.Equal[[]string]) {
			t.Errorf("%s: ClusterRole grants %v, want %v", where, got, want)
		}
	}
	if leader != (len(o.nsRoles) == 1) || len(o.nsRoles) > 1 {
		t.Fatalf("%s: leader %v but Roles %v", where, leader, o.kinds["Role"])
	}
	for _, r := range o.nsRoles {
		for _, rule := range r.Rules {
			if !slices.Equal(rule.Resources, []string{"leases"}) || !slices.Equal(rule.APIGroups, []string{"coordination.k8s.io"}) {
				t.Errorf("%s: lease Role grants %v on %v", where, rule.Verbs, rule.Resources)
			}
		}
	}
}

func TestChartPrivileges(t *testing.T) {
	helm := tool(t, "helm")
	for _, v := range variants {
		o := parse(t, render(t, helm, v))
		kernel := !slices.Contains(v.set, "agent.kernel=false")
		var extra []corev1.Capability
		if slices.Contains(v.set, "agent.extraCapabilities={DAC_READ_SEARCH}") {
			extra = append(extra, "DAC_READ_SEARCH")
		}
		checkAgentPod(t, v.name, o.daemonSet, kernel, extra...)
		checkRBAC(t, v.name, o, !slices.Contains(v.set, "agent.endpointsMode=all-nodes"))
	}
}

// TestChartAgentsThroughServer: by default (agent.server) the agents post
// to the server's TLS port with a projected token of audience drainscope,
// trust the chart's CA and hold no store credentials, nor the server's
// key; the server reviews that audience for the agents' service account
// and serves the certificate. agent.server=false is the store's DSN.
func TestChartAgentsThroughServer(t *testing.T) {
	helm := tool(t, "helm")
	for _, on := range []bool{false, true} {
		var set []string
		if !on {
			set = []string{"agent.server=false"}
		}
		out := render(t, helm, variant{set: set})
		o := parse(t, out)
		agent := o.daemonSet.Spec.Template.Spec
		args := strings.Join(agent.Containers[0].Args, " ")
		var store bool
		for _, e := range agent.Containers[0].Env {
			store = store || e.Name == "DRAINSCOPE_STORE"
		}
		var aud string
		var keys []string // what the agents get of the server's Secret
		for _, v := range agent.Volumes {
			if v.Projected != nil {
				for _, src := range v.Projected.Sources {
					if src.ServiceAccountToken != nil {
						aud = src.ServiceAccountToken.Audience
					}
					if src.Secret != nil && src.Secret.Name == "drainscope-agent-tls" {
						for _, it := range src.Secret.Items {
							keys = append(keys, it.Key)
						}
					}
				}
			}
		}
		if on && !slices.Equal(keys, []string{"ca.crt"}) {
			t.Errorf("the agents get %q of the server's TLS Secret, want ca.crt alone", keys)
		}
		server := strings.Contains(string(out), "--agent-service-account=drainscope/drainscope-agent") &&
			strings.Contains(string(out), "--agent-audiences=drainscope") &&
			strings.Contains(string(out), "--agent-listen=0.0.0.0:8443") &&
			strings.Contains(string(out), "--agent-tls-cert=/etc/drainscope/agent-tls/tls.crt")
		through := strings.Contains(args, "--server=https://drainscope-server.drainscope.svc:8443") &&
			strings.Contains(args, "--server-ca=/var/run/secrets/drainscope/ca.crt") &&
			strings.Contains(args, "--token-file=/var/run/secrets/drainscope/token")
		if on && (!through || store || aud != "drainscope" || !server || agent.ServiceAccountName != "drainscope-agent") {
			t.Errorf("defaults: agent through the server %v, store credentials %v, token audience %q, server reviewing %v, agent account %s",
				through, store, aud, server, agent.ServiceAccountName)
		}
		if !on && (through || !store || aud != "" || server) {
			t.Errorf("agent.server=false: agent through the server %v, store credentials %v, token audience %q, server reviewing %v", through, store, aud, server)
		}
	}
}

func TestKustomizePrivileges(t *testing.T) {
	kubectl := tool(t, "kubectl")
	for dir, leader := range map[string]bool{"kustomize/overlays/try": false, "kustomize/overlays/external-postgres": true} {
		out, err := run(t, kubectl, "kustomize", dir)
		if err != nil {
			t.Fatal(err)
		}
		o := parse(t, out)
		checkAgentPod(t, dir, o.daemonSet, true)
		checkRBAC(t, dir, o, true) // auto may choose leader
		if got := o.daemonSet.Spec.Template.Spec.Containers[0].Args[1]; got != map[bool]string{false: "--endpoints-mode=auto", true: "--endpoints-mode=leader"}[leader] {
			t.Errorf("%s: agent runs with %s", dir, got)
		}
	}
}

// TestManifestsApplyOnAnAPIServer applies every chart variant and every
// kustomize overlay with kubectl apply --dry-run=server to a real
// kube-apiserver: schema, field validation (strict) and admission, with
// nothing stored.
func TestManifestsApplyOnAnAPIServer(t *testing.T) {
	helm, kubectl := tool(t, "helm"), tool(t, "kubectl")
	if _, err := controlplane.CheckBinaries("", "etcd", "kube-apiserver"); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{NoControllerManager: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	kc := func(args ...string) ([]byte, error) {
		return run(t, kubectl, append([]string{"--kubeconfig=" + cp.Kubeconfig()}, args...)...)
	}
	// Namespaced objects need their namespace to exist for real; the
	// monitoring objects need their CRDs.
	if err := cp.EnsureNamespace(ctx, "drainscope"); err != nil {
		t.Fatal(err)
	}
	if _, err := kc("apply", "-f", "testdata/prometheus-operator-crds.yaml"); err != nil {
		t.Fatal(err)
	}
	if _, err := kc("wait", "--for=condition=Established", "--timeout=60s",
		"crd/prometheusrules.monitoring.coreos.com", "crd/podmonitors.monitoring.coreos.com",
		"crd/servicemonitors.monitoring.coreos.com"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	apply := func(name string, manifest []byte) {
		t.Helper()
		f := filepath.Join(dir, strings.ReplaceAll(name, "/", "_")+".yaml")
		if err := os.WriteFile(f, manifest, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := kc("apply", "--dry-run=server", "--validate=strict", "-f", f)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		n := strings.Count(string(out), "(server dry run)")
		if want := len(docs(manifest)); n != want {
			t.Errorf("%s: %d objects accepted, want %d:\n%s", name, n, want, out)
		}
		t.Logf("%s: %d objects accepted by the API server (dry run)", name, n)
	}
	for _, v := range variants {
		apply("helm "+v.name, render(t, helm, v))
	}
	for _, d := range []string{"kustomize/overlays/try", "kustomize/overlays/external-postgres", "kustomize/monitoring"} {
		out, err := kc("kustomize", d)
		if err != nil {
			t.Fatal(err)
		}
		apply(d, out)
	}

	// helm install itself, as a user runs it: the defaults install (dry
	// run), a misspelt value is refused by the chart's schema and named.
	install := func(values ...string) ([]byte, error) {
		return run(t, helm, append([]string{"install", "drainscope", chart, "--kubeconfig=" + cp.Kubeconfig(),
			"--namespace", "drainscope", "--dry-run=server"}, values...)...)
	}
	if _, err := install(); err != nil {
		t.Errorf("helm install --dry-run=server with the defaults: %v", err)
	}
	for _, tc := range badValues[:3] {
		_, err := install("-f", writeValues(t, tc.values))
		if err == nil || !strings.Contains(err.Error(), tc.want[len(tc.want)-1]) {
			t.Errorf("helm install with %s: %v, want an error saying %q", tc.name, err, tc.want[len(tc.want)-1])
		}
	}

	// The check has teeth: a misspelt field is refused.
	bad := bytes.Replace(render(t, helm, variants[0]), []byte("readOnlyRootFilesystem: true"), []byte("readOnlyRootFileSystem: true"), 1)
	f := filepath.Join(dir, "bad.yaml")
	os.WriteFile(f, bad, 0o644)
	if _, err := kc("apply", "--dry-run=server", "--validate=strict", "-f", f); err == nil || !strings.Contains(err.Error(), "readOnlyRootFileSystem") {
		t.Errorf("a misspelt field was not refused: %v", err)
	}
}

// TestAlertRules checks that every metric an alert names is one drainscope
// exposes, and that the kustomize PrometheusRule is the chart's.
func TestAlertRules(t *testing.T) {
	helm := tool(t, "helm")
	out := render(t, helm, variant{set: []string{"metrics.prometheusRule.enabled=true"}})
	type rule struct {
		Alert string `json:"alert"`
		Expr  string `json:"expr"`
		For   string `json:"for"`
	}
	type ruleSpec struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []rule `json:"rules"`
		} `json:"groups"`
	}
	var fromChart *ruleSpec
	var raw map[string]any
	for _, d := range docs(out) {
		var obj struct {
			Kind string   `json:"kind"`
			Spec ruleSpec `json:"spec"`
		}
		if err := yaml.Unmarshal(d, &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Kind == "PrometheusRule" {
			fromChart = &obj.Spec
			var all map[string]any
			yaml.Unmarshal(d, &all)
			raw = all["spec"].(map[string]any)
		}
	}
	if fromChart == nil {
		t.Fatal("the chart rendered no PrometheusRule")
	}
	known := map[string]bool{}
	for _, n := range metrics.New("agent", "test").Catalog() {
		known[n] = true
	}
	name := regexp.MustCompile(`drainscope_[a-z_]+`)
	alerts := 0
	for _, g := range fromChart.Groups {
		for _, r := range g.Rules {
			alerts++
			if strings.Contains(r.Expr, "{{") {
				t.Errorf("%s: unrendered template in %q", r.Alert, r.Expr)
			}
			for _, m := range name.FindAllString(r.Expr, -1) {
				base := m
				for _, suf := range []string{"_bucket", "_count", "_sum"} {
					base = strings.TrimSuffix(base, suf)
				}
				if !known[base] {
					t.Errorf("alert %s uses %s, which drainscope does not expose", r.Alert, m)
				}
			}
		}
	}
	t.Logf("%d alerts, every metric they use is exposed", alerts)

	b, err := os.ReadFile("kustomize/monitoring/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var kust map[string]any
	if err := yaml.Unmarshal(b, &kust); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(kust["spec"], raw) {
		t.Errorf("kustomize/monitoring/prometheusrule.yaml differs from the chart's rendering of files/alerts.yaml; regenerate it:\n" +
			"  helm template drainscope deploy/helm/drainscope --set metrics.prometheusRule.enabled=true -s templates/monitoring.yaml")
	}
}

// TestImageBinaryIsStatic builds the binary as deploy/Dockerfile does and
// checks that it needs no dynamic loader, so it runs on the image's empty
// base.
func TestImageBinaryIsStatic(t *testing.T) {
	df, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CGO_ENABLED=0", "FROM scratch", "./cmd/drainscope", "-tags " + imageTags} {
		if !bytes.Contains(df, []byte(want)) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if testing.Short() {
		t.Skip("-short: not building the binary")
	}
	exe := filepath.Join(t.TempDir(), "drainscope")
	cmd := exec.Command("go", "build", "-tags", imageTags, "-trimpath", "-ldflags", "-s -w", "-o", exe, "../cmd/drainscope")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("the binary asks for a dynamic loader")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Fatalf("the binary links %v", libs)
	}
	st, _ := os.Stat(exe)
	t.Logf("static binary: %.1f MiB", float64(st.Size())/(1<<20))
	// Its lab command says where the lab is, and fails; asked for help,
	// it answers as every command does.
	out, err := exec.Command(exe, "lab").CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte("built without the lab")) {
		t.Errorf("the image's drainscope lab: %v, %s; want an error saying the lab is not in this build", err, out)
	}
	if out, err := exec.Command(exe, "lab", "-h").CombinedOutput(); err != nil {
		t.Errorf("the image's drainscope lab -h: %v, %s", err, out)
	}
}

// imageTags are the build tags deploy/Dockerfile builds the image's binary
// with: nolab leaves the lab out (cmd/drainscope/lab_off.go).
const imageTags = "nolab"

// TestImageHoldsNoLab lists the packages the image's binary is built from
// (go list -deps with the Dockerfile's tags): none is the lab's (a
// control-plane launcher, a simulated kubelet, the fleet simulation, the
// load and sample service), while the checkout's own build, which the
// README's lab command runs, holds them.
func TestImageHoldsNoLab(t *testing.T) {
	deps := func(tags ...string) []string {
		args := append([]string{"list", "-deps"}, tags...)
		out, err := exec.Command("go", append(args, "../cmd/drainscope")...).Output()
		if err != nil {
			t.Fatalf("go list: %v", err)
		}
		var lab []string
		for _, p := range strings.Fields(string(out)) {
			if p == labPackages || strings.HasPrefix(p, labPackages+"/") {
				lab = append(lab, p)
			}
		}
		return lab
	}
	if lab := deps("-tags", imageTags); len(lab) > 0 {
		t.Errorf("the image's binary is built from the lab's packages %v", lab)
	}
	if lab := deps(); !slices.Contains(lab, labPackages+"/scenario") {
		t.Errorf("the lab's build holds %v, want %s/scenario among them", lab, labPackages)
	}
}

const labPackages = "github.com/drainscope/drainscope/lab"

// TestRolloutAlertsFireOnTheServersSignals evaluates the rollout alerts of
// the PrometheusRule (kustomize/monitoring/prometheusrule.yaml, which
// TestAlertRules keeps equal to the chart's) against two scrapes of the
// metrics drainscope serve computes, before and after a rollout in leader
// mode whose pod on the non-leader node gets SIGTERM while its endpoint is
// still in rotation. The race alert and the inferred-failure alert fire for
// that workload; on the events of the non-leader alone, which is what its
// agent used to analyse, the race alert does not.
func TestRolloutAlertsFireOnTheServersSignals(t *testing.T) {
	b, err := os.ReadFile("kustomize/monitoring/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Spec struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Alert string `json:"alert"`
					Expr  string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &pr); err != nil {
		t.Fatal(err)
	}
	rules := map[string]string{}
	for _, g := range pr.Spec.Groups {
		if g.Name == "drainscope-rollouts" {
			for _, r := range g.Rules {
				rules[r.Alert] = r.Expr
			}
		}
	}
	if len(rules) != 4 {
		t.Fatalf("%d rollout alerts, want 4", len(rules))
	}

	base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixNano()
	earlier, rollout := leaderModeRollout(base, "web-a0", "node-a", false), leaderModeRollout(base+int64(time.Minute), "web-b1", "node-b", true)
	// The server: one Rollouts over every node's events, scraped after the
	// earlier rollout (the workload's series exist) and after this one.
	m := metrics.New("serve", "test")
	r := m.NewRollouts(metrics.RolloutOptions{})
	feed := func(evs []event.Event) string {
		for i := range evs {
			r.Add(&evs[i])
		}
		r.Flush()
		return scrapeText(t, m)
	}
	before := feed(earlier)
	after := feed(rollout)
	want := `namespace="shop",workload="Deployment/web"`
	for alert, expr := range rules {
		fired := evalIncreaseRule(t, expr, before, after)
		t.Logf("%s: fires for %v", alert, fired)
		switch alert {
		case "DrainscopeEndpointRemovalRace":
			if !slices.Contains(fired, want) {
				t.Errorf("%s does not fire for %s on the server's metrics:\n%s", alert, want, expr)
			}
		case "DrainscopeInferredRolloutFailures":
			if !slices.Contains(fired, want+`,cause="endpoint_race"`) {
				t.Errorf("%s does not fire for the endpoint race:\n%s", alert, expr)
			}
		default:
			if len(fired) > 0 {
				t.Errorf("%s fires for %v: nothing of the kind happened", alert, fired)
			}
		}
	}

	// The non-leader's events alone: no endpoint transition, so no gap.
	m2 := metrics.New("agent", "test")
	r2 := m2.NewRollouts(metrics.RolloutOptions{})
	only := func(evs []event.Event) string {
		for i := range evs {
			if evs[i].Node == "node-b" {
				r2.Add(&evs[i])
			}
		}
		r2.Flush()
		return scrapeText(t, m2)
	}
	before2 := only(earlier)
	if fired := evalIncreaseRule(t, rules["DrainscopeEndpointRemovalRace"], before2, only(rollout)); len(fired) > 0 {
		t.Errorf("the race alert fires on one node's events alone (%v): the test does not show what the server adds", fired)
	}
}

// leaderModeRollout is one pod's termination as two agents in leader mode
// store it: node-a holds the Lease and records the endpoint transitions,
// node runs the pod and records its pod and kernel events. With race, the
// pod exits at SIGTERM, 250 ms before its endpoint leaves rotation, and
// refuses a SYN meanwhile; without, SIGTERM comes 2 s after.
func leaderModeRollout(base int64, name, node string, race bool) []event.Event {
	const ms = int64(time.Millisecond)
	pod := event.PodRef{Namespace: "shop", Name: name, UID: "uid-" + name}
	wl := event.Workload{Kind: "Deployment", Name: "web"}
	addr := netip.MustParseAddrPort("10.244.1.11:8080")
	var out []event.Event
	add := func(off int64, k event.Kind, on string, f func(*event.Event)) {
		e := event.Event{Time: base + off, Kind: k, Node: on, Source: event.SourceWatcher, Pod: pod, Workload: wl}
		if k.IsKernel() {
			e.Source = event.SourceKernel
		}
		if k.IsEndpoint() {
			e.Local, e.Service, e.Slice = addr, "web", "web-abcde"
		}
		if f != nil {
			f(&e)
		}
		e.Seal()
		out = append(out, e)
	}
	sigterm := 2_300 * ms
	if race {
		sigterm = 50 * ms
	}
	add(-20_000*ms, event.EndpointReady, "node-a", nil)
	add(0, event.PodDeletion, node, func(e *event.Event) { e.Duration = int64(30 * time.Second) })
	add(sigterm, event.Signal, node, func(e *event.Event) { e.Signal, e.PID = 15, 42 })
	add(sigterm+10*ms, event.ListenerClosed, node, func(e *event.Event) { e.PID, e.Local = 42, addr })
	add(sigterm+11*ms, event.ProcessExit, node, func(e *event.Event) { e.PID = 42 })
	if race {
		add(150*ms, event.ConnRefused, node, func(e *event.Event) {
			e.Local, e.Remote = addr, netip.MustParseAddrPort("10.244.0.200:41000")
		})
	}
	add(300*ms, event.EndpointNotReady, "node-a", nil)
	add(310*ms, event.EndpointTerminating, "node-a", nil)
	add(3_000*ms, event.EndpointRemoved, "node-a", nil)
	return out
}

func scrapeText(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// ruleShape is the one shape of the rollout alerts:
// AGG by (LABELS) (increase(METRIC{MATCHERS}[WINDOW])) > THRESHOLD.
var ruleShape = regexp.MustCompile(`^\s*(sum|max) by \(([a-z_, ]+)\) \(\s*increase\((drainscope_[a-z_]+)(?:\{([^}]*)\})?\[[0-9]+[smh]\]\)\s*\) > ([0-9.]+)\s*$`)

var sampleLine = regexp.MustCompile(`^([a-z_]+)(?:\{([^}]*)\})? ([-+0-9.eE]+|NaN|[+-]Inf)$`)
var labelPair = regexp.MustCompile(`([a-z_]+)="([^"]*)"`)

// evalIncreaseRule evaluates an alert of ruleShape over two scrapes taken
// within its window: increase is after minus before per series (a series
// absent before has no increase, as in Prometheus without a sample before
// it), aggregated by the rule's labels and compared. It returns the label
// sets it fires for, as `k="v",…` in the rule's label order. An expression
// of another shape fails the test rather than pass unchecked.
func evalIncreaseRule(t *testing.T, expr, before, after string) []string {
	t.Helper()
	sm := ruleShape.FindStringSubmatch(expr)
	if sm == nil {
		t.Fatalf("alert expression of a shape this test cannot evaluate:\n%s", expr)
	}
	agg, by, name, matchers := sm[1], strings.Split(sm[2], ","), sm[3], labelPair.FindAllStringSubmatch(sm[4], -1)
	threshold, _ := strconv.ParseFloat(sm[5], 64)
	series := func(body string) map[string]float64 {
		out := map[string]float64{}
		for _, l := range strings.Split(body, "\n") {
			s := sampleLine.FindStringSubmatch(l)
			if s == nil || s[1] != name {
				continue
			}
			labels := map[string]string{}
			for _, p := range labelPair.FindAllStringSubmatch(s[2], -1) {
				labels[p[1]] = p[2]
			}
			ok := true
			for _, mt := range matchers {
				ok = ok && labels[mt[1]] == mt[2]
			}
			if ok {
				v, _ := strconv.ParseFloat(s[3], 64)
				out[s[2]] = v
			}
		}
		return out
	}
	b, a := series(before), series(after)
	if len(a) == 0 {
		return nil
	}
	groups := map[string]float64{}
	for key, v := range a {
		prev, ok := b[key]
		if !ok {
			continue
		}
		labels := map[string]string{}
		for _, p := range labelPair.FindAllStringSubmatch(key, -1) {
			labels[p[1]] = p[2]
		}
		var g []string
		for _, l := range by {
			l = strings.TrimSpace(l)
			if _, ok := labels[l]; !ok {
				t.Fatalf("%s groups by %s, which the server's %s does not carry (%s)", expr, l, name, key)
			}
			g = append(g, l+`="`+labels[l]+`"`)
		}
		gk := strings.Join(g, ",")
		inc := v - prev
		if cur, seen := groups[gk]; !seen || agg == "sum" {
			groups[gk] = cur + inc
		} else {
			groups[gk] = max(cur, inc)
		}
	}
	var fired []string
	for g, v := range groups {
		if v > threshold {
			fired = append(fired, g)
		}
	}
	slices.Sort(fired)
	return fired
}

// TestImageBuildCommand: the multi-platform build deploy/README.md gives
// matches deploy/Dockerfile: the file, every --build-arg a declared ARG,
// the build stage cross-compiling on the builder's platform for the
// target's architecture, and every platform one the embedded eBPF objects
// (little-endian) are built into, unlike a big-endian one.
func TestImageBuildCommand(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	cmd := regexp.MustCompile(`(?m)^docker buildx build (?:[^\n]*\\\n)*[^\n]*$`).Find(readme)
	if cmd == nil {
		t.Fatal("deploy/README.md gives no docker buildx build command")
	}
	args := strings.Fields(strings.ReplaceAll(string(cmd), "\\\n", " "))
	df, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^ARG ([A-Z_]+)`).FindAllStringSubmatch(string(df), -1) {
		declared[m[1]] = true
	}
	var platforms []string
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "-f":
			if args[i+1] != "deploy/Dockerfile" {
				t.Errorf("the command builds %s", args[i+1])
			}
		case "--build-arg":
			if name, _, _ := strings.Cut(args[i+1], "="); !declared[name] {
				t.Errorf("--build-arg %s: the Dockerfile declares no ARG %s", args[i+1], name)
			}
		case "--platform":
			platforms = strings.Split(args[i+1], ",")
		}
	}
	if len(platforms) < 2 {
		t.Fatalf("the command names platforms %v", platforms)
	}
	for _, want := range []string{"FROM --platform=$BUILDPLATFORM", "GOARCH=${TARGETARCH}", "CGO_ENABLED=0"} {
		if !bytes.Contains(df, []byte(want)) {
			t.Errorf("the Dockerfile lacks %q: a multi-platform build would not cross-compile", want)
		}
	}
	embeds := func(arch string) bool {
		cmd := exec.Command("go", "list", "-f", `{{join .GoFiles " "}} {{join .EmbedFiles " "}}`, "../ebpf")
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list ../ebpf for %s: %v", arch, err)
		}
		return strings.Contains(string(out), "probes_bpfel.go") && strings.Contains(string(out), "probes_bpfel.o")
	}
	for _, p := range platforms {
		osName, arch, _ := strings.Cut(p, "/")
		if osName != "linux" || !embeds(arch) {
			t.Errorf("platform %s: the eBPF objects are not built into it", p)
		}
	}
	if embeds("s390x") {
		t.Error("the eBPF objects build for big-endian s390x too: the check shows nothing")
	}
	t.Logf("docker buildx build for %v", platforms)
}
