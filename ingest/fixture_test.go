package ingest

import (
	"bytes"
	"context"
	"flag"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/drainscope/drainscope/event"
)

// -update rewrites the small samples in testdata/ (the fuzz tests' seeds)
// from the fixtures the real tools produce.
var update = flag.Bool("update", false, "rewrite testdata/ samples from the real tools' output")

// pod is a test HTTP server on its own loopback address, standing in for a
// pod: resolution goes by IP, so each pod needs its own.
type pod struct {
	ref  event.PodRef
	srv  *httptest.Server
	addr netip.AddrPort
}

// startPod serves h on ip (a 127.0.0.0/8 address) at a free port.
func startPod(t *testing.T, name, ip string, h http.Handler) *pod {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("listening on %s: %v", ip, err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return &pod{
		ref:  event.PodRef{Namespace: "shop", Name: name, UID: "uid-" + name},
		srv:  srv,
		addr: netip.MustParseAddrPort(ln.Addr().String()),
	}
}

// readyEvent says p held its address from t on, as the watcher records it.
func (p *pod) readyEvent(t int64) event.Event {
	return event.Event{
		Time: t, Kind: event.PodReady, Node: "node-1", Source: event.SourceWatcher,
		Pod: p.ref, Workload: event.Workload{Kind: "Deployment", Name: "web"},
		Local: netip.AddrPortFrom(p.addr.Addr(), 0),
	}
}

// hangUp answers nothing: it closes the connection once the request is
// read (the client sees EOF), or with reset, aborts it (RST).
func hangUp(reset bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		if tc, ok := conn.(*net.TCPConn); ok && reset {
			tc.SetLinger(0)
		}
		conn.Close()
	})
}

// writeSample keeps the first and last lines of a real tool's output in
// testdata/, so a sample shows the run's start and its end.
func writeSample(t *testing.T, name string, data []byte, maxLines int) {
	t.Helper()
	if !*update {
		return
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	if len(lines) > maxLines {
		lines = append(lines[:maxLines/2:maxLines/2], lines[len(lines)-maxLines/2:]...)
	}
	if err := os.WriteFile(filepath.Join("testdata", name), bytes.Join(lines, nil), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readSample(f interface{ Add(...any) }, name string) {
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		return
	}
	f.Add(data)
}

// storeWithPods returns a store that knows each pod's address.
func storeWithPods(t0 int64, pods ...*pod) *memStore {
	var evs []event.Event
	for _, p := range pods {
		evs = append(evs, p.readyEvent(t0))
	}
	return newMemStore(evs...)
}

func importBytes(t *testing.T, st *memStore, format, name string, data []byte) *Summary {
	t.Helper()
	im := &Importer{Store: st, Parser: parserFor(t, format, Options{})}
	sum, err := im.Import(context.Background(), name, bytesReader(data))
	if err != nil {
		t.Fatalf("importing %s: %v", name, err)
	}
	return sum
}
