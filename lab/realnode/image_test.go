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
		Ref: "drainscope.dev/test:lab",
		Files: []File{{Path: "/etc/ssl/certs/ca.crt", From: ca}, {Path: "/drainscope", From: prog, Mode: 0o755},
			{Path: "/etc/app.cfg", Data: []byte("written by the lab")}},
		Entrypoint: []string{"/drainscope", "lab", "pause"},
		User:       "65535:65535",
		StopSignal: "SIGUSR1",
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
	if !slices.Equal(cf.Config.Entrypoint, img.Entrypoint) || cf.Config.User != img.User || cf.OS != "linux" || cf.Config.StopSignal != "SIGUSR1" {
		t.Errorf("config: entrypoint %v user %q os %q stop signal %q", cf.Config.Entrypoint, cf.Config.User, cf.OS, cf.Config.StopSignal)
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
	contents := map[string]string{}
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
		b, _ := io.ReadAll(tr)
		contents[h.Name] = string(b)
	}
	want := map[string]int64{"drainscope": 0o755, "etc/": 0o755, "etc/app.cfg": 0o644, "etc/ssl/": 0o755, "etc/ssl/certs/": 0o755, "etc/ssl/certs/ca.crt": 0o644}
	if contents["etc/app.cfg"] != "written by the lab" || contents["etc/ssl/certs/ca.crt"] != "certs" {
		t.Errorf("contents %q", contents)
	}
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

// TestLddPaths reads ldd's three kinds of line: a library resolved to a
// path, the loader by its path alone, the vDSO with none; and a library
// it did not find.
func TestLddPaths(t *testing.T) {
	out := "\tlinux-vdso.so.1 (0x00007ff7743a8000)\n" +
		"\tlibcrypt.so.1 => /lib/x86_64-linux-gnu/libcrypt.so.1 (0x00007ff77435b000)\n" +
		"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007ff77361e000)\n" +
		"\t/lib64/ld-linux-x86-64.so.2 (0x00007ff7743aa000)\n" +
		"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007ff77361e000)\n"
	paths, missing := lddPaths(out)
	want := []string{"/lib/x86_64-linux-gnu/libcrypt.so.1", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if !slices.Equal(paths, want) || len(missing) != 0 {
		t.Errorf("paths %q missing %q, want %q and none", paths, missing, want)
	}
	if _, missing := lddPaths("\tlibgone.so.3 => not found\n"); !slices.Equal(missing, []string{"libgone.so.3"}) {
		t.Errorf("missing %q, want libgone.so.3", missing)
	}
}

// TestLinkedFiles lists a dynamically linked program of this host with its
// libraries and loader, and a static one alone.
func TestLinkedFiles(t *testing.T) {
	files, err := LinkedFiles("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, f.Path)
	}
	if len(files) < 3 || paths[0] != "/bin/sh" || !slices.ContainsFunc(paths, func(p string) bool { return strings.Contains(p, "/libc.so") }) ||
		!slices.ContainsFunc(paths, func(p string) bool { return strings.Contains(p, "ld-linux") }) {
		t.Errorf("/bin/sh: %q, want the shell, libc and the loader", paths)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if CheckStatic(exe) == nil {
		if files, err := LinkedFiles(exe); err != nil || len(files) != 1 {
			t.Errorf("a static program: %v, %v; want it alone", files, err)
		}
	}
}
