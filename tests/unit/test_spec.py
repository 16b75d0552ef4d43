from __future__ import annotations

import time
from pathlib import Path

import pytest

from testbed.experiment.failures import expand
from testbed.experiment.spec import check_against, load
from topos import build
from topos.errors import InputError

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def write(tmp_path, text):
    f = tmp_path / "e.yaml"
    f.write_text(text)
    return f


BASE = "name: t\nworkload: {collective: {op: allreduce, size: 1GB}}\n"


def test_shipped_experiments_validate():
    for f in sorted(EXPERIMENTS.glob("*.yaml")):
        exp = load(f)
        for _label, v in exp.expand():
            check_against(v, build(v.topology.name, preset=v.topology.preset, **v.topology.params))


@pytest.mark.parametrize("extra,field", [
    ("colour: red\n", "colour"),
    ("routing: magic\n", "routing"),
    ("repetitions: 0\n", "repetitions"),
    ("qos: {scale: 0}\n", "qos.scale"),
    ("failures: [{at: 1, action: down}]\n", "failures[].link"),
    ("failures: [{at: 1, link: 'h0:nic0:p0', action: flap}]\n", "failures[].period"),
    ("variants: [{routing: warp}]\n", "variants[0].routing"),
    ("transport: roce\nqos: {cc: dctcp}\n", "qos.cc"),  # TCP's; a RoCE NIC runs DCQCN
    ("transport: roce\nnic_port_choice: round-robin\n", "transport"),  # the hosts pin TCP's ports only
    ("resilience: {retry_timer_s: 0.004}\n", "resilience.retry_timer_s"),  # under TCP's floor; roce's may
])
def test_bad_experiments_name_the_field(tmp_path, extra, field):
    with pytest.raises(InputError) as exc:
        exp = load(write(tmp_path, BASE + extra))
        exp.expand()
    assert exc.value.field == field, exc.value.line()


def test_workload_needs_exactly_one_source(tmp_path):
    with pytest.raises(InputError) as exc:
        load(write(tmp_path, "name: t\nworkload: {}\n"))
    assert exc.value.field == "workload"
    with pytest.raises(InputError) as exc:
        load(write(tmp_path, "name: t\n"))  # neither workload nor jobs
    assert exc.value.field == "workload"
    with pytest.raises(InputError) as exc:
        load(write(tmp_path, BASE + "jobs: [{name: A, collective: {op: allreduce}}]\n"))  # both
    assert exc.value.field == "workload"
    jobs = load(write(tmp_path, "name: t\njobs: [{name: A, collective: {op: allreduce}, priority: default}]\n"))
    assert jobs.jobs[0].priority == "default" and jobs.workload is None
    with pytest.raises(InputError) as exc:
        load(write(tmp_path, "name: t\nworkload: {simai: nowhere.txt}\n"))
    assert exc.value.field == "workload.simai"


def test_names_checked_against_the_topology(tmp_path):
    exp = load(write(tmp_path, BASE + "failures: [{at: 1, link: 'h99:nic0:p0'}, {at: 2, node: t0}]\n"))
    with pytest.raises(InputError) as exc:
        check_against(exp, build("hpn"))
    assert exc.value.field == "failures[0].link"


def test_failure_schedule_expansion(tmp_path):
    topo = build("hpn")
    exp = load(write(tmp_path, BASE + (
        "failures:\n"
        "  - {at: 1.0, link: 'h3:nic0:p0', action: flap, period: 0.5, count: 2}\n"
        "  - {at: 0.5, node: agg-p0-pl0-0, action: down}\n")))
    ev = expand(exp, topo)
    assert [(e.t, e.up) for e in ev] == [(0.5, False), (1.0, False), (1.5, True), (2.0, False), (2.5, True)]
    assert len(ev[0].links) == 4  # an aggregation switch of the mini HPN has 4 links


def test_random_failures_reproducible_and_paired(tmp_path):
    topo = build("hpn")
    text = BASE + "random_failures: {link_down_per_min: 30, repair_after: 0.2}\nhorizon_s: 20\n"
    a = expand(load(write(tmp_path, text + "seed: 1\n")), topo)
    b = expand(load(write(tmp_path, text + "seed: 1\n")), topo)
    c = expand(load(write(tmp_path, text + "seed: 2\n")), topo)
    assert a == b and a != c
    downs = [e for e in a if not e.up]
    ups = {(e.links, round(e.t, 6)) for e in a if e.up}
    assert all((d.links, round(d.t + 0.2, 6)) in ups for d in downs)
    assert all(topo.find_link(d.links[0]).kind == "tor-agg" for d in downs)
    # 32 ToR uplinks x 30/min x 20 s: 320 expected failures; a Poisson draw lands well within +-30%
    assert 224 < len(downs) < 416


def test_same_spec_same_schedules_and_quick_is_smaller():
    from testbed.experiment.jobs import items
    from testbed.experiment.planning import quick

    exp = load(EXPERIMENTS / "precise_vs_ecmp.yaml")
    topo = build("hpn")
    a = [(o, s.steps) for o, s in items(exp, EXPERIMENTS, topo)]
    b = [(o, s.steps) for o, s in items(exp, EXPERIMENTS, topo)]
    assert a == b
    q = quick(exp)
    assert q.repetitions == 1 and q.workload.collective.iters == 2
    qa = items(q, EXPERIMENTS, topo)
    full = sum(f.bytes for st in a[0][1] for f in st)
    assert qa[0][1].total_bytes * 4 == pytest.approx(full, rel=1e-6)


def test_quick_shrinks_jobs_in_variants_too():
    from testbed.experiment.planning import quick

    exp = load(EXPERIMENTS / "multi_job_contention.yaml")
    for _label, v in exp.expand():
        q = quick(v)
        assert q.workload is None and q.repetitions == 1
        assert [j.collective.iters for j in q.jobs] == [2, 2]
        assert all(j.collective.size == 10_000_000_000 for j in q.jobs)  # 40GB / 4


def test_quick_keeps_the_traffic_that_failures_are_timed_against():
    from testbed.experiment.planning import quick

    exp = load(EXPERIMENTS / "dual_tor_failover.yaml")
    q = quick(exp)
    assert q.repetitions == 1 and q.failures == exp.failures
    assert q.workload.collective == exp.workload.collective  # 6 iterations: the failure at 5 s falls inside


def test_quick_iters_caps_only_the_iterations_of_a_failure_experiment():
    from testbed.experiment.planning import plan, quick

    exp = load(EXPERIMENTS / "gray_failures.yaml")
    assert exp.quick_iters == 2 and exp.workload.collective.iters == 4
    q = quick(exp)
    assert q.failures == exp.failures and q.workload.collective.size == exp.workload.collective.size
    assert q.workload.collective.iters == 2
    # every variant, the healthy one without failures too: it is what the others are measured against
    assert {p.exp.workload.collective.iters for p in plan(exp, EXPERIMENTS, reduced=True)} == {2}


def test_a_link_can_be_named_by_the_pair_of_nodes_it_joins(tmp_path):
    topo = build("hpn")
    exp = load(write(tmp_path, BASE + (
        "failures:\n"
        "  - {at: 1.0, link: 'agg-p0-pl0-0--tor-p0-s0-r0-a', action: down}\n"
        "  - {at: 2.0, link: 'h3--tor-p0-s0-r0-b', action: down}\n")))
    check_against(exp, topo)
    ev = expand(exp, topo)
    assert [e.links for e in ev] == [("tor-p0-s0-r0-a:5-agg-p0-pl0-0:1",), ("h3:nic0:p1",)]
    with pytest.raises(InputError, match="no such link") as exc:
        topo.find_link("h3--tor-p0-s1-r0-a")  # not wired together
    assert "pair of nodes" in exc.value.fix


def test_injector_reports_the_events_the_traffic_ended_before():
    from testbed.experiment.failures import Event, Injector

    class Links:
        def __init__(self):
            self.calls = []

        def set_link(self, name, up):
            self.calls.append((name, up))

    net = Links()
    inj = Injector(net, [Event(0.0, False, ("a",), "down a"), Event(30.0, True, ("a",), "up a")])
    inj.start()
    deadline = time.monotonic() + 5
    while not inj.log and time.monotonic() < deadline:
        time.sleep(0.01)
    assert inj.stop() == [{"planned_t": 30.0, "up": True, "links": ["a"], "cause": "up a"}]
    assert net.calls == [("a", False)] and len(inj.log) == 1


# -- what `hpnlab validate` refuses: everything `run` would reject or choke on, one line each ------------
@pytest.mark.parametrize("extra,field", [
    ("workload: {collective: {op: allsmash}}\n", "workload.collective.op"),
    ("workload: {collective: {size: -5}}\n", "workload.collective.size"),
    ("workload: {collective: {size: 1.2.3GB}}\n", "workload.collective.size"),
    ("workload: {collective: {size: 2PB}}\n", "workload.collective.size"),
    ("workload: {collective: {iters: 100000000000}}\n", "workload.collective.iters"),
    ("workload: {collective: {iters: 2.5}}\n", "workload.collective.iters"),
    ("workload: {collective: {iters: true}}\n", "workload.collective.iters"),
    ("horizon_s: .inf\n", "horizon_s"),
    ("seed: -1\n", "seed"),
    ("qos: {scale: .inf}\n", "qos.scale"),
    ("qos: {buffer_ms: .nan}\n", "qos.buffer_ms"),
    ("failures: [{at: 1, link: 'h0:nic0:p0', action: flap, period: 0.5, count: 100000000}]\n", "failures.0.count"),
    ("random_failures: {link_down_per_min: 1.0e9}\n", "random_failures.link_down_per_min"),
    ("variants: [{label: ../../etc}]\n", "variants[0].label"),
    ("variants: [{label: a, routing: ecmp}, {label: a, routing: precise}]\n", "variants[1].label"),
])
def test_validate_refuses_what_run_would(tmp_path, extra, field):
    from testbed.experiment.planning import plan

    text = BASE + extra if not extra.startswith("workload") else "name: t\n" + extra
    with pytest.raises(InputError) as exc:
        exp = load(write(tmp_path, text))
        plan(exp, tmp_path)
    assert exc.value.field == field, exc.value.line()
    assert "\n" not in exc.value.line() and len(exc.value.line()) < 300


@pytest.mark.parametrize("text,field", [
    ("name: ../../tmp/x\n" + BASE[8:], "name"),
    ("name: 'a/b'\n" + BASE[8:], "name"),
    ("name: .hidden\n" + BASE[8:], "name"),
    ("name: t\njobs: [{name: A, collective: {op: allreduce}}, {name: A, collective: {op: allreduce}}]\n",
     "jobs[].name"),
    ("name: t\njobs: [{name: ../x, collective: {op: allreduce}}]\n", "jobs.0.name"),
])
def test_names_are_safe_and_unique(tmp_path, text, field):
    with pytest.raises(InputError) as exc:
        load(write(tmp_path, text)).expand()
    assert exc.value.field == field, exc.value.line()


def test_unknown_ranks_and_huge_failure_schedules_are_caught_by_validate(tmp_path):
    from testbed.experiment.planning import plan

    with pytest.raises(InputError) as exc:
        plan(load(write(tmp_path, "name: t\nworkload: {collective: {ranks: 'h99:0,h1:0'}}\n")), tmp_path)
    assert exc.value.field == "workload.collective.ranks"
    t = time.monotonic()
    with pytest.raises(InputError, match="failure schedule would hold") as exc:
        plan(load(write(tmp_path, BASE + "random_failures: {link_down_per_min: 60, repair_after: 0.01, kinds: "
                                            "[host-tor, tor-agg]}\nhorizon_s: 86400\n")), tmp_path)
    assert time.monotonic() - t < 5  # refused from the closed form, not after drawing millions of events


def test_workload_files_stay_in_the_experiment_folder(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "w.yaml").write_text("ops: [{op: allreduce, size: 1MB}]\n")
    (tmp_path / "link.yaml").symlink_to("/etc/hostname")
    assert load(write(tmp_path, "name: t\nworkload: {file: sub/w.yaml}\n")).workload.yaml_file == "sub/w.yaml"
    for name in ("/etc/hostname", "../../etc/hostname", "link.yaml", "sub/../../x"):
        with pytest.raises(InputError, match="outside the experiment file's folder") as exc:
            load(write(tmp_path, f"name: t\nworkload: {{file: '{name}'}}\n"))
        assert exc.value.field == "workload.file"


def test_yaml_alias_bombs_are_refused_small(tmp_path):
    bomb = "name: t\n" + BASE[8:] + "paper:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for i, prev in zip("bcdefgh", "abcdefg", strict=True):
        bomb += f"  {i}: &{i} [" + ", ".join([f"*{prev}"] * 10) + "]\n"
    assert len(bomb) < 1000
    with pytest.raises(InputError, match="expands to more than"):
        load(write(tmp_path, bomb))
    with pytest.raises(InputError, match="refers to itself"):
        load(write(tmp_path, BASE + "paper: &p {x: *p}\n"))
    with pytest.raises(InputError, match="not UTF-8"):
        f = tmp_path / "latin.yaml"
        f.write_bytes(BASE.encode() + b"description: caf\xe9\n")
        load(f)


def test_a_retry_timer_below_tcps_floor_is_the_roce_transports_alone(tmp_path):
    exp = load(write(tmp_path, BASE + "transport: roce\nresilience: {retry_timer_s: 0.0042}\n"))
    assert exp.resilience.retry_timer_s == 0.0042  # NCCL_IB_TIMEOUT 10
