package load

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
)

// server answers on loopback with handle for each request read.
func server(t *testing.T, handle func(c *net.TCPConn, n int) bool) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for n := 0; ; n++ {
					// Read one request head.
					for {
						line, err := br.ReadString('\n')
						if err != nil {
							return
						}
						if line == "\r\n" {
							break
						}
					}
					if !handle(c.(*net.TCPConn), n) {
						return
					}
				}
			}()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String())
}

func ok(c *net.TCPConn, headers string) {
	body := "ok\n"
	fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Backend: 10.244.0.9:8080\r\nX-Pod: p9\r\n%s\r\n%s", len(body), headers, body)
}

// one runs a single client for a few requests and returns the result.
func one(t *testing.T, target netip.AddrPort, requests int, cfg Config) Result {
	t.Helper()
	cfg.Target, cfg.Clients, cfg.Source = target, 1, netip.MustParseAddr("127.0.0.1")
	if cfg.Interval == 0 {
		cfg.Interval = 10 * time.Millisecond
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	res := make(chan Result, 1)
	go func() {
		r, err := Run(ctx, cfg)
		if err != nil {
			t.Error(err)
		}
		res <- r
	}()
	deadline := time.After(10 * time.Second)
	for n < requests {
		select {
		case <-deadline:
			t.Fatal("load did not make progress")
		case <-time.After(cfg.Interval):
			n++
		}
	}
	cancel()
	return <-res
}

func TestKeepAliveReusesOneConnection(t *testing.T) {
	target := server(t, func(c *net.TCPConn, n int) bool { ok(c, ""); return true })
	r := one(t, target, 10, Config{})
	if r.FailedTotal() != 0 || r.OK < 5 {
		t.Fatalf("%+v", r)
	}
	if r.Conns != 1 {
		t.Errorf("%d connections for %d requests: want one kept alive", r.Conns, r.Requests)
	}
}

func TestConnectionCloseReconnectsWithoutFailure(t *testing.T) {
	target := server(t, func(c *net.TCPConn, n int) bool { ok(c, "Connection: close\r\n"); return false })
	r := one(t, target, 10, Config{})
	if r.FailedTotal() != 0 {
		t.Fatalf("failures: %+v", r.Failures)
	}
	if r.Conns != r.Requests {
		t.Errorf("%d connections for %d requests: want one each", r.Conns, r.Requests)
	}
}

// Each failure mode, produced by a real socket on loopback.
func TestClassifiesRealFailures(t *testing.T) {
	// closed is a loopback port that refuses connections: bound, so that
	// no other listener (another case's server, another test's) can take
	// it as a listener closed at once could be, but never listening.
	closed := func() netip.AddrPort {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Close(fd) })
		lo := [4]byte{127, 0, 0, 1}
		if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: lo}); err != nil {
			t.Fatal(err)
		}
		sa, err := syscall.Getsockname(fd)
		if err != nil {
			t.Fatal(err)
		}
		return netip.AddrPortFrom(netip.AddrFrom4(lo), uint16(sa.(*syscall.SockaddrInet4).Port))
	}
	cases := []struct {
		name   string
		target netip.AddrPort
		class  string
		reused bool
	}{
		{"refused", closed(), event.FailRefused, false},
		{"closed before any response", server(t, func(c *net.TCPConn, n int) bool { return false }), event.FailEOF, false},
		{"reset", server(t, func(c *net.TCPConn, n int) bool { _ = c.SetLinger(0); return false }), event.FailReset, false},
		{"no answer", server(t, func(c *net.TCPConn, n int) bool { time.Sleep(time.Second); return false }), event.FailTimeout, false},
		{"status", server(t, func(c *net.TCPConn, n int) bool {
			fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
			return true
		}), event.FailStatus, false},
		// The keep-alive race: one answer, then the server closes the idle
		// connection; the next request goes out on it and fails.
		{"keep-alive cut", server(t, func(c *net.TCPConn, n int) bool { ok(c, ""); return false }), "eof|reset", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Timeout: 200 * time.Millisecond, Interval: 30 * time.Millisecond}
			var lookups int
			cfg.Backend = func(local, remote netip.AddrPort) (netip.AddrPort, bool) {
				lookups++
				if !local.IsValid() || local.Port() == 0 || remote != tc.target {
					t.Errorf("backend lookup for %v → %v", local, remote)
				}
				return netip.MustParseAddrPort("10.244.0.99:8080"), true
			}
			r := one(t, tc.target, 4, cfg)
			if len(r.Failures) == 0 {
				t.Fatalf("no failure: %+v", r)
			}
			var f *Failure
			for i := range r.Failures {
				if r.Failures[i].Reused == tc.reused {
					f = &r.Failures[i]
					break
				}
			}
			if f == nil {
				t.Fatalf("no failure with reused=%v: %+v", tc.reused, r.Failures)
			}
			if !strings.Contains("|"+tc.class+"|", "|"+f.Class+"|") {
				t.Errorf("class %s (%s), want %s", f.Class, f.Err, tc.class)
			}
			if f.Local.Port() == 0 || f.Local.Addr() != netip.MustParseAddr("127.0.0.1") {
				t.Errorf("local %v: want the bound client address", f.Local)
			}
			if tc.reused {
				// The backend comes from the earlier response on the connection.
				if f.Backend.String() != "10.244.0.9:8080" || f.Pod != "p9" {
					t.Errorf("backend %v pod %q: want the one that answered before", f.Backend, f.Pod)
				}
			} else if f.Backend.String() != "10.244.0.99:8080" {
				t.Errorf("backend %v: want the lookup's", f.Backend)
			}
			if f.Class == event.FailStatus && f.Status != 503 {
				t.Errorf("status %d", f.Status)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	cases := map[error]string{
		nil:                                     "",
		syscall.ECONNREFUSED:                    event.FailRefused,
		&net.OpError{Err: syscall.ECONNRESET}:   event.FailReset,
		fmt.Errorf("write: %w", syscall.EPIPE):  event.FailReset,
		io.EOF:                                  event.FailEOF,
		io.ErrUnexpectedEOF:                     event.FailEOF,
		context.DeadlineExceeded:                event.FailTimeout,
		&net.OpError{Err: syscall.ETIMEDOUT}:    event.FailTimeout,
		&net.OpError{Err: syscall.EHOSTUNREACH}: event.FailTimeout,
		errors.New("HTTP 500 Internal"):         event.FailStatus,
		errors.New("something else went wrong"): event.FailOther,
	}
	for err, want := range cases {
		if got := Classify(err); got != want {
			t.Errorf("Classify(%v) = %q, want %q", err, got, want)
		}
	}
}

func TestFindReplySource(t *testing.T) {
	table := `ipv4     2 tcp      6 117 TIME_WAIT src=10.244.0.1 dst=10.96.0.10 sport=40001 dport=80 src=10.244.0.8 dst=10.244.0.1 sport=8080 dport=40001 [ASSURED] mark=0 zone=0 use=2
ipv4     2 udp      17 20 src=10.0.0.1 dst=10.0.0.2 sport=53 dport=53 src=10.0.0.2 dst=10.0.0.1 sport=53 dport=53 mark=0 zone=0 use=2
ipv4     2 tcp      6 9 CLOSE src=10.244.0.1 dst=10.96.0.10 sport=40000 dport=80 src=10.244.0.7 dst=10.244.0.1 sport=8080 dport=40000 mark=0 zone=0 use=2
`
	local := netip.MustParseAddrPort("10.244.0.1:40000")
	svc := netip.MustParseAddrPort("10.96.0.10:80")
	got, ok := findReplySource(strings.NewReader(table), local, svc)
	if !ok || got.String() != "10.244.0.7:8080" {
		t.Errorf("got %v %v, want 10.244.0.7:8080", got, ok)
	}
	if _, ok := findReplySource(strings.NewReader(table), netip.MustParseAddrPort("10.244.0.1:40002"), svc); ok {
		t.Error("found an entry for an unknown port")
	}
}

func TestFailureEvent(t *testing.T) {
	f := Failure{
		Time: time.Unix(1700000000, 5), Class: event.FailEOF, Err: "EOF",
		Local: netip.MustParseAddrPort("10.244.0.1:40000"), Remote: netip.MustParseAddrPort("10.96.0.10:80"),
		Backend: netip.MustParseAddrPort("10.244.0.7:8080"), Pod: "sample-abc", Reused: true, Duration: time.Millisecond,
	}
	e := f.Event("lab-node", "http://sample.lab.svc/")
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
	if e.Kind != event.ClientFailure || e.Reason != event.FailEOF || e.Attrs[event.AttrTarget] != "http://sample.lab.svc/" ||
		e.Source != event.SourceLab || e.Time != f.Time.UnixNano() || e.Local != f.Local || e.Remote != f.Remote ||
		e.Duration != int64(time.Millisecond) {
		t.Errorf("%+v", e)
	}
	// A real client knows neither the pod nor its address: the event
	// must not carry what only the lab's headers and conntrack told it.
	if e.Service != "" || !e.Pod.IsZero() || e.Attrs[event.AttrBackend] != "" || e.Attrs["backend_pod"] != "" {
		t.Errorf("the stored failure carries what the client could not know: service %q pod %+v attrs %v", e.Service, e.Pod, e.Attrs)
	}
}
