//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
//
// Kernel side of drainscope's capture: signals, process exits, TCP listener
// and connection closes, and resets, for the cgroups and network namespaces
// the agent tracks. Every program is a tp_btf (BTF-enabled raw tracepoint):
// no kprobes and no tracefs are needed, and arguments are typed kernel
// pointers read with CO-RE relocations.
//
// One fixed-size record (struct event) goes through one ring buffer. Per-CPU
// counters count, per kind, the records produced (passed the filter) and
// those dropped because the ring buffer was full, so that user space can
// check produced == delivered + dropped.

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>

char __license[] SEC("license") = "Dual MIT/GPL";

#define AF_INET 2
#define AF_INET6 10
#define PF_EXITING 0x00000004
#define SIGNAL_GROUP_EXIT 0x00000004
#define TCPHDR_SYN 0x02
#define TCPHDR_ACK 0x10
#define MAX_CGROUP_DEPTH 8

enum kind {
	KIND_SIGNAL = 1,
	KIND_EXIT = 2,
	KIND_LISTEN_CLOSE = 3,
	KIND_CONN_CLOSE = 4,
	KIND_RST_SENT = 5,
	KIND_RST_RECV = 6,
	KIND_REFUSED = 7,
	KIND_MAX = 8,
};

enum flag {
	FLAG_AT_EXIT = 1 << 0,     // current task is in its exit path (PF_EXITING)
	FLAG_PEER = 1 << 1,        // connection closed by the peer (FIN received)
	FLAG_NO_SOCKET = 1 << 2,   // reset sent with no socket (closed port or socket gone)
	FLAG_HAVE_REASON = 1 << 3, // reason holds the kernel's enum sk_rst_reason
	FLAG_OWNER = 1 << 4,       // pid/comm is the task that owns the socket
	FLAG_GROUP = 1 << 5,       // signal sent to the whole thread group
	FLAG_TIMEWAIT = 1 << 6,    // reset sent for a TIME_WAIT or request socket
	FLAG_SIGNALED = 1 << 7,    // process terminated by a signal (signal holds it)
	FLAG_CORE = 1 << 8,        // ... and dumped core
	FLAG_MAIN = 1 << 9,        // the process is its container's main one (PID 1 of a child pid namespace)
};

// struct event is decoded by the Go reader; layout_test.go pins its size and
// offsets. All fields are written explicitly, padding included.
struct event {
	__u64 ts_ns;     // bpf_ktime_get_ns (CLOCK_MONOTONIC)
	__u64 cgroup_id; // cgroup of the task (signal target, exiting task) or socket
	__u64 netns;     // network namespace inode
	__u32 pid;       // thread group id
	__u32 tid;
	__u32 peer_pid;  // signal sender
	__s32 signal;
	__s32 code;      // exit status, or the signal's delivery result
	__u32 flags;
	__u16 reason;    // enum sk_rst_reason
	__u8 kind;
	__u8 family;
	__u16 lport;     // host byte order
	__u16 rport;
	__u8 laddr[16];  // IPv4 in the first 4 bytes
	__u8 raddr[16];
	char comm[16];
	char peer_comm[16];
	__u8 old_state;
	__u8 new_state;
	__u16 _pad0;
	__u32 idle_us;   // connection close: 1 + µs since the peer last acked our data; 0 unknown
};

// Emit the types for bpf2go, which generates their Go counterparts.
const struct event *unused_event __attribute__((unused));
const enum kind *unused_kind __attribute__((unused));
const enum flag *unused_flag __attribute__((unused));

// Set by the loader before load (read-only data, so the verifier sees
// constants and prunes what a setting turns off).
volatile const __u64 signal_mask = (1ULL << 15) | (1ULL << 9) | (1ULL << 2) | (1ULL << 3);
volatile const __u8 filter_enabled = 1;  // 0: report every process and socket
volatile const __s32 v1_subsys_id = -1;  // >= 0: identify tasks by this cgroup v1 controller
volatile const __u8 rst_reason_arg = 0;  // tcp_send_reset carries enum sk_rst_reason as arg 3
// tcp_send_reset fires with no socket (Linux 6.10+). Always true where the
// kernel has it; 0 makes the program ignore those calls, as older kernels
// never make them, so that the degraded mode can be tested on a new kernel.
volatile const __u8 no_socket_resets = 1;
// bpf_get_current_task_btf exists (Linux 5.11+). Without it the current task
// comes from bpf_get_current_task and its fields are read with CO-RE probes.
volatile const __u8 have_task_btf = 1;
// sched_process_exit carries group_dead as arg 2 (Linux 6.16+): true for the
// one thread whose exit ends the process. Without it the program reads the
// thread group's live counter, which several threads exiting at once can
// all see at zero.
volatile const __u8 exit_group_dead_arg = 0;
// Wake the reader only once this many bytes wait in the ring buffer (0: on
// every event). Waking costs an irq_work per event, which dominates the
// cost of a tracked event; the reader polls on a timer for the rest.
volatile const __u64 wakeup_bytes = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22); // resized by the loader
} events SEC(".maps");

// Cgroup ids the agent tracks; a task or socket matches when its cgroup or
// one of its ancestors is here.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u8);
} tracked_cgroups SEC(".maps");

// Cache of the walk up a cgroup's ancestors: cgroup id -> verdict, valid
// while its generation is current. The agent bumps the generation after
// every change to tracked_cgroups, which invalidates all verdicts at once
// (a walk racing with the change stores the old generation).
struct verdict {
	__u32 generation;
	__u32 tracked;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct verdict);
} verdicts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} generation SEC(".maps");

// Network namespace inodes the agent tracks.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u8);
} tracked_netns SEC(".maps");

// counters[kind*2] = produced, counters[kind*2+1] = dropped (ring buffer full).
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
	// Atomic even though per-CPU: a program in softirq can interrupt one in
	// task context on the same CPU, and the counts must be exact.
	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline struct event *reserve(__u8 kind)
{
	count(kind, 0);
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(kind, 1);
		return 0;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->ts_ns = bpf_ktime_get_ns();
	e->kind = kind;
	return e;
}

// A record in the ring: the event and the ring's 8-byte header.
#define RECORD_BYTES (sizeof(struct event) + 8)

// submit wakes the reader only for the record that makes the waiting data
// cross wakeup_bytes. Waking for every record past the mark would queue an
// irq_work per record while a busy machine is slow to schedule the reader.
// A crossing missed because other CPUs reserved at the same moment only
// delays the data until the reader's next poll.
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

// Copies a task's 16-byte command name with two loads instead of a helper
// call; the kernel keeps it NUL-terminated.
static __always_inline void copy_comm(char *dst, struct task_struct *task)
{
	const __u64 *src = (const __u64 *)task->comm;
	((__u64 *)dst)[0] = src[0];
	((__u64 *)dst)[1] = src[1];
}

static __always_inline struct cgroup *task_cgroup(struct task_struct *task)
{
	if (v1_subsys_id >= 0) {
		int id = v1_subsys_id;
		if (id >= CGROUP_SUBSYS_COUNT)
			return 0;
		return task->cgroups->subsys[id]->cgroup;
	}
	return task->cgroups->dfl_cgrp;
}

static __always_inline __u64 cgroup_id(struct cgroup *cg)
{
	if (!cg)
		return 0;
	return cg->kn->id;
}

static __always_inline int cgroup_walk(struct cgroup *cg)
{
	for (int i = 0; i < MAX_CGROUP_DEPTH; i++) {
		if (!cg)
			return 0;
		__u64 id = cg->kn->id;
		if (bpf_map_lookup_elem(&tracked_cgroups, &id))
			return 1;
		struct cgroup_subsys_state *parent = cg->self.parent;
		if (!parent)
			return 0;
		cg = parent->cgroup;
	}
	return 0;
}

static __always_inline int cgroup_tracked(struct cgroup *cg)
{
	if (!cg)
		return 0;
	__u32 zero = 0;
	__u32 *gen = bpf_map_lookup_elem(&generation, &zero);
	if (!gen)
		return 0;
	struct verdict v = {.generation = *gen};
	__u64 id = cg->kn->id;
	struct verdict *cached = bpf_map_lookup_elem(&verdicts, &id);
	if (cached && cached->generation == v.generation)
		return cached->tracked;
	v.tracked = cgroup_walk(cg);
	bpf_map_update_elem(&verdicts, &id, &v, BPF_ANY);
	return v.tracked;
}

static __always_inline int netns_tracked(__u64 ino)
{
	return ino && bpf_map_lookup_elem(&tracked_netns, &ino);
}

static __always_inline __u64 task_netns(struct task_struct *task)
{
	struct nsproxy *ns = task->nsproxy;
	if (!ns)
		return 0;
	return ns->net_ns->ns.inum;
}

static __always_inline __u64 sk_netns(const struct sock *sk)
{
	return sk->__sk_common.skc_net.net->ns.inum;
}

// The cgroup a full socket was created in (cgroup v2). Under cgroup v1 it is
// the unified root, which says nothing, so it is not used.
static __always_inline struct cgroup *sk_cgroup(const struct sock *sk)
{
	if (v1_subsys_id >= 0)
		return 0;
	if (!bpf_core_field_exists(sk->sk_cgrp_data.cgroup))
		return 0;
	return sk->sk_cgrp_data.cgroup;
}

static __always_inline void read_sock_addrs(struct event *e, const struct sock *sk, int full)
{
	__u16 family = sk->__sk_common.skc_family;
	e->family = family;
	e->lport = sk->__sk_common.skc_num;
	// A socket moved to CLOSE has released its port (skc_num is 0), but a
	// full socket still has it in inet_sport.
	if (!e->lport && full)
		// The verifier types sk as struct sock: read past it with a helper.
		e->lport = bpf_ntohs(BPF_CORE_READ((struct inet_sock *)sk, inet_sport));
	e->rport = bpf_ntohs(sk->__sk_common.skc_dport);
	if (family == AF_INET) {
		*(__u32 *)e->laddr = sk->__sk_common.skc_rcv_saddr;
		*(__u32 *)e->raddr = sk->__sk_common.skc_daddr;
	} else if (family == AF_INET6) {
		const __u32 *l = sk->__sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32;
		const __u32 *r = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32;
		for (int i = 0; i < 4; i++) {
			((__u32 *)e->laddr)[i] = l[i];
			((__u32 *)e->raddr)[i] = r[i];
		}
	}
}

// The cgroup id and network namespace of a task pointer that is not
// BTF-typed (bpf_get_current_task), read with CO-RE probes.
static __always_inline __u64 probed_task_cgroup_id(struct task_struct *task)
{
	struct css_set *cs = BPF_CORE_READ(task, cgroups);
	struct cgroup *cg = 0;
	if (!cs)
		return 0;
	if (v1_subsys_id >= 0) {
		int id = v1_subsys_id;
		if (id >= CGROUP_SUBSYS_COUNT)
			return 0;
		struct cgroup_subsys_state **slot = __builtin_preserve_access_index(&cs->subsys[0]);
		struct cgroup_subsys_state *css = 0;
		if (bpf_probe_read_kernel(&css, sizeof(css), slot + id) || !css)
			return 0;
		cg = BPF_CORE_READ(css, cgroup);
	} else {
		cg = BPF_CORE_READ(cs, dfl_cgrp);
	}
	if (!cg)
		return 0;
	return BPF_CORE_READ(cg, kn, id);
}

static __always_inline __u64 probed_task_netns(struct task_struct *task)
{
	return BPF_CORE_READ(task, nsproxy, net_ns, ns.inum);
}

// Whether task's process is its container's main process: the one the
// runtime started as the container's init, which is PID 1 in its own pid
// namespace below the host's (level > 0). A process exec'd into the
// container later (a probe, kubectl exec) or forked by the app has another
// number there. Read through the thread-group leader, so that any thread
// of the main process counts, and with CO-RE probe reads, since a zombie
// leader's pid may already be detached.
static __always_inline int task_is_main(struct task_struct *task)
{
	struct pid *p = BPF_CORE_READ(task, group_leader, thread_pid);
	if (!p)
		return 0;
	unsigned int level = BPF_CORE_READ(p, level);
	if (level == 0 || level > 32) // MAX_PID_NS_LEVEL
		return 0;
	int nr = 0;
	if (bpf_core_read(&nr, sizeof(nr), &p->numbers[level].nr))
		return 0;
	return nr == 1;
}

// Fills pid and comm from the current task, and marks it the owner when it
// lives in the socket's cgroup (or, without one, in the socket's network
// namespace): in softirq context the current task is whoever was running.
static __always_inline void sock_owner(struct event *e, __u64 sk_cgid, __u64 netns)
{
	__u64 id = bpf_get_current_pid_tgid();
	int owner, is_main;
	__u32 task_flags;
	if (have_task_btf) {
		struct task_struct *task = bpf_get_current_task_btf();
		if (sk_cgid)
			owner = cgroup_id(task_cgroup(task)) == sk_cgid;
		else
			owner = task_netns(task) == netns;
		task_flags = task->flags;
		is_main = owner && task_is_main(task);
	} else {
		struct task_struct *task = (struct task_struct *)bpf_get_current_task();
		if (sk_cgid)
			owner = probed_task_cgroup_id(task) == sk_cgid;
		else
			owner = probed_task_netns(task) == netns;
		task_flags = BPF_CORE_READ(task, flags);
		is_main = owner && task_is_main(task);
	}
	if (!owner)
		return;
	e->flags |= FLAG_OWNER;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	bpf_get_current_comm(&e->comm, sizeof(e->comm));
	if (task_flags & PF_EXITING)
		e->flags |= FLAG_AT_EXIT;
	if (is_main)
		e->flags |= FLAG_MAIN;
}

SEC("tp_btf/signal_generate")
int BPF_PROG(signal_generate, int sig, struct kernel_siginfo *info, struct task_struct *task, int group,
	     int result)
{
	if (sig <= 0 || sig >= 64 || !(signal_mask & (1ULL << sig)))
		return 0;
	struct cgroup *cg = task_cgroup(task);
	__u64 netns = task_netns(task);
	if (filter_enabled && !netns_tracked(netns) && !cgroup_tracked(cg))
		return 0;

	struct event *e = reserve(KIND_SIGNAL);
	if (!e)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	e->cgroup_id = cgroup_id(cg);
	e->netns = netns;
	e->pid = task->tgid;
	e->tid = task->pid;
	copy_comm(e->comm, task->group_leader);
	e->peer_pid = id >> 32;
	bpf_get_current_comm(&e->peer_comm, sizeof(e->peer_comm));
	e->signal = sig;
	e->code = result;
	if (group)
		e->flags |= FLAG_GROUP;
	if (task_is_main(task))
		e->flags |= FLAG_MAIN;
	submit(e);
	return 0;
}

// One event per process: when its last thread exits, which is when the
// process is gone and its files (sockets) are about to be closed.
SEC("tp_btf/sched_process_exit")
int BPF_PROG(sched_process_exit, struct task_struct *task)
{
	struct signal_struct *sig = task->signal;
	if (exit_group_dead_arg) {
		if (!(__u8)ctx[1])
			return 0;
	} else if (sig->live.counter != 0) {
		return 0;
	}
	struct cgroup *cg = task_cgroup(task);
	__u64 netns = task_netns(task);
	if (filter_enabled && !netns_tracked(netns) && !cgroup_tracked(cg))
		return 0;

	struct event *e = reserve(KIND_EXIT);
	if (!e)
		return 0;
	int code = task->exit_code;
	if (sig->flags & SIGNAL_GROUP_EXIT)
		code = sig->group_exit_code;
	e->cgroup_id = cgroup_id(cg);
	e->netns = netns;
	e->pid = task->tgid;
	e->tid = task->pid;
	copy_comm(e->comm, task->group_leader);
	if (code & 0x7f) {
		e->flags |= FLAG_SIGNALED;
		e->signal = code & 0x7f;
		if (code & 0x80)
			e->flags |= FLAG_CORE;
	} else {
		e->code = (code >> 8) & 0xff;
	}
	if (task_is_main(task))
		e->flags |= FLAG_MAIN;
	submit(e);
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(inet_sock_set_state, const struct sock *sk, const int oldstate, const int newstate)
{
	__u8 kind;
	__u32 flags = 0;
	if (oldstate == TCP_LISTEN && newstate == TCP_CLOSE)
		kind = KIND_LISTEN_CLOSE;
	else if (oldstate == TCP_ESTABLISHED && newstate == TCP_FIN_WAIT1)
		kind = KIND_CONN_CLOSE;
	else if (oldstate == TCP_ESTABLISHED && newstate == TCP_CLOSE_WAIT) {
		kind = KIND_CONN_CLOSE;
		flags = FLAG_PEER;
	} else
		return 0;
	if (sk->sk_protocol != IPPROTO_TCP)
		return 0;
	__u64 netns = sk_netns(sk);
	struct cgroup *cg = sk_cgroup(sk);
	if (filter_enabled && !netns_tracked(netns) && !cgroup_tracked(cg))
		return 0;

	struct event *e = reserve(kind);
	if (!e)
		return 0;
	e->cgroup_id = cgroup_id(cg);
	e->netns = netns;
	e->flags = flags;
	e->old_state = oldstate;
	e->new_state = newstate;
	if (kind == KIND_CONN_CLOSE) {
		// delivered_mstamp is when the peer last acknowledged new data
		// from this side (a response), in CLOCK_MONOTONIC microseconds.
		// Unlike tcp_mstamp it does not move for keepalive probes, so
		// the time since tells a connection in use from an idle pooled
		// one.
		__u64 last = BPF_CORE_READ((const struct tcp_sock *)sk, delivered_mstamp);
		__u64 now = e->ts_ns / 1000;
		if (last && now >= last)
			e->idle_us = now - last >= 0xffffffffULL ? 0xffffffffU : (__u32)(now - last) + 1;
	}
	read_sock_addrs(e, sk, 1);
	sock_owner(e, e->cgroup_id, netns);
	submit(e);
	return 0;
}

// Addresses of a packet that has no socket: the packet's destination is the
// local side.
static __always_inline int read_skb(struct event *e, const struct sk_buff *skb, __u8 *tcpflags)
{
	unsigned char *head = skb->head;
	__u16 nh = skb->network_header;
	__u16 th = skb->transport_header;
	__u8 vers = 0;
	bpf_probe_read_kernel(&vers, 1, head + nh);
	vers >>= 4;
	if (vers == 4) {
		struct iphdr ip;
		if (bpf_probe_read_kernel(&ip, sizeof(ip), head + nh))
			return -1;
		e->family = AF_INET;
		__builtin_memcpy(e->raddr, &ip.saddr, 4);
		__builtin_memcpy(e->laddr, &ip.daddr, 4);
	} else if (vers == 6) {
		struct ipv6hdr ip6;
		if (bpf_probe_read_kernel(&ip6, sizeof(ip6), head + nh))
			return -1;
		e->family = AF_INET6;
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

SEC("tp_btf/tcp_send_reset")
int BPF_PROG(tcp_send_reset, const struct sock *sk, const struct sk_buff *skb)
{
	__u32 reason = 0;
	__u32 flags = 0;
	if (rst_reason_arg) {
		reason = (__u32)ctx[2];
		flags |= FLAG_HAVE_REASON;
	}

	if (!sk) {
		// No socket: a segment for a port nobody listens on, or for a
		// connection that no longer exists.
		if (!skb || !no_socket_resets)
			return 0;
		__u64 netns = skb->dev->nd_net.net->ns.inum;
		if (filter_enabled && !netns_tracked(netns))
			return 0;
		struct event tmp = {};
		__u8 tcpflags = 0;
		if (read_skb(&tmp, skb, &tcpflags))
			return 0;
		__u8 kind = KIND_RST_SENT;
		if ((tcpflags & (TCPHDR_SYN | TCPHDR_ACK)) == TCPHDR_SYN)
			kind = KIND_REFUSED;
		struct event *e = reserve(kind);
		if (!e)
			return 0;
		e->netns = netns;
		e->family = tmp.family;
		e->lport = tmp.lport;
		e->rport = tmp.rport;
		__builtin_memcpy(e->laddr, tmp.laddr, 16);
		__builtin_memcpy(e->raddr, tmp.raddr, 16);
		e->flags = flags | FLAG_NO_SOCKET;
		e->reason = reason;
		submit(e);
		return 0;
	}

	__u8 state = sk->__sk_common.skc_state;
	__u64 netns = sk_netns(sk);
	struct cgroup *cg = 0;
	if (state == TCP_TIME_WAIT || state == TCP_NEW_SYN_RECV)
		flags |= FLAG_TIMEWAIT; // not a full socket: only sock_common is valid
	else
		cg = sk_cgroup(sk);
	if (filter_enabled && !netns_tracked(netns) && !cgroup_tracked(cg))
		return 0;

	struct event *e = reserve(KIND_RST_SENT);
	if (!e)
		return 0;
	e->cgroup_id = cgroup_id(cg);
	e->netns = netns;
	e->flags = flags;
	e->reason = reason;
	e->old_state = state;
	// A reset answering a segment: take the addresses from the segment,
	// since a socket the reset aborts has already released its port.
	__u8 tcpflags;
	if (!skb || read_skb(e, skb, &tcpflags))
		read_sock_addrs(e, sk, !(flags & FLAG_TIMEWAIT));
	if (!(flags & FLAG_TIMEWAIT))
		sock_owner(e, e->cgroup_id, netns);
	submit(e);
	return 0;
}

SEC("tp_btf/tcp_receive_reset")
int BPF_PROG(tcp_receive_reset, struct sock *sk)
{
	__u64 netns = sk_netns(sk);
	struct cgroup *cg = sk_cgroup(sk);
	if (filter_enabled && !netns_tracked(netns) && !cgroup_tracked(cg))
		return 0;

	struct event *e = reserve(KIND_RST_RECV);
	if (!e)
		return 0;
	e->cgroup_id = cgroup_id(cg);
	e->netns = netns;
	e->old_state = sk->__sk_common.skc_state;
	read_sock_addrs(e, sk, 1);
	sock_owner(e, e->cgroup_id, netns);
	submit(e);
	return 0;
}

// Run once by the loader (BPF_PROG_TEST_RUN), never attached: the network
// namespace of the first task, init_task, at the root of every task's
// parent chain. That is the host's (init_net) whatever namespaces the
// agent runs in, and needs neither hostPID nor hostNetwork.
SEC("raw_tp")
int host_netns(void *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	for (int i = 0; i < 64; i++) {
		struct task_struct *parent = BPF_CORE_READ(task, real_parent);
		if (!parent || parent == task)
			break;
		task = parent;
	}
	return BPF_CORE_READ(task, nsproxy, net_ns, ns.inum);
}
