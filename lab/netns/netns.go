// Package netns gives each lab pod a network of its own, as a CNI bridge
// plugin would. It makes a network namespace, a veth pair whose host end is
// enslaved to the lab bridge, an address from the pod CIDR and a default route
// through the bridge. It also routes the Service CIDR to the bridge, so
// traffic to a ClusterIP that kube-proxy did not translate stays on the lab's
// own links, and removes everything it made again.
//
// Every name it creates starts with Prefix, which is how Cleanup finds
// leftovers of a run that died.
package netns

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Prefix starts the name of every bridge, link and namespace the lab makes.
const Prefix = "dslab"

// RunDir is where iproute2 keeps named network namespaces.
const RunDir = "/run/netns"

// Network is the pod network on the host: a bridge holding the gateway
// address of the pod CIDR.
type Network struct {
	Bridge      string       // bridge name, e.g. dslab0
	Gateway     netip.Prefix // bridge address with the pod CIDR's length, e.g. 10.244.0.1/24
	ServiceCIDR netip.Prefix // routed to the bridge, e.g. 10.96.0.0/24
}

// Default is the network the lab uses unless told otherwise.
var Default = Network{
	Bridge:      Prefix + "0",
	Gateway:     netip.MustParsePrefix("10.244.0.1/24"),
	ServiceCIDR: netip.MustParsePrefix("10.96.0.0/24"),
}

// PodCIDR is the network the pods' addresses come from.
func (n Network) PodCIDR() netip.Prefix { return n.Gateway.Masked() }

// Validate checks that the network's names and ranges make sense together.
func (n Network) Validate() error {
	switch {
	case !strings.HasPrefix(n.Bridge, Prefix) || len(n.Bridge) > 15:
		return fmt.Errorf("bridge %q: the name must start with %q and have at most 15 characters", n.Bridge, Prefix)
	case !n.Gateway.Addr().Is4() || n.Gateway.Bits() < 8 || n.Gateway.Bits() > 30:
		return fmt.Errorf("gateway %s: want an IPv4 address with a prefix length from 8 to 30", n.Gateway)
	case n.Gateway.Addr() == n.Gateway.Masked().Addr():
		return fmt.Errorf("gateway %s: the network address cannot be the gateway", n.Gateway)
	case !n.ServiceCIDR.Addr().Is4() || n.ServiceCIDR != n.ServiceCIDR.Masked():
		return fmt.Errorf("service CIDR %s: want an IPv4 network", n.ServiceCIDR)
	case n.ServiceCIDR.Overlaps(n.PodCIDR()):
		return fmt.Errorf("service CIDR %s overlaps the pod CIDR %s", n.ServiceCIDR, n.PodCIDR())
	}
	return nil
}

// Setup creates the bridge, gives it the gateway address, brings it up and
// routes the Service CIDR to it. It fails if the bridge already exists:
// leftovers are for Cleanup, not for reuse.
func (n Network) Setup(ctx context.Context) error {
	if err := n.Validate(); err != nil {
		return err
	}
	if linkExists(n.Bridge) {
		return fmt.Errorf("bridge %s already exists (left over from an earlier lab?): run 'drainscope lab cleanup'", n.Bridge)
	}
	err := ipBatch(ctx, "", []string{
		"link add " + n.Bridge + " type bridge",
		"addr add " + n.Gateway.String() + " dev " + n.Bridge,
		"link set " + n.Bridge + " up",
		"route add " + n.ServiceCIDR.String() + " dev " + n.Bridge + " src " + n.Gateway.Addr().String(),
	})
	if err != nil {
		_ = n.Teardown(context.WithoutCancel(ctx))
		return fmt.Errorf("setting up bridge %s: %w", n.Bridge, err)
	}
	return nil
}

// Teardown deletes the bridge, and with it its address and routes.
func (n Network) Teardown(ctx context.Context) error {
	if !linkExists(n.Bridge) {
		return nil
	}
	if err := ip(ctx, "link", "del", n.Bridge); err != nil {
		return fmt.Errorf("deleting bridge %s: %w", n.Bridge, err)
	}
	return nil
}

// Pod is one pod's network: its namespace and the host end of its veth.
type Pod struct {
	NS       string     // namespace name under RunDir
	HostVeth string     // host end of the veth pair, a port of the bridge
	Addr     netip.Addr // the pod's IP
}

// Path is the namespace's file, for setns(2).
func (p *Pod) Path() string { return filepath.Join(RunDir, p.NS) }

// Names returns the namespace and host link names for a pod id (its UID).
// They are derived from a hash so they fit the 15-character link limit.
func Names(id string) (ns, hostVeth string) {
	sum := sha256.Sum256([]byte(id))
	h := hex.EncodeToString(sum[:4])
	return Prefix + "-" + h, Prefix + h
}

// AddPod creates the pod's namespace and veth, addresses the pod end (named
// eth0, as in every pod) with addr and routes through the bridge.
func (n Network) AddPod(ctx context.Context, id string, addr netip.Addr) (*Pod, error) {
	if !n.PodCIDR().Contains(addr) || addr == n.Gateway.Addr() {
		return nil, fmt.Errorf("pod address %s is not a host address of %s other than the gateway", addr, n.PodCIDR())
	}
	ns, veth := Names(id)
	p := &Pod{NS: ns, HostVeth: veth, Addr: addr}
	if _, err := os.Stat(p.Path()); err == nil {
		return nil, fmt.Errorf("network namespace %s already exists", ns)
	}
	if err := ip(ctx, "netns", "add", ns); err != nil {
		return nil, fmt.Errorf("creating network namespace %s: %w", ns, err)
	}
	bits := fmt.Sprint(n.Gateway.Bits())
	err := ipBatch(ctx, "", []string{
		"link add " + veth + " type veth peer name eth0 netns " + ns,
		"link set " + veth + " master " + n.Bridge + " up",
	})
	if err == nil {
		err = ipBatch(ctx, ns, []string{
			"link set lo up",
			"addr add " + addr.String() + "/" + bits + " dev eth0",
			"link set eth0 up",
			"route add default via " + n.Gateway.Addr().String() + " dev eth0",
		})
	}
	if err != nil {
		_ = RemovePod(context.WithoutCancel(ctx), p)
		return nil, fmt.Errorf("wiring pod %s (%s): %w", id, addr, err)
	}
	return p, nil
}

// RemovePod deletes the pod's veth and namespace. Missing pieces are not an
// error: removal is idempotent.
func RemovePod(ctx context.Context, p *Pod) error {
	var errs []error
	if linkExists(p.HostVeth) {
		if err := ip(ctx, "link", "del", p.HostVeth); err != nil && linkExists(p.HostVeth) {
			errs = append(errs, fmt.Errorf("deleting link %s: %w", p.HostVeth, err))
		}
	}
	if _, err := os.Stat(p.Path()); err == nil {
		if err := ip(ctx, "netns", "del", p.NS); err != nil {
			errs = append(errs, fmt.Errorf("deleting network namespace %s: %w", p.NS, err))
		}
	}
	return errors.Join(errs...)
}

// Leftovers lists the namespaces and links with the lab's prefix that exist
// now.
func Leftovers() (namespaces, links []string, err error) {
	ents, err := os.ReadDir(RunDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("listing %s: %w", RunDir, err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), Prefix+"-") {
			namespaces = append(namespaces, e.Name())
		}
	}
	ifs, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return nil, nil, fmt.Errorf("listing links: %w", err)
	}
	for _, e := range ifs {
		if strings.HasPrefix(e.Name(), Prefix) {
			links = append(links, e.Name())
		}
	}
	return namespaces, links, nil
}

// Cleanup deletes every namespace and link with the lab's prefix. Processes
// still inside a namespace keep it alive after its name is gone, so kill
// them first.
func Cleanup(ctx context.Context) error {
	namespaces, links, err := Leftovers()
	if err != nil {
		return err
	}
	var errs []error
	// Links first: deleting a host veth removes its peer, and the bridge
	// goes with its own deletion.
	for _, l := range links {
		if err := ip(ctx, "link", "del", l); err != nil && linkExists(l) {
			errs = append(errs, fmt.Errorf("deleting link %s: %w", l, err))
		}
	}
	for _, ns := range namespaces {
		if err := ip(ctx, "netns", "del", ns); err != nil {
			errs = append(errs, fmt.Errorf("deleting network namespace %s: %w", ns, err))
		}
	}
	return errors.Join(errs...)
}

// Do runs fn on an OS thread that has entered the pod's network namespace.
// A process started by fn (exec.Cmd.Start forks from the calling thread)
// lives in that namespace.
func (p *Pod) Do(fn func() error) error {
	target, err := os.Open(p.Path())
	if err != nil {
		return fmt.Errorf("opening network namespace: %w", err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("opening own network namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("entering network namespace %s: %w", p.NS, err)
			return
		}
		fnErr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread stays locked, so the runtime retires it with this
			// goroutine instead of reusing it in the wrong namespace.
			errc <- errors.Join(fnErr, fmt.Errorf("leaving network namespace %s: %w", p.NS, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- fnErr
	}()
	return <-errc
}

// Start starts cmd inside the pod's network namespace.
func (p *Pod) Start(cmd *exec.Cmd) error { return p.Do(cmd.Start) }

func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// ip runs one iproute2 command.
func ip(ctx context.Context, args ...string) error {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// ipBatch runs several iproute2 commands in one process, in the named
// network namespace or the host's when ns is empty, stopping at the first
// that fails.
func ipBatch(ctx context.Context, ns string, lines []string) error {
	var stderr bytes.Buffer
	args := []string{"-batch", "-"}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip -batch: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// Available reports what is missing for this package to work here, or nil.
func Available() error {
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("the ip command (Debian package iproute2) is not installed")
	}
	return nil
}
