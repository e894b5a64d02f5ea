package relay_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/relay"
)

// Once PodIndex says it has synced, it holds every pod the list gave: a
// shared informer's handlers get the listed pods after the informer has
// synced, and a server that checked against a half-filled index would take
// a forged event about another node's pod as one about a pod not known yet.
func TestPodIndexSyncedHoldsTheList(t *testing.T) {
	const n = 20000
	objs := make([]runtime.Object, n)
	for i := range objs {
		objs[i] = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprintf("web-%05d", i), UID: types.UID(fmt.Sprintf("uid-%05d", i))},
			Spec:       corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", i%100)},
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	x := &relay.PodIndex{Client: fake.NewClientset(objs...)}
	if err := x.Ready(); err == nil || !strings.Contains(err.Error(), "pod index") {
		t.Fatalf("ready before the list: %v, want the reason", err)
	}
	go x.Run(ctx)
	if err := x.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := x.Ready(); err != nil {
		t.Fatalf("not ready once synced: %v", err)
	}
	if live, _ := x.Len(); live != n {
		t.Fatalf("synced holding %d of the %d pods listed", live, n)
	}
	p, ok, err := x.Place(event.PodRef{UID: fmt.Sprintf("uid-%05d", n-1)})
	if err != nil || !ok || p.Node != fmt.Sprintf("node-%d", (n-1)%100) {
		t.Fatalf("the last pod listed: %+v, %v, %v", p, ok, err)
	}
}

// PodIndex keeps who held each address and when: from the pod's creation
// until it gives the address up, ends or goes; none for a pod that has
// ended, and none once a deleted pod is forgotten.
func TestPodIndexAddresses(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	created := metav1.NewTime(now.Add(-time.Hour))
	pod := func(name, node, phase string, ips ...string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID("uid-" + name), CreationTimestamp: created},
			Spec:       corev1.PodSpec{NodeName: node},
			Status:     corev1.PodStatus{Phase: corev1.PodPhase(phase)},
		}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		if len(ips) > 0 {
			p.Status.PodIP = ips[0]
		}
		return p
	}
	cs := fake.NewClientset(
		pod("web-1", "node-a", "Running", "10.244.1.1", "fd00::1:1"),
		pod("job-1", "node-a", "Succeeded", "10.244.1.2"),
		pod("proxy-b", "node-b", "Running", "192.168.0.2"), // host network: the node's address
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	x := &relay.PodIndex{Client: cs, Now: clock}
	if _, err := x.Holders(netip.MustParseAddr("10.244.1.1")); err == nil {
		t.Fatal("holders before the list: want the index's reason")
	}
	go x.Run(ctx)
	if err := x.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	holders := func(ip string) []relay.AddrTenure {
		t.Helper()
		ts, err := x.Holders(netip.MustParseAddr(ip))
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	want := func(ip string, n int, check func([]relay.AddrTenure) bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			ts := holders(ip)
			if len(ts) == n && (check == nil || check(ts)) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: holders %+v", ip, ts)
			}
		}
	}
	c := created.UnixNano()
	want("10.244.1.1", 1, func(ts []relay.AddrTenure) bool {
		return ts[0].Pod.Node == "node-a" && ts[0].From == c && ts[0].To == 0
	})
	want("::ffff:10.244.1.1", 1, nil) // IPv4 in IPv6 is the same address
	want("fd00::1:1", 1, func(ts []relay.AddrTenure) bool { return ts[0].Pod.Name == "web-1" })
	want("10.244.1.2", 0, nil) // ended: the network has it back
	want("192.168.0.2", 1, func(ts []relay.AddrTenure) bool { return ts[0].Pod.Node == "node-b" })

	// web-1's sandbox made again, with a new address: the old one is
	// given up now, the new one held from now.
	advance(time.Minute)
	moved := now.UnixNano()
	if _, err := cs.CoreV1().Pods("shop").UpdateStatus(ctx, pod("web-1", "node-a", "Running", "10.244.1.7"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want("10.244.1.1", 1, func(ts []relay.AddrTenure) bool { return ts[0].To == moved })
	want("10.244.1.7", 1, func(ts []relay.AddrTenure) bool { return ts[0].From == moved && ts[0].To == 0 })
	// Deleted: given up, remembered for Retain, then forgotten.
	advance(time.Minute)
	gone := now.UnixNano()
	if err := cs.CoreV1().Pods("shop").Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want("10.244.1.7", 1, func(ts []relay.AddrTenure) bool { return ts[0].To == gone })
	advance(relay.DefaultPodRetain + time.Second)
	// Pruning runs at the next deletion.
	if err := cs.CoreV1().Pods("shop").Delete(ctx, "job-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want("10.244.1.7", 0, nil)
	want("10.244.1.1", 0, nil)
	want("192.168.0.2", 1, nil)
}
