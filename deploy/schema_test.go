package deploy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// badValues are values files a user could write by mistake, each with
// what helm must say: the path of the value and what is wrong with it.
var badValues = []struct {
	name, values string
	want         []string
}{
	{"misspelt top-level key", "agnet:\n  kernel: false\n", []string{"additional properties 'agnet' not allowed"}},
	{"misspelt nested key", "agent:\n  kernal: false\n", []string{"at '/agent'", "'kernal' not allowed"}},
	{"retention in words", "store:\n  retention: ten days\n", []string{"at '/store/retention'", "'ten days' does not match"}},
	{"unknown endpoints mode", "agent:\n  endpointsMode: some-nodes\n", []string{"at '/agent/endpointsMode'", "'auto', 'all-nodes', 'leader'"}},
	{"unknown log format", "logFormat: xml\n", []string{"at '/logFormat'", "'text', 'json'"}},
	{"short digest", "image:\n  digest: sha256:abc\n", []string{"at '/image/digest'"}},
	{"duration as a number", "agent:\n  flushInterval: 200\n", []string{"at '/agent/flushInterval'", "want string"}},
	{"boolean as a string", "metrics:\n  serviceMonitor:\n    enabled: \"yes\"\n", []string{"at '/metrics/serviceMonitor/enabled'", "want boolean"}},
	{"empty buffer", "agent:\n  bufferEvents: 0\n", []string{"at '/agent/bufferEvents'", "minimum"}},
	{"port out of range", "server:\n  port: 80800\n", []string{"at '/server/port'", "maximum"}},
}

func writeValues(t *testing.T, body string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestChartSchemaRefusesTypos: with values.schema.json, a misspelt key or a
// value of the wrong shape fails helm template and helm lint, and helm's
// message names the value, where without the schema helm would ignore it.
// helm install is checked the same way against a real API server in
// TestManifestsApplyOnAnAPIServer.
func TestChartSchemaRefusesTypos(t *testing.T) {
	helm := tool(t, "helm")
	for _, tc := range badValues {
		f := writeValues(t, tc.values)
		for _, cmd := range [][]string{
			{"template", "drainscope", chart, "-f", f},
			{"lint", "--strict", chart, "-f", f},
		} {
			out, err := run(t, helm, cmd...)
			if err == nil {
				t.Errorf("%s: helm %s accepted\n%s", tc.name, cmd[0], tc.values)
				continue
			}
			msg := err.Error() + string(out) // lint reports on stdout
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%s: helm %s says\n%s\nwithout %q", tc.name, cmd[0], msg, w)
				}
			}
		}
	}
	// Values helm's --set types as numbers, where a string is usual, pass.
	for _, set := range []string{"store.retention=0", "postgres.image.tag=17"} {
		if _, err := run(t, helm, "template", "drainscope", chart, "--set", set); err != nil {
			t.Errorf("--set %s: %v", set, err)
		}
	}
}

// TestChartSchemaCoversEveryValue: every key of values.yaml, and every
// .Values path the templates read, is declared in values.schema.json, so
// that a value added without its schema fails here, not at a user's
// install (additionalProperties: false would refuse it).
func TestChartSchemaCoversEveryValue(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chart, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	defs, _ := schema["definitions"].(map[string]any)
	resolve := func(s map[string]any) map[string]any {
		if ref, ok := s["$ref"].(string); ok {
			d, _ := defs[strings.TrimPrefix(ref, "#/definitions/")].(map[string]any)
			return d
		}
		return s
	}
	// lookup returns the schema of a dotted path, and whether the path is
	// declared; a free map (additionalProperties a schema) declares all below.
	lookup := func(path []string) (map[string]any, bool) {
		s := schema
		for _, p := range path {
			s = resolve(s)
			props, _ := s["properties"].(map[string]any)
			if sub, ok := props[p].(map[string]any); ok {
				s = sub
				continue
			}
			if ap, ok := s["additionalProperties"].(map[string]any); ok {
				s = ap
				continue
			}
			if s["additionalProperties"] == nil && s["type"] == "object" {
				return s, true // an object left open: Kubernetes' own shape
			}
			return nil, false
		}
		return resolve(s), true
	}

	vb, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(vb, &values); err != nil {
		t.Fatal(err)
	}
	n := 0
	var walk func(prefix []string, v any)
	walk = func(prefix []string, v any) {
		if len(prefix) > 0 {
			n++
			s, ok := lookup(prefix)
			if !ok {
				t.Errorf("values.yaml: %s is not in values.schema.json", strings.Join(prefix, "."))
				return
			}
			if _, free := s["additionalProperties"].(map[string]any); free || s["additionalProperties"] == nil {
				return // a map of the user's or Kubernetes' own keys
			}
		}
		if m, ok := v.(map[string]any); ok {
			for k, sub := range m {
				walk(append(slices.Clone(prefix), k), sub)
			}
		}
	}
	walk(nil, values)

	refs := map[string]bool{}
	re := regexp.MustCompile(`\.Values((?:\.[A-Za-z][A-Za-z0-9]*)+)`)
	files, _ := filepath.Glob(filepath.Join(chart, "templates", "*"))
	files = append(files, filepath.Join(chart, "files", "alerts.yaml"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			refs[strings.TrimPrefix(m[1], ".")] = true
		}
	}
	for ref := range refs {
		if _, ok := lookup(strings.Split(ref, ".")); !ok {
			t.Errorf("the templates read .Values.%s, which values.schema.json does not declare", ref)
		}
	}
	t.Logf("%d keys of values.yaml and %d paths the templates read, all declared", n, len(refs))
}
