package realnode

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImageWrite reads an image archive back with the library's reader, as
// containerd's import would: the tag, the config (entrypoint, user) and
// the files with their modes and parent directories.
func TestImageWrite(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog")
	if err := os.WriteFile(prog, []byte("#!program"), 0o700); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca")
	if err := os.WriteFile(ca, []byte("certs"), 0o600); err != nil {
		t.Fatal(err)
	}
	img := Image{
		Ref:        "drainscope.dev/test:lab",
		Files:      []File{{Path: "/etc/ssl/certs/ca.crt", From: ca}, {Path: "/drainscope", From: prog, Mode: 0o755}},
		Entrypoint: []string{"/drainscope", "lab", "pause"},
		User:       "65535:65535",
	}
	out := filepath.Join(dir, "img.tar")
	if err := img.Write(out); err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag(img.Ref)
	got, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := got.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, img.Entrypoint) || cf.Config.User != img.User || cf.OS != "linux" {
		t.Errorf("config: entrypoint %v user %q os %q", cf.Config.Entrypoint, cf.Config.User, cf.OS)
	}
	layers, err := got.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	seen := map[string]int64{}
	var order []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seen[h.Name] = h.Mode
		order = append(order, h.Name)
	}
	want := map[string]int64{"drainscope": 0o755, "etc/": 0o755, "etc/ssl/": 0o755, "etc/ssl/certs/": 0o755, "etc/ssl/certs/ca.crt": 0o644}
	for n, m := range want {
		if seen[n] != m {
			t.Errorf("%s: mode %o, want %o (entries %s)", n, seen[n], m, strings.Join(order, " "))
		}
	}
	if len(seen) != len(want) {
		t.Errorf("entries %v, want %v", order, want)
	}
}

func TestCheckStatic(t *testing.T) {
	if err := CheckStatic("/bin/sh"); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("a dynamically linked shell: %v", err)
	}
	if err := CheckStatic(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("a missing file passed")
	}
}

func TestUnescape(t *testing.T) {
	if got := unescape(`/run/a\040b/c`); got != "/run/a b/c" {
		t.Errorf("%q", got)
	}
}
