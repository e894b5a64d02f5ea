package analysis

import (
	"net/netip"
	"time"

	"github.com/drainscope/drainscope/event"
)

// seed000PreStop records a rollout shaped like seed 000's "graceful +
// preStop" run: 4 replicas, maxSurge 1 / maxUnavailable 0, so each old pod
// is deleted once its replacement is ready; each old pod is deleted,
// leaves rotation 0.4 s later on both nodes, sleeps 5 s in preStop, gets
// SIGTERM, closes its listener and exits 3.0 s later with 5 keep-alive
// connections still open; each of those clients fails a few ms after the
// exit (20 failures in all). The proxy logged the backend for half of
// them; the rest are found through the pod-side kernel events. Two clients
// saw EOF without their request reaching the pod, so the pod side proves
// 18 of the 20.
func seed000PreStop() *rec {
	r := newRec("node-a", "node-b")
	olds := []*tpod{r.pod("web-6d9f-a1", "10.244.0.11"), r.pod("web-6d9f-b2", "10.244.0.12"), r.pod("web-6d9f-c3", "10.244.0.13"), r.pod("web-6d9f-d4", "10.244.0.14")}
	news := []*tpod{r.pod("web-7c4b-e5", "10.244.0.15"), r.pod("web-7c4b-f6", "10.244.0.16"), r.pod("web-7c4b-g7", "10.244.0.17"), r.pod("web-7c4b-h8", "10.244.0.18")}
	for i, p := range olds {
		p.pid = int32(1000 + i)
		r.created(p, -90*s)
		r.ready(p, -88*s)
	}
	ci := 0
	for i := range olds {
		n, o := news[i], olds[i]
		n.pid = int32(2000 + i)
		base := int64(i) * 3 * s
		r.created(n, base-2*s)
		r.ready(n, base-100*ms)
		var cs []netip.AddrPort
		for k := 0; k < 5; k++ {
			cs = append(cs, client(ci+k))
		}
		exit := r.gracefulPreStop(o, base, cs[:3]) // three requests reached the closed sockets
		for k := 3; k < 5; k++ {
			r.connClosed(o, exit+int64(k)*10_000+50_000, cs[k], "local", event.FlagAtExit)
		}
		for k, c := range cs {
			var opts []fopt
			if k%2 == 0 {
				opts = append(opts, backend(o))
			}
			if k == 4 && i >= 2 {
				// no kernel RST for these two: the client read the FIN first
				r.failure(exit+3*ms+int64(k)*ms, c, event.FailEOF, opts...)
				continue
			}
			if k >= 3 {
				r.rst(o, exit+2*ms+int64(k)*ms, c, "NO_SOCKET", 0)
			}
			r.failure(exit+3*ms+int64(k)*ms, c, event.FailEOF, opts...)
		}
		ci += 5
	}
	return r
}

// exitAtSigterm records seed 000's first run shape for two pods: the app
// exits at SIGTERM, the endpoint leaves rotation 0.5 s later, new
// connections routed meanwhile are refused, keep-alive connections are cut
// at the exit, and one slow request is cut in flight.
func exitAtSigterm() *rec {
	r := newRec("node-a", "node-b")
	r.target = "http://api.default.svc/"
	a, b := r.pod("api-5f7-a1", "10.244.1.21"), r.pod("api-5f7-b2", "10.244.1.22")
	for _, p := range []*tpod{a, b} {
		p.wl = event.Workload{Kind: "Deployment", Name: "api"}
		p.svc = "api"
		r.created(p, -60*s)
		r.ready(p, -58*s)
	}
	n := r.pod("api-8c2-c3", "10.244.1.23")
	n.wl, n.svc = a.wl, "api"
	r.created(n, -3*s)
	r.ready(n, -200*ms)
	r.exitEach([]*tpod{a, b}, 4*s)
	return r
}

// exitEach ends each pod step apart, from 0: deleted, SIGTERM 20 ms
// later and the exit at once; a keep-alive connection cut at the exit, a
// slow request cut in flight, three connections refused before the
// endpoint left rotation 500 ms after the deletion.
func (r *rec) exitEach(pods []*tpod, step int64) {
	for i, p := range pods {
		base := int64(i) * step
		p.pid = int32(3000 + i)
		r.deletion(p, base, 30*time.Second)
		r.signal(p, base+20*ms, 15)
		r.exit(p, base+22*ms, 0, 0)
		c := client(100 + i*10)
		r.connClosed(p, base+22*ms+50_000, c, "local", event.FlagAtExit)
		r.failure(base+25*ms, c, event.FailEOF)
		slow := client(101 + i*10)
		r.rst(p, base+22*ms+60_000, slow, "TCP_ABORT_ON_CLOSE", event.FlagAtExit|event.FlagUnreadData)
		r.failure(base+24*ms, slow, event.FailReset, took(300*time.Millisecond))
		for k := 0; k < 3; k++ {
			c := client(102 + i*10 + k)
			r.refused(p, base+100*ms+int64(k)*100*ms, c)
			r.failure(base+101*ms+int64(k)*100*ms, c, event.FailRefused)
		}
		r.leave(p, base+500*ms, 120*ms)
		r.removed(p, base+600*ms, 100*ms)
	}
}

// kernelOnly is exitAtSigterm without any client log: what the pod side
// proves on its own.
func kernelOnly() *rec {
	r := exitAtSigterm()
	out := r.events[:0]
	for _, e := range r.events {
		if e.Kind != event.ClientFailure {
			out = append(out, e)
		}
	}
	r.events = out
	return r
}

// dataplaneLag is exitAtSigterm for one pod with each node's proxy rules
// recorded: node-a's proxy drops the endpoint 30 ms after the watch saw it
// leave, node-b's 2.5 s after (a --min-sync-period of 3 s). Refusals
// 1.2 s and 2 s after the leave, past the assumed 1 s, came through
// node-b's rules, which still sent there: endpoint race. One 2.6 s after,
// when no node's rules did, is set aside (a probe, or a client bypassing
// the Service). The API server is 1.33 and node-b's kubelet 1.29: the
// patch's preStop is an exec of sleep, which the older kubelet runs.
func dataplaneLag() *rec { return dataplaneLagWith("v1.29.6", nil) }

// dataplaneLagWith is dataplaneLag with node-b's kubelet at kubeletB and
// more of the app container's spec.
func dataplaneLagWith(kubeletB string, spec map[string]string) *rec {
	r := newRec("node-a", "node-b")
	r.target = "http://api.default.svc/"
	p := r.pod("api-5f7-a1", "10.244.1.21")
	p.wl = event.Workload{Kind: "Deployment", Name: "api"}
	p.svc = "api"
	r.nodeInfo("node-a", -90*s, "v1.33.1", "v1.33.1")
	r.nodeInfo("node-b", -90*s+ms, "v1.33.1", kubeletB)
	r.created(p, -60*s)
	attrs := map[string]string{event.AttrContainerRole: event.ContainerRoleApp, event.AttrContainerPorts: "8080/TCP", event.AttrGracePeriod: "30"}
	for k, v := range spec {
		attrs[k] = v
	}
	r.started(p, -59*s, attrs)
	r.ready(p, -58*s)
	for _, n := range r.nodes {
		r.dataplane(p, -58*s+40*ms, n, true)
	}
	p.pid = 3000
	r.deletion(p, 0, 30*time.Second)
	r.signal(p, 20*ms, 15)
	r.exit(p, 22*ms, 0, 0)
	for k, d := range []int64{100 * ms, 1200 * ms, 2000 * ms, 2600 * ms} {
		c := client(102 + k)
		r.refused(p, 500*ms+d, c)
		r.failure(500*ms+d+ms, c, event.FailRefused)
	}
	r.leave(p, 500*ms, 0)
	r.dataplane(p, 530*ms, "node-a", false)
	r.dataplane(p, 3000*ms, "node-b", false)
	r.removed(p, 600*ms, 0)
	return r
}
