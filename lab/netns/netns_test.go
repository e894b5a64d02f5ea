package netns

import (
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/lab/lock"
)

func TestNames(t *testing.T) {
	ns, veth := Names("0b7c6c2e-4a1e-4f0c-9d6e-8f1e2d3c4b5a")
	if len(veth) > 15 || veth[:len(Prefix)] != Prefix {
		t.Errorf("host veth %q: want at most 15 characters starting with %q", veth, Prefix)
	}
	if ns[:len(Prefix)+1] != Prefix+"-" {
		t.Errorf("namespace %q: want prefix %q", ns, Prefix+"-")
	}
	ns2, veth2 := Names("another-uid")
	if ns == ns2 || veth == veth2 {
		t.Errorf("different ids got the same names: %s %s", ns, veth)
	}
}

func TestValidate(t *testing.T) {
	bad := []Network{
		{Bridge: "br0", Gateway: Default.Gateway, ServiceCIDR: Default.ServiceCIDR},
		{Bridge: "dslab0", Gateway: netip.MustParsePrefix("10.244.0.0/24"), ServiceCIDR: Default.ServiceCIDR},
		{Bridge: "dslab0", Gateway: Default.Gateway, ServiceCIDR: netip.MustParsePrefix("10.244.0.0/16")},
		{Bridge: "dslab0", Gateway: Default.Gateway, ServiceCIDR: netip.MustParsePrefix("10.96.0.1/24")},
	}
	for _, n := range bad {
		if n.Validate() == nil {
			t.Errorf("%+v: want an error", n)
		}
	}
	if err := Default.Validate(); err != nil {
		t.Errorf("default network: %v", err)
	}
}

func TestPoolRoundRobin(t *testing.T) {
	n := Network{Bridge: "dslab0", Gateway: netip.MustParsePrefix("10.244.0.1/29"), ServiceCIDR: Default.ServiceCIDR}
	p := NewPool(n)
	var got []string
	for i := range 5 {
		a, err := p.Get(string(rune('a' + i)))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, a.String())
	}
	// .0 network, .1 gateway, .7 broadcast: five host addresses remain.
	want := []string{"10.244.0.2", "10.244.0.3", "10.244.0.4", "10.244.0.5", "10.244.0.6"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if _, err := p.Get("f"); err == nil {
		t.Fatal("want exhaustion")
	}
	p.Put(netip.MustParseAddr("10.244.0.4"))
	p.Put(netip.MustParseAddr("10.244.0.2"))
	// Round-robin: the scan goes on from where it stopped, so .2 comes back first.
	if a, _ := p.Get("g"); a.String() != "10.244.0.2" {
		t.Errorf("after wrap got %s, want 10.244.0.2", a)
	}
	if a, _ := p.Get("h"); a.String() != "10.244.0.4" {
		t.Errorf("got %s, want 10.244.0.4", a)
	}
}

// TestPodNetwork builds a real bridge and two pod namespaces, serves TCP in
// one pod, reaches it from the host and from the other pod, then removes
// everything and checks that nothing is left.
func TestPodNetwork(t *testing.T) {
	testenv.RequireRoot(t)
	if err := Available(); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute) // mostly waiting for the lab lock
	defer cancel()
	l, err := lock.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()

	n := Network{Bridge: Prefix + "t0", Gateway: Default.Gateway, ServiceCIDR: Default.ServiceCIDR}
	if err := n.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Teardown(context.Background()) })
	if err := n.Setup(ctx); err == nil {
		t.Error("second Setup over an existing bridge: want an error")
	}

	a, err := n.AddPod(ctx, "pod-a", netip.MustParseAddr("10.244.0.201"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.AddPod(ctx, "pod-b", netip.MustParseAddr("10.244.0.202"))
	if err != nil {
		t.Fatal(err)
	}

	var ln net.Listener
	if err := a.Do(func() (err error) { ln, err = net.Listen("tcp4", "10.244.0.201:7000"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(c.RemoteAddr().String()))
			c.Close()
		}
	}()
	read := func(c net.Conn, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		s, err := io.ReadAll(c)
		if err != nil {
			t.Fatal(err)
		}
		return string(s)
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	fromHost := read(d.Dial("tcp4", "10.244.0.201:7000"))
	if h, _, _ := net.SplitHostPort(fromHost); h != "10.244.0.1" {
		t.Errorf("host connection arrived from %s, want the bridge address 10.244.0.1", fromHost)
	}
	var fromB string
	if err := b.Do(func() error { fromB = read(d.Dial("tcp4", "10.244.0.201:7000")); return nil }); err != nil {
		t.Fatal(err)
	}
	if h, _, _ := net.SplitHostPort(fromB); h != "10.244.0.202" {
		t.Errorf("pod connection arrived from %s, want 10.244.0.202", fromB)
	}
	// The host's own namespace is untouched by Do.
	if err := a.Do(func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Listen("tcp4", "10.244.0.201:7001"); err == nil {
		t.Error("listening on a pod address from the host succeeded: Do leaked its namespace")
	}

	if err := RemovePod(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := RemovePod(ctx, a); err != nil {
		t.Errorf("second RemovePod: %v", err)
	}
	if _, err := os.Stat(a.Path()); err == nil {
		t.Errorf("%s still exists", a.Path())
	}
	if linkExists(a.HostVeth) {
		t.Errorf("link %s still exists", a.HostVeth)
	}

	// Cleanup finds what is left (pod b and the bridge) by prefix.
	if err := Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	namespaces, links, err := Leftovers()
	if err != nil {
		t.Fatal(err)
	}
	if len(namespaces)+len(links) > 0 {
		t.Errorf("left over after Cleanup: namespaces %v, links %v", namespaces, links)
	}
	if linkExists(b.HostVeth) || linkExists(n.Bridge) {
		t.Error("Cleanup left links")
	}
}
