// SPDX-License-Identifier: GPL-2.0
/* The receiver's side of an ECN-driven congestion control (DCTCP's, which DCQCN's notification point shares
 * here): an immediate ACK whenever the CE state of arriving segments changes (a delayed ACK of the old state
 * first), and ECE on exactly the ACKs of marked segments, so the sender sees which bytes were marked (classic
 * ECN repeats ECE until the sender's CWR, a round trip of echoes for one mark). Included by dctcp.bpf.c and
 * dcqcn.bpf.c; the caller's per-socket state holds a `struct ecn_echo`. */
#ifndef HPN_ECN_ECHO_H
#define HPN_ECN_ECHO_H

#define TCP_ECN_DEMAND_CWR 4
#define TCP_CONG_NEEDS_ECN 0x2

struct ecn_echo {
	__u32 prior_rcv_nxt;
	__u32 ce_state;
};

static __always_inline void ecn_echo_init(struct ecn_echo *e, const struct tcp_sock *tp)
{
	e->prior_rcv_nxt = tp->rcv_nxt;
	e->ce_state = 0;
}

static __always_inline void ecn_echo_update(struct sock *sk, struct ecn_echo *e, __u32 new_ce_state)
{
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	if (e->ce_state != new_ce_state) {
		if (icsk->icsk_ack.pending & ICSK_ACK_TIMER)
			bpf_tcp_send_ack(sk, e->prior_rcv_nxt);
		icsk->icsk_ack.pending |= ICSK_ACK_NOW;
	}
	e->prior_rcv_nxt = tp->rcv_nxt;
	e->ce_state = new_ce_state;
	if (new_ce_state)
		tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
	else
		tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
}

/* Whether a cwnd_event was the receiver's (CE or not on an arriving segment), handled here. */
static __always_inline bool ecn_echo_event(struct sock *sk, struct ecn_echo *e, enum tcp_ca_event ev)
{
	if (ev != CA_EVENT_ECN_IS_CE && ev != CA_EVENT_ECN_NO_CE)
		return false;
	ecn_echo_update(sk, e, ev == CA_EVENT_ECN_IS_CE);
	return true;
}

#endif
