// Package dataplane records when a node's proxy began and stopped sending a
// Service's new connections to each endpoint: the moment its rules changed,
// not the moment the EndpointSlice did. The gap between the two is what a
// preStop sleep has to cover.
//
// Only kube-proxy's nftables mode is implemented. The watcher joins the
// kernel's nftables netlink notification group in the node's network
// namespace, reads kube-proxy's tables (ip and ip6 "kube-proxy") once, and
// then follows every committed transaction: at the end of each one (the
// kernel's new-generation message) it works out, for every Service port
// chain kube-proxy writes (service-HASH-ns/name/proto/port and
// local-HASH-…), which endpoints its rules send to — the "dnat to" of a
// single endpoint, the anonymous "numgen random mod N map" of ip . port, or
// with ClientIP affinity the vmap of per-endpoint chains
// (endpoint-HASH-ns/name/proto/port__ip/port) — and reports each endpoint
// that appeared or went. An event's time is when the agent read the
// transaction's end, microseconds to milliseconds after the commit.
//
// What the other modes would need (not implemented):
//   - iptables mode: kube-proxy replaces its rules whole with
//     iptables-restore, and the per-endpoint KUBE-SEP-… chains hash the
//     endpoint, so the address is in the rule, not the name. With the
//     legacy backend there is no notification, the rules would have to be
//     read again after each sync; with the nft backend the same netlink
//     notifications arrive, but carry xtables match and target
//     expressions this package does not decode.
//   - IPVS mode: the virtual and real servers, read through the IPVS
//     generic-netlink family; this package neither reads them nor knows
//     whether the kernel announces their changes.
//
// A node without nftables, without the permission to read it (the host's
// network namespace and CAP_NET_ADMIN), or without kube-proxy's table logs
// that once and records nothing; the watcher keeps waiting for the table.
package dataplane
