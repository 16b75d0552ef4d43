"""A host namespace's TCP counters as the agents report them at the end of a run (pure: parses /proc text)."""

from __future__ import annotations

# retransmissions and why (timeouts, probes, fast retransmits), what showed them spurious or reordered
# (DSACKs, reordering seen), and what the receiver itself threw away (out-of-order queue, receive queue)
TCP_COUNTERS = ("RetransSegs", "TCPTimeouts", "TCPSpuriousRTOs", "TCPLossProbes", "TCPFastRetrans", "TCPDSACKRecv",
                "TCPSACKReorder", "TCPTSReorder", "TCPOFODrop", "TCPRcvQDrop", "PruneCalled")


def tcp_counters(snmp: str, netstat: str) -> dict[str, int]:
    """This network namespace's TCP retransmission counters, from /proc/net/snmp and /proc/net/netstat (pairs of
    lines: names, then values): what tells a fabric's loss from the transport's own timers going off."""
    out: dict[str, int] = {}
    for text in (snmp, netstat):
        lines = text.splitlines()
        for names, values in zip(lines[::2], lines[1::2], strict=False):
            out.update({k: int(v) for k, v in zip(names.split()[1:], values.split()[1:], strict=False)
                        if k in TCP_COUNTERS})
    return out
