// SPDX-License-Identifier: GPL-2.0
/* DCTCP (RFC 8257) as a BPF TCP congestion control, for kernels without the dctcp module (issue #28).
 *
 * The algorithm of the kernel's net/ipv4/tcp_dctcp.c, written again against
 * BPF struct_ops: the sender keeps alpha, the fraction of its bytes that came
 * back marked CE (a moving average with gain g = 1/16, once per window), and
 * on a marked window cuts cwnd by alpha/2; the receiver echoes CE exactly
 * (ecn_echo.h, shared with DCQCN's dcqcn.bpf.c).
 * Registered as "hpn_dctcp" by testbed/qos/cc.py, selected per socket with
 * TCP_CONGESTION by the traffic agents; it needs ECN (TCP_CONG_NEEDS_ECN), so
 * its segments leave ECN-capable whatever net.ipv4.tcp_ecn says.
 *
 * `alpha_seen` keeps, for the tests and results, how many windows alpha was
 * updated over, how many of them had marks, and the sum of its values (1024 =
 * every byte marked).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "ecn_echo.h"

#define DCTCP_MAX_ALPHA 1024U
#define SHIFT_G 4 /* g = 1/16 */

struct dctcp {
	__u32 old_delivered;
	__u32 old_delivered_ce;
	__u32 alpha;
	__u32 next_seq;
	__u32 loss_cwnd;
	struct ecn_echo echo;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u64); /* 0: windows (alpha updates), 1: windows with marks, 2: the sum of alphas */
} alpha_seen SEC(".maps");

extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;

static __always_inline struct tcp_sock *tcp(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct dctcp *ca_of(const struct sock *sk)
{
	return (void *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline bool before(__u32 seq1, __u32 seq2)
{
	return (__s32)(seq1 - seq2) < 0;
}

static __always_inline void window_reset(const struct tcp_sock *tp, struct dctcp *ca)
{
	ca->next_seq = tp->snd_nxt;
	ca->old_delivered = tp->delivered;
	ca->old_delivered_ce = tp->delivered_ce;
}

static __always_inline void add(__u32 k, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&alpha_seen, &k);
	if (v)
		__sync_fetch_and_add(v, n);
}

static __always_inline void seen(__u32 alpha, bool marked)
{
	add(0, 1);
	if (marked)
		add(1, 1);
	add(2, alpha);
}

SEC("struct_ops")
void BPF_PROG(hpn_dctcp_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp(sk);
	struct dctcp *ca = ca_of(sk);
	ecn_echo_init(&ca->echo, tp);
	ca->alpha = DCTCP_MAX_ALPHA; /* as the kernel's default: cut hard until the first window says otherwise */
	ca->loss_cwnd = 0;
	window_reset(tp, ca);
}

SEC("struct_ops")
__u32 BPF_PROG(hpn_dctcp_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp(sk);
	struct dctcp *ca = ca_of(sk);
	__u32 cwnd = tp->snd_cwnd;
	ca->loss_cwnd = cwnd;
	__u32 cut = cwnd - ((cwnd * ca->alpha) >> 11U); /* cwnd * (1 - alpha / 2) */
	return cut > 2 ? cut : 2;
}

/* alpha = (1 - g) alpha + g F once per window, F the fraction of delivered bytes that were marked */
SEC("struct_ops")
void BPF_PROG(hpn_dctcp_update_alpha, struct sock *sk, __u32 flags)
{
	struct tcp_sock *tp = tcp(sk);
	struct dctcp *ca = ca_of(sk);
	if (before(tp->snd_una, ca->next_seq))
		return;
	__u32 delivered = tp->delivered - ca->old_delivered;
	__u32 delivered_ce = tp->delivered_ce - ca->old_delivered_ce;
	__u32 alpha = ca->alpha;
	__u32 decay = alpha >> SHIFT_G;
	alpha -= decay ? decay : alpha; /* min_not_zero(alpha, alpha >> g): a small alpha decays to 0 */
	if (delivered_ce) {
		delivered_ce <<= (10 - SHIFT_G);
		delivered_ce /= delivered > 1 ? delivered : 1;
		alpha = alpha + delivered_ce < DCTCP_MAX_ALPHA ? alpha + delivered_ce : DCTCP_MAX_ALPHA;
	}
	ca->alpha = alpha;
	seen(alpha, delivered_ce != 0);
	window_reset(tp, ca);
}

static __always_inline void react_to_loss(struct sock *sk)
{
	struct tcp_sock *tp = tcp(sk);
	struct dctcp *ca = ca_of(sk);
	ca->loss_cwnd = tp->snd_cwnd;
	tp->snd_ssthresh = tp->snd_cwnd >> 1U > 2 ? tp->snd_cwnd >> 1U : 2;
}

SEC("struct_ops")
void BPF_PROG(hpn_dctcp_state, struct sock *sk, __u8 new_state)
{
	if (new_state == TCP_CA_Recovery && new_state != ((struct inet_connection_sock *)sk)->icsk_ca_state)
		react_to_loss(sk);
}

SEC("struct_ops")
void BPF_PROG(hpn_dctcp_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	if (!ecn_echo_event(sk, &ca_of(sk)->echo, ev) && ev == CA_EVENT_LOSS)
		react_to_loss(sk);
}

SEC("struct_ops")
__u32 BPF_PROG(hpn_dctcp_undo_cwnd, struct sock *sk)
{
	struct tcp_sock *tp = tcp(sk);
	struct dctcp *ca = ca_of(sk);
	return tp->snd_cwnd > ca->loss_cwnd ? tp->snd_cwnd : ca->loss_cwnd;
}

SEC("struct_ops")
void BPF_PROG(hpn_dctcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
}

SEC(".struct_ops")
struct tcp_congestion_ops hpn_dctcp = {
	.init = (void *)hpn_dctcp_init,
	.in_ack_event = (void *)hpn_dctcp_update_alpha,
	.cwnd_event = (void *)hpn_dctcp_cwnd_event,
	.ssthresh = (void *)hpn_dctcp_ssthresh,
	.cong_avoid = (void *)hpn_dctcp_cong_avoid,
	.undo_cwnd = (void *)hpn_dctcp_undo_cwnd,
	.set_state = (void *)hpn_dctcp_state,
	.flags = TCP_CONG_NEEDS_ECN,
	.name = "hpn_dctcp",
};

char LICENSE[] SEC("license") = "GPL";
