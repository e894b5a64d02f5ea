package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/drainscope/drainscope/event"
)

// PodPlace is a pod and the node it is (or was) bound to; Node is empty
// while the pod is not scheduled.
type PodPlace struct {
	Namespace, Name, UID, Node string
}

// AddrTenure is a pod's hold on an address, in UTC nanoseconds: From its
// creation (or, for an address it took later, when the index saw it),
// To when the index saw it give the address up, end (its phase Succeeded
// or Failed) or go; To is 0 while it holds the address.
type AddrTenure struct {
	Pod      PodPlace
	From, To int64
}

// PodLocator says where a pod runs, for the check that an event's pod is
// on the node of the agent that sends it, and which pods held an address,
// for the check that an event's local address is one of that node's.
type PodLocator interface {
	// Place finds the pod ref names: by UID when it has one, else by
	// namespace/name. ok is false when the pod is not known. err is the
	// locator's own failure (not yet synced), answered 503.
	Place(ref event.PodRef) (p PodPlace, ok bool, err error)
	// Holders lists the pods known to hold ip or to have held it (as long
	// as the locator remembers them), with their tenures. err as Place's.
	Holders(ip netip.Addr) ([]AddrTenure, error)
}

// DefaultPodRetain is how long PodIndex remembers a deleted pod's node:
// the late kernel events of a pod that has ended (its exit, the resets of
// its connections) are still checked for that long.
const DefaultPodRetain = time.Hour

// errNotSynced is PodIndex's answer before its first list.
var errNotSynced = errors.New("the server's pod index has not listed the pods yet")

// PodIndex is a PodLocator over one watch of every pod in the cluster,
// kept as namespace, name, UID, node and addresses only, with deleted pods
// remembered for Retain. With the watch's own cache of those stripped pod
// objects it takes about 1.8 KB a pod, 276 MB for 150,000 (the index 510
// bytes of it; 1.6 KB before it kept addresses). A pod's node never changes once it is bound (spec.nodeName is
// immutable), so what the index knows of a UID stays true. An address is
// held from the pod's creation until the index sees the pod give it up,
// end or go; a host-network pod's address is its node's, and so is known
// as that node's. Lookups cost a map access, never a request to the API
// server.
//
// The server needs list and watch on pods in every namespace.
type PodIndex struct {
	Client  kubernetes.Interface
	Retain  time.Duration // 0: DefaultPodRetain
	MaxGone int           // deleted pods remembered at most; 0: 200,000
	Now     func() time.Time
	Log     *slog.Logger // says when the first list is in; nil: nothing

	mu     sync.RWMutex
	synced bool
	byUID  map[string]*podEntry
	byName map[string]string // namespace/name → the UID of its newest pod
	byIP   map[netip.Addr][]*tenure
	gone   []goneEntry // deleted pods, oldest first
}

type podEntry struct {
	PodPlace
	deleted bool
	created int64     // metadata.creationTimestamp, UTC ns; 0 when not known
	held    []*tenure // the addresses it holds or held, each in byIP
}

// tenure is one pod's hold on one address; to is 0 while it holds it.
type tenure struct {
	pod      *podEntry
	ip       netip.Addr
	from, to int64
}

// maxTenures bounds the addresses one pod is remembered to have held: a
// pod has one per IP family, and a new one only when its sandbox is
// made again.
const maxTenures = 8

type goneEntry struct {
	uid string
	at  time.Time
}

func (x *PodIndex) now() time.Time {
	if x.Now != nil {
		return x.Now()
	}
	return time.Now()
}

// Run watches the pods until ctx is done.
func (x *PodIndex) Run(ctx context.Context) error {
	began := time.Now()
	x.mu.Lock()
	if x.byUID == nil {
		x.byUID, x.byName, x.byIP = map[string]*podEntry{}, map[string]string{}, map[netip.Addr][]*tenure{}
	}
	x.mu.Unlock()
	f := informers.NewSharedInformerFactoryWithOptions(x.Client, 0, informers.WithTransform(stripToPlace))
	inf := f.Core().V1().Pods().Informer()
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { x.put(o) },
		UpdateFunc: func(_, o any) { x.put(o) },
		DeleteFunc: x.del,
	})
	if err != nil {
		return err
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	// The handler's own sync, not the informer's: a shared informer hands
	// the listed pods to its handlers afterwards, and until the index holds
	// them all, a kernel event about a pod on another node would pass as
	// one whose pod is not known yet.
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		return ctx.Err()
	}
	x.mu.Lock()
	x.synced = true
	x.mu.Unlock()
	if x.Log != nil {
		live, _ := x.Len()
		x.Log.Info("agent events: the pod index has listed the cluster's pods", "pods", live, "took", time.Since(began).Round(time.Millisecond))
	}
	<-ctx.Done()
	return nil
}

// Ready is nil once the index has listed the pods, and the reason it
// cannot check an agent's events before.
func (x *PodIndex) Ready() error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if !x.synced {
		return errNotSynced
	}
	return nil
}

// WaitForSync waits until the index has listed the pods once.
func (x *PodIndex) WaitForSync(ctx context.Context) error {
	for x.Ready() != nil {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the pod index did not sync: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// stripToPlace keeps of a pod what the index reads.
func stripToPlace(o any) (any, error) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return o, nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion,
			CreationTimestamp: p.CreationTimestamp},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
	}, nil
}

// podAddrs reads the addresses a pod holds: none once it has ended (the
// object keeps them, the network has taken them back).
func podAddrs(p *corev1.Pod) []netip.Addr {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return nil
	}
	var out []netip.Addr
	add := func(s string) {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return
		}
		if ip = ip.Unmap(); !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	add(p.Status.PodIP)
	for _, a := range p.Status.PodIPs {
		add(a.IP)
	}
	return out
}

func (x *PodIndex) put(o any) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	uid := string(p.UID)
	now := x.now().UnixNano()
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.byUID[uid]
	if e == nil {
		e = &podEntry{}
		x.byUID[uid] = e
	}
	e.PodPlace = PodPlace{Namespace: p.Namespace, Name: p.Name, UID: uid, Node: p.Spec.NodeName}
	if !p.CreationTimestamp.IsZero() {
		e.created = p.CreationTimestamp.UnixNano()
	}
	x.byName[p.Namespace+"/"+p.Name] = uid
	x.hold(e, podAddrs(p), now)
}

// hold records that e holds ips from now on and no other address: the
// tenures of the others end now. A pod's first addresses are held from
// its creation, the API server's time, which an event about it cannot
// precede; an address taken later, from now.
func (x *PodIndex) hold(e *podEntry, ips []netip.Addr, now int64) {
	for _, t := range e.held {
		if t.to == 0 && !slices.Contains(ips, t.ip) {
			t.to = now
		}
	}
	for _, ip := range ips {
		if slices.ContainsFunc(e.held, func(t *tenure) bool { return t.to == 0 && t.ip == ip }) || len(e.held) >= maxTenures {
			continue
		}
		from := now
		if len(e.held) == 0 && e.created > 0 && e.created < now {
			from = e.created
		}
		t := &tenure{pod: e, ip: ip, from: from}
		e.held = append(e.held, t)
		x.byIP[ip] = append(x.byIP[ip], t)
	}
}

func (x *PodIndex) del(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	uid := string(p.UID)
	now := x.now()
	x.mu.Lock()
	defer x.mu.Unlock()
	if e := x.byUID[uid]; e != nil {
		if e.Node == "" {
			e.Node = p.Spec.NodeName
		}
		e.deleted = true
		x.hold(e, nil, now.UnixNano())
	} else {
		x.byUID[uid] = &podEntry{PodPlace: PodPlace{Namespace: p.Namespace, Name: p.Name, UID: uid, Node: p.Spec.NodeName}, deleted: true}
	}
	x.gone = append(x.gone, goneEntry{uid: uid, at: now})
	x.prune(now)
}

// prune forgets the deleted pods older than Retain, and the oldest past
// MaxGone.
func (x *PodIndex) prune(now time.Time) {
	retain := x.Retain
	if retain <= 0 {
		retain = DefaultPodRetain
	}
	max := x.MaxGone
	if max <= 0 {
		max = 200000
	}
	n := 0
	for n < len(x.gone) && (len(x.gone)-n > max || now.Sub(x.gone[n].at) > retain) {
		uid := x.gone[n].uid
		if e := x.byUID[uid]; e != nil && e.deleted {
			delete(x.byUID, uid)
			key := e.Namespace + "/" + e.Name
			if x.byName[key] == uid {
				delete(x.byName, key)
			}
			for _, t := range e.held {
				ts := slices.DeleteFunc(x.byIP[t.ip], func(u *tenure) bool { return u == t })
				if len(ts) == 0 {
					delete(x.byIP, t.ip)
				} else {
					x.byIP[t.ip] = ts
				}
			}
		}
		n++
	}
	if n > 0 {
		x.gone = append(x.gone[:0], x.gone[n:]...)
	}
}

// Len reports how many pods the index knows: live ones, and deleted ones
// it still remembers.
func (x *PodIndex) Len() (live, gone int) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, e := range x.byUID {
		if e.deleted {
			gone++
		} else {
			live++
		}
	}
	return live, gone
}

// Place implements PodLocator.
func (x *PodIndex) Place(ref event.PodRef) (PodPlace, bool, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if !x.synced {
		return PodPlace{}, false, errNotSynced
	}
	uid := ref.UID
	if uid == "" {
		uid = x.byName[ref.Namespace+"/"+ref.Name]
	}
	if e := x.byUID[uid]; e != nil {
		return e.PodPlace, true, nil
	}
	return PodPlace{}, false, nil
}

// Holders implements PodLocator.
func (x *PodIndex) Holders(ip netip.Addr) ([]AddrTenure, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if !x.synced {
		return nil, errNotSynced
	}
	ts := x.byIP[ip.Unmap()]
	if len(ts) == 0 {
		return nil, nil
	}
	out := make([]AddrTenure, len(ts))
	for i, t := range ts {
		out[i] = AddrTenure{Pod: t.pod.PodPlace, From: t.from, To: t.to}
	}
	return out, nil
}
