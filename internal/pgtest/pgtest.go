// Package pgtest gives tests a private corner of the throwaway Postgres. That
// Postgres is the one scripts/test.sh starts (DRAINSCOPE_TEST_POSTGRES); the
// package also gives a loopback proxy that can make the database go away and
// come back, as a real outage does.
package pgtest

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drainscope/drainscope/internal/testenv"
)

// Schema creates a schema of its own for t in the test database and returns
// a DSN whose search_path points there; the schema is dropped afterwards.
// Without DRAINSCOPE_TEST_POSTGRES the test is skipped (failed in CI).
func Schema(t testing.TB) string {
	t.Helper()
	base := testenv.Env(t, "DRAINSCOPE_TEST_POSTGRES", "DSN of a throwaway Postgres database")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connecting to the test Postgres: %v", err)
	}
	defer conn.Close(ctx)
	schema := fmt.Sprintf("t_%d_%d", time.Now().UnixNano(), rand.IntN(1<<30))
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c, err := pgx.Connect(ctx, base); err == nil {
			c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
			c.Close(ctx)
		}
	})
	return WithParam(t, base, "search_path", schema)
}

// WithParam returns dsn with the query parameter k set to v.
func WithParam(t testing.TB, dsn, k, v string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}

// Proxy forwards a loopback port to the database a DSN names. Stop makes
// the database unreachable (listener and every connection closed, as when
// the server goes away); Start brings it back on the same port.
type Proxy struct {
	t      testing.TB
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns []net.Conn
}

// NewProxy starts a proxy to the database dsn names; it stops with the test.
func NewProxy(t testing.TB, dsn string) *Proxy {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{t: t, target: u.Host}
	p.listen("127.0.0.1:0")
	t.Cleanup(p.Stop)
	return p
}

// DSN returns dsn rewritten to reach the database through the proxy.
func (p *Proxy) DSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		p.t.Fatal(err)
	}
	u.Host = p.addr
	return u.String()
}

func (p *Proxy) listen(addr string) {
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the port may linger a moment after Stop
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
}

// Stop closes the listener and every proxied connection.
func (p *Proxy) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Start listens again on the port it had.
func (p *Proxy) Start() { p.listen(p.addr) }
