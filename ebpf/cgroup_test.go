package ebpf

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"
	"time"
)

const (
	uid  = "7c9a1b2e-3f4d-4e5f-8a6b-1c2d3e4f5a6b"
	uidU = "7c9a1b2e_3f4d_4e5f_8a6b_1c2d3e4f5a6b"
	cid  = "4f1e8d2c9b3a7e6f5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e"
)

func TestParseCgroupPath(t *testing.T) {
	tests := []struct {
		name string
		path string
		want CgroupPod
		ok   bool
	}{
		{"cgroupfs v2 burstable", "/kubepods/burstable/pod" + uid + "/" + cid, CgroupPod{uid, cid}, true},
		{"cgroupfs v2 besteffort", "/kubepods/besteffort/pod" + uid + "/" + cid, CgroupPod{uid, cid}, true},
		{"cgroupfs guaranteed", "/kubepods/pod" + uid + "/" + cid, CgroupPod{uid, cid}, true},
		{"cgroupfs v1 with mount point", "/sys/fs/cgroup/memory/kubepods/burstable/pod" + uid + "/" + cid, CgroupPod{uid, cid}, true},
		{"cgroupfs crio", "/kubepods/burstable/pod" + uid + "/crio-" + cid, CgroupPod{uid, cid}, true},
		{"pod level", "/kubepods/burstable/pod" + uid, CgroupPod{uid, ""}, true},
		{"systemd containerd", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope", CgroupPod{uid, cid}, true},
		{"systemd guaranteed crio", "/kubepods.slice/kubepods-pod" + uidU + ".slice/crio-" + cid + ".scope", CgroupPod{uid, cid}, true},
		{"systemd docker", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/docker-" + cid + ".scope", CgroupPod{uid, cid}, true},
		{"systemd crio conmon", "/kubepods.slice/kubepods-pod" + uidU + ".slice/crio-conmon-" + cid + ".scope", CgroupPod{uid, ""}, true},
		{"kind kubelet.slice", "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope", CgroupPod{uid, cid}, true},
		{"test prefix", "/drainscope-test/kubepods/pod" + uid + "/" + cid, CgroupPod{uid, cid}, true},
		{"static pod hash", "/kubepods/burstable/pod0123456789abcdef0123456789abcdef/" + cid, CgroupPod{"0123456789abcdef0123456789abcdef", cid}, true},
		{"containerd sandbox nested deeper", "/kubepods/burstable/pod" + uid + "/" + cid + "/child", CgroupPod{uid, cid}, true},
		{"system service", "/system.slice/containerd.service", CgroupPod{}, false},
		{"root", "/", CgroupPod{}, false},
		{"not a uid", "/kubepods/burstable/podcast/" + cid, CgroupPod{}, false},
		{"slice outside kubepods", "/user.slice/user-pod" + uidU + ".slice", CgroupPod{}, false},
		{"short container id", "/kubepods/pod" + uid + "/abc", CgroupPod{uid, ""}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseCgroupPath(tt.path)
			if got != tt.want || ok != tt.ok {
				t.Errorf("ParseCgroupPath(%q) = %+v, %v; want %+v, %v", tt.path, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestCgroupHierarchyPath resolves ids of real cgroups, through file handles
// and through the walking fallback.
func TestCgroupHierarchyPath(t *testing.T) {
	requireKernel(t)
	p := newTestPod(t, false)
	h, err := openCgroupHierarchy(cgroupRoot)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	rel, _ := filepath.Rel(cgroupRoot, p.Cgroup)
	want := "/" + rel
	if h.mountFD < 0 {
		t.Error("file handles unavailable on cgroup2; resolution will walk the tree")
	}
	if got, err := h.Path(p.CgroupID); err != nil || got != want {
		t.Errorf("Path by handle = %q, %v; want %q", got, err, want)
	}
	// Without file handles (no CAP_DAC_READ_SEARCH): the index of the
	// tracked subtree, rebuilt at most once per reindexInterval, and never
	// a walk of the whole hierarchy once something is tracked by path.
	walk := &cgroupHierarchy{root: cgroupRoot, mountFD: -1}
	walk.addScope(filepath.Dir(p.PodCgroup))
	start := time.Now()
	if got, err := walk.Path(p.CgroupID); err != nil || got != want {
		t.Errorf("Path by walking = %q, %v; want %q", got, err, want)
	}
	for i := 0; i < 100; i++ {
		if _, err := walk.Path(1<<60 + uint64(i)); !errors.Is(err, errNotIndexed) {
			t.Fatalf("Path of an unknown id: %v, want not indexed", err)
		}
	}
	if got, err := walk.Path(p.CgroupID); err != nil || got != want {
		t.Errorf("Path from the index = %q, %v; want %q", got, err, want)
	}
	// One walk, plus one per interval that a loaded machine took.
	bound := 1 + uint64(time.Since(start)/reindexInterval)
	if w, f := walk.walks.Load(), walk.fullWalks.Load(); w > bound || w == 0 || f != 0 {
		t.Errorf("%d walks (%d of the whole hierarchy) for 102 lookups, want 1 to %d, of the tracked subtree", w, f, bound)
	}
	if _, err := h.Path(1 << 60); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Path of a missing cgroup: %v, want not-exist", err)
	}
	if got, _ := ParseCgroupPath(want); got.PodUID != p.UID || got.ContainerID != p.ContainerID {
		t.Errorf("parsed %+v", got)
	}
}
