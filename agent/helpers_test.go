package agent_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/drainscope/drainscope/event"
	"github.com/drainscope/drainscope/store"
)

// openDSN opens the store dsn names, closed when the test ends.
func openDSN(t testing.TB, dsn string) store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// countStored returns the events in the store dsn names, by kind.
func countStored(t testing.TB, dsn string) (int, map[event.Kind]int) {
	t.Helper()
	ctx := context.Background()
	st := openDSN(t, dsn)
	n, by := 0, map[event.Kind]int{}
	if err := st.Scan(ctx, store.Query{}, func(e *event.Event) error {
		n++
		by[e.Kind]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n, by
}

// fakeKubelet plays the kubelet's API side for pods bound to its node:
// binds unscheduled pods (there is no scheduler), marks them running and
// ready with an address, and on deletion marks them not ready with the
// container terminated, then removes them. Pods whose name is in kill end
// as if SIGKILLed (exit code 137).
type fakeKubelet struct {
	cs   kubernetes.Interface
	ns   string
	node string

	mu   sync.Mutex
	next int
	kill map[string]bool
}

func (k *fakeKubelet) run(ctx context.Context, t testing.TB) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pods, err := k.cs.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for i := range pods.Items {
			if err := k.step(ctx, &pods.Items[i]); err != nil && ctx.Err() == nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				t.Logf("fake kubelet: %s: %v", pods.Items[i].Name, err)
			}
		}
	}
}

func (k *fakeKubelet) killOne(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.kill == nil {
		k.kill = map[string]bool{}
	}
	k.kill[name] = true
}

func (k *fakeKubelet) step(ctx context.Context, p *corev1.Pod) error {
	pods := k.cs.CoreV1().Pods(k.ns)
	switch {
	case p.Spec.NodeName == "" && p.DeletionTimestamp == nil:
		return pods.Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
			Target:     corev1.ObjectReference{Kind: "Node", Name: k.node},
		}, metav1.CreateOptions{})
	case p.Spec.NodeName != k.node:
		return nil
	case p.DeletionTimestamp != nil && isReady(p):
		k.mu.Lock()
		code, reason := int32(0), "Completed"
		if k.kill[p.Name] {
			code, reason = 137, "Error"
		}
		k.mu.Unlock()
		now := metav1.Now()
		p.Status.Phase = corev1.PodSucceeded
		if code != 0 {
			p.Status.Phase = corev1.PodFailed
		}
		setReady(p, false)
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: "app", Image: p.Spec.Containers[0].Image, ContainerID: "containerd://" + strings.Repeat("ab", 32),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: code, Reason: reason, StartedAt: now, FinishedAt: now,
				ContainerID: "containerd://" + strings.Repeat("ab", 32),
			}},
		}}
		_, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	case p.DeletionTimestamp != nil:
		zero := int64(0)
		return pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	case !isReady(p) && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed:
		k.mu.Lock()
		k.next++
		ip := fmt.Sprintf("10.244.0.%d", 10+k.next%240)
		k.mu.Unlock()
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP = ip
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
		p.Status.HostIP = "10.244.0.1"
		p.Status.StartTime = &now
		setReady(p, true)
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: "app", Image: p.Spec.Containers[0].Image, Ready: true, Started: ptr(true),
			ContainerID: "containerd://" + strings.Repeat("cd", 32),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}}
		_, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func setReady(p *corev1.Pod, ready bool) {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	now := metav1.Now()
	var out []corev1.PodCondition
	for _, c := range p.Status.Conditions {
		if c.Type != corev1.PodReady && c.Type != corev1.ContainersReady {
			out = append(out, c)
		}
	}
	out = append(out,
		corev1.PodCondition{Type: corev1.PodReady, Status: st, LastTransitionTime: now},
		corev1.PodCondition{Type: corev1.ContainersReady, Status: st, LastTransitionTime: now},
	)
	p.Status.Conditions = out
}

// waitFor polls cond until it holds or the time is up.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
