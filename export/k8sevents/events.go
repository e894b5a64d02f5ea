// Package k8sevents puts a Kubernetes Event on each workload whose disruption
// dropped requests. It is a sink of the export feed, and `kubectl describe`
// shows the Event: reason DroppedRequests, type Warning, the failures by cause
// and the fix in the message. Each Event's name is derived from the
// disruption's key, so a second create of it (after a restart, or from another
// server) is refused as AlreadyExists: Events are deduplicated by the API
// server itself.
package k8sevents

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/drainscope/drainscope/analysis"
	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/export"
)

// Reason is every Event's reason.
const Reason = "DroppedRequests"

// Component is the Events' source.component.
const Component = "drainscope"

// Options configure a Sink.
type Options struct {
	Client kubernetes.Interface
	// Every and Burst bound the Events created, for all workloads
	// together: one per Every on average, Burst at once. Defaults 6 s and
	// 10. A disruption over the limit waits for a later poll.
	Every time.Duration
	Burst int
	// PerWorkload is the shortest time between two Events on one
	// workload (a crash-looping pod ends a disruption every few seconds).
	// Default 1 min.
	PerWorkload time.Duration
	// Host is the Events' source.host (the server's pod name).
	Host string
	Now  func() time.Time
	Log  *slog.Logger
}

// Sink creates Events. Safe for one feed.
type Sink struct {
	o   Options
	lim *rate.Limiter

	mu   sync.Mutex
	last map[string]time.Time // workload → its last Event
}

// New returns a Sink.
func New(o Options) *Sink {
	if o.Every <= 0 {
		o.Every = 6 * time.Second
	}
	if o.Burst <= 0 {
		o.Burst = 10
	}
	if o.PerWorkload <= 0 {
		o.PerWorkload = time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Sink{o: o, lim: rate.NewLimiter(rate.Every(o.Every), o.Burst), last: map[string]time.Time{}}
}

// Name implements export.Sink.
func (s *Sink) Name() string { return "events" }

// Idempotent implements export.Sink: the Event's name dedupes.
func (s *Sink) Idempotent() bool { return true }

// apiVersions of the workloads an Event can name.
var apiVersions = map[string]string{
	"Deployment": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1", "ReplicaSet": "apps/v1",
	"Job": "batch/v1",
}

// Deliver implements export.Sink: one Event per disruption with failures
// or kernel evidence of them, on its workload.
func (s *Sink) Deliver(ctx context.Context, d *analysis.Disruption) error {
	if !d.HasFailures() {
		return nil
	}
	api, ok := apiVersions[d.Kind]
	if !ok || d.Name == "" {
		s.o.Log.Debug("export: no Event for a disruption of no workload an Event can name", "disruption", d.ID, "kind", d.Kind)
		return nil
	}
	wl := d.Namespace + "/" + d.Kind + "/" + d.Name
	now := s.o.Now()
	s.mu.Lock()
	last, seen := s.last[wl]
	s.mu.Unlock()
	if seen && now.Sub(last) < s.o.PerWorkload {
		return fmt.Errorf("%w: an Event on %s %s ago", export.ErrDeferred, wl, now.Sub(last).Round(time.Second))
	}
	if !s.lim.AllowN(now, 1) {
		return fmt.Errorf("%w: Event rate limit", export.ErrDeferred)
	}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: Name(d), Namespace: d.Namespace,
			Annotations: map[string]string{"drainscope.dev/disruption": d.ID}},
		InvolvedObject: corev1.ObjectReference{Kind: d.Kind, APIVersion: api, Namespace: d.Namespace, Name: d.Name, UID: types.UID(d.UID)},
		Reason:         Reason,
		Message:        Message(d),
		Type:           corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: Component, Host: s.o.Host},
		FirstTimestamp: metav1.NewTime(time.Unix(0, d.From)),
		LastTimestamp:  metav1.NewTime(time.Unix(0, d.Until)),
		Count:          1,
	}
	_, err := s.o.Client.CoreV1().Events(d.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		s.o.Log.Debug("export: the disruption's Event exists already", "event", ev.Name, "disruption", d.ID)
		return nil
	case err != nil:
		return fmt.Errorf("creating Event %s/%s: %w", d.Namespace, ev.Name, err)
	}
	s.mu.Lock()
	s.last[wl] = now
	for k, t := range s.last { // bounded by the workloads of the last minute
		if now.Sub(t) >= s.o.PerWorkload {
			delete(s.last, k)
		}
	}
	s.mu.Unlock()
	s.o.Log.Info("export: Event created", "event", d.Namespace+"/"+ev.Name, "workload", wl, "failures", d.Failures, "inferred", d.Inferred)
	return nil
}

// Name is the Event's name for a disruption: the workload's name and a
// hash of the disruption's key, the same on every server and after a
// restart.
func Name(d *analysis.Disruption) string {
	h := fnv.New64a()
	h.Write([]byte(d.ID))
	suffix := fmt.Sprintf(".drainscope.%016x", h.Sum64())
	name := strings.ToLower(d.Name)
	if max := 253 - len(suffix); len(name) > max {
		name = strings.TrimRight(name[:max], ".-")
	}
	return name + suffix
}

// MaxMessage bounds the message (the events.k8s.io note's limit).
const MaxMessage = 1024

// Message says what the disruption cost, by cause, and the fix of each
// cause, with the timeline's link.
func Message(d *analysis.Disruption) string {
	var b strings.Builder
	what := d.Words().Noun
	pods := fmt.Sprintf("%d pods replaced", len(d.Replaced))
	if len(d.Replaced) == 1 {
		pods = "1 pod replaced"
	}
	if d.Failures > 0 {
		fmt.Fprintf(&b, "%d requests failed in the %s of %s (%s): %s.", d.Failures, what, d.Workload(), pods, d.CountsByCause(false))
		if d.Inferred > 0 {
			fmt.Fprintf(&b, " The pods' kernel events alone show %d (%d of them likely).", d.Inferred, d.Likely)
		}
	} else {
		fmt.Fprintf(&b, "Kernel evidence shows %d failed requests (%d likely) in the %s of %s (%s): %s.", d.Inferred, d.Likely, what, d.Workload(), pods, d.CountsByCause(true))
	}
	for _, c := range d.Causes {
		if c.Fix != "" && (c.Failures > 0 || (d.Failures == 0 && c.Inferred > 0)) {
			fmt.Fprintf(&b, " Fix for %s: %s", c.Title, strings.TrimSpace(c.Fix))
			if !strings.HasSuffix(c.Fix, ".") {
				b.WriteByte('.')
			}
		}
	}
	link := ""
	if d.Link != "" {
		link = " Timeline: " + d.Link
	}
	// Names and fixes came from the cluster and clients' logs: kubectl
	// describe and every Event viewer show them (event.Display).
	msg := event.Display(b.String(), -1)
	if room := MaxMessage - len(link); len(msg) > room {
		msg = truncate(msg, room-len("…")) + "…"
	}
	return msg + link
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
