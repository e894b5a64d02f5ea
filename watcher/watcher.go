// Package watcher records the control plane's half of a rollout. That is when
// each pod's deletion was requested, when it stopped being ready, when its
// containers ended, and when each of its endpoints stopped being ready, was
// marked terminating and was removed from its Service's EndpointSlices. It
// watches Pods and EndpointSlices with client-go, turns each update into
// per-pod and per-endpoint transitions, stamps each with the time its handler
// received it (UTC nanoseconds; the API's whole-second timestamps go in
// Attrs), and hands them to a sink. Beside them it records the changes of each
// Deployment, StatefulSet and DaemonSet that begin a rollout or end its pods
// (a new pod template, a change of replicas, its deletion) and each Service's
// addresses and ports, with the EndpointSlices; and beside the pods the
// kubelet's Events of a stop that failed (a preStop hook, a kill) and the
// versions the node runs.
//
// A broken watch loses nothing and doubles nothing: the watcher keeps the
// state it last reported, so an update replayed after a reconnect reports
// only what changed, and after a relist it diffs the complete list against
// that state and reports each missed transition once, flagged
// event.FlagRelist.
//
// The watcher also keeps the pod cache the kernel side resolves pods with
// (PodLookup).
package watcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/drainscope/drainscope/event"
)

// Mode selects who records EndpointSlice transitions.
type Mode string

const (
	// EveryNode: each node's watcher records them, so the events show when
	// each node learned of each change (the spread between nodes).
	EveryNode Mode = "all-nodes"
	// Leader: one watcher, elected with a coordination.k8s.io Lease,
	// records them; the others keep their state warm and take over.
	Leader Mode = "leader"
)

// ParseMode parses a Mode flag value.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case EveryNode, Leader, Auto:
		return Mode(s), nil
	case "":
		return EveryNode, nil
	}
	return "", fmt.Errorf("--endpoints-mode %q: want %s, %s or %s", s, Auto, EveryNode, Leader)
}

// Options configure a Watcher.
type Options struct {
	// Node is the node this watcher runs on; every event carries it.
	Node string
	// Sink receives every event, sealed, one call at a time, in the order
	// the events were observed. It runs on the informers' goroutines: a
	// slow sink delays the watch (it should hand the event to a buffer).
	Sink func(event.Event)

	// Namespace limits both watches to one namespace; empty means all.
	Namespace string
	// SliceSelector is a label selector for the EndpointSlices, e.g.
	// "kubernetes.io/service-name=web".
	SliceSelector string
	// PodNode restricts the pod watch to pods bound to that node
	// (spec.nodeName), as an agent on each node does, and the kubelet's
	// Events it records to those about them; node_info reads that Node's
	// versions. Empty watches every pod (cluster-wide).
	PodNode string
	// NoPods and NoSlices turn a watch off; NoPods the kubelet's Events'
	// too.
	NoPods, NoSlices bool

	// Mode chooses who records EndpointSlice transitions; default
	// EveryNode. Leader needs Lease.
	Mode  Mode
	Lease LeaseOptions

	// PodLinger is how long a deleted pod stays resolvable by PodLookup;
	// default 2 minutes.
	PodLinger time.Duration

	// ObserveInterval is how often the watcher records again the state of
	// everything it tracks (every endpoint, pod, running container and
	// Service, flagged event.FlagObserved), as it does at its initial
	// list, so that any window of history holds each one's state however
	// long ago it began, and the versions the node runs (node_info);
	// default ObserveEvery.
	ObserveInterval time.Duration
	// NoSharedObserve: record no observed state of the cluster-wide
	// watches (every endpoint and Service, at the initial list, at a
	// relist and every ObserveInterval), only their transitions. In
	// EveryNode mode the nodes outside a small sample set it
	// (SampledNode), so that the cluster stores the state of its
	// endpoints and Services a few times per interval, not once per node;
	// this node's own pods are still observed.
	NoSharedObserve bool
	// Tap, when set, sees every event of the cluster-wide watches
	// (EndpointSlices, Services, workloads) as it is stamped, whether or
	// not this watcher records it (a standby in Leader mode, an observed
	// state NoSharedObserve leaves out): a node's proxy lag is measured
	// against its own watch. It runs with the watcher's emit lock held and
	// must not block; the event is not sealed.
	Tap func(*event.Event)

	Logger *slog.Logger
	// Now is the clock; default time.Now. Tests replace it.
	Now func() time.Time
}

// Stats count what a Watcher did.
type Stats struct {
	Events      uint64 // handed to the sink
	RelistEvent uint64 // of which recovered on a relist
	Relists     uint64 // complete lists after the first, per watch
	Rewatches   uint64 // watch requests after the first, per watch: reconnects after a break or a server timeout
	WatchErrors uint64 // errors client-go reported from a list or watch
	Pods        int    // pods tracked
	Endpoints   int    // endpoints tracked
	Slices      int    // EndpointSlices tracked
	Leader      bool   // records EndpointSlices (always true in EveryNode mode)
}

// Watcher watches Pods and EndpointSlices. Create it with New, start it
// with Run.
type Watcher struct {
	cs   kubernetes.Interface
	opts Options
	log  *slog.Logger

	emitMu sync.Mutex
	last   int64 // last event time handed out, for strictly increasing times

	rsLister appslisters.ReplicaSetLister
	rsSynced cache.InformerSynced

	pods   *podTracker
	slices *sliceTracker
	// sliceMu guards slices against Stats; the informer is its one writer.
	sliceMu sync.Mutex

	leading atomic.Bool
	standby *standbyBuffer
	// svcs is the Service handler, for an observation at a takeover; set
	// by Run before the election starts.
	svcs *serviceHandler

	synced             chan struct{}
	events, relistEv   atomic.Uint64
	relists, watchErrs atomic.Uint64
	rewatches          atomic.Uint64
	running            atomic.Bool
}

// New checks o and returns a Watcher; nothing runs until Run.
func New(cs kubernetes.Interface, o Options) (*Watcher, error) {
	if o.Node == "" {
		return nil, errors.New("watcher: Node is required (every event names the node that observed it)")
	}
	if o.Sink == nil {
		return nil, errors.New("watcher: Sink is required")
	}
	if o.Mode == "" {
		o.Mode = EveryNode
	}
	if _, err := ParseMode(string(o.Mode)); err != nil {
		return nil, err
	}
	if o.Mode == Auto {
		return nil, errors.New("watcher: Mode auto must be resolved first (ChooseMode)")
	}
	if o.SliceSelector != "" {
		if _, err := labels.Parse(o.SliceSelector); err != nil {
			return nil, fmt.Errorf("watcher: EndpointSlice selector: %w", err)
		}
	}
	if o.PodLinger == 0 {
		o.PodLinger = 2 * time.Minute
	}
	if o.ObserveInterval < 0 {
		return nil, fmt.Errorf("watcher: ObserveInterval %v is negative", o.ObserveInterval)
	}
	if o.ObserveInterval == 0 {
		o.ObserveInterval = ObserveEvery
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Mode == Leader {
		if err := o.Lease.check(); err != nil {
			return nil, err
		}
	}
	w := &Watcher{cs: cs, opts: o, log: o.Logger, synced: make(chan struct{})}
	w.pods = newPodTracker(w.emitPod, w.workload, o.Now, o.PodLinger)
	w.slices = newSliceTracker(w.emitEndpoint)
	w.leading.Store(o.Mode == EveryNode)
	if o.Mode == Leader {
		w.standby = &standbyBuffer{window: o.Lease.takeoverGap()}
	}
	return w, nil
}

// Pods is the watcher's pod cache as a PodLookup. It answers once Run has
// listed the pods.
func (w *Watcher) Pods() PodLookup { return w.pods }

// Synced is closed once every watch has completed its initial list.
func (w *Watcher) Synced() <-chan struct{} { return w.synced }

// WaitForSync blocks until Synced or ctx ends.
func (w *Watcher) WaitForSync(ctx context.Context) error {
	select {
	case <-w.synced:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the watcher's initial lists: %w", ctx.Err())
	}
}

// Stats returns counters; safe to call at any time.
func (w *Watcher) Stats() Stats {
	w.sliceMu.Lock()
	eps, sl := w.slices.size()
	w.sliceMu.Unlock()
	return Stats{
		Events: w.events.Load(), RelistEvent: w.relistEv.Load(),
		Relists: w.relists.Load(), Rewatches: w.rewatches.Load(), WatchErrors: w.watchErrs.Load(),
		Pods: w.pods.size(), Endpoints: eps, Slices: sl, Leader: w.leading.Load(),
	}
}

// Run watches until ctx ends. The initial lists are taken as the state to
// start from: recorded as observed (event.FlagObserved), not as
// transitions; everything after them is a transition, and every
// ObserveInterval the state is recorded again as observed. The node's
// versions (node_info) are recorded once the lists are done and every
// ObserveInterval.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("watcher: Run called twice")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Nothing reaches the sink after Run returns.
	var running []<-chan struct{}
	defer func() {
		cancel()
		for _, done := range running {
			<-done
		}
	}()

	var waits []cache.InformerSynced
	var svcs *serviceHandler
	var podsSynced cache.InformerSynced
	if !w.opts.NoPods {
		// Owner lookups: ReplicaSets, stripped to their owner references.
		f := informers.NewSharedInformerFactoryWithOptions(w.cs, 0,
			informers.WithNamespace(w.opts.Namespace),
			informers.WithTransform(stripReplicaSet))
		rs := f.Apps().V1().ReplicaSets()
		w.rsLister, w.rsSynced = rs.Lister(), rs.Informer().HasSynced
		f.Start(ctx.Done())
		defer f.Shutdown()
		// Pods are resolved to their Deployment when first seen: have the
		// ReplicaSets first.
		if !cache.WaitForCacheSync(ctx.Done(), w.rsSynced) {
			return ctx.Err()
		}

		ctrl, done := runInformer(ctx, "pods", w.podListWatch(), &corev1.Pod{}, stripPod,
			&podHandler{w}, w.opts.Now, w.watchError("pods"))
		podsSynced = ctrl.HasSynced
		waits, running = append(waits, ctrl.HasSynced), append(running, done)
	}
	if !w.opts.NoSlices {
		ctrl, done := runInformer(ctx, "endpointslices", w.sliceListWatch(), &discoveryv1.EndpointSlice{}, stripSlice,
			&sliceHandler{w}, w.opts.Now, w.watchError("endpointslices"))
		waits, running = append(waits, ctrl.HasSynced), append(running, done)
		// Workloads are cluster-wide like the slices, and recorded by the
		// same watcher: their changes are the triggers of pods' ends.
		for _, wk := range w.workloadWatches() {
			ctrl, done = runInformer(ctx, wk.name, wk.lw, wk.obj, stripWorkload,
				&workloadHandler{w: w, kind: wk.kind, known: map[string]workloadState{}}, w.opts.Now, w.watchError(wk.name))
			waits, running = append(waits, ctrl.HasSynced), append(running, done)
		}
		// Services: what a client's target (a ClusterIP, a DNS name)
		// was at the time it failed.
		svcs = &serviceHandler{w: w, known: map[string]serviceState{}}
		w.svcs = svcs
		ctrl, done = runInformer(ctx, "services", w.serviceListWatch(), &corev1.Service{}, stripService,
			svcs, w.opts.Now, w.watchError("services"))
		waits, running = append(waits, ctrl.HasSynced), append(running, done)
	}
	observations := make(chan struct{})
	go func() {
		defer close(observations)
		every(ctx, w.opts.ObserveInterval, func() { w.observe(svcs) })
	}()
	running = append(running, observations)
	nodeInfo := make(chan struct{})
	go func() { defer close(nodeInfo); w.runNodeInfo(ctx) }()
	running = append(running, nodeInfo)
	if w.opts.Mode == Leader && !w.opts.NoSlices {
		// Run returns after the election ended, so that a leader going
		// away has released the Lease by then.
		elected := make(chan struct{})
		go func() { defer close(elected); w.runElection(ctx) }()
		running = append(running, elected)
	}
	if podsSynced != nil {
		// The kubelet's Events are placed by their pod (kubeletPod): the
		// pods' initial list first.
		if !cache.WaitForCacheSync(ctx.Done(), podsSynced) {
			return ctx.Err()
		}
		evWaits, evRunning := w.runKubeletEvents(ctx)
		waits, running = append(waits, evWaits...), append(running, evRunning...)
	}
	if !cache.WaitForCacheSync(ctx.Done(), waits...) {
		return ctx.Err()
	}
	close(w.synced)
	w.log.Info("watcher synced", "node", w.opts.Node, "mode", w.opts.Mode,
		"namespace", w.opts.Namespace, "podNode", w.opts.PodNode)
	<-ctx.Done()
	return nil
}

// observe records the state of everything tracked, as observed: a walk of
// the trackers, each under the lock its informer takes, so an observation
// sits between two updates, never inside one.
func (w *Watcher) observe(svcs *serviceHandler) {
	if !w.opts.NoPods {
		w.pods.opMu.Lock()
		w.pods.observe(w.opts.Now())
		w.pods.opMu.Unlock()
	}
	if !w.opts.NoSlices && w.observesShared() {
		w.sliceMu.Lock()
		w.slices.observe(w.opts.Now())
		w.sliceMu.Unlock()
	}
	if svcs != nil && w.observesShared() {
		svcs.snapshot(w.opts.Now())
	}
}

// observesShared tells whether the observed state of the cluster-wide
// watches would be recorded now: not with NoSharedObserve, nor on a
// standby (which keeps no observation for a takeover either: the state
// is recorded again within ObserveInterval, and 150,000 endpoints held
// for the standby window would cost every standby node tens of MB).
func (w *Watcher) observesShared() bool {
	return !w.opts.NoSharedObserve && w.leading.Load()
}

func (w *Watcher) watchError(what string) func(error) {
	return func(err error) {
		w.watchErrs.Add(1)
		w.log.Info("watch broken; resuming", "resource", what, "err", err)
	}
}

func (w *Watcher) podListWatch() cache.ListerWatcher {
	pods := w.cs.CoreV1().Pods(w.opts.Namespace)
	return w.listWatch(func(o *metav1.ListOptions) {
		if w.opts.PodNode != "" {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", w.opts.PodNode).String()
		}
	},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return pods.List(ctx, o) },
		pods.Watch)
}

func (w *Watcher) sliceListWatch() cache.ListerWatcher {
	slices := w.cs.DiscoveryV1().EndpointSlices(w.opts.Namespace)
	return w.listWatch(func(o *metav1.ListOptions) { o.LabelSelector = w.opts.SliceSelector },
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return slices.List(ctx, o) },
		slices.Watch)
}

// workloadWatch is one kind of workload whose changes are recorded.
type workloadWatch struct {
	name, kind string
	obj        runtime.Object
	lw         cache.ListerWatcher
}

func (w *Watcher) workloadWatches() []workloadWatch {
	deps := w.cs.AppsV1().Deployments(w.opts.Namespace)
	sets := w.cs.AppsV1().StatefulSets(w.opts.Namespace)
	daemons := w.cs.AppsV1().DaemonSets(w.opts.Namespace)
	all := func(*metav1.ListOptions) {}
	return []workloadWatch{
		{"deployments", "Deployment", &appsv1.Deployment{}, w.listWatch(all,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return deps.List(ctx, o) }, deps.Watch)},
		{"statefulsets", "StatefulSet", &appsv1.StatefulSet{}, w.listWatch(all,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return sets.List(ctx, o) }, sets.Watch)},
		{"daemonsets", "DaemonSet", &appsv1.DaemonSet{}, w.listWatch(all,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return daemons.List(ctx, o) }, daemons.Watch)},
	}
}

func (w *Watcher) serviceListWatch() cache.ListerWatcher {
	svcs := w.cs.CoreV1().Services(w.opts.Namespace)
	return w.listWatch(func(*metav1.ListOptions) {},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return svcs.List(ctx, o) },
		svcs.Watch)
}

// listWatch lists and watches with the options mod sets, and counts every
// watch after the first as a rewatch: the previous one broke.
func (w *Watcher) listWatch(mod func(*metav1.ListOptions),
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.ListerWatcher {
	var watches atomic.Uint64
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			mod(&o)
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if watches.Add(1) > 1 {
				w.rewatches.Add(1)
			}
			mod(&o)
			return watchFn(ctx, o)
		},
	}, w.cs)
}

// stamp returns the event time for an observation at t: t in UTC
// nanoseconds, nudged to stay strictly after the previous event so the
// store's time order is the order of observation. Called with emitMu held.
func (w *Watcher) stamp(t time.Time) int64 {
	ns := t.UnixNano()
	if ns <= w.last {
		ns = w.last + 1
	}
	w.last = ns
	return ns
}

// deliver completes e and hands it to the sink. Called with emitMu held.
func (w *Watcher) deliver(e *event.Event) {
	e.Node = w.opts.Node
	e.Source = event.SourceWatcher
	e.Seal()
	w.events.Add(1)
	if e.Flags.Has(event.FlagRelist) {
		w.relistEv.Add(1)
	}
	w.opts.Sink(*e)
}
