package scenario

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/lab/cgroup"
	"github.com/drainscope/drainscope/lab/lock"
	"github.com/drainscope/drainscope/lab/netns"
	"github.com/drainscope/drainscope/lab/realnode"
)

// Files and directories of a running lab, under lock.Dir.
var (
	tablesFile = filepath.Join(lock.Dir, "nftables") // the nftables tables the lab's kube-proxy owns
	k8sDir     = filepath.Join(lock.Dir, "k8s")      // control-plane certificates, etcd data, logs
	podLogDir  = filepath.Join(lock.Dir, "pods")     // container logs
)

// kubeProxyTables are the tables kube-proxy's nftables mode creates.
var kubeProxyTables = []string{"ip kube-proxy", "ip6 kube-proxy"}

// ErrNotRoot is returned by Preflight without root.
var ErrNotRoot = errors.New("the lab needs root: it creates a bridge, network namespaces, cgroups and nftables rules (run it with sudo)")

// Preflight reports what this host lacks for the lab, or nil.
func Preflight(binDir string) error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	var missing []string
	if err := netns.Available(); err != nil {
		missing = append(missing, err.Error())
	}
	if _, err := exec.LookPath("nft"); err != nil {
		missing = append(missing, "the nft command (Debian package nftables), which kube-proxy's nftables mode runs")
	}
	if _, err := cgroup.Detect(); err != nil {
		missing = append(missing, err.Error())
	}
	if _, err := controlplane.CheckBinaries(binDir, "etcd", "kube-apiserver", "kube-controller-manager", "kube-proxy"); err != nil {
		missing = append(missing, err.Error())
	}
	if len(missing) > 0 {
		return fmt.Errorf("this host lacks what the lab needs:\n  - %s", strings.Join(missing, "\n  - "))
	}
	return nil
}

// Leftovers is what an earlier lab left behind.
type Leftovers struct {
	Namespaces []string // network namespaces
	Links      []string // bridge and veths
	Cgroups    bool     // the lab's cgroup tree exists
	Pids       []int    // processes in it, or running from the lab's directory
	OurTables  []string // nftables tables the lab's kube-proxy made
	Foreign    []string // kube-proxy tables the lab did not make
	Dirs       []string // working directories
	Real       []string // what a real node left (processes, mounts, cgroups, files)
}

// Empty reports whether nothing is left.
func (l Leftovers) Empty() bool {
	return len(l.Namespaces)+len(l.Links)+len(l.Pids)+len(l.OurTables)+len(l.Foreign)+len(l.Dirs)+len(l.Real) == 0 && !l.Cgroups
}

func (l Leftovers) String() string {
	var parts []string
	add := func(what string, items []string) {
		if len(items) > 0 {
			parts = append(parts, what+" "+strings.Join(items, ", "))
		}
	}
	add("network namespaces", l.Namespaces)
	add("links", l.Links)
	if l.Cgroups {
		parts = append(parts, "the cgroup tree "+cgroup.Base)
	}
	var pids []string
	for _, p := range l.Pids {
		pids = append(pids, strconv.Itoa(p))
	}
	add("processes", pids)
	add("nftables tables", l.OurTables)
	add("nftables tables not made by the lab", l.Foreign)
	add("directories", l.Dirs)
	add("real node:", l.Real)
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, "; ")
}

// FindLeftovers looks for everything a lab creates. Call it holding the
// lab lock: a running lab's resources look the same.
func FindLeftovers() (Leftovers, error) {
	var l Leftovers
	var err error
	if l.Namespaces, l.Links, err = netns.Leftovers(); err != nil {
		return l, err
	}
	if tree, err := cgroup.Detect(); err == nil {
		var pids []int
		l.Cgroups, pids, _ = tree.Leftovers()
		l.Pids = append(l.Pids, pids...)
	}
	l.Pids = append(l.Pids, processesUsing(k8sDir)...)
	l.Real = realnode.Leftovers(realDir, realCgroupRoot)
	existing, err := nftTables()
	if err != nil {
		return l, err
	}
	ours := readTablesFile()
	for _, t := range existing {
		if !isKubeProxyTable(t) {
			continue
		}
		if ours[t] {
			l.OurTables = append(l.OurTables, t)
		} else {
			l.Foreign = append(l.Foreign, t)
		}
	}
	for _, d := range []string{k8sDir, podLogDir} {
		if _, err := os.Stat(d); err == nil {
			l.Dirs = append(l.Dirs, d)
		}
	}
	return l, nil
}

// Cleanup removes whatever an earlier lab left: processes first (they keep
// namespaces alive), then cgroups, nftables tables, links, namespaces and
// working directories. It takes the lab lock itself unless held is true,
// and fails rather than touch a running lab. Foreign kube-proxy tables are
// never touched; the error says what to do about them.
func Cleanup(ctx context.Context, held bool) (Leftovers, error) {
	if !held {
		l, err := lock.TryAcquire()
		if err != nil {
			return Leftovers{}, err
		}
		defer l.Release()
	}
	before, err := FindLeftovers()
	if err != nil {
		return before, err
	}
	var errs []error
	for _, pid := range processesUsing(k8sDir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// A real node's containers, shims and mounts go first: its cgroups
	// are inside the lab's tree and its network namespaces hold veths on
	// the lab's bridge.
	if err := realnode.Cleanup(realDir, realCgroupRoot); err != nil {
		errs = append(errs, err)
	}
	if tree, err := cgroup.Detect(); err == nil {
		if err := tree.Cleanup(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if err := cleanupIPTables(readTablesFile()); err != nil {
		errs = append(errs, err)
	}
	for _, t := range before.OurTables {
		if err := nft(ctx, "delete", "table", t); err != nil {
			errs = append(errs, err)
		}
	}
	if len(before.OurTables) > 0 || len(before.Foreign) == 0 {
		_ = os.Remove(tablesFile)
	}
	if err := netns.Cleanup(ctx); err != nil {
		errs = append(errs, err)
	}
	for _, d := range []string{k8sDir, podLogDir} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	after, ferr := FindLeftovers()
	if ferr != nil {
		errs = append(errs, ferr)
	}
	if len(after.Foreign) > 0 {
		errs = append(errs, fmt.Errorf("nftables tables %s exist and this lab did not create them: "+
			"if this machine runs a real kube-proxy, run the lab elsewhere; if they are left from an earlier lab, remove them with 'nft delete table <family> kube-proxy'",
			strings.Join(after.Foreign, ", ")))
		after.Foreign = nil
	}
	if !after.Empty() {
		errs = append(errs, fmt.Errorf("could not remove: %s", after))
	}
	return before, errors.Join(errs...)
}

func isKubeProxyTable(t string) bool {
	for _, k := range kubeProxyTables {
		if t == k {
			return true
		}
	}
	return false
}

// nftTables lists "family name" of every nftables table.
func nftTables() ([]string, error) {
	if _, err := exec.LookPath("nft"); err != nil {
		return nil, nil
	}
	out, err := exec.Command("nft", "list", "tables").Output()
	if err != nil {
		return nil, fmt.Errorf("listing nftables tables: %w", err)
	}
	var ts []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == "table" {
			ts = append(ts, f[1]+" "+f[2])
		}
	}
	return ts, nil
}

func nft(ctx context.Context, args ...string) error {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "nft", args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

func readTablesFile() map[string]bool {
	b, err := os.ReadFile(tablesFile)
	out := map[string]bool{}
	if err != nil {
		return out
	}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out[l] = true
		}
	}
	return out
}

// claimTables records that the kube-proxy about to start owns its tables,
// so a later cleanup may delete them.
//
// In iptables mode it also records the backend ("iptables nft" or
// "iptables legacy"), whose KUBE- chains a cleanup then removes with
// kube-proxy --cleanup.
func claimTables(mode string) error {
	lines := slices.Clone(kubeProxyTables)
	if _, backend, _ := proxyFlags(mode); backend != "" {
		lines = append(lines, "iptables "+backend)
	}
	return os.WriteFile(tablesFile, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// cleanupIPTables removes the KUBE- chains a lab's kube-proxy left in
// iptables mode, with each backend tablesFile names.
func cleanupIPTables(claimed map[string]bool) error {
	var errs []error
	for _, backend := range []string{"nft", "legacy"} {
		if claimed["iptables "+backend] {
			errs = append(errs, controlplane.CleanupKubeProxy("", "iptables", backend))
		}
	}
	return errors.Join(errs...)
}

// processesUsing finds processes whose command line names a path under dir
// (the control plane started from the lab's directory), other than this
// one.
func processesUsing(dir string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte(dir+"/")) {
			out = append(out, pid)
		}
	}
	return out
}
