package dataplane

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
)

// syncBuf is a log sink the watcher writes from its own goroutine.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// In a network namespace of its own, with no kube-proxy table, the watcher
// says so once and keeps following; when a table of kube-proxy's shape
// appears it reports the endpoint its service chain sends to, and when the
// table goes, the endpoint's removal. Needs root (a new network namespace).
func TestWatcherWaitsForTheTable(t *testing.T) {
	testenv.RequireRoot(t)
	var logs syncBuf
	evs := newSink()
	w, err := New(Options{Node: "n1", Emit: evs.add, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan *nftables.Conn, 1)
	done := make(chan error, 1)
	go func() {
		// This goroutine's thread moves to a new network namespace: the
		// watcher's sockets, and the Conn handed back, are made in it.
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- err
			close(ready)
			return
		}
		fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- err
			close(ready)
			return
		}
		c, err := nftables.New(nftables.WithNetNSFd(fd))
		if err != nil {
			done <- err
			close(ready)
			return
		}
		ready <- c
		done <- w.Run(ctx)
	}()
	c := <-ready
	if c == nil {
		t.Fatal(<-done)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "table not found") {
		if time.Now().After(deadline) {
			t.Fatalf("no word of the missing table; log:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}

	tbl := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: Table})
	ch := c.AddChain(&nftables.Chain{Table: tbl, Name: "service-ABCDEFGH-dp/web/tcp/http"})
	c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: []expr.Any{
		&expr.Immediate{Register: unix.NFT_REG_1, Data: []byte{10, 244, 0, 7}},
		&expr.Immediate{Register: unix.NFT_REG_2, Data: []byte{0x1f, 0x90}},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: unix.NFT_REG_1, RegProtoMin: unix.NFT_REG_2, Specified: true},
	}})
	if err := c.Flush(); err != nil {
		t.Fatalf("adding the table: %v", err)
	}
	want := netip.MustParseAddrPort("10.244.0.7:8080")
	has := func(k event.Kind) func([]event.Event) bool {
		return func(es []event.Event) bool {
			for _, e := range es {
				if e.Kind == k && e.Local == want && e.Service == "web" && e.Pod.Namespace == "dp" {
					return true
				}
			}
			return false
		}
	}
	waitSink(t, evs, "the endpoint added", has(event.DataplaneEndpointAdded))
	c.DelTable(tbl)
	if err := c.Flush(); err != nil {
		t.Fatalf("deleting the table: %v", err)
	}
	waitSink(t, evs, "the endpoint removed", has(event.DataplaneEndpointRemoved))
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 0 {
		t.Errorf("%d warnings:\n%s", n, logs.String())
	}
}

func waitSink(t *testing.T, s *sink, what string, ok func([]event.Event) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok(s.all()) {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s; got %+v", what, s.all())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
