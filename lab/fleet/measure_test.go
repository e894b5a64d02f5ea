package fleet

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// A process's reaped children count with reaped, and only then: a
// Postgres backend that exits with a report's connection is the
// postmaster's reaped child.
func TestStatCPUReaped(t *testing.T) {
	self := []int{os.Getpid()}
	with0, without0 := statCPU(self, true), statCPU(self, false)
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	child := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if child < 50*time.Millisecond {
		t.Fatalf("the child used %v of CPU, too little to tell", child)
	}
	reaped := (statCPU(self, true) - with0) - (statCPU(self, false) - without0)
	if tick := time.Second / clockTicks; reaped < child-2*tick || reaped > child+2*tick {
		t.Errorf("reaped children's CPU %v, want the child's %v", reaped, child)
	}
}

// The machine's idle time is read, never falls, and grows by no more
// than its CPUs' wall time.
func TestMachineIdle(t *testing.T) {
	a, cpus := machineIdle()
	if a <= 0 || cpus < 1 {
		t.Fatalf("machineIdle() = %v, %d CPUs: /proc/stat unread", a, cpus)
	}
	start := time.Now()
	time.Sleep(300 * time.Millisecond)
	b, _ := machineIdle()
	if limit := time.Duration(cpus) * time.Since(start); b < a || b-a > limit+20*time.Millisecond {
		t.Fatalf("idle went from %v to %v over %v on %d CPUs", a, b, time.Since(start), cpus)
	}
}
