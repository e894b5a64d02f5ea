package analysis

import (
	"fmt"

	"github.com/drainscope/drainscope/event"
)

// CauseProxyLag is a failure on a new connection that an ingress or load
// balancer sent to a pod after the EndpointSlice had removed it: the
// proxy's own backend list (recorded as its dataplane events) lagged the
// API, and the pod had stopped accepting.
const CauseProxyLag Cause = "proxy_lag"

// proxyLagRule is registered in Rules before the endpoint race: both hold
// for such a failure, and this one names the actor that lagged and by how
// much.
var proxyLagRule = Rule{
	Cause: CauseProxyLag,
	Title: "ingress or load balancer still routed to the pod",
	Requires: []Requirement{
		{"the connection was refused, or made after the pod's process had exited and never answered", AnyOf(Refused, Unanswered)},
		{"the pod was terminating: deleted, signalled, listener closed or exited", PodTerminating},
		{"the EndpointSlice had removed the endpoint before the request began, and the proxy that logged the failure still listed it", ProxyStillRouted},
	},
	Explain: `{{.Class}} on a new connection to {{.Pod}}: {{.Terminating}}, while {{.Rotation}}; the EndpointSlice had already taken it out, so the ingress or load balancer that sent it there lagged the API`,
	Summary: `these {{.Count}} {{plural .Count "failure" "failures"}} were new connections an ingress or load balancer sent to {{.PodsPhrase}} after the EndpointSlice had removed {{plural .PodCount "it" "them"}}, because its own backend list still held {{plural .PodCount "it" "them"}}{{if .RotationLag}} for up to {{.RotationLag}}{{end}}`,
	Fix:     `make the preStop sleep longer than that proxy's lag from the EndpointSlice change to its own removal{{if .DataplaneLag}} (measured: {{.DataplaneLag}}; the sleep must exceed that p99){{end}}, and keep the listener open until then; behind an AWS ALB: deregistration delay < preStop sleep < terminationGracePeriodSeconds`,
	Color:   "#6A3D9A",
}

// ProxyStillRouted holds when a failure came through a proxy or load
// balancer (its Attrs[via], set by the importer of that proxy's log) whose
// own backend list was recorded (dataplane events with the same
// Attrs[proxy]), the watch had seen the pod's endpoint leave the Service
// before the request began, and that proxy's list still held the endpoint
// then. Its evidence is the watch's removal and the proxy's own later
// removal, with the lag between them in the role.
func ProxyStillRouted(f *Facts, dst []Piece) []Piece {
	p, via := f.pod, f.Failure.Attrs[event.AttrVia]
	if p == nil || via == "" {
		return dst
	}
	t := f.Start
	for i := range p.dp {
		v := &p.dp[i]
		if len(v.trans) == 0 || v.trans[0].ev.Attrs[event.AttrProxy] != via {
			continue
		}
		if len(f.svcs) > 0 && !containsService(f.svcs, v.svc) {
			continue
		}
		w := p.watchLeave(v.svc, t)
		if w == nil || w.Time >= t {
			continue
		}
		// The proxy's view at t: in rotation when its last move before t
		// was an add, or its first move after t a removal.
		j := 0
		for j < len(v.trans) && v.trans[j].t < t {
			j++
		}
		in := j > 0 && v.trans[j-1].ready || j == 0 && !v.trans[0].ready
		if !in {
			continue
		}
		var removal *event.Event
		for k := j; k < len(v.trans); k++ {
			if !v.trans[k].ready {
				removal = v.trans[k].ev
				break
			}
		}
		dst = append(dst, piece(fmt.Sprintf("the EndpointSlice removed it %s before the request", fmtDur(t-w.Time)), w))
		if removal != nil {
			dst = append(dst, piece(fmt.Sprintf("%s %s still listed it: its own removal came %s after the EndpointSlice's", via, v.node, fmtDur(removal.Time-w.Time)), removal))
		} else {
			dst = append(dst, piece(fmt.Sprintf("%s %s still listed it (no removal recorded)", via, v.node), v.trans[max(j-1, 0)].ev))
		}
		return dst
	}
	return dst
}
