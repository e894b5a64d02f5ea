package scenario

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drainscope/drainscope/lab/sampleapp"
)

// The long-lived sequence's later steps: what else a cluster that has run
// for days sees besides rollouts, scale-downs and evictions.

// minReady is the slow rollout's minReadySeconds.
func (p Profile) minReady() time.Duration {
	if p.MinReady > 0 {
		return p.MinReady
	}
	return DefaultMinReady
}

// stepServiceDelete deletes the pods' second Service and waits until its
// EndpointSlices are gone and the first Service still reaches every pod:
// the pods leave one Service and keep serving in the other.
func stepServiceDelete(ctx context.Context, c *Cluster, name string, p Profile) (Step, error) {
	st := Step{Name: StepServiceDelete}
	pods, err := runPods(ctx, c, LongLivedRun)
	if err != nil {
		return st, err
	}
	svc, err := c.Client.CoreV1().Services(Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return st, fmt.Errorf("reading the Service %s: %w", name, err)
	}
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil {
		return st, fmt.Errorf("service %s has no ClusterIP: %w", name, err)
	}
	canary := CanaryService(name)
	st.Start = time.Now()
	if err := c.Client.CoreV1().Services(Namespace).Delete(ctx, canary, metav1.DeleteOptions{}); err != nil {
		return st, fmt.Errorf("deleting the Service %s: %w", canary, err)
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		sl, err := c.Client.DiscoveryV1().EndpointSlices(Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + canary})
		if err == nil && len(sl.Items) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("waiting for the EndpointSlices of %s to go: %w", canary, ctx.Err())
		case <-t.C:
		}
	}
	if err := waitServed(ctx, c, netip.AddrPortFrom(ip, 80), len(pods)); err != nil {
		return st, fmt.Errorf("the Service %s after %s's deletion: %w", name, canary, err)
	}
	st.End = time.Now()
	st.Note = fmt.Sprintf("Service %s deleted, its EndpointSlices gone; %s still reaches all %d pods", canary, name, len(pods))
	return st, nil
}

// stepSlowRollout sets the Deployment's minReadySeconds and rolls it out:
// each old pod ends only once a new one has been ready that long, so the
// old pods end about minReadySeconds apart. It sets minReadySeconds back
// to 0 afterwards (a spec change that ends no pod), so the later steps
// are as quick as before.
func stepSlowRollout(ctx context.Context, c *Cluster, name string, p Profile) (Step, error) {
	st := Step{Name: StepSlowRollout}
	old, err := runPods(ctx, c, LongLivedRun)
	if err != nil {
		return st, err
	}
	minReady := p.minReady()
	st.Start, st.Pods = time.Now(), old
	if err := setMinReady(ctx, c, name, minReady); err != nil {
		return st, err
	}
	ends := trackEnds(ctx, c, old)
	if err := triggerRollout(ctx, c, name); err != nil {
		ends.result()
		return st, err
	}
	err = waitRolledOut(ctx, c, name, int32(len(old)), old)
	st.Ends = ends.result()
	if err != nil {
		return st, err
	}
	st.End = time.Now()
	st.Note = fmt.Sprintf("minReadySeconds %d: %d pods replaced, ended %s", int(minReady/time.Second), len(old), endOffsets(st))
	if err := setMinReady(ctx, c, name, 0); err != nil {
		return st, err
	}
	return st, nil
}

func setMinReady(ctx context.Context, c *Cluster, name string, d time.Duration) error {
	patch := fmt.Sprintf(`{"spec":{"minReadySeconds":%d}}`, int(d/time.Second))
	if _, err := c.Client.AppsV1().Deployments(Namespace).Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("setting minReadySeconds to %v: %w", d, err)
	}
	return nil
}

// stepPauseResume rolls the Deployment out, pauses it (kubectl rollout
// pause) as soon as its first old pod is seen ending, waits Profile.Gap
// and resumes it: the old pods end on both sides of the pause.
func stepPauseResume(ctx context.Context, c *Cluster, name string, p Profile) (Step, error) {
	st := Step{Name: StepPauseResume}
	old, err := runPods(ctx, c, LongLivedRun)
	if err != nil {
		return st, err
	}
	st.Start, st.Pods = time.Now(), old
	ends := trackEnds(ctx, c, old)
	defer ends.result()
	if err := triggerRollout(ctx, c, name); err != nil {
		return st, err
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for ends.count() == 0 {
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("waiting for the first old pod to end: %w", ctx.Err())
		case <-t.C:
		}
	}
	if err := setPaused(ctx, c, name, true); err != nil {
		return st, err
	}
	st.Paused = time.Now()
	endedAtPause := ends.count()
	if !sleepCtx(ctx, p.Gap) {
		return st, ctx.Err()
	}
	endedInPause := ends.count() - endedAtPause
	if err := setPaused(ctx, c, name, false); err != nil {
		return st, err
	}
	st.Resumed = time.Now()
	err = waitRolledOut(ctx, c, name, int32(len(old)), old)
	st.Ends = ends.result()
	if err != nil {
		return st, err
	}
	st.End = time.Now()
	st.Note = fmt.Sprintf("paused at +%.1fs with %d of %d old pods ended, %d more while paused, resumed at +%.1fs; %d pods replaced, ended %s",
		st.Paused.Sub(st.Start).Seconds(), endedAtPause, len(old), endedInPause, st.Resumed.Sub(st.Start).Seconds(), len(old), endOffsets(st))
	return st, nil
}

func setPaused(ctx context.Context, c *Cluster, name string, paused bool) error {
	patch := fmt.Sprintf(`{"spec":{"paused":%t}}`, paused)
	if _, err := c.Client.AppsV1().Deployments(Namespace).Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("setting paused to %t: %w", paused, err)
	}
	return nil
}

// stepKubeletEviction has one pod's app write FillMiB into its scratch
// volume, past the pod's ephemeral-storage limit (StorageLimit), and waits
// for the kubelet's eviction manager to evict it (the pod stays, Failed,
// reason Evicted; nothing deletes it) and for its replacement to be ready.
func stepKubeletEviction(ctx context.Context, c *Cluster, name string, p Profile) (Step, error) {
	st := Step{Name: StepKubeletEviction}
	pods, err := runPods(ctx, c, LongLivedRun)
	if err != nil || len(pods) == 0 {
		return st, fmt.Errorf("no pod to evict: %v", err)
	}
	victim := pods[0]
	st.Start, st.Pods = time.Now(), []PodRecord{victim}
	if err := c.admin(ctx, victim.IP, fmt.Sprintf("%s?mib=%d", sampleapp.PathFill, FillMiB)); err != nil {
		return st, err
	}
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		pod, err := c.Client.CoreV1().Pods(Namespace).Get(ctx, victim.Name, metav1.GetOptions{})
		if err == nil && pod.DeletionTimestamp != nil {
			return st, fmt.Errorf("%s was deleted, not evicted by the kubelet", victim.Name)
		}
		if err == nil && pod.Status.Phase == corev1.PodFailed {
			st.Note = fmt.Sprintf("%d MiB written past its %s ephemeral-storage limit; phase %s, reason %s: %s",
				FillMiB, StorageLimit, pod.Status.Phase, pod.Status.Reason, pod.Status.Message)
			break
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("waiting for the kubelet to evict %s past its %s ephemeral-storage limit: %w; the kubelet's log of evictions:\n%s",
				victim.Name, StorageLimit, ctx.Err(), c.kubeletLog("evict", 20))
		case <-t.C:
		}
	}
	if err := waitRolledOut(ctx, c, name, int32(len(pods)), nil); err != nil {
		return st, err
	}
	st.End = time.Now()
	return st, nil
}

// endTracker notes when each of some pods was first seen terminating or
// gone, polling the API until it is stopped.
type endTracker struct {
	mu   sync.Mutex
	ends map[string]time.Time
	stop context.CancelFunc
	done chan struct{}
}

func trackEnds(ctx context.Context, c *Cluster, pods []PodRecord) *endTracker {
	ctx, cancel := context.WithCancel(ctx)
	t := &endTracker{ends: map[string]time.Time{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			list, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "run=" + LongLivedRun.Name})
			if err == nil {
				now := time.Now()
				t.mu.Lock()
				for _, p := range pods {
					if _, ok := t.ends[p.UID]; ok {
						continue
					}
					i := slices.IndexFunc(list.Items, func(q corev1.Pod) bool { return string(q.UID) == p.UID })
					if i < 0 || list.Items[i].DeletionTimestamp != nil || terminal(&list.Items[i]) {
						t.ends[p.UID] = now
					}
				}
				t.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return t
}

func (t *endTracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.ends)
}

// result stops the tracker and returns what it saw.
func (t *endTracker) result() map[string]time.Time {
	t.stop()
	<-t.done
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]time.Time, len(t.ends))
	for k, v := range t.ends {
		out[k] = v
	}
	return out
}

// endOffsets lists a step's pods' ends from its start, in order.
func endOffsets(s Step) string {
	var ts []time.Time
	for _, t := range s.Ends {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return cmp.Compare(a.UnixNano(), b.UnixNano()) })
	var out []string
	for _, t := range ts {
		out = append(out, fmt.Sprintf("+%.1fs", t.Sub(s.Start).Seconds()))
	}
	return strings.Join(out, ", ")
}

// terminal tells a pod that has ended for good: Failed (a kubelet
// eviction) or Succeeded.
func terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
}
