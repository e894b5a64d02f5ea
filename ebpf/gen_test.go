package ebpf

import (
	"os/exec"
	"testing"

	"github.com/drainscope/drainscope/internal/testenv"
)

// TestGeneratedUpToDate runs check-generated.sh: the committed bpf2go
// outputs must be what the C source compiles to.
func TestGeneratedUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the BPF programs")
	}
	testenv.RequireBinary(t, "clang")
	testenv.RequireBinary(t, "llvm-strip")
	out, err := exec.Command("./check-generated.sh").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}
