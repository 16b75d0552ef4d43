"""Several jobs in one experiment: specs, their hosts and classes, and what the Crux scheduler is told (pure)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from testbed.experiment.jobs import demand, jobs
from testbed.experiment.spec import from_dict, load
from topos.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
SIMAI = "simai_dp16_two_layers.txt"  # 16 GPUs, 1 s of compute each, two weight-gradient all-reduces of 10 GB
YAML = "dp_training.yaml"  # a data-parallel step for any number of GPUs (experiments/workloads)


def spec(**over) -> dict:
    base = {"name": "t", "topology": {"name": "hpn", "params": {"gpus_per_host": 4}},
            "qos": {"scale": 20_000, "lossless": [{"priority": 3, "dscp": 26}, {"priority": 4, "dscp": 34}]},
            "jobs": [{"name": "big", "workload": {"simai": SIMAI, "iterations": 2}, "hosts": "h0,h1,h2,h3"},
                     {"name": "small", "collective": {"op": "allreduce", "size": "1GB", "ranks": "h4:0,h5:0"},
                      "priority": 4}]}
    base.update(over)
    return base


def test_jobs_with_workload_files_run_on_their_hosts_in_their_class(tmp_path):
    shutil.copy(DATA / SIMAI, tmp_path)
    exp = from_dict(spec())
    topo = exp.topology.build()
    big, small = jobs(exp, tmp_path, topo)
    assert big.hosts == ["h0", "h1", "h2", "h3"] and small.hosts == ["h4", "h5"]
    assert (big.dscp, small.dscp) == (26, 34)  # default lossless class; priority 4's DSCP
    assert big.compute_s == pytest.approx(1.0) and big.iterations == 2
    # every flow of the training job stays on its four hosts
    assert {r[0] for _o, s in big.items for st in s.steps for f in st for r in (f.src, f.dst)} == set(big.hosts)


def test_demand_carries_real_bytes_compute_and_overlap(tmp_path):
    shutil.copy(DATA / SIMAI, tmp_path)
    exp = from_dict(spec())
    topo = exp.topology.build()
    big, small = jobs(exp, tmp_path, topo)
    d = demand(big, 0, topo, exp.qos.scale)
    emulated = sum(s.total_bytes for step, s in big.iteration if s is not None)
    assert sum(f["bytes"] for f in d["flows"]) == pytest.approx(emulated * 20_000, rel=1e-6)
    assert d["gpus"] == 4 * topo.nodes["h0"].gpus and d["compute_s"] == pytest.approx(1.0)
    # both all-reduces are weight gradients, but only layer 1's hides (under layer 0's backward compute):
    # a ring of the 16 GPUs (4 per host) leaves each host once, every hop 2 x 15/16 of the 10 GB: 0.75 s at
    # 200G; fwd 0.6 s + ig/wg 0.2 s, then 0.75 s under 0.2 s of compute, then layer 0's 0.75 s: 2.3 s, 1.3 s
    # exposed of 1.5 s -> 2/15 hidden
    assert d["overlap"] == pytest.approx(2 / 15, abs=1e-6)
    # two channels: one flow each with half the bytes; 0.375 s per all-reduce, layer 1's runs 0.8-1.175 s,
    # layer 0's 1.175-1.55 s: 0.55 s exposed of 0.75 s -> 4/15 hidden
    two = demand(big, 0, topo, exp.qos.scale, channels=2)
    assert len(two["flows"]) == 2 * len(d["flows"]) and two["overlap"] == pytest.approx(4 / 15, abs=1e-6)
    assert len({(f["src"], f["dst"], f["sport"], f["dport"]) for f in d["flows"]}) == len(d["flows"])
    s = demand(small, 1, topo, exp.qos.scale)
    assert s["compute_s"] == 0 and s["overlap"] == 0 and {f["dport"] for f in s["flows"]} == {10_001}
    # one iteration (of 3) of a 2-rank ring all-reduce of 1 GB: each rank sends 500 MB twice
    assert sum(f["bytes"] for f in s["flows"]) == pytest.approx(2e9, rel=1e-3)


@pytest.mark.parametrize("over,field", [
    ({"jobs": [{"name": "a"}]}, "jobs[].collective"),
    ({"jobs": [{"name": "a", "collective": {"op": "allreduce"}, "hosts": "h0,h1"}]}, "jobs[].hosts"),
    ({"jobs": [{"name": "a", "workload": {"collective": {"op": "allreduce"}}}]}, "jobs[].workload.collective"),
    ({"jobs": [{"name": "a", "collective": {"op": "allreduce"}, "gpus": 4}]}, "jobs[].gpus"),
    ({"jobs": [{"name": "a", "workload": {"simai": SIMAI}, "gpus": 4, "hosts": "h0,h1"}]}, "jobs[].gpus"),
    ({"placement": "random", "jobs": [{"name": "a", "collective": {"op": "allreduce"}}]}, "placement"),
    ({"jobs": [{"name": "a", "collective": {"op": "allreduce"}, "priority": 5}]}, "jobs[0].priority"),
    ({"scheduler": "crux", "jobs": [{"name": "a", "collective": {"op": "allreduce"}},
                                    {"name": "b", "collective": {"op": "allreduce"}, "priority": "default"}]},
     "jobs[1].priority"),
    ({"scheduler": "crux", "jobs": [{"name": "a", "collective": {"op": "allreduce"}}]}, "scheduler"),
])
def test_bad_jobs_name_the_field(over, field):
    with pytest.raises(InputError) as exc:
        from_dict(spec(**over))
    assert exc.value.field == field


def test_job_hosts_and_files_are_checked(tmp_path):
    shutil.copy(DATA / SIMAI, tmp_path)
    exp = from_dict(spec(jobs=[{"name": "a", "workload": {"simai": SIMAI}, "hosts": "h0,h99"}]))
    with pytest.raises(InputError) as exc:
        jobs(exp, tmp_path, exp.topology.build())
    assert (exc.value.field, exc.value.value) == ("jobs[0].hosts", "h99")
    f = tmp_path / "e.yaml"
    f.write_text("name: t\njobs:\n  - {name: a, workload: {simai: missing.txt}}\n")
    with pytest.raises(InputError) as exc:
        load(f)
    assert exc.value.field == "jobs[0].workload.simai"


@pytest.mark.parametrize("policy,a_hosts,b_hosts", [
    ("compact", ["h0", "h1", "h2", "h3", "h4", "h5"], ["h6", "h7"]),  # fullest segment first, then the rest
    ("scattered", ["h0", "h4", "h1", "h5", "h2", "h6"], ["h3", "h7"]),  # dealt across the two segments
])
def test_jobs_given_as_gpus_are_placed_by_the_policy(tmp_path, policy, a_hosts, b_hosts):
    shutil.copy(ROOT / "experiments" / "workloads" / YAML, tmp_path)
    hpn = {"name": "hpn"}  # 8 hosts of 2 GPUs
    exp = from_dict(spec(placement=policy, topology=hpn, jobs=[{"name": "A", "workload": {"file": YAML}, "gpus": 12},
                                                               {"name": "B", "workload": {"file": YAML}, "gpus": 4}]))
    a, b = jobs(exp, tmp_path, exp.topology.build())
    assert (a.hosts, b.hosts) == (a_hosts, b_hosts)
    with pytest.raises(InputError) as exc:  # 20 GPUs on 8 hosts of 2: only 16
        jobs(from_dict(spec(topology=hpn, jobs=[{"name": "A", "workload": {"file": YAML}, "gpus": 20}])),
             tmp_path, exp.topology.build())
    assert exc.value.field == "jobs[].gpus"


def test_a_simai_file_runs_on_as_many_gpus_as_it_was_written_for(tmp_path):
    shutil.copy(DATA / SIMAI, tmp_path)
    exp = from_dict(spec(jobs=[{"name": "A", "workload": {"simai": SIMAI}, "hosts": "h0,h1,h2"}]))
    with pytest.raises(InputError) as exc:  # 3 hosts of 4 GPUs for a 16-GPU file
        jobs(exp, tmp_path, exp.topology.build())
    assert (exc.value.field, exc.value.value) == ("jobs[0].workload.simai", 16)
    assert "at least 4 hosts" in exc.value.line() and "\n" not in exc.value.line()
