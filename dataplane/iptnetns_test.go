package dataplane

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
)

// kube-proxy's iptables-mode nat rules for one Service port of two
// endpoints (as its iptables-restore input writes them, trimmed), and the
// sync that drops the first endpoint from the Service chain.
const (
	restoreTwo = `*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-AAAAAAAAAAAAAAAA - [0:0]
:KUBE-SEP-AAAAAAAAAAAAAAA1 - [0:0]
:KUBE-SEP-AAAAAAAAAAAAAAA2 - [0:0]
:KUBE-MARK-MASQ - [0:0]
-A KUBE-SERVICES -m comment --comment "dp/web:http cluster IP" -m tcp -p tcp -d 10.96.0.10/32 --dport 80 -j KUBE-SVC-AAAAAAAAAAAAAAAA
-A KUBE-SVC-AAAAAAAAAAAAAAAA -m comment --comment "dp/web:http -> 10.244.0.11:8080" -m recent --name KUBE-SEP-AAAAAAAAAAAAAAA1 --rcheck --seconds 10800 --reap -j KUBE-SEP-AAAAAAAAAAAAAAA1
-A KUBE-SVC-AAAAAAAAAAAAAAAA -m comment --comment "dp/web:http -> 10.244.0.11:8080" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-AAAAAAAAAAAAAAA1
-A KUBE-SVC-AAAAAAAAAAAAAAAA -m comment --comment "dp/web:http -> 10.244.0.12:8080" -j KUBE-SEP-AAAAAAAAAAAAAAA2
-A KUBE-SEP-AAAAAAAAAAAAAAA1 -m comment --comment dp/web:http -s 10.244.0.11 -j KUBE-MARK-MASQ
-A KUBE-SEP-AAAAAAAAAAAAAAA1 -m comment --comment dp/web:http -m recent --name KUBE-SEP-AAAAAAAAAAAAAAA1 --set -m tcp -p tcp -j DNAT --to-destination 10.244.0.11:8080
-A KUBE-SEP-AAAAAAAAAAAAAAA2 -m comment --comment dp/web:http -m tcp -p tcp -j DNAT --to-destination 10.244.0.12:8080
COMMIT
`
	restoreOne = `*nat
:KUBE-SVC-AAAAAAAAAAAAAAAA - [0:0]
-A KUBE-SVC-AAAAAAAAAAAAAAAA -m comment --comment "dp/web:http -> 10.244.0.12:8080" -j KUBE-SEP-AAAAAAAAAAAAAAA2
COMMIT
`
)

// In a network namespace of its own, Debian's iptables-nft-restore
// writes kube-proxy's iptables-mode rules: the watcher reads them from the
// kernel's notifications (xtables compat expressions) and reports both
// endpoints with proxy=iptables, then the first one's removal when a
// second restore rewrites the Service chain without it, and what it holds
// is what iptables-nft-save lists. Needs root and iptables-nft.
func TestWatcherIPTablesNFT(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireBinary(t, "iptables-nft-restore")
	evs := newSink()
	w, err := New(Options{Node: "n1", Emit: evs.add, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nsPath := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			close(nsPath)
			done <- err
			return
		}
		nsPath <- fmt.Sprintf("/proc/%d/task/%d/ns/net", unix.Getpid(), unix.Gettid())
		done <- w.Run(ctx)
	}()
	ns, ok := <-nsPath
	if !ok {
		t.Fatal(<-done)
	}
	inNS := func(stdin string, argv ...string) []byte {
		t.Helper()
		cmd := exec.Command("nsenter", append([]string{"--net=" + ns}, argv...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, stderr.String())
		}
		return out
	}
	waitFor := func(what string, kind event.Kind, addr string) {
		t.Helper()
		waitSink(t, evs, what, func(es []event.Event) bool {
			for _, e := range es {
				if e.Kind == kind && e.Local.String() == addr {
					return true
				}
			}
			return false
		})
	}
	time.Sleep(200 * time.Millisecond) // the watcher's snapshot, before the first restore
	inNS(restoreTwo, "iptables-nft-restore", "--noflush")
	waitFor("10.244.0.11 added", event.DataplaneEndpointAdded, "10.244.0.11:8080")
	waitFor("10.244.0.12 added", event.DataplaneEndpointAdded, "10.244.0.12:8080")
	inNS(restoreOne, "iptables-nft-restore", "--noflush")
	waitFor("10.244.0.11 removed", event.DataplaneEndpointRemoved, "10.244.0.11:8080")
	listed := endpointsFromSave(t, inNS("", "iptables-nft-save", "-t", "nat"), "iptables-nft-save")
	if !slices.Equal(listed, []string{"dp/web/tcp/http 10.244.0.12:8080"}) {
		t.Errorf("iptables-nft-save lists %v", listed)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	var got []string
	for _, e := range evs.all() {
		got = append(got, fmt.Sprintf("%s %s/%s %s %s %s %s", e.Kind, e.Pod.Namespace, e.Service, e.Attrs[event.AttrServicePort],
			e.Attrs[event.AttrProtocol], e.Local, e.Attrs[event.AttrProxy]))
	}
	want := []string{
		"dataplane_endpoint_added dp/web http tcp 10.244.0.11:8080 iptables",
		"dataplane_endpoint_added dp/web http tcp 10.244.0.12:8080 iptables",
		"dataplane_endpoint_removed dp/web http tcp 10.244.0.11:8080 iptables",
	}
	if !slices.Equal(got, want) {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The legacy backend in a network namespace of its own: iptables-legacy-
// restore writes the same rules, a metrics endpoint stands in for
// kube-proxy's sync gauge (set after each restore, as kube-proxy does),
// and the poller reports both endpoints, then the first one's removal,
// stamped with the gauge's time. Needs root and iptables-legacy.
func TestLegacyPollerNetns(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireBinary(t, "iptables-legacy-restore")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nsPath := make(chan string, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			close(nsPath)
			return
		}
		nsPath <- fmt.Sprintf("/proc/%d/task/%d/ns/net", unix.Getpid(), unix.Gettid())
		<-ctx.Done()
	}()
	ns, ok := <-nsPath
	if !ok {
		t.Fatal("unshare failed")
	}
	var mu sync.Mutex
	var stamp float64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if stamp > 0 {
			fmt.Fprintf(w, "%s{ip_family=\"IPv4\"} %s\n", syncMetric, strconv.FormatFloat(stamp, 'g', -1, 64))
		}
	}))
	defer srv.Close()
	restore := func(in string) time.Time {
		t.Helper()
		cmd := exec.Command("nsenter", "--net="+ns, "iptables-legacy-restore", "--noflush")
		cmd.Stdin = strings.NewReader(in)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("iptables-legacy-restore: %v: %s", err, out)
		}
		now := time.Now()
		mu.Lock()
		stamp = float64(now.UnixNano()) / 1e9
		mu.Unlock()
		return now
	}
	evs := newSink()
	lp, err := NewLegacy(LegacyOptions{Node: "n1", Emit: evs.add, Logger: quiet, Metrics: strings.TrimPrefix(srv.URL, "http://"),
		Save: [][]string{{"nsenter", "--net=" + ns, "iptables-legacy-save", "-t", "nat"}}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- lp.Run(ctx) }()
	time.Sleep(300 * time.Millisecond) // its first read
	first := restore(restoreTwo)
	waitSink(t, evs, "both endpoints added", func(es []event.Event) bool { return len(es) >= 2 })
	second := restore(restoreOne)
	waitSink(t, evs, "the first endpoint removed", func(es []event.Event) bool { return len(es) >= 3 })
	cancel()
	<-done
	es := evs.all()
	var got []string
	for _, e := range es {
		got = append(got, fmt.Sprintf("%s %s/%s %s %s %s", e.Kind, e.Pod.Namespace, e.Service, e.Attrs[event.AttrProtocol], e.Local, e.Attrs[event.AttrProxy]))
	}
	want := []string{
		"dataplane_endpoint_added dp/web tcp 10.244.0.11:8080 iptables-legacy",
		"dataplane_endpoint_added dp/web tcp 10.244.0.12:8080 iptables-legacy",
		"dataplane_endpoint_removed dp/web tcp 10.244.0.11:8080 iptables-legacy",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Stamped with the sync's own time (the gauge, to its float's
	// precision), not when the poller read it.
	for i, at := range []time.Time{first, first, second} {
		if d := es[i].At().Sub(at); d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("event %d stamped %v from its sync", i, d)
		}
	}
}
