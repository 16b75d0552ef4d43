"""The fidelity verdict: each reason on its own, and a quiet run faithful."""

from __future__ import annotations

from testbed.experiment.fidelity import line, verdict
from testbed.qos.scale import Floor

QUIET = [{"cpu_idle": 0.4, "steal": 0.01, "ovs_thread": 0.5}, {"cpu_idle": 0.3, "steal": 0.02, "ovs_thread": 0.6}]
PFC_OK = {"poll_period_ms": {"configured": 5.0, "median": 5.0, "p99": 11.0, "max": 19.0}, "polls": 900,
          "polls_in_window": 800, "last_poll_age_ms": 3.0, "error": None,
          "queues": {"agg-p0-pl0-0:3": {"max_backlog": 90_000, "xoff": 48_448, "headroom": 53_028, "drops": 0}}}


def test_a_quiet_run_is_faithful():
    v = verdict(QUIET, PFC_OK, pfc_enabled=True, lossless_drops=0)
    assert v["faithful"] and v["reasons"] == [] and v["cpu_idle_min"] == 0.3 and v["steal_mean"] == 0.015
    assert line(v) == "fidelity: faithful (CPU idle >= 30%, OVS thread <= 60%, steal 2%, PFC poll p99 11 ms)"


def test_each_reason_makes_it_unfaithful():
    hog = [{"cpu_idle": 0.4, "steal": 0.0}, {"cpu_idle": 0.01, "steal": 0.0}]
    assert verdict(hog)["reasons"] == ["CPU-bound: idle fell to 1% (needs >= 5%)"]
    # over several servers a row's idle is the least of any server's, and the reason names that server
    spread = [{"cpu_idle": 0.3, "steal": 0.0, "cpu_idle_by_server": {"s1": 0.5, "s2": 0.3}},
              {"cpu_idle": 0.02, "steal": 0.0, "cpu_idle_by_server": {"s1": 0.6, "s2": 0.02}}]
    assert verdict(spread)["reasons"] == ["CPU-bound: idle fell to 2% on server s2 (needs >= 5%)"]
    assert verdict(QUIET, offered_bps=640e6, budget_bps=320e6)["reasons"] == [
        "offered load 640 Mbit/s above this machine's faithful budget 320 Mbit/s (default; run 'hpnlab calibrate')"]
    assert verdict(QUIET, offered_bps=160e6, budget_bps=320e6, calibrated=True)["faithful"]
    stolen = [{"cpu_idle": 0.3, "steal": 0.12}]
    assert verdict(stolen)["reasons"][0].startswith("the hypervisor took 12%")
    lag = {"poll_period_ms": {"configured": 5.0, "median": 9.0, "p99": 14.2, "max": 40.0},
           "queues": {"tor-p0-s0-r0-a:5": {"max_backlog": 120_000, "xoff": 48_448, "headroom": 53_028},
                      "tor-p0-s0-r0-a:6": {"max_backlog": 10_000, "xoff": 48_448, "headroom": 53_028},
                      # a host's own queue: nothing upstream to pause, so never a late pause
                      "h1:0": {"max_backlog": 300_000, "xoff": 48_448, "headroom": 53_028, "host": True}}}
    assert verdict(QUIET, lag)["reasons"] == [
        "a PFC pause came late: 1 lossless queue(s) past XOFF + headroom, e.g. tor-p0-s0-r0-a:5 at 120,000 B > "
        "101,476 B (agent poll p99 14.2 ms, configured 5 ms)"]
    assert verdict(QUIET, PFC_OK, pfc_enabled=True, lossless_drops=3)["reasons"] == [
        "3 drops in the lossless class with PFC on"]
    assert verdict(QUIET, PFC_OK, pfc_enabled=False, lossless_drops=3)["faithful"]  # a lossy class may drop
    # what the PFC watchdog dropped in a storm is the fabric's doing; anything beyond it is not
    storm = {**PFC_OK, "watchdog": {"action": "drop", "drops": 3}}
    assert verdict(QUIET, storm, pfc_enabled=True, lossless_drops=3)["faithful"]
    assert verdict(QUIET, storm, pfc_enabled=True, lossless_drops=5)["reasons"] == [
        "2 drops in the lossless class with PFC on (besides the 3 the PFC watchdog dropped in storms)"]
    v = verdict(hog, lag)
    assert not v["faithful"] and len(v["reasons"]) == 2 and line(v).startswith("fidelity: NOT faithful: CPU-bound")


def test_missing_measurements_are_unknown_never_faithful():
    none = verdict([])
    assert none["status"] == "unknown" and not none["faithful"]
    assert none["unknown"] == ["no CPU samples: idle and steal were not watched"]
    assert line(none) == "fidelity: unknown: no CPU samples: idle and steal were not watched"
    died = verdict(QUIET[:1], sampler_error="KeyError: 'cpu'")
    assert died["status"] == "unknown" and "the CPU sampler failed (KeyError: 'cpu')" in died["unknown"][0]
    assert verdict(QUIET, None, pfc_enabled=True)["unknown"] == ["PFC is on but there is no PFC agent report"]
    dead = {**PFC_OK, "error": "OSError: netlink"}
    assert verdict(QUIET, dead, pfc_enabled=True)["unknown"][0].startswith("the PFC agent died (OSError: netlink)")
    never = {**PFC_OK, "polls_in_window": 0, "poll_period_ms": {"configured": 5.0, "median": None, "p99": None,
                                                                 "max": None}}
    v = verdict(QUIET, never, pfc_enabled=True)
    assert v["unknown"] == ["the PFC agent never polled during the traffic"] and v["pfc_poll_p99_ms"] is None
    stalled = {**PFC_OK, "last_poll_age_ms": 4_000.0}  # stopped polling 4 s before the end, without an error
    assert verdict(QUIET, stalled, pfc_enabled=True)["unknown"][0].startswith("the PFC agent was silent for 4,000 ms")
    gap = {**PFC_OK, "poll_period_ms": {**PFC_OK["poll_period_ms"], "max": 1_500.0}}
    assert verdict(QUIET, gap, pfc_enabled=True)["status"] == "unknown"
    assert verdict(QUIET, PFC_OK, pfc_enabled=True, lossless_drops=None)["unknown"] == [
        "the lossless class's drops could not be read"]
    # the kernel programs' own counters: a crossing the ring buffer dropped, a lossless leaf not found
    assert verdict(QUIET, {**PFC_OK, "kernel_lost_events": 0, "kernel_no_leaf": 0}, pfc_enabled=True)["faithful"]
    lost = verdict(QUIET, {**PFC_OK, "kernel_lost_events": 1}, pfc_enabled=True)
    assert lost["status"] == "unknown" and lost["unknown"][0].startswith("the kernel's ring buffer had no room for 1 ")
    blind = verdict(QUIET, {**PFC_OK, "kernel_no_leaf": 12}, pfc_enabled=True)
    assert blind["unknown"] == ["the kernel programs found no lossless leaf 12 times: those queues were not watched "
                                "then"]
    # evidence against fidelity wins over missing evidence: both are said
    both = verdict([{"cpu_idle": 0.01, "steal": 0.0}], None, pfc_enabled=True)
    assert both["status"] == "not faithful" and both["unknown"] and line(both).endswith("no PFC agent report")


def busy(seconds: float, gbps: float = 100.0, scale: float = 1.0) -> list[dict]:
    """Every link idle but one, which carried `seconds` of full frames at its rate in the fabric's time."""
    frames = int(seconds * gbps * 1e9 / 8 / scale / 1448) + 1
    return [{"from": "h0", "to": "tor-0", "bytes": 0, "packets": 0, "gbps": gbps},
            {"from": "agg-0", "to": "tor-1", "bytes": frames * 1514, "packets": frames, "gbps": gbps}]


def test_small_ops_far_from_their_ideal_time_are_latency_bound():
    def op(seconds, ideal, steps=14):
        return {"label": "allreduce/ring", "seconds": seconds, "fraction_of_ideal": ideal / seconds,
                "step_seconds": [seconds / steps] * steps}

    floor = Floor(0.010, 0.001)  # 24 ms for an 8-rank ring's 14 steps, 11 ms for one step
    # the 16-GPU SimAI file: an op of 9.2 ms ideal that took 0.42 s, with the CPU idle; one that took 10 ms is
    # flagged too: 24 ms of the emulator's latency could be in it or not
    v = verdict(QUIET, ops=[op(0.42, 0.0092), op(0.010, 0.0092)], floor=floor)
    assert v["status"] == "not faithful" and v["reasons"] == [
        "latency-bound: 2 of 2 ops took longer than their ideal time and the emulator's own per-op latency is "
        "over 5% of what they took (or they are short against it and took over 10x), worst allreduce/ring 46x "
        "(420.00 ms against 9.20 ms; 24.0 ms of wall time for its 14 steps, from the default floor (not "
        "calibrated here: run 'hpnlab calibrate')): the emulator, not the fabric, may be what is measured; dilate "
        "time (time.dilation >= 60, or auto)"]
    # a big op slowed by contention is the fabric's doing; a short op that met its ideal time shows the floor
    # did not matter; the same 9.2 ms op that took 12 ms is 0.72 s of wall time at D = 60, where 24 ms is under
    # 5%, and 0.36 s at D = 30, where it is not
    assert verdict(QUIET, ops=[op(4.0, 0.5), op(0.0105, 0.0100)], floor=floor, links=busy(4.0))["faithful"]
    assert verdict(QUIET, ops=[op(0.0120, 0.0092)], dilation=60, floor=floor, links=busy(0.012))["faithful"]
    assert not verdict(QUIET, ops=[op(0.0120, 0.0092)], dilation=30, floor=floor)["faithful"]
    # the floor is weighed against the time taken, not the ideal: an op that contention made 2x its ideal (5.6 s
    # for 2.8 s) with a floor of 6% of the ideal (174 ms) is off by at most 3%; one that took 1.07x is not
    ring = Floor(0.005, 0.003, frame_s=0.009)
    assert verdict(QUIET, ops=[op(5.6, 2.8)], floor=ring, links=busy(5.6))["faithful"]
    (slow,) = verdict(QUIET, ops=[op(3.0, 2.8)], floor=ring)["reasons"]
    # a short op (its floor over 5% of its ideal) many times its ideal is flagged however small the floor is
    # against what it took: the fabric adds a few times at most, the rest is something of the emulator's
    assert not verdict(QUIET, ops=[op(0.6, 0.0092)], floor=floor)["faithful"]  # 65x; 24 ms is 4% of 0.6 s
    # 6.5x, 0.7% of it
    assert verdict(QUIET, ops=[op(0.06, 0.0092)], dilation=60, floor=floor, links=busy(0.06))["faithful"]
    # the floor is wall time: the advice dilates time until it is 5% of the ideal (178 ms, 5% of 2.8 s at 1.3x)
    assert slow.endswith("dilate time (time.dilation >= 1.5, or auto)"), slow
    # the floor grows with the steps an op waits through: at D = 30 one step's 11 ms is under 5% of the op
    # (0.36 s of wall time), a ring's 24 ms is not
    assert verdict(QUIET, ops=[op(0.0120, 0.0092, steps=1)], dilation=30, floor=floor, links=busy(0.012))["faithful"]
    assert not verdict(QUIET, ops=[op(0.0120, 0.0092, steps=14)], dilation=30, floor=floor)["faithful"]
    # a calibrated floor says where it came from
    cal = verdict(QUIET, ops=[op(0.42, 0.0092)], floor=Floor(0.010, 0.001, True, 8))
    assert "from this machine's calibration on 8 hosts" in cal["reasons"][0]


def test_a_training_job_is_weighed_by_the_time_its_iterations_took():
    """A job's ops' floors added up against the time its iterations took: placement's job A (4 iterations of
    one 10-step ring, a floor of 156 ms each with full frames) at 1.09x its ideal of 0.86 s is latency-bound
    (17% of what it took); the same job that contention made 5x its ideal is off by at most 3.6%."""
    floor = Floor(0.005, 0.003, frame_s=0.0121)
    ops = [{"job": "A", "label": "grads", "seconds": 0.9, "fraction_of_ideal": 0.95,
            "step_seconds": [0.09] * 10}] * 4
    its = [{"job": "A", "seconds": 0.94, "predicted_s": 0.86}] * 4
    (reason,) = verdict(QUIET, ops=ops, iterations=its, floor=floor)["reasons"]
    assert reason.startswith("latency-bound: job A's iterations took 1.09x their ideal time") and \
        "is 17% of what they took" in reason, reason
    assert "time.dilation >= 4, or auto" in reason
    # at D = 4 the same floor in wall time is 4% of what they took
    assert verdict(QUIET, ops=ops, iterations=its, floor=floor, dilation=4)["faithful"]
    # contention 5x: 3.6% of what it took, the rest is the fabric's; 12x is more than the fabric adds
    slow = [{**i, "seconds": 4.3} for i in its]
    assert verdict(QUIET, ops=ops, iterations=slow, floor=floor, links=busy(17.2))["faithful"]
    (many,) = verdict(QUIET, ops=ops, iterations=[{**i, "seconds": 10.3} for i in its], floor=floor)["reasons"]
    assert "is 2% of what they took (over 5% of their ideal, and they took over 10x it)" in many, many


def test_a_job_far_from_its_closed_form_needs_a_cause_in_the_fabric():
    """The 64-host case: a ring all-reduce at 68% of ideal, the CPU idle, a floor far under 5% of it, no pause,
    drop or failure. Only a link busy for most of the time it took (ECMP collisions, a shared link) makes that the
    fabric's; else it is the emulator's. Headers are not payload: a link busy with small frames does not count."""
    ops = [{"job": "ar", "label": "allreduce/ring", "seconds": 2.0, "fraction_of_ideal": 0.68,
            "step_seconds": [0.02] * 100}] * 2
    floor = Floor(0.005, 0.0001)
    (reason,) = verdict(QUIET, ops=ops, floor=floor, links=busy(2.72, scale=1000), scale=1000)["reasons"]
    assert reason.startswith("far from its closed form with nothing in the fabric to explain it: job ar ran at 68% "
                             "of its closed form (4 s of the fabric's time against 2.72 s)"), reason
    assert "its busiest link (agg-0->tor-1) was needed for 2.72 s of it (under 85%)" in reason, reason
    # the same with one link busy for all of it (two flows hashed onto it), or a cause the fabric names
    assert verdict(QUIET, ops=ops, floor=floor, links=busy(4.0, scale=1000), scale=1000)["faithful"]
    assert verdict(QUIET, ops=ops, floor=floor, links=busy(0), fabric_causes=["12 PFC pauses"])["faithful"]
    # within 85% of the closed form nothing is asked; links not read leave a far job unknown, never faithful
    near = [{**o, "fraction_of_ideal": 0.86} for o in ops]
    assert verdict(QUIET, ops=near, floor=floor, links=busy(0))["faithful"]
    v = verdict(QUIET, ops=ops, floor=floor)
    assert v["status"] == "unknown" and "the links' counters were not read" in v["unknown"][0]
    assert v["of_closed_form"] == {"ar": 0.68}
    # the busy link's 2.72 s made of 90-byte frames is 40 ms of payload: not the fabric's
    small = [{**l, "packets": l["bytes"] // 90} for l in busy(4.0, scale=1000)]
    assert not verdict(QUIET, ops=ops, floor=floor, links=small, scale=1000)["faithful"]
    # a training job is its iterations against their closed form
    its = [{"job": "ar", "seconds": 1.0, "predicted_s": 0.5}]
    assert "job ar ran at 50%" in verdict(QUIET, ops=ops, iterations=its, floor=floor, links=busy(0))["reasons"][0]


def test_each_link_direction_is_read_at_its_switch_end():
    """A switch's port counts what it sends on the link (tx) and, where the other end is a host, what the host
    sent (rx): every direction of every link once, with the link's real rate."""
    from testbed.experiment.counters import link_load
    from topos import build

    topo = build("hpn")
    host_link = next(l for l in topo.links if l.kind == "host-tor")
    up = next(l for l in topo.links if l.kind == "tor-agg")
    zero = {"rx_bytes": 0, "rx_packets": 0, "tx_bytes": 0, "tx_packets": 0}
    before = {sw.name: {} for sw in topo.switches}
    after = {sw.name: {p: dict(zero) for p in range(1, 80)} for sw in topo.switches}
    after[host_link.b][host_link.b_port] = {"rx_bytes": 3000, "rx_packets": 2, "tx_bytes": 1500, "tx_packets": 1}
    after[up.a][up.a_port]["tx_bytes"] = 9000
    loads = {(x["from"], x["to"]): x for x in link_load(topo, before, after)}
    assert len(loads) == 2 * len(topo.links)
    assert loads[host_link.a, host_link.b] == {"from": host_link.a, "to": host_link.b, "bytes": 3000, "packets": 2,
                                               "gbps": host_link.rate_gbps}
    assert loads[host_link.b, host_link.a]["bytes"] == 1500 and loads[up.a, up.b]["bytes"] == 9000


def test_a_late_pause_names_the_frames_that_waited_for_ovs():
    """The row with OVS's largest receive backlog goes beside a late pause: those frames had left their queue."""
    lag = {"poll_period_ms": {"configured": 50.0, "median": 50.0, "p99": 50.0, "max": 50.0}, "detect": "kernel",
           "reaction_ms": {"median": 0.4, "p99": 2.1},
           "queues": {"agg-p0-pl0-1:1": {"max_backlog": 203_416, "xoff": 100_000, "headroom": 101_018}}}
    rows = [{**QUIET[0], "t": 0.5, "ovs_rx_peak": 40_000, "ovs_rx_port": "tor-p0-s0-r0-a:6"},
            {**QUIET[1], "t": 1.0, "ovs_rx_peak": 410_112, "ovs_rx_port": "agg-p0-pl0-1:3"}]
    v = verdict(rows, lag)
    assert v["ovs_rx_max"] == 410_112
    assert v["reasons"] == [
        "a PFC pause came late: 1 lossless queue(s) past XOFF + headroom, e.g. agg-p0-pl0-1:1 at 203,416 B > "
        "201,018 B (PFC reaction p99 2.1 ms, from kernel events); up to 410,112 B of socket memory of frames "
        "waited for OVS's one thread at agg-p0-pl0-1:3 (at 1 s): frames that had left their queue, which no "
        "pause holds"]
    assert verdict(rows, PFC_OK)["faithful"]  # a backlog alone, with no pause late, is no reason
    assert verdict(QUIET, lag)["ovs_rx_max"] is None  # not read: not known, not zero
