"""Link-level settings on the root-namespace (switch) side: offloads, netem delay, admin state."""

from __future__ import annotations

OFFLOADS = ["tso", "gso", "gro", "tx", "rx"]


def offloads_off_script(ifnames: list[str]) -> str:
    # Userspace OVS does not segment or checksum for the kernel: with offloads
    # on, TSO super-frames and missing checksums stall TCP.
    return "\n".join(f"ethtool -K {i} {' off '.join(OFFLOADS)} off >/dev/null 2>&1" for i in ifnames)


def delay(ifnames: list[str], delay_ms: float) -> None:
    """netem on every given egress: a host-to-host path of h hops gets h x delay one way."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        for ifname in ifnames:
            idx = ipr.link_lookup(ifname=ifname)[0]
            ipr.tc("replace", "netem", idx, delay=int(delay_ms * 1000))
