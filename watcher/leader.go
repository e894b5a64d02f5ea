package watcher

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
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

	// Standby, when set, makes this watcher a far standby: it reads the
	// Lease once every Standby and campaigns (with the timings above) only
	// while nobody holds it, going back to reading it once another holds
	// it again. A candidate reads the Lease every RetryPeriod: with every
	// node of a 5,000-node cluster a candidate, that is 2,500 reads a
	// second of one object (each a quorum read from etcd) to learn that
	// nothing changed. A few candidates and far standbys for the rest
	// bound that, and a cluster whose candidates are all gone still gets
	// a leader within Standby and the Lease's duration; the standby keeps
	// the endpoint events of that gap (see standbyBuffer) and delivers them
	// at its takeover.
	Standby time.Duration
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

// takeoverGap is the longest time between the old holder's last renewal
// and this watcher's takeover: what its standby buffer must hold.
func (o LeaseOptions) takeoverGap() time.Duration {
	return o.duration() + o.renewDeadline() + o.Standby
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
	var seen leaseSeen
	for ctx.Err() == nil {
		stale := ""
		if o.Standby > 0 {
			var free bool
			if free, stale = w.leaseFree(ctx, lock, id, &seen); !free {
				continue
			}
		}
		if !w.campaign(ctx, lock, id, stale) {
			return
		}
		if ctx.Err() == nil && o.Standby == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(o.RetryPeriod):
			}
		}
	}
}

// leaseSeen is a far standby's last reading of the Lease: the holder and
// renewal it named, and when this node first saw that renewal.
type leaseSeen struct {
	holder string
	renew  time.Time
	since  time.Time
}

// leaseFree waits a far standby's period, then reads the Lease once and
// tells whether nobody holds it: absent, released, or its renewal unchanged
// for the lease's duration by this node's clock (as client-go's elector
// judges it: the holder's clock may be off). stale is the holder of a
// lease that expired, whose identity the election will report until
// another takes it. An error reading it counts as held: the next read
// asks again.
func (w *Watcher) leaseFree(ctx context.Context, lock *observingLock, id string, seen *leaseSeen) (free bool, stale string) {
	o := w.opts.Lease
	select {
	case <-ctx.Done():
		return false, ""
	case <-time.After(wait.Jitter(o.Standby, 0.2)):
	}
	r, _, err := lock.Get(ctx)
	switch {
	case apierrors.IsNotFound(err):
		return true, ""
	case err != nil:
		w.log.Debug("reading the lease", "lease", o.Namespace+"/"+o.Name, "err", err)
		return false, ""
	}
	if r.HolderIdentity == "" || r.HolderIdentity == id {
		return true, ""
	}
	now := time.Now()
	if r.HolderIdentity != seen.holder || !r.RenewTime.Time.Equal(seen.renew) {
		*seen = leaseSeen{holder: r.HolderIdentity, renew: r.RenewTime.Time, since: now}
		return false, ""
	}
	if now.Sub(seen.since) <= time.Duration(r.LeaseDurationSeconds)*time.Second {
		return false, ""
	}
	return true, r.HolderIdentity
}

// campaign runs one leader election until ctx ends or the lease is lost;
// a far standby's ends too as soon as another holds the Lease: a holder
// other than stale, the expired one, which the election reports first. It
// reports false when the election could not be set up.
func (w *Watcher) campaign(ctx context.Context, lock *observingLock, id, stale string) bool {
	o := w.opts.Lease
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
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
				if o.Standby > 0 && holder != id && holder != stale {
					cancel() // another leads: back to reading the Lease now and then
				}
			},
		},
	})
	if err != nil {
		w.log.Error("leader election", "err", err)
		return false
	}
	le.Run(cctx)
	return true
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
