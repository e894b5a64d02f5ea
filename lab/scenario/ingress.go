package scenario

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	klabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/drainscope/drainscope/ingest"
	"github.com/drainscope/drainscope/lab/ingress"
	"github.com/drainscope/drainscope/lab/load"
)

// Ingress kinds the lab can put in front of a run's Service
// (Config.Ingress, drainscope lab --ingress).
const (
	// IngressHAProxy is Debian's HAProxy 2.6 driven as HAProxy's ingress
	// controllers drive it: one backend per Service, a fixed set of server
	// slots set from the EndpointSlices through the runtime API, no reload.
	IngressHAProxy = "haproxy"
)

// Ingresses lists the values Config.Ingress accepts besides "".
var Ingresses = []string{IngressHAProxy}

// IngressNode is the node name of the ingress's dataplane events: the
// proxy is an actor of its own, not the lab node's kube-proxy.
const IngressNode = "haproxy"

// ingressPollEvery is how often the proxy's own view (show servers state)
// is read back: the resolution of its removal times.
const ingressPollEvery = 20 * time.Millisecond

// IngressResult is what the ingress in front of a run logged, and how its
// log and the client's own failures were stored.
type IngressResult struct {
	Kind    string         // IngressHAProxy
	Addr    netip.AddrPort // the frontend the load went to
	Backend string         // ns_service_port
	// Failures are the failed requests of the proxy's access log, as the
	// haproxy format read them (the pod is Backend, the mechanism the
	// termination state).
	Failures []IngressFailure
	// Imported is the import's summary of the access log.
	Imported ingest.Summary
	// ClientMatched counts the client's failures that were the same
	// requests as a failure of the proxy's log (stored once: the proxy's
	// record, which names the pod); ClientOnly those the proxy's log has
	// no failure for (stored as the client's).
	ClientMatched, ClientOnly int
	// SyncErrors counts runtime-API updates that failed.
	SyncErrors int
}

// IngressFailure is one failed request of the proxy's log.
type IngressFailure struct {
	Time        time.Time      // the request's end (accept date + Ta)
	Duration    time.Duration  // Ta
	Client      netip.AddrPort // %ci:%cp, the client's side of its connection to the proxy
	Backend     netip.AddrPort // %si:%sp, the pod
	Status      int
	Termination string // %tsc, e.g. SC--
	Class       string // the class the haproxy format gave it
}

// ingressRun is a running ingress for one run: HAProxy, the EndpointSlice
// watch that sets its slots, and the poller of its own view.
type ingressRun struct {
	h        *ingress.HAProxy
	dir      string
	service  string
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	factory  informers.SharedInformerFactory
	stopOnce sync.Once

	mu      sync.Mutex
	syncErr []error
}

// DefaultIngressSync is the ingress's default sync period
// (Config.IngressSync, drainscope lab --ingress-sync): ingress controllers
// apply the EndpointSlice changes they saw in batches, not each as it
// comes (HAProxy's Kubernetes ingress controller every --sync-period,
// ingress-nginx at most a few times a second), so a pod stays in the
// proxy's rotation for up to that long after its endpoint left.
const DefaultIngressSync = time.Second

// syncDesc says how the ingress applies the EndpointSlice changes.
func syncDesc(every time.Duration) string {
	if every <= 0 {
		return "as each change comes"
	}
	return fmt.Sprintf("every %v", every)
}

// startIngress starts HAProxy for the Service ns/name (port 80 → the
// pods' port http) with slots server slots, listening on the bridge's
// address, its slots following the Service's EndpointSlices from a
// client-go watch (the changes applied every syncEvery, or as each comes
// when it is 0), its own view recorded as the dataplane events of node
// IngressNode.
func startIngress(ctx context.Context, c *Cluster, kind, name string, slots int, syncEvery time.Duration) (*ingressRun, error) {
	if kind != IngressHAProxy {
		return nil, fmt.Errorf("ingress %q: want one of %v", kind, Ingresses)
	}
	dir := filepath.Join(k8sDir, "ingress-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// A free port on the bridge's address: the lab's own, which the
	// pods see as the proxy's when it connects to them.
	ln, err := net.Listen("tcp", netip.AddrPortFrom(c.net.Gateway.Addr(), 0).String())
	if err != nil {
		return nil, fmt.Errorf("finding a port for the ingress: %w", err)
	}
	listen := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	backend := fmt.Sprintf("%s_%s_80", Namespace, name)
	h, err := ingress.StartHAProxy(ctx, dir, listen, backend, slots)
	if err != nil {
		return nil, err
	}
	ictx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ir := &ingressRun{h: h, dir: dir, service: name, cancel: cancel}
	ir.wg.Add(1)
	go func() {
		defer ir.wg.Done()
		_ = h.Watch(ictx, ingressPollEvery, IngressNode, Namespace, name, c.Record)
	}()
	ir.factory = informers.NewSharedInformerFactoryWithOptions(c.Client, 0,
		informers.WithNamespace(Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = discoveryv1.LabelServiceName + "=" + name
		}))
	inf := ir.factory.Discovery().V1().EndpointSlices()
	lister := inf.Lister().EndpointSlices(Namespace)
	resync := func() {
		sl, err := lister.List(klabels.Everything())
		if err != nil {
			ir.fail(err)
			return
		}
		if err := h.SetEndpoints(readyEndpoints(sl)); err != nil {
			ir.fail(err)
			c.log.Warn("ingress: setting server slots", "service", name, "err", err)
		}
	}
	// The handlers only note a change; one goroutine applies them, in
	// order.
	changed := make(chan struct{}, 1)
	note := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: note, UpdateFunc: func(any, any) { note(nil) }, DeleteFunc: note,
	}); err != nil {
		ir.stop()
		return nil, err
	}
	ir.factory.Start(ictx.Done())
	for typ, ok := range ir.factory.WaitForCacheSync(ictx.Done()) {
		if !ok {
			ir.stop()
			return nil, fmt.Errorf("ingress: the %v watch did not sync", typ)
		}
	}
	ir.wg.Add(1)
	go func() {
		defer ir.wg.Done()
		applyChanges(ictx, changed, syncEvery, resync)
	}()
	return ir, nil
}

// applyChanges calls apply once, then after each change noted on changed:
// at once when every is 0, else at the next tick of every that follows it
// (several changes between two ticks are applied together). It returns
// when ctx ends.
func applyChanges(ctx context.Context, changed <-chan struct{}, every time.Duration, apply func()) {
	apply()
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	pending := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			if tick == nil {
				apply()
			} else {
				pending = true
			}
		case <-tick:
			if pending {
				pending = false
				apply()
			}
		}
	}
}

func (ir *ingressRun) fail(err error) {
	ir.mu.Lock()
	ir.syncErr = append(ir.syncErr, err)
	ir.mu.Unlock()
}

// readyEndpoints are the ready endpoints of a Service's slices, on the
// port named http (the sample service's), as ingress controllers take
// them: terminating and not-ready endpoints are left out.
func readyEndpoints(slices_ []*discoveryv1.EndpointSlice) []netip.AddrPort {
	var out []netip.AddrPort
	for _, s := range slices_ {
		var port int32
		for _, p := range s.Ports {
			if p.Port != nil && (p.Name != nil && *p.Name == "http" || port == 0) {
				port = *p.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil {
					out = append(out, netip.AddrPortFrom(ip, uint16(port)))
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return slices.Compact(out)
}

// stop ends the watch and the poller, then HAProxy (a soft stop that lets
// it write its last log lines). Safe to call more than once.
func (ir *ingressRun) stop() {
	ir.stopOnce.Do(func() {
		ir.cancel()
		if ir.factory != nil {
			ir.factory.Shutdown()
		}
		ir.wg.Wait()
		ir.h.Close()
	})
}

// waitRouted waits until the proxy's own view holds replicas servers,
// then asks it on new connections until every one of the pods has
// answered through it. Asked before its slots held them (up to a sync
// period after the pods were ready), it would answer 503 with no server,
// and log those as the run's failures.
func (ir *ingressRun) waitRouted(ctx context.Context, c *Cluster, replicas int) error {
	for {
		in, err := ir.h.ServersState()
		if err == nil && len(in) >= replicas {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: the proxy routes to %d of %d replicas (last error: %v)", ctx.Err(), len(in), replicas, err)
		case <-time.After(ingressPollEvery):
		}
	}
	return waitServed(ctx, c, ir.h.Listen, replicas)
}

// importLog stores the proxy's access log through the haproxy format (its
// failures, each on the pod its server address names) and returns the
// client's failures that are not among them. A request the client saw
// fail and the proxy logged as failed is one failure: the proxy's record
// is kept, as it names the pod and the mechanism (the termination state);
// the client's record of it is dropped. The two are the same request
// when the proxy's client address is the client's local address and the
// proxy's end is within a second of the client's.
func (ir *ingressRun) importLog(ctx context.Context, c *Cluster, client []load.Failure) (IngressResult, []load.Failure, error) {
	res := IngressResult{Kind: IngressHAProxy, Addr: ir.h.Listen, Backend: ir.h.Backend}
	ir.mu.Lock()
	res.SyncErrors = len(ir.syncErr)
	ir.mu.Unlock()
	f, err := os.Open(ir.h.AccessLog)
	if err != nil {
		return res, client, err
	}
	defer f.Close()
	parse := func(r io.Reader, emit ingest.Emit) error {
		return ingest.ParseHAProxy(r, ingest.Options{}, func(rec *ingest.Record) error {
			if rec.Err == nil && rec.Failed {
				be, _ := netip.ParseAddrPort(rec.Backend)
				res.Failures = append(res.Failures, IngressFailure{
					Time: time.Unix(0, rec.Time).UTC(), Duration: rec.Duration, Client: rec.Client, Backend: be,
					Status: rec.Status, Termination: rec.Attrs[ingest.AttrTermination], Class: rec.Reason,
				})
			}
			return emit(rec)
		})
	}
	// The pod and endpoint events must be in the store for the import to
	// resolve the server addresses to pods.
	c.Sync()
	im := &ingest.Importer{Store: c.opts.Store, Parser: parse}
	sum, err := im.Import(ctx, "haproxy access log "+ir.h.Backend, f)
	if sum != nil {
		res.Imported = *sum
	}
	if err != nil {
		return res, client, err
	}
	var kept []load.Failure
	res.ClientMatched, kept = sameRequests(res.Failures, client)
	res.ClientOnly = len(kept)
	return res, kept, nil
}

// sameRequests pairs each client failure with the proxy's failed request
// that was the same request: the proxy's client address is the client's
// local address and the proxy's end is within a second of the client's
// (the closest such, each proxy record used once). It returns how many
// were paired and the client's failures left over.
func sameRequests(proxy []IngressFailure, client []load.Failure) (matched int, kept []load.Failure) {
	used := make([]bool, len(proxy))
	for _, cf := range client {
		best := -1
		var bestD time.Duration
		for i, pf := range proxy {
			if used[i] || pf.Client != cf.Local {
				continue
			}
			d := pf.Time.Sub(cf.Time).Abs()
			if d <= time.Second && (best < 0 || d < bestD) {
				best, bestD = i, d
			}
		}
		if best >= 0 {
			used[best] = true
			matched++
			continue
		}
		kept = append(kept, cf)
	}
	return matched, kept
}

// Line is one line about what the ingress of a run logged.
func (r IngressResult) Line() string {
	byTerm := map[string]int{}
	var terms []string
	for _, f := range r.Failures {
		k := fmt.Sprintf("%d %s", f.Status, f.Termination)
		if byTerm[k] == 0 {
			terms = append(terms, k)
		}
		byTerm[k]++
	}
	slices.Sort(terms)
	s := fmt.Sprintf("%s at %s: %d requests logged, %d failed", r.Kind, r.Addr, r.Imported.Lines, len(r.Failures))
	for i, t := range terms {
		if i == 0 {
			s += " ("
		} else {
			s += ", "
		}
		s += fmt.Sprintf("%d× %s", byTerm[t], t)
		if i == len(terms)-1 {
			s += ")"
		}
	}
	s += fmt.Sprintf("; client failures: %d the proxy logged (stored once, as the proxy's record), %d it did not", r.ClientMatched, r.ClientOnly)
	if r.SyncErrors > 0 {
		s += fmt.Sprintf("; %d runtime-API updates failed", r.SyncErrors)
	}
	return s
}

// PreflightIngress checks that the ingress kind can run on this machine.
func PreflightIngress(kind string) error {
	if kind != IngressHAProxy {
		return fmt.Errorf("ingress %q: want one of %v", kind, Ingresses)
	}
	if _, err := ingress.Binary(); err != nil {
		return fmt.Errorf("--ingress %s: %w", kind, err)
	}
	return nil
}
