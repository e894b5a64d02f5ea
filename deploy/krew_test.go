package deploy_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// krewPlugin is the part of krew's Plugin manifest (v1alpha2) a release
// must get right.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			Sha256 string `json:"sha256"`
			Bin    string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

func readKrew(t *testing.T, path string) krewPlugin {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var p krewPlugin
	if err := yaml.UnmarshalStrict(raw, &p); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return p
}

var templateField = regexp.MustCompile(`@[A-Za-z0-9_]+@`)

// The manifest covers Linux and macOS on amd64 and arm64, with the fields
// krew requires, and leaves every value the release makes to the release.
func TestKrewManifest(t *testing.T) {
	p := readKrew(t, "plugin.yaml")
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" || p.Metadata.Name != "drainscope" ||
		p.Spec.Homepage == "" || p.Spec.Description == "" || p.Spec.Version != "@VERSION@" {
		t.Errorf("manifest header: %+v", p)
	}
	if !strings.Contains(p.Spec.Description, "License: Apache-2.0") {
		t.Errorf("the description does not name the license (Apache-2.0, the LICENSE file)")
	}
	if n := len(p.Spec.ShortDescription); n == 0 || n > 50 {
		t.Errorf("shortDescription %q: want 1 to 50 characters", p.Spec.ShortDescription)
	}
	var platforms []string
	for _, pl := range p.Spec.Platforms {
		platform := pl.Selector.MatchLabels["os"] + "_" + pl.Selector.MatchLabels["arch"]
		platforms = append(platforms, platform)
		if pl.Sha256 != "@SHA256_"+platform+"@" || pl.Bin != "kubectl-drainscope" ||
			pl.URI != "@URL@/kubectl-drainscope_@VERSION@_"+platform+".tar.gz" {
			t.Errorf("%s: sha256 %q, uri %q, bin %q: want the release's fields", platform, pl.Sha256, pl.URI, pl.Bin)
		}
	}
	slices.Sort(platforms)
	if want := []string{"darwin_amd64", "darwin_arm64", "linux_amd64", "linux_arm64"}; !slices.Equal(platforms, want) {
		t.Errorf("platforms %v, want %v", platforms, want)
	}
}

// The release step fills the manifest from the archives it builds: the
// platform's sha256 is its archive's, the archive holds the binary the
// manifest names, and that binary is the plugin. (This machine's platform
// only: the four take minutes to build.)
func TestKrewRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin")
	}
	out := t.TempDir()
	const version = "v0.0.1-test"
	platform := runtime.GOOS + "_" + runtime.GOARCH
	cmd := exec.Command("../scripts/krew-release.sh", version, out, "https://example.invalid/dl")
	cmd.Env = append(os.Environ(), "PLATFORMS="+runtime.GOOS+"/"+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("krew-release.sh: %v\n%s", err, b)
	}
	raw, err := os.ReadFile(filepath.Join(out, "plugin.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if f := templateField.FindString(string(raw)); f != "" {
		t.Errorf("the manifest keeps the template field %s:\n%s", f, raw)
	}
	p := readKrew(t, filepath.Join(out, "plugin.yaml"))
	if p.Spec.Version != version || len(p.Spec.Platforms) != 1 {
		t.Fatalf("version %q, %d platforms; want %s and this machine's only", p.Spec.Version, len(p.Spec.Platforms), version)
	}
	pl := p.Spec.Platforms[0]
	archive := "kubectl-drainscope_" + version + "_" + platform + ".tar.gz"
	if got := pl.Selector.MatchLabels["os"] + "_" + pl.Selector.MatchLabels["arch"]; got != platform || pl.URI != "https://example.invalid/dl/"+archive {
		t.Errorf("platform %s, uri %q; want %s and its archive", got, pl.URI, platform)
	}
	data, err := os.ReadFile(filepath.Join(out, archive))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(data); pl.Sha256 != hex.EncodeToString(sum[:]) {
		t.Errorf("sha256 %s in the manifest, %x the archive's", pl.Sha256, sum)
	}
	path := filepath.Join(t.TempDir(), pl.Bin)
	if err := os.WriteFile(path, untar(t, data, pl.Bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if lic := untar(t, data, "LICENSE"); !bytes.Contains(lic, []byte("Apache License")) || !bytes.Contains(lic, []byte("Version 2.0")) {
		t.Errorf("the archive's LICENSE is not the Apache License 2.0 (%d bytes)", len(lic))
	}
	if b, _ := exec.Command(path, "-h").CombinedOutput(); !strings.Contains(string(b), "usage: kubectl drainscope report") {
		t.Errorf("the archive's binary is not the plugin:\n%s", b)
	}
	bad := exec.Command("../scripts/krew-release.sh", "0.1", out)
	if b, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(b), `e.g. v0.1.0 (got "0.1")`) {
		t.Errorf("a version without v: %v\n%s", err, b)
	}
}

// untar returns the file named name in a .tar.gz archive.
func untar(t *testing.T, data []byte, name string) []byte {
	t.Helper()
	zr, err := gzip.NewReader(strings.NewReader(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("the archive has no %s", name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == name {
			if name != "LICENSE" && h.Mode&0o111 == 0 {
				t.Errorf("%s is not executable in the archive (mode %o)", name, h.Mode)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}
