// SPDX-License-Identifier: GPL-2.0
/* A link that loses frames at a given rate (a gray failure: dirty optics, a marginal cable), in the kernel
 * (issue #29). This kernel has no netem; this program drops each frame with probability threshold / 2^32 at
 * the egress of the link's two ends (testbed/qos/loss.py: one object per link, a program for each end), and
 * counts what it dropped and let through per direction, as the receiving port's input-error counter and its
 * frame counter would (a corrupted frame fails its checksum there and is counted and discarded). Every frame
 * is at risk, whatever its class: corruption is physical.
 *
 * The egress hook runs before a GSO packet is cut into frames, and a host's TCP builds GSO packets whatever
 * its device offers (since Linux 4.13): such a packet is lost or kept whole and counted as the frames it
 * carries. The host end of a lossy link is set to one frame per packet (gso_max_segs 1, testbed/net/gray.py)
 * before its connections open, so losses come frame by frame; the counts are frames either way (a test checks
 * them against the frames the switch port received).
 *
 * A lost frame is gone on the wire, after the sender: the program takes it (TC_ACT_STOLEN: the sender's stack
 * is told it went out, as netem does), where TC_ACT_SHOT would tell the sender's own stack it was dropped
 * there. TCP then sends it again at once without counting a loss (3 retransmissions where netem's 2% gave 61,
 * in the VM tier), and rxe fails the queue pair on the send error.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#define TC_ACT_OK 0
#define TC_ACT_STOLEN 4

/* Slot 0 is the link's a -> b direction (`lose_ab`, at a's end), slot 1 is b -> a (`lose_ba`, at b's end). */
struct direction {
	__u32 threshold;  /* drop when a random 32-bit number is below this: the loss rate x 2^32 */
	__u32 pad;
	__u64 dropped;
	__u64 passed;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct direction);
} link SEC(".maps");

static __always_inline int lose(struct __sk_buff *skb, __u32 slot)
{
	struct direction *d = bpf_map_lookup_elem(&link, &slot);
	__u32 frames = skb->gso_segs > 1 ? skb->gso_segs : 1;

	if (!d)
		return TC_ACT_OK;
	if (d->threshold && bpf_get_prandom_u32() < d->threshold) {
		__sync_fetch_and_add(&d->dropped, frames);
		return TC_ACT_STOLEN;
	}
	__sync_fetch_and_add(&d->passed, frames);
	return TC_ACT_OK;
}

SEC("tc")
int lose_ab(struct __sk_buff *skb)
{
	return lose(skb, 0);
}

SEC("tc")
int lose_ba(struct __sk_buff *skb)
{
	return lose(skb, 1);
}

char LICENSE[] SEC("license") = "GPL";
