//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
//
// Refused connections on kernels before 6.10. There tcp_send_reset is an
// instance of the tcp_event_sk_skb class, called only with a socket, so a
// SYN to a port nobody listens on (the endpoint race's own signature) and a
// segment of a connection the kernel already forgot are answered by a reset
// that no tracepoint shows. Two programs see that reset instead; the loader
// (refused.go) picks the first this kernel can run:
//
//   fentry/tcp_v4_send_reset, fentry/tcp_v6_send_reset with sk == NULL:
//     the reset function itself (a static function, but its address is
//     taken by request_sock_ops.send_reset, so it is never inlined away and
//     is in BTF on every kernel). fentry needs a BPF trampoline: x86-64
//     from 5.5, arm64 from 6.0.
//   tp_btf/kfree_skb with reason SKB_DROP_REASON_NO_SOCKET: tcp_v4_rcv and
//     tcp_v6_rcv free a segment that found no socket with that reason
//     right after sending its reset (5.17+, where kfree_skb passes the
//     reason); any architecture.
//
// They write the same record as tcp_send_reset's no-socket path in
// drainscope.c, into the same ring buffer and counters (the loader passes
// drainscope.c's maps in place of these declarations), so the reader and
// everything after it cannot tell which program saw the reset.

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>

char __license[] SEC("license") = "Dual MIT/GPL";

#define AF_INET 2
#define AF_INET6 10
#define TCPHDR_RST 0x04
#define TCPHDR_SYN 0x02
#define TCPHDR_ACK 0x10

// Must equal drainscope.c's values: TestRefusedLayout compares the
// generated Go types of both objects.
#define KIND_RST_SENT 5
#define KIND_REFUSED 7
#define KIND_MAX 8
#define FLAG_NO_SOCKET (1 << 2)

// A copy of drainscope.c's struct event (TestRefusedLayout checks that the
// two stay the same, field by field).
struct event {
	__u64 ts_ns;
	__u64 cgroup_id;
	__u64 netns;
	__u32 pid;
	__u32 tid;
	__u32 peer_pid;
	__s32 signal;
	__s32 code;
	__u32 flags;
	__u16 reason;
	__u8 kind;
	__u8 family;
	__u16 lport;
	__u16 rport;
	__u8 laddr[16];
	__u8 raddr[16];
	char comm[16];
	char peer_comm[16];
	__u8 old_state;
	__u8 new_state;
	__u16 _pad0;
	__u32 idle_us;
};

const struct event *unused_event __attribute__((unused));

// Set by the loader to drainscope.c's values.
volatile const __u8 filter_enabled = 1;
volatile const __u64 wakeup_bytes = 0;
// enum skb_drop_reason's SKB_DROP_REASON_NO_SOCKET on this kernel (its
// value moved between releases), read from BTF by the loader.
volatile const __u32 drop_reason_no_socket = 0;

// Replaced by drainscope.c's maps of the same names at load.
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u8);
} tracked_netns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KIND_MAX * 2);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 kind, __u32 dropped)
{
	__u32 key = kind * 2 + dropped;
	__u64 *v = bpf_map_lookup_elem(&counters, &key);
	if (v)
		__sync_fetch_and_add(v, 1);
}

#define RECORD_BYTES (sizeof(struct event) + 8)

static __always_inline void submit(struct event *e)
{
	__u64 flags = 0;
	if (wakeup_bytes) {
		__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
		flags = avail >= wakeup_bytes && avail < wakeup_bytes + 4 * RECORD_BYTES ? BPF_RB_FORCE_WAKEUP
											 : BPF_RB_NO_WAKEUP;
	}
	bpf_ringbuf_submit(e, flags);
}

// The segment's addresses (its destination is the local side) and TCP
// flags, read from the skb's headers. proto receives the IP protocol.
static __always_inline int read_segment(struct event *e, const struct sk_buff *skb, __u8 *tcpflags, __u8 *proto)
{
	unsigned char *head = BPF_CORE_READ(skb, head);
	__u16 nh = BPF_CORE_READ(skb, network_header);
	__u16 th = BPF_CORE_READ(skb, transport_header);
	__u8 vers = 0;
	if (bpf_probe_read_kernel(&vers, 1, head + nh))
		return -1;
	vers >>= 4;
	if (vers == 4) {
		struct iphdr ip;
		if (bpf_probe_read_kernel(&ip, sizeof(ip), head + nh))
			return -1;
		e->family = AF_INET;
		*proto = ip.protocol;
		__builtin_memcpy(e->raddr, &ip.saddr, 4);
		__builtin_memcpy(e->laddr, &ip.daddr, 4);
	} else if (vers == 6) {
		struct ipv6hdr ip6;
		if (bpf_probe_read_kernel(&ip6, sizeof(ip6), head + nh))
			return -1;
		e->family = AF_INET6;
		*proto = ip6.nexthdr;
		__builtin_memcpy(e->raddr, &ip6.saddr, 16);
		__builtin_memcpy(e->laddr, &ip6.daddr, 16);
	} else {
		return -1;
	}
	struct tcphdr tcp;
	if (bpf_probe_read_kernel(&tcp, sizeof(tcp), head + th))
		return -1;
	e->rport = bpf_ntohs(tcp.source);
	e->lport = bpf_ntohs(tcp.dest);
	*tcpflags = ((__u8 *)&tcp)[13];
	return 0;
}

// One reset sent for a segment that found no socket: conn_refused when the
// segment was a bare SYN, rst_sent otherwise.
static __always_inline void no_socket_reset(const struct sk_buff *skb, int check_proto)
{
	if (!skb)
		return;
	__u64 netns = BPF_CORE_READ(skb, dev, nd_net.net, ns.inum);
	if (filter_enabled && !(netns && bpf_map_lookup_elem(&tracked_netns, &netns)))
		return;
	struct event tmp = {};
	__u8 tcpflags = 0, proto = 0;
	if (read_segment(&tmp, skb, &tcpflags, &proto))
		return;
	if (check_proto && proto != IPPROTO_TCP)
		return;
	// Never a reset in answer to a reset (tcp_v4_send_reset's first test).
	if (tcpflags & TCPHDR_RST)
		return;
	__u8 kind = (tcpflags & (TCPHDR_SYN | TCPHDR_ACK)) == TCPHDR_SYN ? KIND_REFUSED : KIND_RST_SENT;
	count(kind, 0);
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(kind, 1);
		return;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->ts_ns = bpf_ktime_get_ns();
	e->kind = kind;
	e->netns = netns;
	e->family = tmp.family;
	e->lport = tmp.lport;
	e->rport = tmp.rport;
	__builtin_memcpy(e->laddr, tmp.laddr, 16);
	__builtin_memcpy(e->raddr, tmp.raddr, 16);
	e->flags = FLAG_NO_SOCKET;
	submit(e);
}

SEC("fentry/tcp_v4_send_reset")
int BPF_PROG(reset_v4_fentry, const struct sock *sk, struct sk_buff *skb)
{
	if (sk)
		return 0; // a socket's reset: tcp_send_reset shows it on every kernel
	// tcp_v4_send_reset sends nothing without a socket unless the segment
	// was routed to this host.
	unsigned long refdst = BPF_CORE_READ(skb, _skb_refdst) & ~1UL;
	if (refdst) {
		struct rtable *rt = (struct rtable *)refdst;
		if (BPF_CORE_READ(rt, rt_type) != RTN_LOCAL)
			return 0;
	}
	no_socket_reset(skb, 0);
	return 0;
}

SEC("fentry/tcp_v6_send_reset")
int BPF_PROG(reset_v6_fentry, const struct sock *sk, struct sk_buff *skb)
{
	if (sk)
		return 0;
	no_socket_reset(skb, 0);
	return 0;
}

// tcp_v4_rcv/tcp_v6_rcv: no_tcp_socket: a segment with a good checksum is
// answered by tcp_v*_send_reset(NULL, skb) and then freed with
// SKB_DROP_REASON_NO_SOCKET. UDP frees with the same reason, hence the
// protocol test.
SEC("tp_btf/kfree_skb")
int BPF_PROG(kfree_skb_no_socket, struct sk_buff *skb, void *location, int reason)
{
	if ((__u32)reason != drop_reason_no_socket || !drop_reason_no_socket)
		return 0;
	no_socket_reset(skb, 1);
	return 0;
}
