"""`hpnlab run --metrics-port N`: Prometheus scrapes link utilization and queue depths while an incast runs
(testbed/web/metrics.py over the live view's Hub)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

HPNLAB = str(Path(sys.executable).parent / "hpnlab")
INCAST = """
name: metrics_incast
topology: {name: spine_leaf, params: {leaves: 1, hosts_per_leaf: 4, spines: 1}}
routing: ecmp
qos: {scale: 10000}
workload:
  collective: {op: incast, size: 8GB, ranks: "h3:0,h0:0,h1:0,h2:0", iters: 6}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _samples(url: str) -> list:
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError:  # not listening yet, or gone with the run
        return []
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def test_a_scrape_during_an_incast_reads_the_receivers_link_and_its_queue(tmp_path, no_leftovers):
    (tmp_path / "incast.yaml").write_text(INCAST)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    p = subprocess.Popen([HPNLAB, "run", "incast.yaml", "--metrics-port", str(port)], cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    util, backlog, scrapes = 0.0, 0, 0
    try:
        while p.poll() is None and (util < 0.5 or backlog == 0):
            samples = _samples(url)
            scrapes += bool(samples)
            util = max([util] + [s.value for s in samples if s.name == "hpnlab_link_utilization"
                                 and s.labels["link"] == "h3:nic0:p0"])
            backlog = max([backlog] + [int(s.value) for s in samples if s.name == "hpnlab_queue_backlog_bytes"])
            time.sleep(0.25)
        out, _ = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, out[-3000:]
    assert f"metrics: {url}" in out
    print(f"{scrapes} scrapes: receiver's link utilization up to {util:.2f}, deepest queue {backlog:,} B")
    assert util >= 0.5 and backlog > 0, (util, backlog, out[-2000:])
