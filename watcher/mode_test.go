package watcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/drainscope/drainscope/event"
)

func nodes(n int) []runtime.Object {
	out := make([]runtime.Object, n)
	for i := range out {
		out[i] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i)}}
	}
	return out
}

func TestChooseMode(t *testing.T) {
	forbidden := func(cs *fake.Clientset) {
		cs.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("no RBAC"))
		})
	}
	for _, tc := range []struct {
		name      string
		nodes     int
		mode      Mode
		above     int
		breakList func(*fake.Clientset)
		want      Mode
		wantNodes int
		why       string
	}{
		{"auto, small", 3, Auto, 50, nil, EveryNode, 3, "3 nodes <= 50"},
		{"auto, at the bound", 50, Auto, 50, nil, EveryNode, 50, "50 nodes <= 50"},
		{"auto, past it", 51, Auto, 50, nil, Leader, 51, "51 nodes > 50"},
		{"auto, default bound", 51, Auto, 0, nil, Leader, 51, "> 50"},
		{"auto, nodes not listable", 3, Auto, 50, forbidden, Leader, 0, "could not be counted"},
		{"all-nodes given, big", 200, EveryNode, 50, nil, EveryNode, 200, "--endpoints-mode all-nodes"},
		{"leader given, small", 2, Leader, 50, nil, Leader, 2, "--endpoints-mode leader"},
		{"all-nodes given, not listable", 2, EveryNode, 50, forbidden, EveryNode, 0, "--endpoints-mode all-nodes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset(nodes(tc.nodes)...)
			if tc.breakList != nil {
				tc.breakList(cs)
			}
			c := ChooseMode(context.Background(), cs, tc.mode, tc.above)
			if c.Mode != tc.want || c.Nodes != tc.wantNodes || !strings.Contains(c.Reason, tc.why) {
				t.Errorf("ChooseMode = %+v; want %s, %d nodes, a reason with %q", c, tc.want, tc.wantNodes, tc.why)
			}
		})
	}
}

// CountNodes reads the count from a list of one where the server gives
// remainingItemCount, and pages through where it does not.
func TestCountNodes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		remaining bool
		total     int
		wantLists int
	}{
		{"remainingItemCount", true, 5000, 1},
		{"paged", false, 1201, 1 + 3}, // 1, then 500, 500, 200
		{"empty", true, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			lists := 0
			cs.PrependReactor("list", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				lists++
				o := a.(k8stesting.ListActionImpl).ListOptions
				start := 0
				if o.Continue != "" {
					fmt.Sscan(o.Continue, &start)
				}
				n := min(int(o.Limit), tc.total-start)
				l := &corev1.NodeList{Items: make([]corev1.Node, n)}
				if rest := tc.total - start - n; rest > 0 {
					if tc.remaining {
						l.RemainingItemCount = ptr.To(int64(rest))
					}
					l.Continue = fmt.Sprint(start + n)
				}
				return true, l, nil
			})
			n, err := CountNodes(context.Background(), cs)
			if err != nil || n != tc.total || lists != tc.wantLists {
				t.Errorf("CountNodes = %d, %v after %d lists; want %d after %d", n, err, lists, tc.total, tc.wantLists)
			}
		})
	}
}

func TestSampledNode(t *testing.T) {
	for _, tc := range []struct {
		node     string
		nodes, k int
		want     bool
	}{
		{"a", 3, 5, true},     // a cluster no larger than the sample is all in it
		{"a", 5, 5, true},     // …at the bound too
		{"a", 0, 5, true},     // unknown size: in it
		{"a", 3, 0, false},    // no sample
		{"a", 5000, 0, false}, // no sample
	} {
		if got := SampledNode(tc.node, tc.nodes, tc.k); got != tc.want {
			t.Errorf("SampledNode(%q, %d, %d) = %v, want %v", tc.node, tc.nodes, tc.k, got, tc.want)
		}
	}
	// Over names that differ only in their numbers, the sample holds
	// about k of them (binomial: k = 500 of 5,000 has σ ≈ 21), and each
	// node's answer is the same every time.
	for _, k := range []int{5, 500} {
		in := 0
		for i := range 5000 {
			name := fmt.Sprintf("ip-10-0-%d-%d.ec2.internal", i/256, i%256)
			s := SampledNode(name, 5000, k)
			if s != SampledNode(name, 5000, k) {
				t.Fatalf("%s: not deterministic", name)
			}
			if s {
				in++
			}
		}
		lo, hi := k-k/5-5, k+k/5+5
		t.Logf("k=%d of 5000: %d in the sample", k, in)
		if in < lo || in > hi {
			t.Errorf("k=%d of 5000: %d nodes in the sample, want %d–%d", k, in, lo, hi)
		}
	}
}

// With NoSharedObserve the watcher records the transitions of endpoints
// but no observed state of them or of the Services, neither at its
// initial list nor every interval; its own pods are still observed, and
// the tap sees the transitions.
func TestNoSharedObserve(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := pod("old", "1", "10.244.0.2", true)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"},
		Spec: corev1.ServiceSpec{ClusterIPs: []string{"10.96.0.10"}, Ports: []corev1.ServicePort{{Port: 80}}}}
	cs := fake.NewClientset(p, svc, slice("web-1", "web", "1", ep("old", "10.244.0.2", true, true, false)))
	c := newCollector()
	tapped := make(chan event.Kind, 64)
	w, err := New(cs, Options{Node: "node-a", Sink: c.sink, ObserveInterval: 50 * time.Millisecond, NoSharedObserve: true,
		Tap: func(e *event.Event) {
			if !e.Flags.Has(event.FlagObserved) {
				tapped <- e.Kind
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	go w.Run(ctx)
	c.waitFor(t, 10*time.Second, "three observations of the pod", func(evs []event.Event) bool {
		n := 0
		for _, e := range evs {
			if e.Kind == event.PodReady && e.Flags.Has(event.FlagObserved) {
				n++
			}
		}
		return n >= 3
	})
	waitWatching(t, cs, "endpointslices")
	if _, err := cs.DiscoveryV1().EndpointSlices("ns").Update(ctx, slice("web-1", "web", "2", ep("old", "10.244.0.2", false, true, true)), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	evs := c.waitFor(t, 5*time.Second, "the endpoint's transition", hasKinds(event.EndpointNotReady))
	for _, e := range evs {
		if e.Flags.Has(event.FlagObserved) && (e.Kind.IsEndpoint() || e.Kind == event.ServiceChanged) {
			t.Errorf("observed %s recorded with NoSharedObserve", e.Kind)
		}
	}
	select {
	case k := <-tapped:
		if k != event.EndpointNotReady {
			t.Errorf("tap saw %s first, want the not-ready transition", k)
		}
	case <-time.After(5 * time.Second):
		t.Error("the tap saw no transition")
	}
}

// A standby keeps no observed state for a takeover (that would hold every
// endpoint of the cluster for the standby window); a new leader records
// the state afresh when it takes the lease.
func TestLeaderObservesAtTakeOver(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset(slice("web-1", "web", "1", ep("a", "10.244.0.2", true, true, false)))
	c := newCollector()
	w, err := New(cs, Options{Node: "node-a", Sink: c.sink, Mode: Leader, NoPods: true,
		Lease: LeaseOptions{Namespace: "kube-system", LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	w.emitMu.Lock()
	w.standby.add(event.Event{Time: time.Now().UnixNano(), Kind: event.EndpointReady, Flags: event.FlagObserved})
	w.emitMu.Unlock()
	w.sliceMu.Lock()
	w.slices.at = time.Now()
	w.slices.apply(slice("other", "api", "1", ep("b", "10.244.0.3", true, true, false)), 0, true)
	w.slices.observe(time.Now()) // on a standby: goes nowhere
	w.sliceMu.Unlock()
	if n := len(w.standby.events) - w.standby.head; n != 1 {
		t.Errorf("standby holds %d events, want only the one added by hand", n)
	}
	go w.Run(ctx)
	c.waitFor(t, 10*time.Second, "the state observed at takeover", func(evs []event.Event) bool {
		for _, e := range evs {
			if e.Kind == event.EndpointReady && e.Flags.Has(event.FlagObserved) && e.Service == "web" {
				return true
			}
		}
		return false
	})
}
