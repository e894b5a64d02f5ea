package repocheck_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/drainscope/drainscope/"

// floors is the layering of the packages, lowest first: a package may
// import packages on its own floor or below, never above. A new package
// must be given its floor here, where the import it needs says.
var floors = [][]string{
	// 0, the ground: the event model and what imports nothing of drainscope.
	{"event", "controlplane", "deploy", "internal/duration", "internal/httpauth", "internal/memtest", "internal/testenv", "internal/repocheck",
		"lab/cgroup", "lab/realnode", "lab/lock", "lab/netns", "lab/sampleapp"},
	// 1, recording: the store and each source of events.
	{"store", "watcher", "ebpf", "dataplane", "flight", "dataplane/cilium", "internal/eventgen", "internal/eventfile", "internal/pgtest", "lab/load"},
	// 2, making sense: the analysis, the importers, the simulated kubelet.
	{"analysis", "ingest", "lab/simnode", "relay"},
	// 3, presenting: the web UI, metrics, the export feed, the lab's ingress,
	// the text and markdown reports, the simulation of many agents.
	{"web", "metrics", "export", "lab/ingress", "analysis/textreport", "lab/fleet"},
	// 4, delivering: the export sinks, the kubectl plugin, the node agent.
	{"export/k8sevents", "export/otlp", "export/otlp/otlptest", "kubectl", "agent"},
	// 5, the lab's runs.
	{"lab/scenario"},
	// 6, the commands.
	{"cmd/drainscope", "cmd/kubectl-drainscope"},
}

// checkFloors lists every import in graph (package → the packages it
// imports, this module's only) that runs up a floor, every package on no
// floor, and every cycle.
func checkFloors(graph map[string][]string, floors [][]string) []string {
	floor := map[string]int{}
	var bad []string
	for i, f := range floors {
		for _, p := range f {
			if j, ok := floor[p]; ok {
				bad = append(bad, fmt.Sprintf("%s is on floors %d and %d", p, j, i))
			}
			floor[p] = i
		}
	}
	pkgs := make([]string, 0, len(graph))
	for p := range graph {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		fp, ok := floor[p]
		if !ok {
			bad = append(bad, fmt.Sprintf("%s is on no floor: add it to floors in internal/repocheck", p))
			continue
		}
		for _, q := range graph[p] {
			if fq, ok := floor[q]; ok && fq > fp {
				bad = append(bad, fmt.Sprintf("%s (floor %d) imports %s (floor %d), above it", p, fp, q, fq))
			}
		}
	}
	// Cycles: a depth-first walk that meets a package still on its path.
	const (
		unseen = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var walk func(p string)
	walk = func(p string) {
		state[p] = onPath
		path = append(path, p)
		for _, q := range graph[p] {
			switch state[q] {
			case onPath:
				i := slices.Index(path, q)
				bad = append(bad, "import cycle: "+strings.Join(append(slices.Clone(path[i:]), q), " → "))
			case unseen:
				walk(q)
			}
		}
		path = path[:len(path)-1]
		state[p] = done
	}
	for _, p := range pkgs {
		if state[p] == unseen {
			walk(p)
		}
	}
	return bad
}

// importGraph is this module's packages and their imports of each other,
// as go list reports them (tests' imports apart).
func importGraph(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	graph := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(p.ImportPath, module)
		graph[name] = []string{}
		for _, q := range p.Imports {
			if strings.HasPrefix(q, module) {
				graph[name] = append(graph[name], strings.TrimPrefix(q, module))
			}
		}
	}
	return graph
}

// TestImportFloors: no package imports one on a floor above its own, and
// no import cycle, in the module as it is.
func TestImportFloors(t *testing.T) {
	graph := importGraph(t)
	if len(graph) < 20 {
		t.Fatalf("go list found %d packages: not this module", len(graph))
	}
	for _, b := range checkFloors(graph, floors) {
		t.Error(b)
	}
	// A floor that names a package that is gone is stale.
	for _, f := range floors {
		for _, p := range f {
			if _, ok := graph[p]; !ok {
				t.Errorf("floors name %s, which is no package of the module", p)
			}
		}
	}
	t.Logf("%d packages on %d floors", len(graph), len(floors))
}

// TestCheckFloors: the check fails an upward import, a package on no floor
// and a cycle (within a floor, where the floors alone allow it), and passes
// a clean graph.
func TestCheckFloors(t *testing.T) {
	fl := [][]string{{"event"}, {"store", "watcher"}, {"web"}}
	for _, tc := range []struct {
		name  string
		graph map[string][]string
		want  []string
	}{
		{"clean", map[string][]string{"event": {}, "store": {"event"}, "watcher": {"event", "store"}, "web": {"store", "event"}}, nil},
		{"upward import", map[string][]string{"event": {}, "store": {"event", "web"}, "watcher": {}, "web": {}},
			[]string{"store (floor 1) imports web (floor 2), above it"}},
		{"the ground imports the top", map[string][]string{"event": {"web"}, "store": {}, "watcher": {}, "web": {"store"}},
			[]string{"event (floor 0) imports web (floor 2), above it"}},
		{"cycle across floors", map[string][]string{"event": {}, "store": {"web"}, "watcher": {}, "web": {"store"}},
			[]string{"store (floor 1) imports web (floor 2), above it", "import cycle: store → web → store"}},
		{"no floor", map[string][]string{"event": {}, "store": {}, "watcher": {}, "web": {}, "newpkg": {"event"}},
			[]string{"newpkg is on no floor"}},
		{"cycle on one floor", map[string][]string{"event": {}, "store": {"watcher"}, "watcher": {"store"}, "web": {}},
			[]string{"import cycle: store → watcher → store"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkFloors(tc.graph, fl)
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %d findings %q", got, len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Errorf("finding %d: %q, want %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}
