package ingress

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/ingest"
	"github.com/drainscope/drainscope/internal/testenv"
)

func backend(t *testing.T) (*http.Server, netip.AddrPort) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return srv, netip.MustParseAddrPort(ln.Addr().String())
}

// Debian's HAProxy 2.6, driven through its runtime API as an ingress
// controller drives it: its slots follow SetEndpoints without a reload,
// its own view (show servers state) becomes dataplane events, and a request
// it sends to a backend that stopped listening is logged SC-- and read by
// the haproxy format as refused, on that backend.
func TestHAProxyRuntimeAPI(t *testing.T) {
	if _, err := Binary(); err != nil {
		testenv.Unavailable(t, err.Error())
	}
	_, a := backend(t)
	srvB, b := backend(t)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	listen := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h, err := StartHAProxy(ctx, t.TempDir(), listen, "default_web_80", 4)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var mu sync.Mutex
	var evs []event.Event
	done := make(chan struct{})
	go func() {
		h.Watch(ctx, 20*time.Millisecond, "haproxy", "default", "web", func(e event.Event) { mu.Lock(); evs = append(evs, e); mu.Unlock() })
		close(done)
	}()
	// seen waits until the watch has recorded n events of kind k.
	seen := func(k event.Kind, n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			c := 0
			for _, e := range evs {
				if e.Kind == k {
					c++
				}
			}
			mu.Unlock()
			if c >= n {
				return
			}
		}
		t.Fatalf("haproxy's view never showed %d %s", n, k)
	}
	if err := h.SetEndpoints([]netip.AddrPort{a, b}); err != nil {
		t.Fatal(err)
	}
	seen(event.DataplaneEndpointAdded, 2)
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func() int {
		resp, err := hc.Get("http://" + listen.String() + "/")
		if err != nil {
			t.Fatalf("through haproxy: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 4 {
		if c := get(); c != 200 {
			t.Fatalf("request %d: %d with both backends listening", i, c)
		}
	}
	srvB.Close() // b stops listening; haproxy still lists it
	failed := 0
	for range 6 {
		if get() != 200 {
			failed++
		}
	}
	removedAt := time.Now()
	if err := h.SetEndpoints([]netip.AddrPort{a}); err != nil {
		t.Fatal(err)
	}
	seen(event.DataplaneEndpointRemoved, 1)
	for range 4 {
		if c := get(); c != 200 {
			t.Fatalf("%d after b left haproxy's list", c)
		}
	}
	cancel()
	<-done
	h.Close()

	if failed == 0 {
		t.Fatal("no request failed while haproxy still sent to the closed backend")
	}
	data, err := os.ReadFile(h.AccessLog)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	err = ingest.ParseHAProxy(strings.NewReader(string(data)), ingest.Options{}, func(r *ingest.Record) error {
		if r.Err != nil {
			t.Errorf("haproxy's own line rejected: %v", r.Err)
			return nil
		}
		if r.Failed {
			got = append(got, fmt.Sprintf("%s %s %s %s %s", r.Reason, r.Backend, r.Attrs[ingest.AttrTermination], r.Service, r.Attrs[event.AttrVia]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != failed {
		t.Fatalf("log has %d failures, the client saw %d:\n%s\n%s", len(got), failed, strings.Join(got, "\n"), data)
	}
	for _, g := range got {
		if want := fmt.Sprintf("refused %s SC-- default/web haproxy", b); g != want {
			t.Errorf("failure %q, want %q", g, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var added, removed int
	for _, e := range evs {
		if e.Attrs[event.AttrProxy] != event.ProxyHAProxy || e.Service != "web" || e.Pod.Namespace != "default" {
			t.Errorf("event %+v", e)
		}
		switch {
		case e.Kind == event.DataplaneEndpointAdded:
			added++
		case e.Kind == event.DataplaneEndpointRemoved && e.Local == b:
			removed++
			if lag := time.Duration(e.Time - removedAt.UnixNano()); lag < 0 || lag > time.Second {
				t.Errorf("removal seen %v after SetEndpoints", lag)
			}
		}
	}
	if added != 2 || removed != 1 {
		t.Errorf("events %+v: want both added, b removed once", evs)
	}
}

func TestParseServersState(t *testing.T) {
	out := `1
# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port
3 default_web_80 1 srv1 10.244.0.11 2 0 1 1 12 1 0 0 0 0 0 0 - 8080 - 0 0 - - 0
3 default_web_80 2 srv2 10.244.0.12 0 1 1 1 3 1 0 0 0 0 0 0 - 8080 - 0 0 - - 0
3 default_web_80 3 srv3 10.244.0.13 2 8 1 1 3 1 0 0 0 0 0 0 - 8080 - 0 0 - - 0
`
	in, err := parseServersState(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(in) != 1 || !in[netip.MustParseAddrPort("10.244.0.11:8080")] {
		t.Fatalf("%v: want only srv1 (running, no maintenance or drain)", in)
	}
	if _, err := parseServersState("Unknown command\n"); err == nil {
		t.Fatal("no error for an answer that is no state")
	}
}
