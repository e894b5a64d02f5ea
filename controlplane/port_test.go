package controlplane

import (
	"net"
	"net/netip"
	"strconv"
	"testing"
)

// The API server's port for a relay on another address is free on both,
// and below the ephemeral range, where no outgoing connection or port-0
// listener can take it meanwhile.
func TestPortFreeOn(t *testing.T) {
	also := netip.MustParseAddr("127.0.0.2")
	low := ephemeralStart()
	for range 20 {
		p, err := portFreeOn([]netip.Addr{also})
		if err != nil {
			t.Fatal(err)
		}
		if p < 10000 || p >= low {
			t.Fatalf("port %d, outside 10000-%d", p, low-1)
		}
		for _, a := range []string{"127.0.0.1", also.String()} {
			l, err := net.Listen("tcp", net.JoinHostPort(a, strconv.Itoa(p)))
			if err != nil {
				t.Fatalf("port %d chosen, but not free on %s: %v", p, a, err)
			}
			l.Close()
		}
	}
}
