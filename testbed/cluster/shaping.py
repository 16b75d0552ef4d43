"""Shaping a network spread over servers: each server shapes the egress ports that live on it.

    shaper = split_shaper(ports, spec, site_of, local)   # then apply(), stats(), remove() as with one Shaper

The ports on this server get a testbed.qos Shaper as on one machine; another server's ports go to its agent,
which shapes them with its own Shaper (agent.py). Reading them (drops, backlogs, sent bytes for the results)
asks each server for its own ports and puts the answers together, keyed by port.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from testbed.qos.netlink import QdiscStats
from testbed.qos.ports import Port, ports_to_json
from testbed.qos.shaper import Shaper
from testbed.qos.spec import QosSpec
from testbed.system.site import LocalSite


class RemoteShaper:
    """One other server's share of the ports, shaped by its agent."""

    def __init__(self, agent, ports: list[Port], spec: QosSpec):
        self.agent, self.planned, self.spec = agent, ports, spec
        self.ports: dict[str, Port] = {}

    def apply(self) -> None:
        self.agent.shape(self.spec.model_dump(mode="json"), ports_to_json(self.planned))
        self.ports = {p.key: p for p in self.planned}

    def stats(self, handle: int | None = None, ports: list[Port] | None = None) -> dict[str, list[QdiscStats]]:
        keys = None if ports is None else [p.key for p in ports]
        return {k: [QdiscStats(**q) for q in qs] for k, qs in self.agent.qos_stats(handle, keys).items()}

    def remove(self) -> int:
        self.ports = {}
        return self.agent.unshape()


class SplitShaper:
    """Several servers' shapers read and removed as one (what the network and the results use)."""

    def __init__(self, parts: list[Shaper | RemoteShaper], spec: QosSpec):
        self.parts, self.spec = parts, spec

    @property
    def ports(self) -> dict[str, Port]:
        return {k: p for part in self.parts for k, p in part.ports.items()}

    def local_ports(self) -> list[Port]:
        return [p for part in self.parts if isinstance(part, Shaper) for p in part.ports.values()]

    def apply(self) -> None:
        self._each(lambda part: part.apply())

    def stats(self, handle: int | None = None, ports: list[Port] | None = None) -> dict[str, list[QdiscStats]]:
        if ports is None:
            asked = [(part, None) for part in self.parts]
        else:
            keys = {p.key for p in ports}
            asked = [(part, [p for p in part.ports.values() if p.key in keys]) for part in self.parts]
            asked = [(part, ps) for part, ps in asked if ps]
        out: dict[str, list[QdiscStats]] = {}
        for got in self._each(lambda a: a[0].stats(handle, a[1]), asked):
            out.update(got)
        return out

    def remove(self) -> int:
        return sum(self._each(lambda part: part.remove()))

    def _each(self, fn, items=None) -> list:
        """fn over every part (or item) at once: each server answers over its own connection."""
        items = self.parts if items is None else items
        with ThreadPoolExecutor(max(1, len(items))) as pool:
            return list(pool.map(fn, items))


def split_shaper(ports: list[Port], spec: QosSpec, site_of, local: LocalSite) -> SplitShaper:
    """The ports shaped where they live: `site_of(node)` is this server's LocalSite or another's agent."""
    by_site: dict[object, list[Port]] = {}
    for p in ports:
        by_site.setdefault(site_of(p.node), []).append(p)
    return SplitShaper([Shaper(ps, spec) if site is local else RemoteShaper(site, ps, spec)
                        for site, ps in by_site.items()], spec)
