// Package load is the lab's traffic, from keep-alive HTTP/1.1 clients. Each
// keeps one connection alive and reuses it, as connection pools and load
// balancers do, and records every failure with its time, its class and, for
// the lab's own table, the backend pod when known (never stored: see
// Failure.Event).
//
// It deliberately does not use net/http's Transport: the Transport retries
// a request that failed on a reused idle connection and hides exactly the
// keep-alive races the lab exists to show. Each client here writes its
// request on the connection it has and reports whatever happens.
package load

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/lab/sampleapp"
)

// Config sets the load up.
type Config struct {
	Target   netip.AddrPort // where to connect: the Service's ClusterIP and port
	Host     string         // Host header; Target when empty
	Path     string         // request path; "/" when empty
	Clients  int            // concurrent clients, one connection each
	Interval time.Duration  // each client's pause after a request
	Timeout  time.Duration  // per request, connecting included
	// Source binds every connection to this local address (the lab's
	// bridge address), so a failure names the client's address and port
	// even when the connection never got established.
	Source netip.Addr
	// Backend finds which pod a connection was sent to when no response
	// named it (a refused or reset first request). Optional.
	Backend func(local, remote netip.AddrPort) (netip.AddrPort, bool)
	// OnFailure is called for each failure as it happens. Optional.
	OnFailure func(Failure)
}

// Failure is one request that did not get a good response.
type Failure struct {
	Time     time.Time // when the failure was seen
	Start    time.Time // when the request started
	Client   int
	Class    string // one of event.FailEOF, FailRefused, FailReset, FailTimeout, FailStatus, FailOther
	Status   int    // HTTP status for FailStatus
	Err      string
	Local    netip.AddrPort // the client's side of the connection
	Remote   netip.AddrPort // what it dialled
	Backend  netip.AddrPort // the pod that served the connection, when known
	Pod      string         // the pod's name, when a response on the connection said it
	Reused   bool           // the connection had answered before
	Duration time.Duration
}

// Result counts what happened.
type Result struct {
	Requests int
	OK       int
	Failed   map[string]int // by class
	Failures []Failure
	Conns    int // connections opened
	Elapsed  time.Duration
}

// FailedTotal is the number of failed requests.
func (r Result) FailedTotal() int { return r.Requests - r.OK }

// Classes lists the failure classes in a fixed order for tables.
var Classes = []string{event.FailEOF, event.FailReset, event.FailRefused, event.FailTimeout, event.FailStatus, event.FailOther}

// Run sends requests until ctx ends and returns the counts.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if !cfg.Target.IsValid() {
		return Result{}, errors.New("load: no target")
	}
	if cfg.Clients <= 0 {
		cfg.Clients = 20
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Path == "" {
		cfg.Path = "/"
	}
	if cfg.Host == "" {
		cfg.Host = cfg.Target.String()
	}
	req := []byte("GET " + cfg.Path + " HTTP/1.1\r\nHost: " + cfg.Host + "\r\nUser-Agent: drainscope-lab\r\n\r\n")
	start := time.Now()
	var (
		mu  sync.Mutex
		res = Result{Failed: map[string]int{}}
		wg  sync.WaitGroup
	)
	for i := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &client{id: i, cfg: &cfg, req: req}
			defer c.close()
			// Spread the clients over one interval so they do not move in step.
			if !sleep(ctx, cfg.Interval*time.Duration(i)/time.Duration(cfg.Clients)) {
				return
			}
			for ctx.Err() == nil {
				f := c.do(ctx)
				if f != nil && ctx.Err() != nil && f.Class == event.FailOther {
					break // cancelled mid-request: not a failure of the service
				}
				mu.Lock()
				res.Requests++
				if f == nil {
					res.OK++
				} else {
					res.Failed[f.Class]++
					res.Failures = append(res.Failures, *f)
				}
				mu.Unlock()
				if f != nil && cfg.OnFailure != nil {
					cfg.OnFailure(*f)
				}
				if !sleep(ctx, cfg.Interval) {
					break
				}
			}
			mu.Lock()
			res.Conns += c.conns
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	sort.Slice(res.Failures, func(i, j int) bool { return res.Failures[i].Time.Before(res.Failures[j].Time) })
	return res, nil
}

type client struct {
	id      int
	cfg     *Config
	req     []byte
	conn    net.Conn
	br      *bufio.Reader
	local   netip.AddrPort
	backend netip.AddrPort
	pod     string
	answers int // responses on this connection
	conns   int
}

func (c *client) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// do sends one request and returns its failure, or nil.
func (c *client) do(ctx context.Context) *Failure {
	start := time.Now()
	deadline := start.Add(c.cfg.Timeout)
	fresh := c.conn == nil
	if fresh {
		conn, local, err := dial(ctx, c.cfg.Source, c.cfg.Target, deadline)
		c.local, c.backend, c.pod, c.answers = local, netip.AddrPort{}, "", 0
		if err != nil {
			return c.fail(start, err, 0, false)
		}
		c.conns++
		c.conn, c.br = conn, bufio.NewReader(conn)
	}
	reused := c.answers > 0
	_ = c.conn.SetDeadline(deadline)
	if _, err := c.conn.Write(c.req); err != nil {
		return c.fail(start, err, 0, reused)
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return c.fail(start, err, 0, reused)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return c.fail(start, err, 0, reused)
	}
	c.answers++
	if b, err := netip.ParseAddrPort(resp.Header.Get(sampleapp.HeaderBackend)); err == nil {
		c.backend = b
	}
	if p := resp.Header.Get(sampleapp.HeaderPod); p != "" {
		c.pod = p
	}
	if resp.Close {
		// The server asked us to leave: a complete response, then a new
		// connection for the next request.
		c.close()
	}
	if resp.StatusCode >= 400 {
		// An error answer is a complete response: the connection stays.
		return c.fail(start, fmt.Errorf("HTTP %s", resp.Status), resp.StatusCode, reused)
	}
	return nil
}

// fail records a failed request. Unless it is an HTTP status, the
// connection is unusable and is closed.
func (c *client) fail(start time.Time, err error, status int, reused bool) *Failure {
	now := time.Now()
	f := &Failure{
		Time: now, Start: start, Client: c.id, Status: status, Err: err.Error(),
		Local: c.local, Remote: c.cfg.Target, Backend: c.backend, Pod: c.pod,
		Reused: reused, Duration: now.Sub(start),
	}
	f.Class = event.FailStatus
	if status == 0 {
		f.Class = Classify(err)
	}
	if !f.Backend.IsValid() && c.cfg.Backend != nil && c.local.IsValid() {
		if b, ok := c.cfg.Backend(c.local, c.cfg.Target); ok {
			f.Backend = b
		}
	}
	if status == 0 {
		c.close()
	}
	return f
}

// Classify names the class of a request error, in the terms of the field
// reports: a connection closed before any response (Python's
// RemoteDisconnected) is eof, refused and reset are the errnos, a deadline
// is timeout.
func Classify(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return ""
	case errors.Is(err, syscall.ECONNREFUSED):
		return event.FailRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return event.FailReset
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return event.FailEOF
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, syscall.ETIMEDOUT), errors.As(err, &ne) && ne.Timeout():
		return event.FailTimeout
	case errors.Is(err, syscall.EHOSTUNREACH):
		// Nobody answered: a SYN to a pod address whose network is gone
		// (the proxy still sent it there) ends this way once ARP gives up,
		// or as a timeout when the client gives up first. Same thing.
		return event.FailTimeout
	case strings.HasPrefix(err.Error(), "HTTP "):
		return event.FailStatus
	}
	return event.FailOther
}

// dial connects to target from source. It binds the socket before
// connecting so the local port is known even when the connection fails.
func dial(ctx context.Context, source netip.Addr, target netip.AddrPort, deadline time.Time) (net.Conn, netip.AddrPort, error) {
	var local netip.AddrPort
	var bindErr error
	d := net.Dialer{
		Deadline: deadline,
		Control: func(_, _ string, rc syscall.RawConn) error {
			err := rc.Control(func(fd uintptr) {
				var sa unix.SockaddrInet4
				if source.Is4() {
					sa.Addr = source.As4()
				}
				if bindErr = unix.Bind(int(fd), &sa); bindErr != nil {
					return
				}
				got, err := unix.Getsockname(int(fd))
				if err != nil {
					bindErr = err
					return
				}
				if in, ok := got.(*unix.SockaddrInet4); ok {
					local = netip.AddrPortFrom(netip.AddrFrom4(in.Addr), uint16(in.Port))
				}
			})
			if err != nil {
				return err
			}
			if bindErr != nil {
				return fmt.Errorf("binding the client socket: %w", bindErr)
			}
			return nil
		},
	}
	conn, err := d.DialContext(ctx, "tcp4", target.String())
	if err != nil {
		return nil, local, err
	}
	if a, ok := conn.LocalAddr().(*net.TCPAddr); ok {
		local = a.AddrPort()
	}
	return conn, local, nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Event turns a failure into the client_failure event the store keeps. It
// carries only what a real client knows: the URL it asked for (target),
// the Service address it dialled (Remote), its own local address, the
// request's end and duration, and what went wrong. The backend and pod a
// response named (Backend, Pod) stay the lab's own truth and are not
// stored: drainscope must find the pod as it would for any client, through
// the Service and the kernel's record of the client's connection.
func (f Failure) Event(node, target string) event.Event {
	e := event.Event{
		Time:     f.Time.UnixNano(),
		Kind:     event.ClientFailure,
		Node:     node,
		Source:   event.SourceLab,
		Local:    f.Local,
		Remote:   f.Remote,
		Code:     int32(f.Status),
		Duration: int64(f.Duration),
		Reason:   f.Class,
		Attrs:    map[string]string{"error": f.Err, "client": fmt.Sprint(f.Client)},
	}
	if target != "" {
		e.Attrs[event.AttrTarget] = target
	}
	if f.Reused {
		e.Attrs["conn"] = "reused"
	} else {
		e.Attrs["conn"] = "new"
	}
	e.Seal()
	return e
}
