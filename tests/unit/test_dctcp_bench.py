"""bench/dctcp_bench.py's table: each side read from its first queued byte, and 'agree' only when both the
median queue and the goodput are within 25% of ns-3's."""

from __future__ import annotations

from bench.dctcp_bench import _queued, render


def _side(backlog: list[int], goodput: float) -> dict:
    return {"backlog": backlog, "goodput_bps": goodput, "marked": 10, "rate_bps": 20e6, "rtt_s": 2.5e-4,
            "k_bytes": 24_224, "pauses": 3}


def test_samples_before_the_first_queued_byte_are_not_the_queue():
    assert _queued([0, 0, 5, 0, 7]) == [5, 0, 7] and _queued([0, 0]) == []


def test_agree_needs_the_median_and_the_goodput_within_a_quarter():
    near = {"senders": 4, "emulated": _side([0, 0] + [24_000] * 30, 19e6), "ns3": _side([25_000] * 30, 19.2e6)}
    deep = {"senders": 16, "emulated": _side([36_000] * 30, 19.5e6), "ns3": _side([16_000] * 30, 18.5e6)}
    slow = {"senders": 8, "emulated": _side([25_000] * 30, 12e6), "ns3": _side([25_000] * 30, 19e6)}
    table = render({"seconds": 10, "rows": [near, deep, slow]})
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines() if ":1 |" in line}
    assert rows["4:1"].endswith("| yes |") and rows["16:1"].endswith("| no |") and rows["8:1"].endswith("| no |")
    assert "| 24.0 / 25.0 | 24.0 / 25.0 |" in rows["4:1"]  # the leading zeros of the emulated side are not counted
