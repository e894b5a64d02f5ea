// Package eventgen makes realistic event streams for tests and benchmarks.
// They hold pods of a Deployment rolled one after another, each with the
// control-plane, kernel and client events a real rollout produces, in the
// proportions the lab sees (mostly socket events).
package eventgen

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/drainscope/drainscope/event"
)

// Rollout returns n sealed events, starting at start, from a rollout of a
// Deployment with the given name in namespace "shop". The same seed gives
// the same events.
func Rollout(n int, start time.Time, seed uint64, name string) []event.Event {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]event.Event, 0, n)
	t := start.UnixNano()
	wl := event.Workload{Kind: "Deployment", Name: name}
	client := netip.MustParseAddr("10.244.0.200")
	for pod := 0; len(out) < n; pod++ {
		ref := event.PodRef{
			Namespace: "shop",
			Name:      fmt.Sprintf("%s-7d4b9c-%05d", name, pod),
			UID:       fmt.Sprintf("%08x-0000-4000-8000-%012d", uint32(seed), pod),
			Container: "app",
		}
		ip := netip.AddrFrom4([4]byte{10, 244, byte(1 + pod/250%250), byte(1 + pod%250)})
		podAddr := netip.AddrPortFrom(ip, 8080)
		base := event.Event{Node: "node-a", Pod: ref, Workload: wl}
		add := func(dt time.Duration, k event.Kind, src event.Source, f func(*event.Event)) {
			if len(out) == n {
				return
			}
			t += int64(dt)
			e := base
			e.Time, e.Kind, e.Source = t, k, src
			if f != nil {
				f(&e)
			}
			e.Seal()
			out = append(out, e)
		}
		jitter := func(d time.Duration) time.Duration { return d/2 + time.Duration(r.Int64N(int64(d))) }
		add(jitter(time.Millisecond), event.PodDeletion, event.SourceWatcher, func(e *event.Event) {
			e.Duration = int64(30 * time.Second)
			e.Attrs = map[string]string{event.AttrDeletionTimestamp: time.Unix(0, t).UTC().Truncate(time.Second).Format(time.RFC3339)}
		})
		add(jitter(400*time.Millisecond), event.EndpointNotReady, event.SourceWatcher, func(e *event.Event) {
			e.Local, e.Service, e.Slice = podAddr, name, name+"-x7k2p"
		})
		add(jitter(5*time.Millisecond), event.EndpointTerminating, event.SourceWatcher, func(e *event.Event) {
			e.Local, e.Service, e.Slice = podAddr, name, name+"-x7k2p"
		})
		add(jitter(10*time.Millisecond), event.Signal, event.SourceKernel, func(e *event.Event) {
			e.PID, e.Comm, e.PeerPID, e.PeerComm, e.Signal = 4242, "server", 1, "containerd-shim", 15
		})
		add(jitter(time.Millisecond), event.ListenerClosed, event.SourceKernel, func(e *event.Event) {
			e.PID, e.Comm, e.Local, e.NetNS = 4242, "server", podAddr, 4026532000+uint64(pod)
		})
		// The bulk: connections closed and reset while the pod drains.
		conns := 40 + r.IntN(80)
		for c := 0; c < conns; c++ {
			peer := netip.AddrPortFrom(client, uint16(30000+r.IntN(30000)))
			kind, reason, flags := event.ConnClosed, "local", event.Flags(0)
			switch x := r.IntN(10); {
			case x < 2:
				kind, reason = event.RSTSent, "NOT_SPECIFIED"
			case x < 3:
				kind, reason = event.ConnClosed, "peer"
			case x < 5:
				flags = event.FlagAtExit
			}
			add(jitter(20*time.Millisecond), kind, event.SourceKernel, func(e *event.Event) {
				e.PID, e.Comm, e.Local, e.Remote, e.NetNS = 4242, "server", podAddr, peer, 4026532000+uint64(pod)
				e.Reason, e.Flags = reason, flags
			})
			if r.IntN(8) == 0 {
				add(jitter(time.Millisecond), event.ClientFailure, event.SourceClient, func(e *event.Event) {
					e.Pod, e.Workload = event.PodRef{}, event.Workload{}
					e.Local, e.Remote, e.Service = peer, netip.MustParseAddrPort("10.96.0.10:80"), name
					e.Reason, e.Duration = event.FailEOF, int64(jitter(3*time.Millisecond))
					e.Attrs = map[string]string{event.AttrBackend: podAddr.String()}
				})
			}
		}
		add(jitter(3*time.Second/time.Duration(conns)), event.ProcessExit, event.SourceKernel, func(e *event.Event) {
			e.PID, e.Comm, e.Code = 4242, "server", 0
		})
		add(jitter(50*time.Millisecond), event.ContainerTerminated, event.SourceWatcher, func(e *event.Event) {
			e.Reason = "Completed"
		})
		add(jitter(200*time.Millisecond), event.EndpointRemoved, event.SourceWatcher, func(e *event.Event) {
			e.Local, e.Service, e.Slice = podAddr, name, name+"-x7k2p"
		})
	}
	return out
}
