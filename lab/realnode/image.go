package realnode

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one file of an image.
type File struct {
	Path string // in the image, absolute
	From string // on this host
	Data []byte // the file's content when From is empty (a configuration the lab writes)
	Mode int64
}

// Image is an image built from files on this host, without a registry or a
// container builder.
type Image struct {
	Ref        string // e.g. drainscope.dev/sampleapp:lab
	Files      []File
	Entrypoint []string
	Cmd        []string
	User       string // uid:gid; "" for root
	// StopSignal is the signal the runtime stops the container with
	// (the image's STOPSIGNAL); "" for SIGTERM.
	StopSignal string
}

// Write builds img and writes it as an image archive (the layout `docker
// save` writes, which `ctr images import` reads) to path.
func (img Image) Write(path string) error {
	ref, err := name.NewTag(img.Ref)
	if err != nil {
		return fmt.Errorf("image %q: %w", img.Ref, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	files := slices.Clone(img.Files)
	slices.SortFunc(files, func(a, b File) int { return compare(a.Path, b.Path) })
	for _, f := range files {
		b := f.Data
		if f.From != "" {
			var err error
			if b, err = os.ReadFile(f.From); err != nil {
				return fmt.Errorf("image %s: %w", img.Ref, err)
			}
		}
		// Parent directories first, as a tar from a real file system has.
		for _, d := range parents(f.Path) {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: 0o755}); err != nil {
				return err
			}
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.Path[1:], Mode: mode, Size: int64(len(b))}); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	})
	if err != nil {
		return fmt.Errorf("image %s: layer: %w", img.Ref, err)
	}
	im, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Ref, err)
	}
	cf, err := im.ConfigFile()
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Ref, err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{Entrypoint: img.Entrypoint, Cmd: img.Cmd, User: img.User, StopSignal: img.StopSignal}
	if im, err = mutate.ConfigFile(im, cf); err != nil {
		return fmt.Errorf("image %s: %w", img.Ref, err)
	}
	if err := tarball.WriteToFile(path, ref, im); err != nil {
		return fmt.Errorf("writing image %s to %s: %w", img.Ref, path, err)
	}
	return nil
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// parents lists "/a", "/a/b" for "/a/b/c".
func parents(p string) []string {
	var out []string
	for i := 1; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return out
}

// CheckStatic fails unless the program at path is a statically linked ELF
// file: an image without a C library cannot run anything else.
func CheckStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; the images hold no C library (build it with CGO_ENABLED=0)", path)
		}
	}
	return nil
}

// LinkedFiles are the files a dynamically linked program needs in an image
// without a C library: the program, at its path on this host, and the
// shared objects and the dynamic loader ldd names for it, each at the path
// ldd resolved it to (their links followed), where the loader's default
// search finds them. A statically linked program is returned alone.
func LinkedFiles(program string) ([]File, error) {
	out, err := exec.Command("ldd", program).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "not a dynamic executable") {
		return nil, fmt.Errorf("ldd %s: %w: %s", program, err, strings.TrimSpace(string(out)))
	}
	libs, missing := lddPaths(string(out))
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s needs %s, which ldd does not find", program, strings.Join(missing, ", "))
	}
	files := []File{{Path: program, From: program, Mode: 0o755}}
	for _, lib := range libs {
		files = append(files, File{Path: lib, From: lib, Mode: 0o755})
	}
	return files, nil
}

// lddPaths reads ldd's output: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6
// (0x…)" and "/lib64/ld-linux-x86-64.so.2 (0x…)" give their paths; the
// vDSO ("linux-vdso.so.1 (0x…)") has none and is the kernel's; "libx.so.1
// => not found" is missing.
func lddPaths(out string) (paths, missing []string) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		var p string
		switch {
		case len(f) >= 4 && f[1] == "=>" && f[2] == "not" && f[3] == "found":
			missing = append(missing, f[0])
			continue
		case len(f) >= 3 && f[1] == "=>":
			p = f[2]
		case len(f) >= 1:
			p = f[0]
		}
		if strings.HasPrefix(p, "/") && !slices.Contains(paths, p) {
			paths = append(paths, p)
		}
	}
	return paths, missing
}
