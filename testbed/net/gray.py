"""Gray failures: links that keep running, but lossy (testbed/qos/loss.py) or slower (their ports' rates
lowered, testbed/qos/shaper.py `set_rate`), and what an operator's counters show of them.

`GrayLinks` owns both kinds for one network: `restore` undoes one link's, `close` every link's (the network's
teardown calls it before the qdiscs go). `counters()` is the operator's view: per link and direction, the
input errors the receiving port counted (the frames the lossy link lost) and the frames it passed, and the
rate each port runs at against its planned one (a port's operational speed, as a switch reports it).
"""

from __future__ import annotations

import logging

from testbed.qos.loss import LossyLink
from testbed.qos.shaper import Shaper
from topos.model import Link, Topology

log = logging.getLogger(__name__)


class GrayLinks:
    def __init__(self, topo: Topology, shaper: Shaper):
        self.topo, self.shaper = topo, shaper
        self.lossy: dict[str, LossyLink] = {}
        self.degraded: dict[str, float] = {}  # link -> the fraction of its rate it runs at
        self._segs: dict[str, int] = {}  # host port -> its gso_max_segs before one frame per packet

    def _ends(self, link: Link) -> tuple[str, str]:
        ends = (f"{link.a}:{link.a_port}", f"{link.b}:{link.b_port}")
        missing = [k for k in ends if k not in self.shaper.ports]
        if missing:  # over several servers, a port on another server is not shaped here
            raise ValueError(f"link {link.name}: port(s) {', '.join(missing)} are not shaped on this server")
        return ends

    def frames_only(self, name: str) -> None:
        """The host end of `name` hands its egress one frame per packet (not a GSO packet of many, which a loss
        would take whole: testbed/qos/bpf/loss.bpf.c) for the connections it opens from now; undone at close."""
        for key in self._ends(self.topo.find_link(name)):
            if self.shaper.ports[key].is_host and key not in self._segs:
                self._segs[key] = self.shaper.gso_max_segs(key, 1)

    def set_loss(self, name: str, rate: float) -> None:
        """`name` loses `rate` of its frames each way from now (0: none again); connections its host end opens
        from now send frame by frame (`frames_only`: those open before keep their packets)."""
        link = self.topo.find_link(name)
        ends = self._ends(link)
        if rate > 0:
            self.frames_only(link.name)
        old = self.lossy.pop(link.name, None)
        if old is not None:
            old.close()
        if rate > 0:
            self.lossy[link.name] = LossyLink(link.name, tuple(self.shaper.ports[k] for k in ends), rate)

    def set_rate(self, name: str, fraction: float) -> None:
        """`name` runs at `fraction` of its rate each way from now (1.0: its own rate again)."""
        link = self.topo.find_link(name)
        for key in self._ends(link):
            self.shaper.set_rate(key, fraction)
        if fraction == 1.0:
            self.degraded.pop(link.name, None)
        else:
            self.degraded[link.name] = fraction

    def restore(self, name: str) -> None:
        """Whatever gray failure `name` had, gone."""
        link = self.topo.find_link(name)
        if link.name in self.lossy:
            self.set_loss(link.name, 0.0)
        if link.name in self.degraded:
            self.set_rate(link.name, 1.0)

    def counters(self) -> dict[str, dict]:
        """Per gray link: input errors and frames passed each way (lossy), the fraction of its rate (degraded)."""
        out: dict[str, dict] = {}
        for name, lossy in self.lossy.items():
            ab, ba = lossy.counts()
            out.setdefault(name, {})["errors"] = {"a_to_b": ab.dropped, "b_to_a": ba.dropped}
            out[name]["frames"] = {"a_to_b": ab.passed, "b_to_a": ba.passed}
        for name, fraction in self.degraded.items():
            out.setdefault(name, {})["rate_fraction"] = fraction
        return out

    def close(self) -> None:
        for name in list(self.lossy) + list(self.degraded):
            try:
                self.restore(name)
            except Exception as exc:  # noqa: BLE001 - the qdiscs and namespaces go with the network anyway
                log.debug("gray %s: %s", name, exc)
        for lossy in self.lossy.values():
            lossy.close()
        for key, segs in self._segs.items():
            try:
                self.shaper.gso_max_segs(key, segs)
            except Exception as exc:  # noqa: BLE001 - the namespace may be gone with its host
                log.debug("gso_max_segs of %s: %s", key, exc)
        self._segs.clear()
        self.lossy.clear()
