package scenario

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/lab/cgroup"
	"github.com/drainscope/drainscope/lab/lock"
	"github.com/drainscope/drainscope/lab/netns"
)

// TestCleanupRemovesLeftovers fakes what a lab killed outright leaves
// behind (a bridge, a pod namespace with a process in its cgroup, a
// kube-proxy table), and checks that Cleanup removes all of it, but not a
// kube-proxy table the lab did not create.
func TestCleanupRemovesLeftovers(t *testing.T) {
	testenv.RequireRoot(t)
	if err := netns.Available(); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	if _, err := exec.LookPath("nft"); err != nil {
		testenv.Unavailable(t, "nft (Debian package nftables) is not installed")
	}
	tree, err := cgroup.Detect()
	if err != nil {
		testenv.Unavailable(t, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute) // mostly waiting for the lab lock
	defer cancel()
	l, err := lock.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if left, err := FindLeftovers(); err != nil || !left.Empty() {
		testenv.Unavailable(t, fmt.Sprintf("the host is not clean before the test (%v, %v); not touching it", left, err))
	}
	t.Cleanup(func() {
		_ = nft(context.Background(), "delete", "table", "ip", "kube-proxy")
		_, _ = Cleanup(context.Background(), true)
	})

	n := netns.Default
	if err := n.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := n.AddPod(ctx, "leftover-pod", netip.MustParseAddr("10.244.0.250")); err != nil {
		t.Fatal(err)
	}
	g, err := cgroup.Create(tree.PodDir("11111111-2222-3333-4444-555555555555", cgroup.Burstable) + "/" + strings.Repeat("c", 64))
	if err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sleep", "60")
	sleeper.SysProcAttr = &syscall.SysProcAttr{}
	g.Place(sleeper.SysProcAttr)
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	g.Close()
	sleeperDone := make(chan struct{})
	go func() { _ = sleeper.Wait(); close(sleeperDone) }()
	if err := os.MkdirAll(podLogDir, 0o755); err != nil {
		t.Fatal(err)
	}

	// A kube-proxy table nobody recorded: not the lab's to delete.
	if err := nft(ctx, "add", "table", "ip", "kube-proxy"); err != nil {
		t.Fatal(err)
	}
	left, err := FindLeftovers()
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Namespaces) != 1 || len(left.Links) != 2 || !left.Cgroups || len(left.Pids) != 1 || len(left.Foreign) != 1 || len(left.Dirs) != 1 {
		t.Errorf("leftovers found: %s", left)
	}
	_, err = Cleanup(ctx, true)
	if err == nil || !strings.Contains(err.Error(), "did not create") || !strings.Contains(err.Error(), "nft delete table") {
		t.Errorf("Cleanup over a foreign kube-proxy table: %v; want an error saying what to do", err)
	}
	after, _ := FindLeftovers()
	if len(after.Foreign) != 1 {
		t.Errorf("the foreign table was touched: %s", after)
	}
	after.Foreign = nil
	if !after.Empty() {
		t.Errorf("left after Cleanup: %s", after)
	}
	select {
	case <-sleeperDone:
	case <-time.After(5 * time.Second):
		t.Error("the process in the lab's cgroup survived Cleanup")
	}

	// Once the lab has claimed the table (it does before starting
	// kube-proxy), cleanup deletes it.
	if err := claimTables(ProxyNFTables); err != nil {
		t.Fatal(err)
	}
	if _, err := Cleanup(ctx, true); err != nil {
		t.Errorf("Cleanup of a claimed table: %v", err)
	}
	if after, _ := FindLeftovers(); !after.Empty() {
		t.Errorf("left after the second Cleanup: %s", after)
	}
}
