"""Prometheus metrics from the live view's Hub (testbed/web/metrics.py): the last sample's links and queues and
the runner's ops as metric families, scraped over HTTP on 127.0.0.1 the way Prometheus does."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testbed.web.metrics import MetricsServer
from topos.errors import InputError


class _Hub:
    """What the collector reads of a Hub: its snapshot."""

    def __init__(self, snap: dict):
        self.snap = snap

    def snapshot(self) -> dict:
        return self.snap


SNAP = {
    "network": {"run": "r1", "label": "pfc-on", "scale": 10000.0, "dilation": 2.0},
    "state": {"links": {"h0:nic0:p0": {"up": True, "ab_bps": 9_000_000, "ba_bps": 10_000, "util": 0.9},
                        "tor-p0-s0:5-agg-p0-pl0-0:1": {"up": False, "ab_bps": 0, "ba_bps": 0, "util": 0.0}},
              "ports": {"tor-p0-s0:3": {"backlog": 96_000, "paused": True, "pause_events": 7, "drops": 0,
                                        "ecn_marks": 12, "paused_by": []}}},
    "ops": [{"variant": "pfc-on", "job": "A", "label": "allreduce/ring", "busbw_bps": 1e7, "fraction_of_ideal": 0.5},
            {"variant": "pfc-on", "job": "A", "label": "allreduce/ring", "busbw_bps": 1.5e7,
             "fraction_of_ideal": 0.75}],
    "events": [], "progress": None, "period_s": 0.5}


def _scrape(url: str) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_scrape_reads_link_utilization_queue_depth_pauses_and_op_busbw():
    with MetricsServer(_Hub(SNAP), 0) as server:
        got = _scrape(server.url)
    link = (("link", "h0:nic0:p0"), ("variant", "pfc-on"))
    port = (("port", "tor-p0-s0:3"), ("variant", "pfc-on"))
    assert got["hpnlab_link_utilization", link] == 0.9 and got["hpnlab_link_up", link] == 1.0
    assert got["hpnlab_link_up", (("link", "tor-p0-s0:5-agg-p0-pl0-0:1"), ("variant", "pfc-on"))] == 0.0
    assert got["hpnlab_link_bits_per_second", (("direction", "ab"), *link)] == 9e6
    assert got["hpnlab_queue_backlog_bytes", port] == 96_000 and got["hpnlab_port_paused", port] == 1.0
    assert got["hpnlab_pause_events_total", port] == 7 and got["hpnlab_ecn_marks_total", port] == 12
    job = (("job", "A"), ("variant", "pfc-on"))
    assert got["hpnlab_ops_total", job] == 2
    last = (("job", "A"), ("op", "allreduce/ring"), ("variant", "pfc-on"))
    assert got["hpnlab_op_busbw_gbps", last] == pytest.approx(150.0)  # 15 Mbit/s x the bytes scale 10,000
    assert got["hpnlab_op_fraction_of_ideal", last] == 0.75


def test_before_any_network_a_scrape_is_empty_and_a_taken_port_is_refused():
    empty = {"network": None, "state": None, "ops": [], "events": [], "progress": None, "period_s": 0.5}
    with MetricsServer(_Hub(empty), 0) as server:
        assert not [k for k in _scrape(server.url) if k[0].startswith("hpnlab_") and not k[0].endswith("_created")]
        port = int(server.url.split(":")[2].split("/")[0])
        with pytest.raises(InputError) as exc:
            MetricsServer(_Hub(empty), port)
    assert exc.value.field == "--metrics-port" and "\n" not in exc.value.line()
    with pytest.raises(OSError):  # closed with the block: nothing listens on its port
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
