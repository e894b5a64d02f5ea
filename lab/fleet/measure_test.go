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
