package event

// AttrVia names, on a client_failure read from a proxy's or load
// balancer's own log, the kind of proxy that logged it (ProxyHAProxy …):
// the analysis compares the proxy's own backend list, recorded as
// dataplane events with the same Attrs[proxy], with the EndpointSlice.
const AttrVia = "via"

// Proxy kinds of ingresses and load balancers (Attrs[proxy] of the dataplane
// kinds, Attrs[via] of their failures), beside ProxyNFTables and ProxyEnvoy.
const (
	ProxyHAProxy = "haproxy" // HAProxy's runtime `show servers state`
	ProxyNginx   = "nginx"   // nginx, ingress-nginx
	ProxyTraefik = "traefik"
	ProxyALB     = "alb"    // AWS elbv2 target health
	ProxyGCPLB   = "gcp-lb" // Google Cloud backend service health
)
