package cgroup

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drainscope/drainscope/ebpf"
	"github.com/drainscope/drainscope/internal/testenv"
)

func TestPodDirLayout(t *testing.T) {
	tr := Tree{Mount: "/sys/fs/cgroup/unified", Base: Base}
	uid := "0b7c6c2e-4a1e-4f0c-9d6e-8f1e2d3c4b5a"
	cases := map[string]string{
		Burstable:  "/sys/fs/cgroup/unified/drainscope-lab/kubepods/burstable/pod" + uid,
		BestEffort: "/sys/fs/cgroup/unified/drainscope-lab/kubepods/besteffort/pod" + uid,
		Guaranteed: "/sys/fs/cgroup/unified/drainscope-lab/kubepods/pod" + uid,
	}
	for qos, want := range cases {
		if got := tr.PodDir(uid, qos); got != want {
			t.Errorf("%s: %s, want %s", qos, got, want)
		}
	}
}

// TestPlaceKillRemove starts a real process inside a container cgroup,
// checks the kernel's view of its cgroup, then removes the tree with the
// process still in it.
func TestPlaceKillRemove(t *testing.T) {
	testenv.RequireRoot(t)
	tr, err := Detect()
	if err != nil {
		testenv.Unavailable(t, err.Error())
	}
	tr.Base = "drainscope-lab-test"
	t.Cleanup(func() { _ = tr.Cleanup(5 * time.Second) })
	uid := "11111111-2222-3333-4444-555555555555"
	cid := strings.Repeat("ab", 32)
	g, err := Create(tr.PodDir(uid, Burstable) + "/" + cid)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	g.Place(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	want := "/drainscope-lab-test/kubepods/burstable/pod" + uid + "/" + cid
	if !strings.Contains(string(b), "0::"+want+"\n") {
		t.Errorf("/proc/pid/cgroup:\n%s\nwant the v2 line 0::%s", b, want)
	}
	id, err := ebpf.CgroupID(g.Path)
	if err != nil || id == 0 {
		t.Errorf("cgroup id %d: %v", id, err)
	}
	exists, pids, err := tr.Leftovers()
	if err != nil || !exists || len(pids) != 1 || pids[0] != cmd.Process.Pid {
		t.Errorf("leftovers: %v %v %v, want the sleep's pid %d", exists, pids, err, cmd.Process.Pid)
	}
	if err := tr.Cleanup(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("sleep ended with %v, want SIGKILL", err)
	}
	if exists, _, _ := tr.Leftovers(); exists {
		t.Error("the lab cgroup still exists after Cleanup")
	}
}
