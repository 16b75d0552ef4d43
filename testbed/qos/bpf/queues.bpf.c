// SPDX-License-Identifier: GPL-2.0
/* Lossless queues watched per packet, in the kernel (issue #28).
 *
 * Every port of the fabric has an HTB root with one class and bfifo leaf per
 * lossless 802.1p priority (testbed/qos/shaper.py). Two programs run on the
 * qdisc tracepoints of every root (this kernel has tracepoints, but neither
 * kprobes nor fentry): after each enqueue the root accepted and after each
 * dequeue. On a watched port they read the backlog of each of its lossless
 * leaves, the leaf qdisc's own figure (`tc -s` prints the same), found through
 * HTB's class hash as htb_find() does, and keep it with its maximum; a queue
 * crossing XOFF upward or XON downward puts an event on a ring buffer. The PFC
 * agent sleeps on that ring buffer instead of polling every queue
 * (testbed/qos/kqueues.py).
 *
 * Nothing is counted here, so nothing can drift: every packet in or out of a
 * port re-reads every lossless queue of that port. (Counting bytes in and out
 * was tried first: on this kernel a few dequeues in a thousand reached no
 * tracepoint, with no recursion miss counted, and each stayed in the count.)
 *
 * Which ports are watched is the `ports` map: (network namespace inode,
 * ifindex) -> port number; which of its priorities, the `watched` field of
 * each queue. Every other qdisc of the machine is looked up once and left.
 *
 * A third program, attached only when the experiment asks for ECN, marks
 * packets at switch egress from the same figures (mark_ecn, below).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#ifndef LOSSLESS_MINOR
#error "build with -DLOSSLESS_MINOR=<the HTB minor of lossless priority 0> (testbed/qos/spec.py)"
#endif
#define PRIORITIES 8
#define MAX_CHAIN 16  /* classes followed in one bucket of HTB's class hash */
#define EV_XOFF 1
#define EV_XON 2
#define MARK_ENQUEUE 0
#define MARK_DEQUEUE 1

struct port_key {
	__u32 netns;   /* inode of the port's network namespace */
	__u32 ifindex;
};

/* One (port, priority); user space reads and writes these through mmap. */
struct lossless_queue {
	__u32 watched;      /* set by user space for the port's lossless priorities */
	__u32 xoff;         /* bytes; 0: never raise events (a host's queue pauses nobody) */
	__u32 xon;
	__u32 above;        /* 1 from an XOFF crossing to the next XON crossing */
	__u32 backlog;      /* bytes in the leaf at the last packet in or out of the port */
	__u32 max_backlog;
	__u32 xoff_events;
	__u32 kmin;         /* ECN marking (RED on the backlog before each packet joins): none at or below kmin */
	__u32 kmax;         /* bytes; 0: this queue marks nothing. At or above kmax every ECN-capable packet */
	__u32 pmax;         /* the probability just below kmax, in 1/2^32 */
	__u32 marks;        /* packets marked CE */
	__u32 mark_at;      /* MARK_ENQUEUE: at the port's egress, on the queue a packet joins; MARK_DEQUEUE: as it
	                     * leaves, on the queue behind it (mark_departed, at the far end of the port's link) */
	__u64 leaf;         /* the leaf qdisc, once found */
	__u64 last_ns;      /* bpf_ktime_get_ns (CLOCK_MONOTONIC) of the last read */
	__u64 held;         /* bytes of frames counted on ingress ports (pfc.model ingress, mmu.bpf.h) */
};

struct event {
	__u64 t_ns;         /* CLOCK_MONOTONIC of the crossing */
	__u32 queue;        /* port * PRIORITIES + priority */
	__u32 backlog;
	__u32 kind;         /* EV_XOFF or EV_XON */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1); /* set to the port count by the loader */
	__type(key, struct port_key);
	__type(value, __u32);
} ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1); /* set to ports * PRIORITIES by the loader */
	__type(key, __u32);
	__type(value, struct lossless_queue);
} queues SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 7);
	__type(key, __u32);
	__type(value, __u64); /* the seven below */
} counters SEC(".maps");
#define LOST 0        /* crossings the ring buffer had no room for */
#define NO_LEAF 1     /* lossless leaves not found */
#define DRAINED 2     /* bytes a queue held by the ingress count when its qdisc said it was empty: their leaving
                       * was not seen (mmu.bpf.h) */
#define UNFOLLOWED 3  /* bulk dequeues longer than MAX_BULK frames: the rest not taken off their ingress */
#define UNNAMED 4     /* lossless frames whose source MAC could not be made their port's */
#define COUNTED 5     /* bytes counted on ingress ports (DRAINED is measured against it) */
#define DISCARDED 6   /* bytes a reset or destroyed queue held (a link set down): gone with it, not unseen */

static __always_inline void count(__u32 which)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &which);
	if (c)
		__sync_fetch_and_add(c, 1);
}

/* HTB's own types, as far as they are read here. Where sch_htb is a module (Debian's kernels) they are not in
 * vmlinux.h; libbpf resolves these local flavours against the module's BTF at load time (CO-RE). */
struct htb_sched___hpn {
	struct Qdisc_class_hash clhash;
} __attribute__((preserve_access_index));

struct htb_class_leaf___hpn {
	struct Qdisc *q;
} __attribute__((preserve_access_index));

struct htb_class___hpn {
	struct Qdisc_class_common common;
	union {
		struct htb_class_leaf___hpn leaf;
	};
} __attribute__((preserve_access_index));

/* The leaf qdisc of class `classid` under an HTB root: its class hash walked as htb_find() walks it. A
 * global function, so the verifier checks it once; pointers are addresses read with probes. */
__noinline __u64 htb_leaf(__u64 root_addr, __u32 classid)
{
	struct Qdisc *root = (struct Qdisc *)root_addr;
	struct htb_sched___hpn *htb = (void *)root + bpf_core_field_offset(struct Qdisc, privdata);
	struct hlist_head *buckets = BPF_CORE_READ(htb, clhash.hash);
	__u32 h = classid ^ (classid >> 8);
	h ^= h >> 4; /* qdisc_class_hash() */
	h &= BPF_CORE_READ(htb, clhash.hashmask);
	struct hlist_node *node = BPF_CORE_READ(buckets + h, first);
	for (int i = 0; i < MAX_CHAIN && node; i++) {
		struct Qdisc_class_common *common =
			(void *)node - bpf_core_field_offset(struct Qdisc_class_common, hnode);
		if (BPF_CORE_READ(common, classid) == classid) {
			struct htb_class___hpn *cl = (void *)common - bpf_core_field_offset(struct htb_class___hpn, common);
			return (__u64)BPF_CORE_READ(cl, leaf.q);
		}
		node = BPF_CORE_READ(node, next);
	}
	return 0;
}

static __always_inline void crossed(__u32 index, __u32 backlog, __u64 now, __u32 kind)
{
	struct event ev = {.t_ns = now, .queue = index, .backlog = backlog, .kind = kind};
	if (bpf_ringbuf_output(&events, &ev, sizeof(ev), 0))
		count(LOST);
}

/* The switch ports whose egress programs (mark_ecn, switch_egress) act, and the lossless priorities' DSCPs. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1); /* set to the port count by the loader */
	__type(key, __u32);     /* ifindex in the root namespace (every switch port is there) */
	__type(value, __u32);   /* port number, as in `ports` */
} switch_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 64);
	__type(key, __u32);     /* DSCP */
	__type(value, __u32);   /* its lossless priority + 1; 0: not lossless */
} dscp_priority SEC(".maps");

#define ETH_HLEN 14
#define ETH_P_IP 0x0800
#include "mmu.bpf.h"

static __always_inline void read_queue(struct Qdisc *root, __u32 port, __u32 prio, __u64 now)
{
	__u32 index = port * PRIORITIES + prio;
	struct lossless_queue *q = bpf_map_lookup_elem(&queues, &index);
	if (!q || !q->watched)
		return;
	if (!q->leaf) {
		__u32 major = BPF_CORE_READ(root, handle) & 0xFFFF0000;
		q->leaf = htb_leaf((__u64)root, major | (LOSSLESS_MINOR + prio));
		if (!q->leaf) {
			count(NO_LEAF);
			return;
		}
	}
	struct Qdisc *leaf = (struct Qdisc *)q->leaf; /* apart: inside BPF_CORE_READ it would be relocated */
	__u32 backlog = BPF_CORE_READ(leaf, qstats.backlog);
	q->backlog = backlog;
	q->last_ns = now;
	if (backlog > q->max_backlog)
		q->max_backlog = backlog; /* under the root's lock: one writer per port */
	if (!backlog && q->held)
		drain_held(port, prio, now, DRAINED);
	if (!q->xoff)
		return;
	if (!q->above && backlog > q->xoff && __sync_val_compare_and_swap(&q->above, 0, 1) == 0) {
		__sync_fetch_and_add(&q->xoff_events, 1);
		crossed(index, backlog, now, EV_XOFF);
	} else if (q->above && backlog < q->xon && __sync_val_compare_and_swap(&q->above, 1, 0) == 1) {
		crossed(index, backlog, now, EV_XON);
	}
}

/* The watched port a qdisc of the machine belongs to, or NULL. */
static __always_inline __u32 *port_of(struct Qdisc *q)
{
	struct net_device *dev = BPF_CORE_READ(q, dev_queue, dev);
	struct port_key key = {
		.netns = BPF_CORE_READ(dev, nd_net.net, ns.inum),
		.ifindex = BPF_CORE_READ(dev, ifindex),
	};
	return bpf_map_lookup_elem(&ports, &key);
}

/* Every watched lossless queue of the root's port, after `packets` frames went in or out of it (`in`), their
 * bytes counted on the ingress ports they came by first. */
static __always_inline void port_changed(struct Qdisc *root, struct sk_buff *skb, int packets, bool in)
{
	__u32 *port = port_of(root);
	if (!port)
		return;
	__u32 p = *port;
	__u64 now = bpf_ktime_get_ns();
	mmu_frames(p, skb, packets, in, now);
	for (__u32 prio = 0; prio < PRIORITIES; prio++)
		read_queue(root, p, prio, now);
}

SEC("raw_tp/qdisc_enqueue")
int BPF_PROG(on_enqueue, struct Qdisc *root, const struct netdev_queue *txq, struct sk_buff *skb)
{
	port_changed(root, skb, 1, true);
	return 0;
}

SEC("raw_tp/qdisc_dequeue")
int BPF_PROG(on_dequeue, struct Qdisc *root, const struct netdev_queue *txq, int packets, struct sk_buff *skb)
{
	if (skb)
		port_changed(root, skb, packets, false);
	return 0;
}

/* A watched leaf emptied without a dequeue: reset (a link set down: dev_deactivate resets every qdisc of the
 * port, and no dequeue tracepoint sees the packets go) or destroyed (its class or the root deleted). Both
 * tracepoints fire before the qdisc is emptied, after the port stopped taking packets. The queue's figure
 * becomes 0 and a queue above XOFF crosses XON: without this its stored backlog and XOFF held the upstream
 * neighbours paused until a packet crossed that port again (never, for a link left down). A destroyed leaf is
 * forgotten, to be found again under the root by the next packet. */
static __always_inline void leaf_emptied(struct Qdisc *q, bool destroyed)
{
	__u32 *port = port_of(q);
	if (!port)
		return;
	__u32 p = *port;
	__u64 now = bpf_ktime_get_ns();
	for (__u32 prio = 0; prio < PRIORITIES; prio++) {
		__u32 index = p * PRIORITIES + prio;
		struct lossless_queue *lq = bpf_map_lookup_elem(&queues, &index);
		if (!lq || !lq->watched || lq->leaf != (__u64)q)
			continue;
		lq->backlog = 0;
		lq->last_ns = now;
		drain_held(p, prio, now, DISCARDED);
		if (destroyed)
			lq->leaf = 0;
		if (lq->xoff && lq->above && __sync_val_compare_and_swap(&lq->above, 1, 0) == 1)
			crossed(index, 0, now, EV_XON);
	}
}

SEC("raw_tp/qdisc_reset")
int BPF_PROG(on_reset, struct Qdisc *q)
{
	leaf_emptied(q, false);
	return 0;
}

SEC("raw_tp/qdisc_destroy")
int BPF_PROG(on_destroy, struct Qdisc *q)
{
	leaf_emptied(q, true);
	return 0;
}

/* No verdict: the next program runs (on tcx, TCX_NEXT: then a clsact's filters, a lossy link's; on clsact,
 * TC_ACT_UNSPEC: the next filter), and the packet goes on. TC_ACT_OK would end the chain there. */
#define GO_ON (-1)
#define ECN_MASK 3

/* The queue of `port` whose marking (`mark_at`) an IPv4 packet with this TOS meets, if RED's probability on the
 * backlog the tracepoints above last read marks it Congestion Experienced, as DCQCN's switches mark (Kmin, Kmax,
 * Pmax); else NULL. Only ECN-capable packets of a lossless priority, not marked yet. */
static __always_inline struct lossless_queue *to_mark(__u8 tos, __u32 port, __u32 mark_at)
{
	if ((tos & ECN_MASK) == 0 || (tos & ECN_MASK) == ECN_MASK)
		return NULL; /* not ECN-capable, or marked already */
	__u32 dscp = tos >> 2;
	__u32 *prio = bpf_map_lookup_elem(&dscp_priority, &dscp);
	if (!prio || !*prio)
		return NULL;
	__u32 index = port * PRIORITIES + (*prio - 1);
	struct lossless_queue *q = bpf_map_lookup_elem(&queues, &index);
	if (!q || !q->kmax || q->mark_at != mark_at)
		return NULL;
	__u32 backlog = q->backlog, kmin = q->kmin, kmax = q->kmax;
	if (backlog <= kmin)
		return NULL; /* kmin == kmax: DCTCP's step, every packet above K */
	if (backlog < kmax) {
		__u64 p = (__u64)q->pmax * (backlog - kmin) / (kmax - kmin);
		if (bpf_get_prandom_u32() >= p)
			return NULL;
	}
	__sync_fetch_and_add(&q->marks, 1);
	return q;
}

/* Enqueue marking: at the port's egress, before its qdisc, on the queue the packet is about to join. */
static __always_inline int ecn(struct __sk_buff *skb, __u32 *port)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + ETH_HLEN;
	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return GO_ON;
	__u8 tos = ip->tos;
	if (!to_mark(tos, *port, MARK_ENQUEUE))
		return GO_ON;
	__u16 old = *(__u16 *)ip; /* version, header length and TOS: the checksum's 16-bit word */
	__u16 new = old;
	((__u8 *)&new)[1] = tos | ECN_MASK;
	__u8 marked = tos | ECN_MASK;
	bpf_l3_csum_replace(skb, ETH_HLEN + offsetof(struct iphdr, check), old, new, 2);
	bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct iphdr, tos), &marked, 1, 0);
	return GO_ON;
}

/* ECN marking at a switch port's egress, before the qdisc (a tcx link, or cls_bpf on clsact, direct action). */
SEC("tc")
int mark_ecn(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	__u32 *port = bpf_map_lookup_elem(&switch_ports, &ifindex);
	return port ? ecn(skb, port) : GO_ON;
}

/* Every switch port's egress with pfc.model ingress: the frame's ingress port named (mmu.bpf.h), then ECN
 * marking where it is on (queues with kmax). */
SEC("tc")
int switch_egress(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	__u32 *port = bpf_map_lookup_elem(&switch_ports, &ifindex);
	if (!port)
		return GO_ON;
	__u32 slot = *port;
	ingress_mark(skb, slot);
	return ecn(skb, &slot);
}

char LICENSE[] SEC("license") = "GPL";

/* Dequeue marking, as the HPCC simulator's switches mark (on the egress queue as a packet leaves it): an XDP
 * program at the far end of a switch port's link (the next switch's port, or a host's NIC) runs as the frame
 * arrives, right after the port's qdisc let it go, and marks it on the backlog its dequeue left behind (the
 * tracepoints above read it then). Userspace OVS and a host's stack see the frame after this program.
 *
 * An XDP program knows the interface a frame came in by only by its index, which is unique in one network
 * namespace: a switch's far end (the root namespace) is named by it, a host's by it and the address the frame
 * is for (each host NIC's own), each kind by its own program and map. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1); /* set to the port count by the loader */
	__type(key, __u32);     /* ifindex, in the root namespace */
	__type(value, __u32);   /* the switch port whose link ends there */
} far_switch_ends SEC(".maps");

struct host_end {
	__u32 ifindex; /* in the host's namespace */
	__u32 daddr;   /* the NIC's IPv4 address, network order */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1); /* set to the port count by the loader */
	__type(key, struct host_end);
	__type(value, __u32);   /* the switch port whose link ends there */
} far_host_ends SEC(".maps");

static __always_inline int departed(struct xdp_md *ctx, bool host)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + ETH_HLEN;
	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	__u32 *port;
	if (host) {
		struct host_end key = {.ifindex = ctx->ingress_ifindex, .daddr = ip->daddr};
		port = bpf_map_lookup_elem(&far_host_ends, &key);
	} else {
		__u32 ifindex = ctx->ingress_ifindex;
		port = bpf_map_lookup_elem(&far_switch_ends, &ifindex);
	}
	__u8 tos = ip->tos;
	if (!port || !to_mark(tos, *port, MARK_DEQUEUE))
		return XDP_PASS;
	/* RFC 1624's incremental update of the header checksum for its first 16-bit word (the new word made as
	 * the tc path makes it: re-reading it through the header after the store gave the old one) */
	__u16 old = *(__u16 *)ip;
	__u16 new = old;
	((__u8 *)&new)[1] = tos | ECN_MASK;
	ip->tos = tos | ECN_MASK;
	__u32 sum = (__u16)~ip->check + (__u16)~old + new;
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	ip->check = ~sum;
	return XDP_PASS;
}

SEC("xdp")
int mark_departed(struct xdp_md *ctx)
{
	return departed(ctx, false);
}

SEC("xdp")
int mark_departed_host(struct xdp_md *ctx)
{
	return departed(ctx, true);
}
