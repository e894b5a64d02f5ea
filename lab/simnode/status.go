package simnode

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// buildStatus is the pod status the kubelet would report now, on top of
// the status p carries (the API server's own conditions, PodScheduled
// among them, and the QoS class stay). Call with w.mu held.
func (w *podWorker) buildStatus(p *corev1.Pod) corev1.PodStatus {
	st := *p.Status.DeepCopy()
	st.Phase = w.phase
	if w.ip.IsValid() && w.sandbox {
		st.PodIP = w.ip.String()
		st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
		host := w.n.IP().String()
		st.HostIP = host
		st.HostIPs = []corev1.HostIP{{IP: host}}
	}
	if !w.started.IsZero() && st.StartTime == nil {
		t := metav1.NewTime(w.started)
		st.StartTime = &t
	}
	allReady := len(w.ctrs) > 0
	var statuses []corev1.ContainerStatus
	for _, c := range w.ctrs {
		cs := corev1.ContainerStatus{
			Name:         c.spec.Name,
			Image:        c.spec.Image,
			ImageID:      runtimeName + "://" + c.spec.Image,
			RestartCount: int32(c.restarts),
			Ready:        c.ready,
		}
		started := false
		switch {
		case c.exited != nil && !isClosed(c.exited):
			started = true
			cs.ContainerID = runtimeName + "://" + c.id
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.startedAt)}
		case c.state != nil:
			cs.ContainerID = runtimeName + "://" + c.id
			cs.State.Terminated = c.terminated()
		default:
			reason := c.waiting
			if reason == "" {
				reason = "ContainerCreating"
			}
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: c.waitingMsg}
		}
		cs.Started = &started
		if c.lastTerm != nil {
			cs.LastTerminationState.Terminated = c.lastTerm
		}
		if !c.ready {
			allReady = false
		}
		statuses = append(statuses, cs)
	}
	st.ContainerStatuses = statuses

	now := metav1.NewTime(time.Now())
	terminal := w.phase == corev1.PodSucceeded || w.phase == corev1.PodFailed
	setCondition(&st, corev1.PodReadyToStartContainers, boolStatus(w.sandbox && !terminal), "", now)
	setCondition(&st, corev1.PodInitialized, corev1.ConditionTrue, "", now)
	reason := ""
	if !allReady {
		reason = "ContainersNotReady"
		if terminal {
			reason = "PodCompleted"
		}
	}
	setCondition(&st, corev1.ContainersReady, boolStatus(allReady), reason, now)
	setCondition(&st, corev1.PodReady, boolStatus(allReady), reason, now)
	return st
}

// setCondition sets a condition, moving its transition time only when the
// status changes.
func setCondition(st *corev1.PodStatus, t corev1.PodConditionType, s corev1.ConditionStatus, reason string, now metav1.Time) {
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type != t {
			continue
		}
		if c.Status != s {
			c.LastTransitionTime = now
		}
		c.Status, c.Reason = s, reason
		c.LastProbeTime = metav1.Time{}
		return
	}
	st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: now})
}

func boolStatus(b bool) corev1.ConditionStatus {
	if b {
		return corev1.ConditionTrue
	}
	return corev1.ConditionFalse
}

// terminalPhase is the phase the kubelet reports for a pod whose containers
// have all stopped on deletion: Succeeded when each exited 0, else Failed.
// Call with the containers' lock held or after they all exited.
func terminalPhase(ctrs []*container) corev1.PodPhase {
	for _, c := range ctrs {
		c.mu.Lock()
		code, ran := c.exitCode(), c.state != nil
		c.mu.Unlock()
		if !ran || code != 0 {
			return corev1.PodFailed
		}
	}
	return corev1.PodSucceeded
}
