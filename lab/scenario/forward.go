package scenario

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
)

// Forward relays TCP connections to listen (an address of the pod network's
// bridge, which pods reach) to target (a loopback address of this host),
// until ctx ends: how pods on the real node reach the API server, which
// listens on loopback only, through the kubernetes Service, and how a test
// lets them reach a database on loopback.
func Forward(ctx context.Context, listen, target netip.AddrPort) (stop func(), err error) {
	if !target.Addr().IsLoopback() {
		return nil, errors.New("scenario: forward only to loopback")
	}
	ln, err := net.Listen("tcp", listen.String())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	track := func(c net.Conn, on bool) {
		mu.Lock()
		defer mu.Unlock()
		if on {
			conns[c] = true
		} else {
			delete(conns, c)
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				var d net.Dialer
				u, err := d.DialContext(ctx, "tcp", target.String())
				if err != nil {
					return
				}
				defer u.Close()
				track(c, true)
				track(u, true)
				defer track(c, false)
				defer track(u, false)
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	go func() {
		<-ctx.Done()
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	return func() {
		cancel()
		wg.Wait()
	}, nil
}
