package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// PodLocator says where a pod runs, for the check that a kernel event's
// pod is on the node of the agent that sends it.
type PodLocator interface {
	// Place finds the pod ref names: by UID when it has one, else by
	// namespace/name. ok is false when the pod is not known. err is the
	// locator's own failure (not yet synced), answered 503.
	Place(ref event.PodRef) (p PodPlace, ok bool, err error)
}

// DefaultPodRetain is how long PodIndex remembers a deleted pod's node:
// the late kernel events of a pod that has ended (its exit, the resets of
// its connections) are still checked for that long.
const DefaultPodRetain = time.Hour

// errNotSynced is PodIndex's answer before its first list.
var errNotSynced = errors.New("the server's pod index has not listed the pods yet")

// PodIndex is a PodLocator over one watch of every pod in the cluster,
// kept as namespace, name, UID and node only (some 200 bytes a pod: about
// 30 MB for 150,000 pods), with deleted pods remembered for Retain. A
// pod's node never changes once it is bound (spec.nodeName is immutable),
// so what the index knows of a UID stays true. Lookups cost a map access,
// never a request to the API server.
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
	gone   []goneEntry       // deleted pods, oldest first
}

type podEntry struct {
	PodPlace
	deleted bool
}

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
		x.byUID, x.byName = map[string]*podEntry{}, map[string]string{}
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
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion},
		Spec:       corev1.PodSpec{NodeName: p.Spec.NodeName},
	}, nil
}

func (x *PodIndex) put(o any) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	uid := string(p.UID)
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.byUID[uid]
	if e == nil {
		e = &podEntry{}
		x.byUID[uid] = e
	}
	e.PodPlace = PodPlace{Namespace: p.Namespace, Name: p.Name, UID: uid, Node: p.Spec.NodeName}
	x.byName[p.Namespace+"/"+p.Name] = uid
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
