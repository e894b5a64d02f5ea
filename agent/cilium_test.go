package agent_test

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/drainscope/drainscope/agent"
	"github.com/drainscope/drainscope/dataplane/cilium"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/internal/testenv"
	"github.com/drainscope/drainscope/store"
)

// TestAgentReadsCiliumMaps: an agent with the Cilium reader on names the
// Service of a frontend by its ClusterIP, learnt from its own watch of
// Services, and stores the backend that left the frontend's slots (in
// maps laid out as Cilium writes them, in a bpffs of the test's own) as a
// dataplane removal of that Service, with proxy=cilium.
func TestAgentReadsCiliumMaps(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, ""); err != nil {
		testenv.Unavailable(t, "mounting a bpffs: "+err.Error())
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	w, err := cilium.NewWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fe := netip.MustParseAddrPort("10.96.0.10:80")
	a, b := netip.MustParseAddrPort("10.244.0.5:8080"), netip.MustParseAddrPort("10.244.0.6:8080")
	if err := w.SetService(fe, 6, []netip.AddrPort{a, b}); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "svc-1"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
	})
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got := make(chan event.Event, 1000)
	ag, err := agent.New(agent.Config{
		Node: "node-c", Client: client, Store: st,
		Kernel:    agent.KernelConfig{Disabled: true},
		Dataplane: agent.DataplaneConfig{Disabled: true},
		Cilium:    agent.CiliumConfig{Dir: dir, Interval: 20 * time.Millisecond},
		Sink:      func(e event.Event) { got <- e },
		Logger:    testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ag.Run(ctx) }()
	wait := func(what string, match func(*event.Event) bool) event.Event {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case e := <-got:
				if match(&e) {
					return e
				}
			case <-deadline:
				t.Fatalf("no %s", what)
			}
		}
	}
	wait("service_changed of shop/web", func(e *event.Event) bool { return e.Kind == event.ServiceChanged && e.Service == "web" })
	// The reader has its baseline once it has polled.
	for s, ok := ag.CiliumStats(); !ok || s.Polls < 2; s, ok = ag.CiliumStats() {
		time.Sleep(10 * time.Millisecond)
	}
	before := time.Now().UnixNano()
	if err := w.SetService(fe, 6, []netip.AddrPort{a}); err != nil {
		t.Fatal(err)
	}
	rm := wait("dataplane_endpoint_removed", func(e *event.Event) bool { return e.Kind == event.DataplaneEndpointRemoved })
	if rm.Local != b || rm.Pod.Namespace != "shop" || rm.Service != "web" || rm.Node != "node-c" ||
		rm.Attrs[event.AttrProxy] != event.ProxyCilium || rm.Attrs[event.AttrFrontend] != fe.String() || rm.Time < before {
		t.Errorf("removal %+v", rm)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	n := 0
	st.Scan(context.Background(), store.Query{Kinds: []event.Kind{event.DataplaneEndpointRemoved}}, func(e *event.Event) error {
		if e.Service == "web" && e.Local == b {
			n++
		}
		return nil
	})
	if n != 1 {
		t.Errorf("%d removals of web's backend stored, want 1", n)
	}
}
