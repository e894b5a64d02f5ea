package simnode

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// probeLoop runs the container's readiness probe for as long as ctx lasts,
// and reports readiness changes. Like the kubelet, it keeps probing while
// the pod terminates: an application that fails its probe after SIGTERM
// becomes not ready. Without a probe there is nothing to run: the
// container is ready while it runs (startContainer, the exit).
func (w *podWorker) probeLoop(ctx context.Context, c *container) {
	pr := c.spec.ReadinessProbe
	if pr == nil {
		return
	}
	period := seconds(pr.PeriodSeconds, 10)
	timeout := seconds(pr.TimeoutSeconds, 1)
	failureThreshold := threshold(pr.FailureThreshold, 3)
	successThreshold := threshold(pr.SuccessThreshold, 1)
	var successes, failures int
	var runningSince time.Time
	t := time.NewTicker(period)
	defer t.Stop()
	check := func() {
		w.mu.Lock()
		running := c.exited != nil && !isClosed(c.exited)
		startedAt := c.startedAt
		w.mu.Unlock()
		if !running {
			w.setReady(c, false)
			successes, failures = 0, 0
			return
		}
		if startedAt != runningSince {
			// A new process: results start over, readiness starts false.
			runningSince, successes, failures = startedAt, 0, 0
		}
		if time.Since(startedAt) < time.Duration(pr.InitialDelaySeconds)*time.Second {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := w.probe(pctx, c, &pr.ProbeHandler)
		cancel()
		if err != nil {
			w.n.log.Debug("probe failed", "container", c.spec.Name, "err", err)
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			successes, failures = successes+1, 0
			if successes >= successThreshold {
				w.setReady(c, true)
			}
		} else {
			successes, failures = 0, failures+1
			if failures >= failureThreshold {
				w.setReady(c, false)
			}
		}
	}
	// Like the kubelet's prober worker, probe on a ticker that started
	// with the pod, not with the container: the first probe comes within
	// one period after the container starts, by which time a server has
	// usually bound its port.
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		check()
	}
}

func (w *podWorker) setReady(c *container, ready bool) {
	w.mu.Lock()
	changed := c.ready != ready
	c.ready = ready
	w.mu.Unlock()
	if changed {
		w.logger().Info("readiness changed", "container", c.spec.Name, "ready", ready)
		w.markDirty()
	}
}

// probe runs one probe handler against the container.
func (w *podWorker) probe(ctx context.Context, c *container, h *corev1.ProbeHandler) error {
	switch {
	case h.HTTPGet != nil:
		return w.httpGet(ctx, c, h.HTTPGet)
	case h.TCPSocket != nil:
		port, err := resolvePort(h.TCPSocket.Port.String(), c.spec)
		if err != nil {
			return err
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp4", netip.AddrPortFrom(w.ipAddr(), uint16(port)).String())
		if err != nil {
			return err
		}
		return conn.Close()
	case h.Exec != nil:
		return w.exec(ctx, c, h.Exec.Command)
	case h.GRPC != nil:
		return errors.New("gRPC probes are not supported by the lab node")
	}
	return errors.New("empty probe")
}

func seconds(v int32, def int) time.Duration {
	if v <= 0 {
		return time.Duration(def) * time.Second
	}
	return time.Duration(v) * time.Second
}

func threshold(v int32, def int) int {
	if v <= 0 {
		return def
	}
	return int(v)
}
