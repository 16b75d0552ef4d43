"""Reading a run's counters: a NIC's two-port balance, its deepest queue, the aggregation links used."""

from __future__ import annotations

from testbed.net.balance import Counters, NicBalance, QueueOverTime, links_used, nic_balance, nic_port_queue, ratio_text


def record() -> Counters:
    return Counters.of({
        "host_port_rx": {"h0:0": 3_000_000, "h0:1": 1_000_000, "h1:0": 2_000_000, "h1:1": 0, "h2:0": 10},
        "host_port_tor": {"h0:0": "tor-a:1", "h0:1": "tor-b:1", "h1:0": "tor-a:2", "h1:1": "tor-b:2"},
        "pfc": {"queues": {"tor-a:1": {"max_backlog": 90_000}, "tor-b:1": {"max_backlog": 3_000}}},
        "fabric_links": [
            {"from": "agg-0", "to": "tor-a", "kind": "tor-agg", "bytes": 1_000_000},
            {"from": "agg-0", "to": "tor-b", "kind": "tor-agg", "bytes": 2_000},  # acknowledgements only
            {"from": "agg-1", "to": "tor-a", "kind": "tor-agg", "bytes": 0},
            {"from": "agg-1", "to": "tor-b", "kind": "tor-agg", "bytes": 900_000},
            {"from": "agg-1", "to": "tor-c", "kind": "tor-agg", "bytes": 0},  # a ToR nothing came down to
            {"from": "tor-a", "to": "agg-0", "kind": "tor-agg", "bytes": 5_000_000},
        ],
    })


def test_each_dual_homed_nic_with_traffic_busiest_first():
    nics = nic_balance(record(), min_bytes=1000)
    assert [n.nic for n in nics] == ["h0:nic0", "h1:nic0"]  # h2 is single-homed here
    assert nics[0].port_bytes == (3_000_000, 1_000_000) and nics[0].imbalance == 3.0
    assert nics[0].deepest_queue == 90_000
    assert nics[1].imbalance == float("inf") and nics[1].deepest_queue == 0


def test_aggregation_to_tor_links_used_among_those_into_fed_tors():
    assert links_used(record()) == (2, 4)
    assert links_used(Counters()) == (0, 0)


def test_a_port_that_carried_only_acknowledgements_is_idle_not_a_ratio():
    acks = NicBalance("h4:nic0", (48_000_000, 491), 0)  # read "97669.57x" before
    assert acks.imbalance == float("inf") and ratio_text(acks.imbalance) == "one port idle"
    assert ratio_text(NicBalance("h0:nic0", (3_000_000, 1_000_000), 0).imbalance) == "3.00"
    assert NicBalance("h1:nic0", (90_000, 10_000), 0).imbalance == 9.0  # 10% of the NIC's bytes: a ratio
    assert NicBalance("h2:nic0", (98_900, 1_100), 0).imbalance == float("inf")  # 91x before: acknowledgements


def test_queue_over_time_is_the_deepest_nic_facing_port_at_each_sample():
    rec = record()
    # ten samples with traffic: a first-window spike at one port, then tor-b:1 standing at 20 KB; a switch's
    # uplink queue (agg-0:1) is deeper but faces no NIC; an empty sample (before the traffic) is left out
    spike = {"tor-a:1/p3": 90_000, "agg-0:1/p3": 200_000}
    standing = [{"tor-a:1/p3": 1_000, "tor-b:1/p3": 20_000, "agg-0:1/p3": 200_000}] * 9
    rec.pfc["samples"] = [{"t": t, "backlog": b} for t, b in enumerate([{}, spike, *standing])]
    assert nic_port_queue(rec) == QueueOverTime(samples=10, p50=20_000, p90=90_000, peak=90_000)
    rec.pfc["samples"] = [{"t": 0, "backlog": {}}]
    assert nic_port_queue(rec) is None  # nothing queued while sampled: no figure, not a zero
    assert nic_port_queue(Counters()) is None  # PFC off: nobody sampled
