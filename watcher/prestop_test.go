package watcher

import (
	"maps"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/drainscope/drainscope/event"
)

func execHook(cmd ...string) *corev1.Lifecycle {
	return &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: cmd}}}
}

// TestPreStopOf: the preStop handler's type, and the seconds it waits when
// the spec says: the sleep action, or an exec that only sleeps (directly
// or as a shell's whole script); a script doing more than sleep says
// nothing of its time. The stripped container reads the same.
func TestPreStopOf(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lifecycle *corev1.Lifecycle
		hook      string // Attrs[prestop]; "" for none
		sleep     string // Attrs[prestop_sleep]; "" for absent
	}{
		{"none", nil, "", ""},
		{"postStart only", &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sleep", "5"}}}}, "", ""},
		{"sleep action", &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 15}}}, event.PreStopSleep, "15"},
		{"sleep action of 0", &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 0}}}, event.PreStopSleep, "0"},
		{"exec sleep", execHook("sleep", "10"), event.PreStopExec, "10"},
		{"exec /bin/sleep with s", execHook("/bin/sleep", "20s"), event.PreStopExec, "20"},
		{"exec /usr/bin/sleep", execHook("/usr/bin/sleep", "7"), event.PreStopExec, "7"},
		{"sh -c sleep 5", execHook("sh", "-c", "sleep 5"), event.PreStopExec, "5"},
		{"/bin/bash -c padded", execHook("/bin/bash", "-c", "  sleep 30s; "), event.PreStopExec, "30"},
		{"dash -c", execHook("/bin/dash", "-c", "sleep 3"), event.PreStopExec, "3"},
		{"script doing more than sleep", execHook("/bin/sh", "-c", "sleep 5 && nginx -s quit"), event.PreStopExec, ""},
		{"script waiting for a file", execHook("sh", "-c", "while [ -e /tmp/busy ]; do sleep 1; done"), event.PreStopExec, ""},
		{"fractional sleep", execHook("sleep", "0.5"), event.PreStopExec, ""},
		{"sleep in minutes", execHook("sleep", "1m"), event.PreStopExec, ""},
		{"sleep with two operands", execHook("sleep", "5", "5"), event.PreStopExec, ""},
		{"sleep signed", execHook("sleep", "+5"), event.PreStopExec, ""},
		{"not a shell", execHook("python", "-c", "sleep 5"), event.PreStopExec, ""},
		{"shell without -c", execHook("sh", "-e", "sleep 5"), event.PreStopExec, ""},
		{"another program", execHook("/app/drain", "--wait=5"), event.PreStopExec, ""},
		{"empty exec", execHook(), event.PreStopExec, ""},
		{"httpGet", &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/drain", Port: intstr.FromInt32(8080)}}}, event.PreStopHTTP, ""},
		{"tcpSocket", &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}}, event.PreStopTCP, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &corev1.Container{Name: "app", Lifecycle: tc.lifecycle}
			s := stripContainers([]corev1.Container{*c})[0]
			for what, spec := range map[string]stopSpec{"spec": preStopOf(c), "stripped": preStopOf(&s)} {
				sleep := ""
				if spec.timed {
					sleep = strconv.Itoa(int(spec.sleep))
				}
				if spec.hook.String() != tc.hook || sleep != tc.sleep || spec.timed != (tc.sleep != "") {
					t.Errorf("%s: hook %q sleep %q (timed %v), want %q %q", what, spec.hook, sleep, spec.timed, tc.hook, tc.sleep)
				}
			}
		})
	}
	if s := preStopOf(nil); s != (stopSpec{}) {
		t.Errorf("no spec: %+v", s)
	}
}

// TestPodTrackerPreStop: container_started carries what the spec gives
// each container to stop (its preStop hook, its sleep, the pod's grace
// period), read through the stripped pod the informer hands over, for an
// app container and a native sidecar alike, and again when re-observed.
func TestPodTrackerPreStop(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tr, got := newTestPodTracker(&now)
	tr.replaceAll(nil, event.FlagRelist, true)
	p := withInit(pod("a", "1", "10.244.0.2", true))
	p.Spec.TerminationGracePeriodSeconds = ptr.To(int64(45))
	p.Spec.Containers[0].Lifecycle = execHook("/bin/sh", "-c", "sleep 20")
	p.Spec.InitContainers[1].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
		HTTPGet: &corev1.HTTPGetAction{Path: "/drain", Port: intstr.FromInt32(15000)}}}
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "log", Image: "log:1"})
	p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
		Name: "log", ContainerID: "containerd://log-a", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
	want := map[string]map[string]string{
		"app":   {event.AttrPreStop: event.PreStopExec, event.AttrPreStopSleep: "20", event.AttrGracePeriod: "45"},
		"proxy": {event.AttrPreStop: event.PreStopHTTP, event.AttrGracePeriod: "45"},
		"log":   {event.AttrGracePeriod: "45"},
	}
	check := func(what string) {
		t.Helper()
		seen := map[string]bool{}
		for _, r := range *got {
			if r.kind != event.ContainerStarted {
				continue
			}
			c := r.e.Pod.Container
			seen[c] = true
			stop := map[string]string{}
			for _, k := range []string{event.AttrPreStop, event.AttrPreStopSleep, event.AttrGracePeriod} {
				if v, ok := r.e.Attrs[k]; ok {
					stop[k] = v
				}
			}
			if !maps.Equal(stop, want[c]) {
				t.Errorf("%s: %s stops with %v, want %v", what, c, stop, want[c])
			}
		}
		if len(seen) != len(want) {
			t.Errorf("%s: started %v, want %d containers", what, seen, len(want))
		}
	}
	tr.apply(stripped(t, p), 0, false)
	check("started")
	*got = nil
	tr.observe(now)
	check("observed")

	// No grace period given (as only a client that skips the API's
	// defaults would send): none recorded.
	*got = nil
	q := pod("b", "1", "10.244.0.3", true)
	tr.apply(stripped(t, q), 0, false)
	for _, r := range *got {
		if _, ok := r.e.Attrs[event.AttrGracePeriod]; ok && r.kind == event.ContainerStarted {
			t.Errorf("pod b: grace_period %q without one in the spec", r.e.Attrs[event.AttrGracePeriod])
		}
	}
}
