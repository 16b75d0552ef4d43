"""One planning pass (testbed/experiment/planning.py): what `run`, `validate` and `traffic run` share."""

import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed.cluster.spec import load_cluster
from testbed.experiment import jobs as jobs_module
from testbed.experiment import planning
from testbed.experiment.planning import plan
from testbed.experiment.spec import load
from topos.errors import InputError

DATA = Path(__file__).parents[1] / "data"
BASE = "name: t\nworkload: {collective: {op: allreduce, size: 1GB}}\n"
CLUSTER = """
servers:
  - {name: s1, ssh: 127.0.0.1:2201, key: id_test, tunnel_ip: 192.168.7.1}
  - {name: s2, ssh: 127.0.0.1:2202, key: id_test, tunnel_ip: 192.168.7.2}
"""


def write(folder: Path, text: str, name: str = "e.yaml") -> Path:
    (folder / name).write_text(text)
    return folder / name


def caps(rxe: bool) -> SimpleNamespace:
    return SimpleNamespace(root=True, rxe_in_netns=rxe, rxe_failure=None if rxe else "no rdma_rxe")


def test_a_workload_file_is_read_once_however_often_it_is_scheduled(tmp_path, monkeypatch):
    shutil.copy(DATA / "simai_dp16_two_layers.txt", tmp_path / "w.txt")
    reads = []
    real = jobs_module.load_simai
    monkeypatch.setattr(jobs_module, "load_simai", lambda path: reads.append(path) or real(path))
    exp = load(write(tmp_path, "name: t\nworkload: {simai: w.txt}\ntime: {dilation: auto}\nqos: {scale: auto}\n"
                               "variants: [{label: a, routing: ecmp}, {label: b, routing: precise}]\n"))
    plans = plan(exp, tmp_path)
    assert [p.label for p in plans] == ["a", "b"]
    assert len(reads) == 2  # once per variant: scheduled at real size for auto and at the emulated size to run
    for p in plans:
        assert p.auto.time is not None and p.auto.scale is not None
        assert p.exp.time.dilation == p.auto.time.dilation and p.exp.qos.scale == p.auto.scale.scale
        assert [o for o, _s in p.items] == [o for o, _s in planning.jobs(p.exp, tmp_path, p.topo)[0].items]


def test_validate_chooses_the_transport_as_run_does(tmp_path, monkeypatch):
    down = "failures: [{at: 1, action: down, link: 'h0:nic0:p0'}]\n"
    monkeypatch.setattr(planning, "probe", lambda: caps(rxe=True))
    (p,) = plan(load(write(tmp_path, BASE + "transport: auto\n" + down)), tmp_path)
    link = p.topo.find_link("h0:nic0:p0").name
    assert p.transport == "tcp" and link in p.notes[-1]  # soft-RoCE's queue pairs end with their port
    with pytest.raises(InputError) as exc:
        plan(load(write(tmp_path, BASE + "transport: rdma\n" + down)), tmp_path)
    assert exc.value.field == "transport" and link in exc.value.line()
    monkeypatch.setattr(planning, "probe", lambda: caps(rxe=False))
    with pytest.raises(InputError, match="needs soft-RoCE") as exc:
        plan(load(write(tmp_path, BASE + "transport: rdma\n")), tmp_path)
    assert exc.value.field == "transport"
    (p,) = plan(load(write(tmp_path, BASE)), tmp_path)
    assert p.transport == "tcp" and not any("transport" in n for n in p.notes)


def test_validate_refuses_what_a_cluster_cannot_run(tmp_path, hpnlab):
    (tmp_path / "id_test").write_text("not a real key")
    os.chmod(tmp_path / "id_test", 0o600)
    cluster = write(tmp_path, CLUSTER, "cluster.yaml")
    lossy = write(tmp_path, BASE + "failures: [{at: 1, action: lossy, link: 'h0:nic0:p0', loss: 0.001}]\n")
    with pytest.raises(InputError) as exc:
        plan(load(lossy), tmp_path, cluster=load_cluster(cluster))
    assert exc.value.field == "failures[].action"
    assert plan(load(lossy), tmp_path)[0].events  # on one server it plans
    ingress = write(tmp_path, BASE + "qos: {pfc: {model: ingress}}\n", "ingress.yaml")
    with pytest.raises(InputError) as exc:
        plan(load(ingress), tmp_path, cluster=load_cluster(cluster))
    assert exc.value.field == "qos.pfc.model" and "between servers" in exc.value.line()
    r = hpnlab("validate", str(lossy), "--cluster", str(cluster))
    assert r.returncode == 2 and "failures[].action" in r.stderr and "Traceback" not in r.stderr


def test_a_repetition_draws_its_own_failures_on_the_same_jobs(tmp_path):
    exp = load(write(tmp_path, BASE + "repetitions: 3\nseed: 5\nhorizon_s: 60\nrandom_failures: "
                                      "{link_down_per_min: 6, repair_after: 1, kinds: [tor-agg]}\n"))
    (p,) = plan(exp, tmp_path)
    again = p.at(2)
    assert (p.rep, p.exp.seed, again.rep, again.exp.seed) == (0, 5, 2, 7)
    assert again.events and again.events != p.events  # its own draw
    assert again.at(0).events == p.events and again.at(0).exp.seed == 5
    assert [o for o, _s in again.items] == [o for o, _s in p.items] and again.transport == p.transport
    assert all(a is not b for a, b in zip(again.jobs, p.jobs, strict=True))  # Crux sets a job's class per run
