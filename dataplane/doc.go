// Package dataplane records when a node's proxy began and stopped sending to
// each endpoint. That is the moment its rules for a Service's new connections
// changed, not the moment the EndpointSlice did. The gap between the two is
// what a preStop sleep has to cover.
//
// kube-proxy's nftables mode: the watcher joins the kernel's nftables
// netlink notification group in the node's network namespace, reads
// kube-proxy's tables (ip and ip6 "kube-proxy") once, and then follows
// every committed transaction: at the end of each one (the kernel's
// new-generation message) it works out, for every Service port chain
// kube-proxy writes (service-HASH-ns/name/proto/port and local-HASH-…),
// which endpoints its rules send to — the "dnat to" of a single endpoint,
// the anonymous "numgen random mod N map" of ip . port, or with ClientIP
// affinity the vmap of per-endpoint chains
// (endpoint-HASH-ns/name/proto/port__ip/port) — and reports each endpoint
// that appeared or went. An event's time is when the agent read the
// transaction's end, microseconds to milliseconds after the commit.
//
// kube-proxy's iptables mode on the nf_tables backend (iptables-nft)
// commits to the same group: the same watcher keeps a second model of the
// nat tables' KUBE-SERVICES, KUBE-SVC-/KUBE-SVL- and KUBE-SEP- chains,
// whose xtables matches and targets arrive as compat expressions
// (iptables.go), and reports their endpoints with proxy=iptables.
//
// On the legacy backend the kernel announces nothing: LegacyPoller reads
// kube-proxy's sync metric and, when it moves, iptables-legacy-save, and
// stamps the changes with the sync's own time (legacy.go). DetectMode
// tells which mode a node runs. IPVS mode is not read: its virtual and
// real servers would come through the IPVS generic-netlink family.
//
// A node without nftables, without the permission to read it (the host's
// network namespace and CAP_NET_ADMIN), or without kube-proxy's rules logs
// that once and records nothing; the watcher keeps waiting for them.
package dataplane
