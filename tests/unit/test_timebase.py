"""Time dilation (traffic/timebase.py): what goes in is the fabric's time and becomes wall time, what comes out
is measured in wall time and becomes the fabric's; the network is shaped D times slower."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from traffic.timebase import MAX_DILATION, Clock, Timebase


@given(st.floats(1, MAX_DILATION), st.floats(0, 1e6))
def test_wall_and_virtual_are_inverse(d, t):
    tb = Timebase(d)
    assert tb.virtual(tb.wall(t)) == pytest.approx(t, rel=1e-12, abs=1e-12)
    assert tb.wall(t) >= t  # the emulation never runs ahead of the fabric


@pytest.mark.parametrize("d", [0.5, 0.0, -1.0, MAX_DILATION * 2, float("nan")])
def test_a_dilation_outside_its_range_is_refused(d):
    with pytest.raises(ValueError, match="dilation"):
        Timebase(d)


def test_a_clock_counts_the_fabrics_time():
    c = Clock(Timebase(10), t0=time.time() - 5.0)  # 5 wall seconds ago
    assert c.wall_now() == pytest.approx(5.0, abs=0.05)
    assert c.now() == pytest.approx(0.5, abs=0.005)
    assert c.wall_at(2.0) == pytest.approx(c.t0 + 20.0)


def test_the_spec_takes_a_dilation_and_refuses_a_bad_one():
    from testbed.experiment.spec import from_dict
    from topos.errors import InputError

    base = {"name": "t", "workload": {"collective": {"op": "allreduce"}}}
    assert from_dict({**base, "time": {"dilation": 10}}).timebase == Timebase(10)
    assert from_dict(base).time.dilation == "auto"  # the default: resolved before a run (test_dilation_auto.py)
    with pytest.raises(ValueError, match="resolve dilation auto first"):
        _ = from_dict(base).timebase
    for bad in (0.5, "fast", 1e9):
        with pytest.raises(InputError) as exc:
            from_dict({**base, "time": {"dilation": bad}})
        assert exc.value.field == "time.dilation"


def test_a_dilated_network_is_shaped_d_times_slower_with_the_same_buffer_bytes():
    from testbed.qos.spec import QosSpec, port_plan

    spec = QosSpec(scale=20_000, delay_ms=2.0, pfc={"poll_ms": 5})
    slow = spec.dilated(10)
    assert (slow.scale, slow.delay_ms, slow.buffer_ms) == (200_000, 20.0, spec.buffer_ms * 10)
    a, b = port_plan(400, spec), port_plan(400, slow)
    assert b.rate_bps == pytest.approx(a.rate_bps / 10, rel=1e-6)
    assert b.buffer_bytes == a.buffer_bytes  # the same bytes; they drain in the same time of the fabric's
    assert spec.dilated(1) is spec
    with pytest.raises(ValueError):
        QosSpec(scale="auto").dilated(10)


@pytest.mark.timing
def test_a_failure_fires_at_its_virtual_time():
    """A failure at t = 0.2 s of the fabric's time under D = 10 fires 2 s of wall time in, and its record says
    0.2 s (and 2 s of wall time)."""
    from testbed.experiment.failures import Event, Injector

    class Links:
        def __init__(self):
            self.at = []

        def set_link(self, name, up):
            self.at.append(time.time())

    net, clock = Links(), Clock(Timebase(10))
    inj = Injector(net, [Event(0.2, False, ("a",), "down a")], clock=clock)
    inj.start()
    deadline = time.monotonic() + 10
    while not inj.log and time.monotonic() < deadline:
        time.sleep(0.01)
    assert inj.stop() == []
    (entry,) = inj.log
    assert net.at[0] - clock.t0 == pytest.approx(2.0, abs=0.1)
    assert entry["t"] == pytest.approx(0.2, abs=0.01) and entry["wall_t"] == pytest.approx(2.0, abs=0.1)


def test_latency_bound_is_judged_in_wall_time():
    """A 2 ms op (the fabric's) that took 10 ms: latency-bound at D = 1 (2 ms of wall time, the emulator's
    latency is 20); at D = 1000 its ideal is 2 s of wall time, and 5x is the fabric's own doing."""
    from testbed.experiment.fidelity import verdict

    op = {"label": "ar", "seconds": 0.010, "fraction_of_ideal": 0.2}
    rows = [{"t": 0.0, "cpu_idle": 0.5, "steal": 0.0}]
    assert any(r.startswith("latency-bound") for r in verdict(rows, ops=[op])["reasons"])
    assert verdict(rows, ops=[op], dilation=1000)["reasons"] == []


def test_an_op_faster_than_its_links_allow_is_not_faithful():
    """A 1,342-byte all-reduce at 40 kbit/s went at 760% of its ideal rate (one shaper burst): not a transfer the
    fabric could make, so not faithful; 104% (timer granularity) is."""
    from testbed.experiment.fidelity import verdict

    rows = [{"t": 0.0, "cpu_idle": 0.5, "steal": 0.0}]
    op = {"label": "allreduce/ring", "size": 1342, "seconds": 0.05, "fraction_of_ideal": 7.6}
    (reason,) = verdict(rows, ops=[op], dilation=100)["reasons"]
    assert reason.startswith("faster than the fabric allows") and "1,342 bytes" in reason
    assert verdict(rows, ops=[{**op, "fraction_of_ideal": 1.04}], dilation=100)["reasons"] == []


def test_auto_scale_gives_a_dilated_run_d_times_the_bytes():
    from testbed.qos.scale import choose_scale

    one, ten = choose_scale(6.4e12, budget_bps=128e6), choose_scale(6.4e12, budget_bps=128e6, dilation=10)
    assert (one.scale, ten.scale) == (50_000, 5_000)
    assert one.offered_emulated_bps == ten.offered_emulated_bps == 128e6  # the same load on this machine
    assert "time dilated 10x" in ten.why()


def test_retransmissions_nobody_dropped_for_are_the_emulators():
    """An all-reduce at 36% of its ideal rate under D = 1000: 15 TCP segments retransmitted, no shaper dropped,
    no link failed. Not faithful; with a drop or a failure in the run the retransmissions are the fabric's."""
    from testbed.experiment.fidelity import verdict
    from testbed.experiment.runner import _lost_in_emulator

    d = {"tcp": {"RetransSegs": 15}, "drops": {"high": 0, "lossless": 0, "default": 0, "unread": 0}, "failures": []}
    assert _lost_in_emulator(d) == 15
    assert _lost_in_emulator({**d, "drops": {**d["drops"], "default": 3}}) == 0
    assert _lost_in_emulator({**d, "failures": [{"t": 1.0}]}) == 0 and _lost_in_emulator({**d, "tcp": None}) == 0
    # 64 hosts, D = 8: 190 tail-loss probes, each answered by a DSACK: not needed, nothing waited for them
    probes = {"RetransSegs": 190, "TCPLossProbes": 190, "TCPDSACKRecv": 190, "TCPTSReorder": 0}
    assert _lost_in_emulator({**d, "tcp": probes}) == 0
    # microAllReduce, D = 1,000, small data segments in the ACKs' class: 29 reorderings taken for loss
    reordered = {"RetransSegs": 29, "TCPFastRetrans": 29, "TCPDSACKRecv": 29, "TCPTSReorder": 29}
    assert _lost_in_emulator({**d, "tcp": reordered}) == 29
    rows = [{"t": 0.0, "cpu_idle": 0.5, "steal": 0.0}]
    (reason,) = verdict(rows, lost_in_emulator=15)["reasons"]
    assert reason.startswith("15 TCP segments lost or reordered (or RoCE frames resent) with no drop in any shaper")


def test_tcp_counters_are_read_from_the_namespaces_proc_files():
    from traffic.tcpstats import tcp_counters

    snmp = ("Ip: Forwarding DefaultTTL\nIp: 1 64\n"
            "Tcp: RtoAlgorithm ActiveOpens RetransSegs\nTcp: 1 4 17\n")
    netstat = "TcpExt: SyncookiesSent TCPTimeouts TCPSpuriousRTOs\nTcpExt: 0 3 1\n"
    assert tcp_counters(snmp, netstat) == {"RetransSegs": 17, "TCPTimeouts": 3, "TCPSpuriousRTOs": 1}


def test_pfc_pause_times_are_the_fabrics_and_its_poll_figures_the_emulators():
    from testbed.qos.pfc_report import in_fabric_time

    wall = {"by_priority": {"3": {"pause_events": 4, "paused_s": 2.0, "drops": 0}},
            "pauses_by_tier": {"tor": {"pause_events": 4, "paused_s": 2.0, "ports_paused": 1}},
            "ports": {"tor-a:1/p3": {"pause_events": 4, "paused_s": 2.0}},
            "samples": [{"t": 0.0, "backlog": {}, "paused": []}, {"t": 1.5, "backlog": {}, "paused": ["x"]}],
            "poll_period_ms": {"configured": 5.0, "median": 5.1, "p99": 9.0, "max": 12.0}, "last_poll_age_ms": 3.0}
    assert in_fabric_time(wall, Timebase(1.0)) is wall
    v = in_fabric_time(wall, Timebase(100.0))
    assert v["by_priority"]["3"]["paused_s"] == v["pauses_by_tier"]["tor"]["paused_s"] == 0.02
    assert v["ports"]["tor-a:1/p3"] == {"pause_events": 4, "paused_s": 0.02}
    assert [x["t"] for x in v["samples"]] == [0.0, 0.015] and v["samples"][1]["paused"] == ["x"]
    assert v["poll_period_ms"] == wall["poll_period_ms"] and v["clock"]["dilation"] == 100.0
    assert wall["ports"]["tor-a:1/p3"]["paused_s"] == 2.0  # the agent's own report is left as it was


def test_a_dilated_qos_spec_is_still_a_valid_one_and_experiment_files_cannot_set_its_factor():
    """The PFC agent's process and a server's agent take the shaping spec as JSON: at D = 1,500 its lossy buffer
    is 30 s and its scale 1/30,000,000, past what a user may ask for; the bounds apply to what was asked (CI:
    `traffic run --simai microAllReduce --dilation auto` stopped at 'buffer_ms <= 10000' in the agent's
    process)."""
    from testbed.experiment.spec import from_dict
    from testbed.qos.spec import QosSpec
    from topos.errors import InputError

    slow = QosSpec(scale=20_000).dilated(1500)
    again = QosSpec.model_validate(slow.model_dump(mode="json"))
    assert again == slow and again.buffer_ms == 30_000 and again.dilated_by == 1500
    with pytest.raises(InputError, match="buffer_ms must be at most 10,000 ms"):
        QosSpec(buffer_ms=20_000)
    with pytest.raises(InputError, match="qos.dilated_by is set by the runner"):
        from_dict({"name": "x", "topology": {"name": "hpn"}, "qos": {"dilated_by": 10},
                   "workload": {"collective": {"op": "allreduce"}}})
