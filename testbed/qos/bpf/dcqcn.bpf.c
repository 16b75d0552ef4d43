// SPDX-License-Identifier: GPL-2.0
/* A DCQCN-like congestion control for the TCP stand-in of RoCE, as a BPF TCP congestion control (issue #28).
 *
 * DCQCN (Zhu et al., SIGCOMM'15) as the HPCC ns-3 simulator implements Mellanox's version (rdma-hw.cc,
 * "Mellanox's version of DCQCN"): a sender (reaction point) keeps a rate Rc, a target rate Rt and alpha.
 *  - A congestion notification (here: an ACK carrying ECE, which the receiver sets on exactly the ACKs of
 *    CE-marked segments, ecn_echo.h) sets two flags. The first one sets alpha = 1.
 *  - Every T_alpha: alpha = (1 - g) alpha + g if a notification came in the interval, else (1 - g) alpha.
 *  - At most every T_dec, after a notification: Rt = Rc (unless no increase happened since the last cut),
 *    Rc = max(Rmin, Rc (1 - alpha / 2)), and the increase stage starts again.
 *  - Every T_inc without a cut: fast recovery (Rc = (Rc + Rt) / 2) for F periods, then additive increase
 *    (Rt += R_AI), then hyper increase (Rt += R_HAI), each also Rc = (Rc + Rt) / 2; Rt at most the line rate.
 * The rate is the socket's pacing rate (the kernel's TCP paces internally); the window is only a cap, two
 * round trips at that rate, so the rate and nothing else governs the sender as on a RoCE NIC.
 *
 * The simulator's timers run here lazily, at each ACK: what elapsed since the last one is applied in one go
 * (alpha decays by (1 - g)^n over n intervals; increases step through the periods passed). Between ACKs
 * nothing would read the rate anyway. Parameters (`params`, written by testbed/qos/cc.py): rates in the
 * emulation's bytes per second (the fabric's divided by bytes scale and dilation), intervals in wall-clock
 * nanoseconds (the fabric's times the dilation): the loop keeps the fabric's time constants.
 *
 * `seen` counts, for tests and results: 0 notifications, 1 rate cuts, 2 increase periods applied, 3 the lowest
 * rate a cut left, in 1/1024 of the line rate (starts at 1024).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "ecn_echo.h"

#define ONE (1U << 20)   /* alpha's 1.0 */
#define MAX_STEPS 64     /* increase periods applied at one ACK: past these Rc is at Rt within 2^-64 anyway */

struct dcqcn_params {
	__u64 line_Bps;      /* 0: not configured, the socket is left unpaced */
	__u64 min_Bps;
	__u64 ai_Bps;
	__u64 hai_Bps;
	__u64 t_alpha_ns;
	__u64 t_dec_ns;
	__u64 t_inc_ns;
	__u32 g_shift;       /* g = 2^-g_shift */
	__u32 fast_recovery; /* F */
};

struct dcqcn {
	__u64 rate;          /* Rc, bytes per second */
	__u64 target;        /* Rt */
	__u32 alpha;         /* in 1/ONE */
	__u32 stage;         /* increase periods since the last cut */
	__u64 t_alpha;       /* when the current alpha interval began */
	__u64 t_dec;         /* the last cut */
	__u64 t_inc;         /* when the current increase period began */
	__u8 notified;       /* 1 from the first notification on: the timers run */
	__u8 cnp_alpha;      /* a notification in the current alpha interval */
	__u8 cnp_dec;        /* a notification since the last cut */
	__u8 pad;
	struct ecn_echo echo;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dcqcn_params);
} params SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} seen SEC(".maps");

static __always_inline struct dcqcn *ca_of(const struct sock *sk)
{
	return (void *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline const struct dcqcn_params *dcqcn_config(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&params, &zero);
}

static __always_inline void count(__u32 k, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&seen, &k);
	if (v)
		__sync_fetch_and_add(v, n);
}

static __always_inline void lowest(__u64 rate, __u64 line)
{
	__u32 k = 3;
	__u64 *v = bpf_map_lookup_elem(&seen, &k);
	__u64 frac = line ? rate * 1024 / line : 1024;
	if (v && frac < *v)
		*v = frac; /* racy between CPUs; a figure for reports, not control */
}

/* x * (1 - 2^-s)^n in 1/ONE, by squaring: n may be thousands of intervals between two ACKs */
static __always_inline __u32 decay(__u32 x, __u64 n, __u32 s)
{
	__u64 factor = ONE - (ONE >> s), out = x;
	for (int i = 0; i < 32 && n; i++) {
		if (n & 1)
			out = (out * factor) >> 20;
		factor = (factor * factor) >> 20;
		n >>= 1;
	}
	return n ? 0 : (__u32)out; /* beyond 2^32 intervals nothing is left */
}

static __always_inline void update_alpha(struct dcqcn *ca, const struct dcqcn_params *p, __u64 now)
{
	__u64 n = (now - ca->t_alpha) / p->t_alpha_ns;
	if (!n)
		return;
	__u32 a = ca->alpha - (ca->alpha >> p->g_shift);
	if (ca->cnp_alpha)
		a += ONE >> p->g_shift;
	ca->alpha = decay(a, n - 1, p->g_shift);
	ca->cnp_alpha = 0;
	ca->t_alpha += n * p->t_alpha_ns;
}

static __always_inline void cut(struct dcqcn *ca, const struct dcqcn_params *p, __u64 now)
{
	if (!ca->cnp_dec || now - ca->t_dec < p->t_dec_ns)
		return;
	if (ca->stage)  /* the simulator's CLAMP_TARGET_RATE 0: a cut right after a cut keeps the target */
		ca->target = ca->rate;
	__u64 rate = ca->rate - ((ca->rate * ca->alpha) >> 21);
	ca->rate = rate > p->min_Bps ? rate : p->min_Bps;
	ca->stage = 0;
	ca->cnp_dec = 0;
	ca->t_dec = now;
	ca->t_inc = now;
	count(1, 1);
	lowest(ca->rate, p->line_Bps);
}

static __always_inline void increase(struct dcqcn *ca, const struct dcqcn_params *p, __u64 now)
{
	__u64 n = (now - ca->t_inc) / p->t_inc_ns;
	ca->t_inc += n * p->t_inc_ns;
	count(2, n);
	for (int i = 0; i < MAX_STEPS && i < n; i++) {
		if (ca->stage == p->fast_recovery)
			ca->target += p->ai_Bps;
		else if (ca->stage > p->fast_recovery)
			ca->target += p->hai_Bps;
		if (ca->target > p->line_Bps)
			ca->target = p->line_Bps;
		ca->rate = (ca->rate + ca->target) / 2;
		ca->stage++;
	}
}

/* The rate as the socket's pacing rate, and a window that lets it through: two round trips at that rate. */
static __always_inline void apply(struct sock *sk, const struct dcqcn *ca)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	__u64 srtt_us = tp->srtt_us >> 3;
	__u32 mss = tp->mss_cache ? tp->mss_cache : 1448;
	__u64 cwnd = ca->rate * (srtt_us ? srtt_us : 1000) * 2 / 1000000 / mss;
	sk->sk_pacing_rate = ca->rate;
	tp->snd_cwnd = cwnd > 10 ? (cwnd < 65535 ? cwnd : 65535) : 10;
}

SEC("struct_ops")
void BPF_PROG(hpn_dcqcn_init, struct sock *sk)
{
	struct dcqcn *ca = ca_of(sk);
	const struct dcqcn_params *p = dcqcn_config();
	ecn_echo_init(&ca->echo, (struct tcp_sock *)sk);
	ca->rate = ca->target = p && p->line_Bps ? p->line_Bps : 0;
	ca->alpha = ONE;
	ca->stage = 0;
	ca->notified = ca->cnp_alpha = ca->cnp_dec = 0;
	if (ca->rate) {
		sk->sk_pacing_status = SK_PACING_NEEDED;
		apply(sk, ca);
	}
}

/* A notification: an ACK with ECE (the receiver marks exactly the ACKs of CE-marked segments). */
SEC("struct_ops")
void BPF_PROG(hpn_dcqcn_in_ack_event, struct sock *sk, __u32 flags)
{
	struct dcqcn *ca = ca_of(sk);
	if (!(flags & CA_ACK_ECE) || !ca->rate)
		return;
	count(0, 1);
	__u64 now = bpf_ktime_get_ns();
	if (!ca->notified) { /* the first: alpha = 1, the timers start (the simulator's m_first_cnp) */
		ca->notified = 1;
		ca->alpha = ONE;
		ca->target = ca->rate;
		ca->t_alpha = ca->t_inc = now;
		ca->t_dec = 0; /* the first cut comes at once */
		ca->cnp_dec = 1;
		return;
	}
	ca->cnp_alpha = ca->cnp_dec = 1;
}

SEC("struct_ops")
void BPF_PROG(hpn_dcqcn_cong_control, struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs)
{
	struct dcqcn *ca = ca_of(sk);
	const struct dcqcn_params *p = dcqcn_config();
	if (!p || !ca->rate || !p->t_alpha_ns || !p->t_dec_ns || !p->t_inc_ns)
		return;
	if (ca->notified) {
		__u64 now = bpf_ktime_get_ns();
		update_alpha(ca, p, now);
		cut(ca, p, now);
		increase(ca, p, now);
	}
	apply(sk, ca);
}

SEC("struct_ops")
__u32 BPF_PROG(hpn_dcqcn_ssthresh, struct sock *sk)
{
	/* Losses (a lossy class) and ECE (tcp_enter_cwr) ask for a threshold: the rate alone governs here. */
	return ((struct tcp_sock *)sk)->snd_cwnd;
}

SEC("struct_ops")
__u32 BPF_PROG(hpn_dcqcn_undo_cwnd, struct sock *sk)
{
	return ((struct tcp_sock *)sk)->snd_cwnd;
}

SEC("struct_ops")
void BPF_PROG(hpn_dcqcn_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	ecn_echo_event(sk, &ca_of(sk)->echo, ev);
}

SEC(".struct_ops")
struct tcp_congestion_ops hpn_dcqcn = {
	.init = (void *)hpn_dcqcn_init,
	.in_ack_event = (void *)hpn_dcqcn_in_ack_event,
	.cong_control = (void *)hpn_dcqcn_cong_control,
	.cwnd_event = (void *)hpn_dcqcn_cwnd_event,
	.ssthresh = (void *)hpn_dcqcn_ssthresh,
	.undo_cwnd = (void *)hpn_dcqcn_undo_cwnd,
	.flags = TCP_CONG_NEEDS_ECN,
	.name = "hpn_dcqcn",
};

char LICENSE[] SEC("license") = "GPL";
