"""Prometheus metrics of a running fabric (`--metrics-port N` on `up` and `run`), from the live view's Hub.

The Hub already samples what the page draws twice a second (testbed/web/fabric.py: link rates from OVS's
datapath counters, each shaped port's backlog, pauses, drops and ECN marks; the runner's ops as they end), so a
scrape reads its last sample through a prometheus-client collector and never touches the system itself. The
endpoint listens on 127.0.0.1 only, like the web view.

Rates and sizes are the emulation's (the real fabric's divided by the scale), except the op metrics, which are
the real fabric's, as nccl-tests prints them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from topos.errors import InputError

from .hub import Hub

log = logging.getLogger(__name__)


class HubCollector(Collector):
    """The Hub's last sample and ops as metric families, labelled by the variant being run."""

    def __init__(self, hub: Hub):
        self.hub = hub

    def collect(self) -> Iterator[Metric]:
        snap = self.hub.snapshot()
        net, state = snap["network"] or {}, snap["state"] or {}
        variant = net.get("label") or net.get("run") or ""
        yield from _links(variant, state.get("links") or {})
        yield from _ports(variant, state.get("ports") or {})
        yield from _ops(snap["ops"], net.get("scale") or 1.0)  # ops' rates are per fabric second: bytes scale


def _links(variant: str, links: dict) -> Iterator[Metric]:
    up = GaugeMetricFamily("hpnlab_link_up", "1 while both ends of the link are up", labels=["variant", "link"])
    util = GaugeMetricFamily("hpnlab_link_utilization", "the busier direction's rate over the link's shaped rate",
                             labels=["variant", "link"])
    bps = GaugeMetricFamily("hpnlab_link_bits_per_second", "emulated bits per second sent each way (a: the "
                            "link's first end)", labels=["variant", "link", "direction"])
    for name, st in links.items():
        up.add_metric([variant, name], 1.0 if st["up"] else 0.0)
        if st.get("util") is not None:
            util.add_metric([variant, name], st["util"])
        for d in ("ab", "ba"):
            bps.add_metric([variant, name, d], st[f"{d}_bps"])
    yield from (up, util, bps)


def _ports(variant: str, ports: dict) -> Iterator[Metric]:
    labels = ["variant", "port"]
    backlog = GaugeMetricFamily("hpnlab_queue_backlog_bytes", "bytes queued on the shaped port, all classes",
                                labels=labels)
    paused = GaugeMetricFamily("hpnlab_port_paused", "1 while a lossless priority of the port is paused",
                               labels=labels)
    counters = {k: CounterMetricFamily(f"hpnlab_{k}", what, labels=labels) for k, what in (
        ("pause_events", "PFC pauses of the port's lossless priorities"), ("drops", "frames the port's queues "
         "dropped"), ("ecn_marks", "frames the port's queues marked CE"))}
    for key, p in ports.items():
        backlog.add_metric([variant, key], p["backlog"])
        paused.add_metric([variant, key], 1.0 if p["paused"] else 0.0)
        for k, family in counters.items():
            family.add_metric([variant, key], p[k])
    yield from (backlog, paused, *counters.values())


def _ops(ops: list[dict], scale: float) -> Iterator[Metric]:
    """Per job: ops done, and the last op's bus bandwidth (the real fabric's) and fraction of ideal."""
    done = CounterMetricFamily("hpnlab_ops", "collective ops finished", labels=["variant", "job"])
    busbw = GaugeMetricFamily("hpnlab_op_busbw_gbps", "the last op's bus bandwidth, the real fabric's Gbit/s",
                              labels=["variant", "job", "op"])
    ideal = GaugeMetricFamily("hpnlab_op_fraction_of_ideal", "the last op's busbw over its ideal",
                              labels=["variant", "job", "op"])
    last: dict[tuple[str, str], dict] = {}
    count: dict[tuple[str, str], int] = {}
    for o in ops:
        key = (str(o.get("variant") or ""), str(o.get("job") or ""))
        last[key], count[key] = o, count.get(key, 0) + 1
    for (variant, job), o in last.items():
        done.add_metric([variant, job], count[variant, job])
        busbw.add_metric([variant, job, str(o["label"])], (o["busbw_bps"] or 0.0) * scale / 1e9)
        ideal.add_metric([variant, job, str(o["label"])], o["fraction_of_ideal"] or 0.0)
    yield from (done, busbw, ideal)


class MetricsServer:
    """`with MetricsServer(hub, port):` serves /metrics on 127.0.0.1:port; a port that is taken is an error
    before any network starts."""

    def __init__(self, hub: Hub, port: int):
        registry = CollectorRegistry(auto_describe=False)
        registry.register(HubCollector(hub))
        try:
            self._server, self._thread = start_http_server(port, addr="127.0.0.1", registry=registry)
        except OSError as exc:
            raise InputError(f"cannot listen on 127.0.0.1:{port} ({exc.strerror})", "give a free port",
                             field="--metrics-port", value=port) from None
        self.url = f"http://127.0.0.1:{self._server.server_port}/metrics"

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
