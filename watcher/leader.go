package watcher

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drainscope/drainscope/event"
)

// LeaseOptions configure the Lease that elects the EndpointSlice recorder
// in Leader mode. The agent's service account needs get, create and update
// on coordination.k8s.io leases in Namespace.
type LeaseOptions struct {
	Namespace string // default $POD_NAMESPACE, else "default"
	Name      string // default "drainscope-endpointslices"
	Identity  string // default the watcher's Node

	// Timings as client-go's leaderelection takes them; defaults 15 s, 10 s
	// and 2 s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

func (o *LeaseOptions) check() error {
	if o.Namespace == "" {
		o.Namespace = os.Getenv("POD_NAMESPACE")
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.Name == "" {
		o.Name = "drainscope-endpointslices"
	}
	if o.RetryPeriod == 0 {
		o.RetryPeriod = 2 * time.Second
	}
	if o.LeaseDuration != 0 && o.RenewDeadline != 0 && o.RenewDeadline >= o.LeaseDuration {
		return errors.New("watcher: lease RenewDeadline must be shorter than LeaseDuration")
	}
	return nil
}

func (o LeaseOptions) duration() time.Duration {
	if o.LeaseDuration == 0 {
		return 15 * time.Second
	}
	return o.LeaseDuration
}

func (o LeaseOptions) renewDeadline() time.Duration {
	if o.RenewDeadline == 0 {
		return 10 * time.Second
	}
	return o.RenewDeadline
}

// standbyBuffer keeps the endpoint events a standby observed during the last
// window, so that a takeover can deliver those the old leader may not have
// recorded: the ones after its last renewal.
type standbyBuffer struct {
	window time.Duration
	events []event.Event // events[head:] are within the window
	head   int
}

// add appends e and forgets the events older than the window. The dropped
// prefix is reclaimed only once it is half the slice, so each event is
// moved at most once on average, not once per add.
func (b *standbyBuffer) add(e event.Event) {
	b.events = append(b.events, e)
	cut := e.Time - int64(b.window)
	for b.head < len(b.events) && b.events[b.head].Time < cut {
		b.events[b.head] = event.Event{} // let the collector have its strings
		b.head++
	}
	if b.head > len(b.events)/2 {
		b.events = append(b.events[:0], b.events[b.head:]...)
		b.head = 0
	}
}

// after removes and returns the buffered events later than t.
func (b *standbyBuffer) after(t int64) []event.Event {
	var out []event.Event
	for _, e := range b.events[b.head:] {
		if e.Time > t {
			out = append(out, e)
		}
	}
	b.events, b.head = nil, 0
	return out
}

// observingLock records the last lease record held by someone else, so a
// new leader knows when the old one last renewed.
type observingLock struct {
	resourcelock.Interface
	mu   sync.Mutex
	prev resourcelock.LeaderElectionRecord
}

func (l *observingLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	r, raw, err := l.Interface.Get(ctx)
	if err == nil && r != nil && r.HolderIdentity != l.Identity() {
		l.mu.Lock()
		l.prev = *r
		l.mu.Unlock()
	}
	return r, raw, err
}

func (l *observingLock) previous() resourcelock.LeaderElectionRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.prev
}

// runElection campaigns for the Lease until ctx ends, switching
// EndpointSlice recording on while this watcher leads.
func (w *Watcher) runElection(ctx context.Context) {
	o := w.opts.Lease
	id := o.Identity
	if id == "" {
		id = w.opts.Node
	}
	lock := &observingLock{Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name},
		Client:     w.cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   o.duration(),
			RenewDeadline:   o.renewDeadline(),
			RetryPeriod:     o.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            "drainscope-endpointslices",
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) {
					w.takeOver(lock.previous())
					// The state as of now: standbys keep no observation.
					w.observe(w.svcs)
				},
				OnStoppedLeading: func() {
					w.leading.Store(false)
					w.log.Info("stopped recording EndpointSlices: lost the lease", "lease", o.Namespace+"/"+o.Name)
				},
				OnNewLeader: func(holder string) {
					w.log.Info("EndpointSlice recorder", "holder", holder, "me", holder == id)
				},
			},
		})
		if err != nil {
			w.log.Error("leader election", "err", err)
			return
		}
		le.Run(ctx)
		if ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(o.RetryPeriod):
			}
		}
	}
}

// takeOver starts recording. Endpoint events observed while on standby
// after the previous holder's last renewal (or release) are delivered now:
// the old leader may have died before recording them.
func (w *Watcher) takeOver(prev resourcelock.LeaderElectionRecord) {
	w.emitMu.Lock()
	defer w.emitMu.Unlock()
	since := int64(0)
	if !prev.RenewTime.IsZero() {
		since = prev.RenewTime.UnixNano()
	}
	late := w.standby.after(since)
	w.leading.Store(true)
	w.log.Info("recording EndpointSlices: acquired the lease", "previous", prev.HolderIdentity, "recovered", len(late))
	for i := range late {
		w.deliver(&late[i])
	}
}
