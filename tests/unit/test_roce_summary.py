"""The summary's RoCE section (testbed/experiment/sections.py): go-back-N's cost read as frames resent per frame
the fabric lost, against a recorded gray-failure run given a RoCE NIC's counters."""

from __future__ import annotations

import json

from testbed.experiment.sections import cpu_per_gbit, gray_lines, roce_lines, time_lines
from testbed.schema.results import Run
from tests.labwork import RECORDED

NIC = {"sent": 12_000, "resent": 620, "rewinds": 9, "timeouts": 1, "received": 11_500, "out_of_order": 580,
       "naks": 8, "cnps_sent": 0, "cnps_received": 0, "ce": 0, "icrc_errors": 0}


def _runs() -> list[Run]:
    data = json.loads((RECORDED / "gray_failures.json").read_text())
    return [Run.model_validate(r) for r in data["runs"]]


def test_roce_runs_get_a_row_of_resent_per_lost_and_tcp_runs_none():
    runs = _runs()
    assert roce_lines(runs) == []  # TCP runs: no RoCE section
    lossy = next(r for r in runs if r.gray and any(c.get("errors") for c in r.gray["counters"].values()))
    lost = sum(sum(c.get("errors", {}).values()) for c in lossy.gray["counters"].values())
    roce = lossy.model_copy(update={"roce": NIC, "transport": "roce"})
    row = roce_lines([roce])[-1]
    assert lost > 0 and row == (f"| {roce.variant} #0 | 12,000 | 620 | {lost:,} | {620 / lost:.1f} | 8 / 1 | 580 | - |")
    marked = roce.model_copy(update={"roce": NIC | {"ce": 300, "cnps_sent": 40, "rate_cuts": 35}})
    assert roce_lines([marked])[-1].endswith("| 300 / 40 / 35 |")  # DCQCN's notifications and what they cut
    assert "620 frames resent" in "\n".join(gray_lines([roce]))  # the gray table reads RoCE's resends, not TCP's


def test_the_agents_cpu_is_read_per_emulated_gbit_the_hosts_sent():
    run = _runs()[0]
    hosts = {k.split(":")[0] for k in run.host_port_rx}
    sent = sum(link["bytes"] for link in run.links if link["from"] in hosts)
    assert sent > 0 and time_lines([run])[-1].count("CPU-s") == 0  # recorded before agents reported CPU
    timed = run.model_copy(update={"agents_cpu_s": 12.5})
    assert cpu_per_gbit(timed) == 12.5 / (sent * 8 / 1e9)
    assert f"agents: 12.5 CPU-s, {12.5 / (sent * 8 / 1e9):.2f} per emulated Gbit sent" in time_lines([timed])[-1]
