"""What paced streams (testbed.experiment.measure.run_streams) delivered, for the tests that send them."""

from __future__ import annotations


def delivered(specs: list, result: dict) -> dict[str, float]:
    """Frames received over frames sent, per destination (`host:dport`), in the order of `specs`."""
    got = {}
    for spec, sender in zip(specs, result["senders"], strict=True):
        key = f"{spec.dst}:{spec.dport}"
        got[key] = sum(s["received"] for s in result["receivers"][key]["streams"].values()) / sender["sent"]
    return got
