package cilium

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/printer"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/drainscope/drainscope/internal/testenv"
)

// ciliumReleases are the releases whose map layouts testdata/ copies, and
// where each declares them.
var ciliumReleases = []struct {
	version string
	files   []string
}{
	{"v1.15.19", []string{"pkg/maps/lbmap/ipv4.go", "pkg/maps/lbmap/ipv6.go"}},
	{"v1.20.2", []string{"pkg/loadbalancer/maps/types.go"}},
}

// ours pairs each of Cilium's types with the reader's.
var ours = map[string]reflect.Type{
	"Service4Key":     reflect.TypeOf(Service4Key{}),
	"Service4Value":   reflect.TypeOf(ServiceValue{}),
	"Backend4KeyV3":   reflect.TypeOf(uint32(0)),
	"Backend4ValueV3": reflect.TypeOf(Backend4Value{}),
	"Service6Key":     reflect.TypeOf(Service6Key{}),
	"Service6Value":   reflect.TypeOf(ServiceValue{}),
	"Backend6KeyV3":   reflect.TypeOf(uint32(0)),
	"Backend6ValueV3": reflect.TypeOf(Backend6Value{}),
}

// fakeImporter provides the three Cilium packages the layouts name, with
// the underlying types Cilium gives them.
type fakeImporter map[string]*types.Package

func newFakeImporter(t *testing.T) fakeImporter {
	srcs := map[string]string{
		"github.com/cilium/cilium/pkg/types":        "package types\ntype IPv4 [4]byte\ntype IPv6 [16]byte\n",
		"github.com/cilium/cilium/pkg/u8proto":      "package u8proto\ntype U8proto uint8\n",
		"github.com/cilium/cilium/pkg/loadbalancer": "package loadbalancer\ntype BackendID uint32\n",
	}
	imp := fakeImporter{}
	for path, src := range srcs {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path+".go", src, 0)
		if err != nil {
			t.Fatal(err)
		}
		pkg, err := (&types.Config{Importer: importer.Default()}).Check(path, fset, []*ast.File{f}, nil)
		if err != nil {
			t.Fatal(err)
		}
		imp[path] = pkg
	}
	return imp
}

func (f fakeImporter) Import(path string) (*types.Package, error) { return f[path], nil }

// TestLayoutMatchesCilium: every key and value type of the services and
// backends maps, as Cilium v1.15.19 and v1.20.2 declare them (copied in
// testdata/), has the reader's size, and each field the reader's offset
// and size, on amd64 and arm64.
func TestLayoutMatchesCilium(t *testing.T) {
	imp := newFakeImporter(t)
	for _, rel := range ciliumReleases {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, filepath.Join("testdata", "lbmap-"+rel.version+".go.txt"), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		pkg, err := (&types.Config{Importer: imp}).Check("lbmap", fset, []*ast.File{f}, nil)
		if err != nil {
			t.Fatalf("%s: %v", rel.version, err)
		}
		for _, arch := range []string{"amd64", "arm64"} {
			sizes := types.SizesFor("gc", arch)
			for name, our := range ours {
				obj := pkg.Scope().Lookup(name)
				if obj == nil {
					t.Errorf("%s: no %s", rel.version, name)
					continue
				}
				st := obj.Type().Underlying().(*types.Struct)
				if got := sizes.Sizeof(st); got != int64(our.Size()) {
					t.Errorf("%s %s (%s): %d bytes in Cilium, %d in the reader's %s", rel.version, name, arch, got, our.Size(), our)
				}
				if our.Kind() != reflect.Struct {
					continue
				}
				var fields []*types.Var
				for i := 0; i < st.NumFields(); i++ {
					fields = append(fields, st.Field(i))
				}
				offs := sizes.Offsetsof(fields)
				// Match by offset: 1.15 and 1.20 name some bytes differently.
				byOff := map[int64]reflect.StructField{}
				for i := 0; i < our.NumField(); i++ {
					byOff[int64(our.Field(i).Offset)] = our.Field(i)
				}
				for i, fv := range fields {
					of, ok := byOff[offs[i]]
					if !ok {
						t.Errorf("%s %s.%s at offset %d: no field of the reader's %s starts there", rel.version, name, fv.Name(), offs[i], our)
						continue
					}
					// Padding may span several of the reader's fields (1.15's
					// two pad bytes are 1.20's Zone and Pad).
					sz := sizes.Sizeof(fv.Type())
					if strings.HasPrefix(fv.Name(), "Pad") {
						if offs[i]+sz > int64(our.Size()) {
							t.Errorf("%s %s.%s: %d bytes at %d run past the reader's %s", rel.version, name, fv.Name(), sz, offs[i], our)
						}
						continue
					}
					if sz != int64(of.Type.Size()) {
						t.Errorf("%s %s.%s: %d bytes at %d; the reader's %s has %d", rel.version, name, fv.Name(), sz, offs[i], of.Name, of.Type.Size())
					}
				}
			}
		}
	}
}

// TestTestdataIsCiliumsSource: the copies in testdata/ are Cilium's own
// declarations, field for field with their align tags (which Cilium's
// alignchecker matches against its C structs). Cilium's source comes from
// the Go module cache (go mod download, outside this module: drainscope
// does not depend on Cilium).
func TestTestdataIsCiliumsSource(t *testing.T) {
	for _, rel := range ciliumReleases {
		dir := ciliumSource(t, rel.version)
		want := structDecls(t, filepath.Join("testdata", "lbmap-"+rel.version+".go.txt"))
		got := map[string]string{}
		for _, f := range rel.files {
			for k, v := range structDecls(t, filepath.Join(dir, f)) {
				got[k] = v
			}
		}
		for name := range ours {
			if got[name] == "" {
				t.Errorf("%s: %s not declared in %v", rel.version, name, rel.files)
			} else if got[name] != want[name] {
				t.Errorf("%s: %s differs from Cilium's:\ntestdata:\n%s\nCilium:\n%s", rel.version, name, want[name], got[name])
			}
		}
		t.Logf("Cilium %s: %d layouts match %s", rel.version, len(ours), dir)
	}
}

func structDecls(t *testing.T, path string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			continue
		}
		for _, s := range gd.Specs {
			ts := s.(*ast.TypeSpec)
			if _, ok := ts.Type.(*ast.StructType); !ok {
				continue
			}
			var b bytes.Buffer
			printer.Fprint(&b, fset, ts)
			out[ts.Name.Name] = b.String()
		}
	}
	return out
}

// ciliumSource returns the directory of Cilium's module at version,
// downloading it into the module cache when it is not there yet.
func ciliumSource(t *testing.T, version string) string {
	t.Helper()
	gobin := testenv.RequireBinary(t, "go")
	out, err := exec.Command(gobin, "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "github.com", "cilium", "cilium@"+version)
	if _, err := os.Stat(filepath.Join(dir, "VERSION")); err == nil {
		return dir
	}
	cmd := exec.Command(gobin, "mod", "download", "-json", "github.com/cilium/cilium@"+version)
	cmd.Dir = t.TempDir() // outside this module
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GO111MODULE=on")
	start := time.Now()
	out, err = cmd.Output()
	if err != nil {
		testenv.Unavailable(t, "Cilium "+version+"'s source is not in the module cache and go mod download failed: "+err.Error())
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("go mod download: %v %s", err, out)
	}
	t.Logf("downloaded Cilium %s in %v", version, time.Since(start).Round(time.Second))
	return m.Dir
}
