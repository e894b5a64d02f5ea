package watcher

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/drainscope/drainscope/controlplane"
	"github.com/drainscope/drainscope/event"
)

// benchUpdates is the least number of updates a latency benchmark measures.
const benchUpdates = 1000

type arrival struct {
	kind event.Kind
	at   time.Time
}

func benchWatcher(b *testing.B, cs kubernetes.Interface, ns string, o Options) (*Watcher, chan arrival, context.CancelFunc) {
	b.Helper()
	ch := make(chan arrival, 4*benchUpdates)
	o.Node = "node-a"
	o.Namespace = ns
	o.Sink = func(e event.Event) {
		if e.Flags.Has(event.FlagObserved) {
			return // the state at the list, not an update being measured
		}
		select {
		case ch <- arrival{e.Kind, time.Now()}:
		default:
		}
	}
	w, err := New(cs, o)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go w.Run(ctx)
	if err := w.WaitForSync(ctx); err != nil {
		b.Fatal(err)
	}
	return w, ch, cancel
}

// measure runs n writes; after each it waits for an event of one of kinds
// at the sink and records the time from the write's return to the sink.
//
// It also returns the time from the write's start, which bounds the whole
// path (request, etcd, watch cache, watch stream, decode, handler) from
// above: the event often reaches the sink before the client has read the
// write's response.
func measure(b *testing.B, n int, ch chan arrival, write func(i int) error, kinds ...event.Kind) (lat, fromStart []time.Duration, early int) {
	b.Helper()
	want := map[event.Kind]bool{}
	for _, k := range kinds {
		want[k] = true
	}
	lat = make([]time.Duration, 0, n)
	fromStart = make([]time.Duration, 0, n)
	for i := range n {
		started := time.Now()
		if err := write(i); err != nil {
			b.Fatalf("write %d: %v", i, err)
		}
		returned := time.Now()
		timeout := time.After(30 * time.Second)
	wait:
		for {
			select {
			case a := <-ch:
				if !want[a.kind] {
					continue
				}
				d := a.at.Sub(returned)
				if d < 0 {
					early++ // the watch event overtook the write's response
					d = 0
				}
				lat = append(lat, d)
				fromStart = append(fromStart, a.at.Sub(started))
				break wait
			case <-timeout:
				b.Fatalf("update %d: no %v event within 30 s", i, kinds)
			}
		}
	}
	return lat, fromStart, early
}

func report(b *testing.B, what string, lat, fromStart []time.Duration, early int) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	q := func(ds []time.Duration, p float64) float64 {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ms(ds[int(p*float64(len(ds)-1))])
	}
	b.Logf("%s: %d updates, write returned -> event at sink: p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms (%d events arrived before the write returned, counted as 0)",
		what, len(lat), q(lat, 0.5), q(lat, 0.9), q(lat, 0.99), q(lat, 1), early)
	b.Logf("%s: %d updates, write started  -> event at sink: p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms",
		what, len(fromStart), q(fromStart, 0.5), q(fromStart, 0.9), q(fromStart, 0.99), q(fromStart, 1))
	b.ReportMetric(q(lat, 0.5), what+"-p50-ms")
	b.ReportMetric(q(lat, 0.99), what+"-p99-ms")
	b.ReportMetric(q(fromStart, 0.99), what+"-from-start-p99-ms")
}

// BenchmarkWatchLatency measures, on the real API server over loopback, the
// time from an API write returning to the watcher handing the resulting
// event to its sink: pod readiness flips (pod_ready / pod_not_ready) and
// endpoint condition flips in an EndpointSlice (endpoint_ready /
// endpoint_not_ready), at least 1,000 of each.
//
//	go test ./watcher -run '^$' -bench WatchLatency -benchtime 1x
func BenchmarkWatchLatency(b *testing.B) {
	cp := controlPlane(b)
	ctx := context.Background()
	ns := "bench-latency"
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		b.Fatal(err)
	}
	cs := cp.Client()
	n := max(benchUpdates, b.N)

	// Pods: flip the Ready condition, as a kubelet's probe would.
	kl := &kubelet{t: b, cs: cs, ns: ns, node: "node-a"}
	if _, err := cp.RegisterNode(ctx, controlplane.NodeOptions{Name: "node-a", InternalIP: "10.244.0.1"}); err != nil {
		b.Fatal(err)
	}
	p := kl.start(ctx, "flip", "bench", "10.244.0.200")
	_, ch, cancel := benchWatcher(b, cs, ns, Options{PodNode: "node-a", NoSlices: true})
	b.ResetTimer()
	lat, fromStart, early := measure(b, n, ch, func(i int) error {
		st := corev1.ConditionFalse
		if i%2 == 1 {
			st = corev1.ConditionTrue
		}
		for j := range p.Status.Conditions {
			if p.Status.Conditions[j].Type == corev1.PodReady {
				p.Status.Conditions[j].Status = st
			}
		}
		var err error
		p, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	}, event.PodReady, event.PodNotReady)
	b.StopTimer()
	cancel()
	report(b, "pod", lat, fromStart, early)

	// EndpointSlices: a slice managed by the benchmark (the EndpointSlice
	// controller leaves it alone) whose one endpoint flips readiness.
	sl := benchSlice(ns, "flip", 0, 1)
	sl, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, sl, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	_, ch, cancel = benchWatcher(b, cs, ns, Options{NoPods: true})
	defer cancel()
	b.StartTimer()
	lat, fromStart, early = measure(b, n, ch, func(i int) error {
		sl.Endpoints[0].Conditions.Ready = ptr.To(i%2 == 1)
		var err error
		sl, err = cs.DiscoveryV1().EndpointSlices(ns).Update(ctx, sl, metav1.UpdateOptions{})
		return err
	}, event.EndpointReady, event.EndpointNotReady)
	b.StopTimer()
	report(b, "endpoint", lat, fromStart, early)
}

// benchSlice is an EndpointSlice of n endpoints (pod addresses in
// 10.245.0.0/16), managed by the benchmark rather than the controller.
func benchSlice(ns, name string, from, n int) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "drainscope-bench"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for i := from; i < from+n; i++ {
		pod := fmt.Sprintf("%s-%d", name, i)
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.245.%d.%d", i/250, 1+i%250)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			NodeName:   ptr.To("node-a"),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod, UID: types.UID("bench-" + pod)},
		})
	}
	return s
}

// BenchmarkWatcherMemory10kEndpoints reports the heap the watcher holds
// after listing 10,000 endpoints (100 EndpointSlices of 100) from the real
// API server.
//
//	go test ./watcher -run '^$' -bench WatcherMemory -benchtime 1x
func BenchmarkWatcherMemory10kEndpoints(b *testing.B) {
	cp := controlPlane(b)
	ctx := context.Background()
	ns := "bench-memory"
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		b.Fatal(err)
	}
	cs := cp.Client()
	const slices, per = 100, 100
	l, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for i := len(l.Items); i < slices; i++ {
		if _, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, benchSlice(ns, fmt.Sprintf("mem-%03d", i), i*per, per), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		w, _, cancel := benchWatcher(b, cs, ns, Options{NoPods: true})
		runtime.GC()
		runtime.ReadMemStats(&after)
		st := w.Stats()
		cancel()
		if st.Endpoints != slices*per {
			b.Fatalf("watcher tracks %d endpoints, want %d", st.Endpoints, slices*per)
		}
		heap := float64(after.HeapAlloc) - float64(before.HeapAlloc)
		b.Logf("watcher heap with %d endpoints in %d slices: %.2f MiB (%.0f bytes per endpoint)",
			st.Endpoints, st.Slices, heap/(1<<20), heap/float64(st.Endpoints))
		b.ReportMetric(heap/(1<<20), "heap-MiB")
		b.ReportMetric(heap/float64(st.Endpoints), "B/endpoint")
		runtime.KeepAlive(w)
	}
}

// BenchmarkObserve measures one re-observation of 10,000 endpoints (100
// slices of 100) and 1,000 pods of one container each: the walk every
// ObserveInterval adds to the watcher's steady state, event building and
// sealing included (the sink discards them).
//
//	go test ./watcher -run '^$' -bench Observe
func BenchmarkObserve(b *testing.B) {
	var events int
	w, err := New(nil, Options{Node: "node-a", Sink: func(event.Event) { events++ }})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		w.slices.apply(benchSlice("ns", fmt.Sprintf("obs-%03d", i), i*100, 100), 0, true)
	}
	for i := 0; i < 1000; i++ {
		w.pods.apply(pod(fmt.Sprintf("p%04d", i), "1", fmt.Sprintf("10.246.%d.%d", i/250, 1+i%250), true), 0, true)
	}
	b.ReportAllocs()
	for b.Loop() {
		events = 0
		w.observe(nil)
	}
	if events != 10000+2*1000 {
		b.Fatalf("one observation gave %d events, want %d", events, 10000+2*1000)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(events), "ns/event")
}
