"""What a running fabric does now, read from the system on every sample: OVS's datapath counters (link
utilization), each switch port's operstate (failed links), the run's shaped queues and pause state
(testbed/qos/show.py) and the controller's declared flows.

Reading the system rather than the Network object means a link failed from the Mininet CLI, by a failure
schedule or from another shell shows the same way, and a sample never calls into Mininet (whose node.cmd is
not safe from a second thread).
"""

from __future__ import annotations

import logging
import time

from testbed.net.checks import datapath_counters, operstate
from testbed.net.naming import intf_name
from testbed.qos.show import snapshot
from topos.model import Topology

from .elements import flow_links, port_links

log = logging.getLogger(__name__)

FLOWS_EVERY_S = 1.0  # declared flows change when a job starts or a link fails, not every sample
FLOWS_TIMEOUT_S = 1.0  # a busy controller delays the flow list, never the link states drawn beside it
# Reading every shaped port's queues costs ~10 ms at 8 hosts but ~170 ms at 64 (every HTB class of every port,
# in every host's namespace): they are re-read only when the last read took at most this share of the time
# since, so watching never takes the emulation's CPU (bench/web_sample.py).
QUEUE_SHARE = 0.05
OPPOSITE = {"ab": "ba", "ba": "ab"}


class FabricProbe:
    """One network's live figures; `sample()` returns the state the page draws."""

    def __init__(self, topo: Topology, run_id: str, *, scale: float | None = None, controller=None,
                 qos: bool = False):
        self.topo = topo
        self.run_id = run_id
        self.scale = scale  # emulated rate = link rate / scale; None: links are not shaped
        self.controller = controller  # REST client, or None with static routing
        self.qos = qos
        self.ports = port_links(topo)
        # the switch ends of each link (they live in the root namespace): interface and the direction it sends
        self.ends = {l.name: [(intf_name(topo, n, p), d) for n, p, d in ((l.a, l.a_port, "ab"), (l.b, l.b_port, "ba"))
                              if topo.nodes[n].is_switch] for l in topo.links}
        self._last: tuple[float, dict[str, tuple[int, int]]] | None = None
        self._flows: list[dict] = []
        self._flows_at = 0.0
        self._ports: dict[str, dict] = {}
        self._ports_at = self._ports_cost = 0.0

    @classmethod
    def of(cls, net) -> FabricProbe:
        scale = net.qos_spec.scale if net.qos_spec is not None else None
        return cls(net.topo, net.owner.run_id, scale=scale, controller=net.controller, qos=net.qos is not None)

    def sample(self) -> dict:
        now = time.monotonic()
        counters = datapath_counters()
        last, self._last = self._last, (now, counters)
        links = {}
        for l in self.topo.links:
            bps = {"ab": 0.0, "ba": 0.0}
            if last is not None and now > last[0]:
                dt = now - last[0]
                for ifname, sends in self.ends[l.name]:
                    (rx0, tx0), (rx1, tx1) = last[1].get(ifname, (0, 0)), counters.get(ifname, (0, 0))
                    bps[sends] = max(bps[sends], max(tx1 - tx0, 0) * 8 / dt)
                    bps[OPPOSITE[sends]] = max(bps[OPPOSITE[sends]], max(rx1 - rx0, 0) * 8 / dt)
            busiest = max(bps.values())
            links[l.name] = {"up": all(operstate(i) == "up" for i, _ in self.ends[l.name]),
                             "ab_bps": round(bps["ab"]), "ba_bps": round(bps["ba"]),
                             "util": None if self.scale is None else round(busiest / self.rate_bps(l), 4)}
        if self.qos:
            self._queues(links, now)
        return {"t": time.time(), "links": links, "ports": self._ports, "ports_age_s": round(now - self._ports_at, 1)
                if self.qos else None, "flows": self._declared(now)}

    def rate_bps(self, link) -> float:
        return link.rate_gbps * 1e9 / self.scale

    def _queues(self, links: dict, now: float) -> None:
        """Per shaped port with anything to show: backlog (all classes), paused, pause events, drops; each link
        also gets its ends' largest backlog and whether either end is paused."""
        if now - self._ports_at >= self._ports_cost / QUEUE_SHARE:
            t0 = time.monotonic()
            self._ports = self._read_ports(snapshot(self.run_id))
            self._ports_at, self._ports_cost = now, time.monotonic() - t0
        for key, p in self._ports.items():
            node, port = key.rsplit(":", 1)
            link = self.ports.get((node, int(port)))
            if link is not None:
                st = links[link[0]]
                st["backlog"] = max(st.get("backlog", 0), p["backlog"])
                st["paused"] = st.get("paused", False) or p["paused"]
                if p["paused"] and p["paused_by"]:  # which queues (model ingress: which ingress ports) hold it
                    st["paused_by"] = sorted(set(st.get("paused_by", [])) | set(p["paused_by"]))

    @staticmethod
    def _read_ports(rows: list[dict]) -> dict[str, dict]:
        ports: dict[str, dict] = {}
        for row in rows:
            p = ports.setdefault(row["port"], {"backlog": 0, "paused": False, "pause_events": 0, "drops": 0,
                                               "ecn_marks": 0, "paused_by": []})
            p["backlog"] += row["backlog"]
            p["paused"] |= row["paused"]
            p["pause_events"] += row["pause_events"]
            p["paused_by"] += row.get("paused_by", [])
            p["drops"] += row["drops"]
            p["ecn_marks"] += row.get("ecn_marks") or 0
        return {k: p for k, p in ports.items()
                if p["backlog"] or p["paused"] or p["pause_events"] or p["drops"] or p["ecn_marks"]}

    def _declared(self, now: float) -> list[dict]:
        if self.controller is None or now - self._flows_at < FLOWS_EVERY_S:
            return self._flows
        self._flows_at = now
        try:
            flows = self.controller.get("/flows", timeout=FLOWS_TIMEOUT_S)
        except (OSError, RuntimeError) as exc:  # the controller is going away with its network
            log.debug("flows: %s", exc)
            return self._flows
        self._flows = [{"flow": f["flow"], "src": f["src"], "dst": f["dst"], "links": flow_links(f, self.ports)}
                       for f in flows]
        return self._flows
