// SPDX-License-Identifier: GPL-2.0
/* 802.1Qbb's ingress accounting (`pfc.model: ingress`), included by queues.bpf.c.
 *
 * A shared-buffer switch pauses an ingress port by that port's own bytes inside the switch, against a dynamic
 * threshold, as ns-3's switch MMU does (testbed/qos/mmu.py is the same model, pure): each (ingress port,
 * priority) has a reserve; past it its bytes are in the shared buffer, and past the threshold (the free shared
 * buffer times the port's alpha, 2^-shift) the port's priority is paused (XOFF). It resumes (XON) when its
 * shared bytes are gone or `resume_offset` below the threshold. Bytes that came past the threshold are what the
 * port's headroom took: their most is kept (`max_over`), and a pause was late when it passed the headroom.
 *
 * Which ingress port a frame came in by: its source MAC. A ToR port sees one host NIC; a switch port writes its
 * own MAC as the source of what it sends, as a router does (the frames leave Open vSwitch and reach the next
 * switch's egress with it). At this switch's egress (switch_egress, before the qdisc) the ingress port's slot
 * and the priority are put in skb->mark, and the source MAC becomes this port's; the frame's bytes are added
 * when the egress qdisc accepts it (the enqueue tracepoint, under the port's root lock) and taken off when it
 * leaves the qdisc (the dequeue tracepoint, every frame of a bulk dequeue). Frames the qdisc refuses are never
 * counted. What a reset or destroyed qdisc held (a link set down), or anything else a queue holds by the
 * count when its qdisc says it is empty, is taken off the ingress ports then (`drained`, counted). Measured: a
 * few frames in ten thousand are taken off so, their dequeue never seen here (no recursion miss counted).
 */
#define MARK_MAGIC 0xA0000000u  /* skb->mark of a lossless frame counted here: magic, ingress slot, priority */
#define MARK_MASK 0xF0000000u
#define MAX_LOCAL 256           /* ports of one switch, at most */
#define MAX_BULK 64             /* frames of one bulk dequeue followed */

struct mmu_config {
	__u32 ports_per_switch;  /* K: the held bytes are kept per (egress slot, ingress local number < K, priority) */
	__u32 acks_high;         /* ack_priority on: 0x100 | the traffic agents' port high byte (to_high_class); 0 off */
};

struct switch_buffer {
	__u64 shared_used;  /* bytes of every (ingress port, priority) past its reserve */
	__u64 free_base;    /* the buffer less every port's headroom and reserve: the shared buffer when empty */
	__u32 reserve;
	__u32 resume_offset;
};

/* One (ingress port, priority) of a switch; user space reads these through mmap. */
struct ingress_account {
	__u64 bytes;        /* its frames inside the switch now: reserve, shared and headroom */
	__u64 max_bytes;
	__u64 max_over;     /* the most its shared bytes stood above the dynamic threshold (what its headroom took) */
	__u64 last_ns;
	__u32 watched;      /* a switch port's lossless priority */
	__u32 paused;       /* 1 from its XOFF to its XON */
	__u32 xoff_events;
	__u32 shift;        /* alpha = 2^-shift */
	__u32 buffer;       /* its switch's index in `buffers` */
	__u32 pad;
};

struct slot_info {
	__u32 switch_id;    /* 1 + its switch's index in `buffers`; 0: a host's port */
	__u32 local;        /* its number among its switch's ports (< K) */
};

struct sender_key {
	__u32 switch_id;
	__u8 mac[6];        /* the source MAC of frames that come in by one port of that switch */
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mmu_config);
} mmu SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* set to the switch count by the loader */
	__type(key, __u32);
	__type(value, struct switch_buffer);
} buffers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1); /* set to ports * PRIORITIES by the loader, slots as in `queues` */
	__type(key, __u32);
	__type(value, struct ingress_account);
} accounts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* set to the port count by the loader */
	__type(key, __u32);
	__type(value, struct slot_info);
} slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* set to switches * K by the loader: (switch index * K + local) -> slot */
	__type(key, __u32);
	__type(value, __u32);
} local_slot SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1); /* set to the port count by the loader */
	__type(key, struct sender_key);
	__type(value, __u32);   /* the slot of the switch's port those frames come in by */
} senders SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* set to ports * K * PRIORITIES by the loader */
	__type(key, __u32);
	__type(value, __u64);   /* bytes an egress queue holds that came in by one ingress port */
} held SEC(".maps");

static __always_inline __u64 shared_of(__u64 bytes, __u32 reserve)
{
	return bytes > reserve ? bytes - reserve : 0;
}

static __always_inline __u64 threshold(struct switch_buffer *buf, __u32 shift)
{
	__u64 used = buf->shared_used;
	return used < buf->free_base ? (buf->free_base - used) >> shift : 0;
}

/* A watched account and its switch's buffer, or NULL. */
static __always_inline struct ingress_account *account(__u32 index, struct switch_buffer **buf)
{
	struct ingress_account *a = bpf_map_lookup_elem(&accounts, &index);
	if (!a || !a->watched)
		return 0;
	__u32 b = a->buffer;
	*buf = bpf_map_lookup_elem(&buffers, &b);
	return *buf ? a : 0;
}

/* `len` bytes in by ingress `slot`, priority `prio`: the shared buffer grows past the reserve; XOFF past the
 * threshold. Global functions (here and below): the verifier checks each once, not at every call. */
__noinline int account_add(__u32 slot, __u32 prio, __u32 len, __u64 now)
{
	__u32 index = slot * PRIORITIES + prio;
	struct switch_buffer *buf;
	struct ingress_account *a = account(index, &buf);
	if (!a)
		return 0;
	__u64 old = __sync_fetch_and_add(&a->bytes, len), new = old + len;
	__u64 grown = shared_of(new, buf->reserve) - shared_of(old, buf->reserve);
	if (grown)
		__sync_fetch_and_add(&buf->shared_used, grown);
	__u64 limit = threshold(buf, a->shift), shared = shared_of(new, buf->reserve);
	a->last_ns = now;
	if (new > a->max_bytes)
		a->max_bytes = new;
	if (shared > limit && shared - limit > a->max_over)
		a->max_over = shared - limit;
	if (!a->paused && shared && shared >= limit && __sync_val_compare_and_swap(&a->paused, 0, 1) == 0) {
		__sync_fetch_and_add(&a->xoff_events, 1);
		crossed(index, new, now, EV_XOFF);
	}
	return 0;
}

/* Up to `len` bytes out (never below 0: a count drained meanwhile); XON once the shared bytes are gone or
 * resume_offset below the threshold. */
__noinline int account_sub(__u32 slot, __u32 prio, __u64 len, __u64 now)
{
	__u32 index = slot * PRIORITIES + prio;
	struct switch_buffer *buf;
	struct ingress_account *a = account(index, &buf);
	if (!a)
		return 0;
	__u64 old = a->bytes, new = 0;
	for (int i = 0; i < 8; i++) { /* compare-and-swap, retried: other ports' queues take off the same count */
		new = old > len ? old - len : 0;
		__u64 seen = __sync_val_compare_and_swap(&a->bytes, old, new);
		if (seen == old)
			break;
		old = seen;
	}
	__u64 shrunk = shared_of(old, buf->reserve) - shared_of(new, buf->reserve);
	if (shrunk)
		__sync_fetch_and_sub(&buf->shared_used, shrunk);
	__u64 limit = threshold(buf, a->shift), shared = shared_of(new, buf->reserve);
	a->last_ns = now;
	if (a->paused && (!shared || shared + buf->resume_offset <= limit)
	    && __sync_val_compare_and_swap(&a->paused, 1, 0) == 1)
		crossed(index, new, now, EV_XON);
	return 0;
}

static __always_inline __u32 ports_per_switch(void)
{
	__u32 zero = 0;
	struct mmu_config *c = bpf_map_lookup_elem(&mmu, &zero);
	return c ? c->ports_per_switch : 0;
}

/* A frame switch_egress marked, accepted by (`in`) or gone from the egress queue of port `egress`: its bytes
 * kept per (egress, ingress, priority) and on the ingress port's account. Under the egress root's lock. */
static __always_inline void mmu_frame(__u32 egress, struct sk_buff *skb, bool in, __u64 now)
{
	__u32 mark = BPF_CORE_READ(skb, mark), k = ports_per_switch();
	if ((mark & MARK_MASK) != MARK_MAGIC || !k)
		return;
	__u32 slot = (mark & ~MARK_MASK) >> 3, prio = mark & 7, queue = egress * PRIORITIES + prio;
	struct slot_info *from = bpf_map_lookup_elem(&slots, &slot), *to = bpf_map_lookup_elem(&slots, &egress);
	struct lossless_queue *q = bpf_map_lookup_elem(&queues, &queue);
	if (!from || !to || !q || from->local >= k || !to->switch_id)
		return; /* a host's frame: whatever its mark, it is no switch's to count */
	__u32 index = (egress * k + from->local) * PRIORITIES + prio;
	__u64 *h = bpf_map_lookup_elem(&held, &index);
	if (!h)
		return;
	__u32 len = BPF_CORE_READ(skb, len);
	if (in) {
		*h += len;
		q->held += len;
		account_add(slot, prio, len, now);
		__u32 which = COUNTED;
		__u64 *c = bpf_map_lookup_elem(&counters, &which);
		if (c)
			__sync_fetch_and_add(c, len);
		return;
	}
	__u64 take = *h < len ? *h : len;
	*h -= take;
	q->held -= take < q->held ? take : q->held;
	account_sub(slot, prio, take, now);
}

/* Every frame of an enqueue (one) or a dequeue (a bulk dequeue hands the tracepoint the first of a list). */
static __always_inline void mmu_frames(__u32 egress, struct sk_buff *skb, int packets, bool in, __u64 now)
{
	for (int i = 0; i < MAX_BULK && i < packets && skb; i++) {
		mmu_frame(egress, skb, in, now);
		skb = BPF_CORE_READ(skb, next);
	}
	if (packets > MAX_BULK)
		count(UNFOLLOWED);
}

/* Whatever the egress queue (`egress`, `prio`) still holds by the count, taken off the ingress ports: its
 * qdisc says it is empty (a reset or a destroy: counted as `which` DISCARDED; a frame no tracepoint saw leave:
 * DRAINED). Under the root's lock. */
__noinline int drain_held(__u32 egress, __u32 prio, __u64 now, __u32 which)
{
	__u32 k = ports_per_switch(), queue = egress * PRIORITIES + prio;
	struct slot_info *me = bpf_map_lookup_elem(&slots, &egress);
	struct lossless_queue *q = bpf_map_lookup_elem(&queues, &queue);
	if (!q || !q->held || !me || !me->switch_id)
		return 0;
	__u64 drained = 0;
	for (__u32 local = 0; local < MAX_LOCAL && local < k; local++) {
		__u32 index = (egress * k + local) * PRIORITIES + prio;
		__u64 *h = bpf_map_lookup_elem(&held, &index);
		if (!h || !*h)
			continue;
		__u32 at = (me->switch_id - 1) * k + local;
		__u32 *slot = bpf_map_lookup_elem(&local_slot, &at);
		if (slot)
			account_sub(*slot, prio, *h, now);
		drained += *h;
		*h = 0;
	}
	q->held = 0;
	__u64 *c = bpf_map_lookup_elem(&counters, &which);
	if (c)
		__sync_fetch_and_add(c, drained);
	return 0;
}

/* A switch port's own MAC, as it writes it as the source of the lossless frames it sends: locally administered
 * (0x0a), "HP", then its slot. */
static __always_inline void port_mac(__u8 *mac, __u32 slot)
{
	mac[0] = 0x0a;
	mac[1] = 'H';
	mac[2] = 'P';
	mac[3] = slot >> 16;
	mac[4] = slot >> 8;
	mac[5] = slot;
}

/* A lossless-DSCP segment the shaper's filters put in the high class with ack_priority on (shaper.py's
 * pure_ack_keys and agent_ack_keys, the same rules): a TCP segment behind a 20-byte IP header with no payload (a
 * pure ACK), or one byte from a traffic agent's port. It never joins the lossless queue, so it is not counted:
 * counted, it held the account until the queue emptied (the ACKs: 2% of an 8-host ring all-reduce's counted bytes)
 * and its dequeue took other frames' bytes off. */
static __always_inline bool to_high_class(struct iphdr *ip, void *end)
{
	__u32 zero = 0;
	struct mmu_config *c = bpf_map_lookup_elem(&mmu, &zero);
	if (!c || !c->acks_high || ip->protocol != IPPROTO_TCP || ip->ihl != 5)
		return false;
	struct tcphdr *tcp = (void *)(ip + 1);
	if ((void *)(tcp + 1) > end)
		return false;
	__u32 headers = 20 + tcp->doff * 4, total = bpf_ntohs(ip->tot_len);
	if (total == headers)
		return true;
	return total == headers + 1 && (bpf_ntohs(tcp->source) >> 8) == (c->acks_high & 0xff);
}

/* At a switch port's egress: the ingress port the frame came in by, known by its source MAC (a host NIC's, or
 * the upstream switch port's own), and its lossless priority into skb->mark; then the frame's source becomes
 * this port's MAC, as a router's egress writes its own (so the next switch knows the frame's port the same way). */
static __always_inline void ingress_mark(struct __sk_buff *skb, __u32 egress)
{
	struct slot_info *me = bpf_map_lookup_elem(&slots, &egress);
	skb->mark = 0;
	if (!me || !me->switch_id)
		return;
	struct sender_key key = {.switch_id = me->switch_id};
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + ETH_HLEN;
	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return;
	__u32 dscp = ip->tos >> 2;
	__u32 *prio = bpf_map_lookup_elem(&dscp_priority, &dscp);
	if (!prio || !*prio || to_high_class(ip, end))
		return;
	__builtin_memcpy(key.mac, eth->h_source, sizeof(key.mac));
	__u32 *in = bpf_map_lookup_elem(&senders, &key);
	if (in)
		skb->mark = MARK_MAGIC | (*in << 3) | (*prio - 1);
	__u8 mac[6];
	port_mac(mac, egress);
	if (bpf_skb_store_bytes(skb, 6, mac, sizeof(mac), 0))
		count(UNNAMED);
}
