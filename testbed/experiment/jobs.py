"""What an experiment replays: its jobs, each a name, a traffic class and a list of (op, schedule) items.

Pure: schedules are built from the spec and the topology, at the emulated size
(real size / scale). `hpnlab run` and `hpnlab traffic run` both come through here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from testbed.qos.scale import ScaleChoice, choose_scale, offered_load
from topos.model import Topology
from traffic.collectives import Schedule, build_schedule
from traffic.iteration import Step
from traffic.replay import op_schedule
from traffic.workload import Op, load_simai, load_yaml, parse_size, select_ranks

from .spec import CollectiveSpec, Experiment, resolve

Item = tuple[Op, Schedule | None]  # None: the op stays inside hosts (NVLink) and is not replayed


@dataclass
class Job:
    name: str
    dscp: int  # its traffic class on the wire
    items: list[Item]  # every op it replays, in order (all iterations)
    # a training job: one iteration's steps with their schedules (compute, then communication), run
    # `iterations` times by Replayer.run_iteration; empty: `items` back to back
    iteration: list[tuple[Step, Schedule | None]] = field(default_factory=list)
    iterations: int = 1


def collective_items(c: CollectiveSpec, scale: float, topo: Topology, where: str = "workload.collective") -> list[Item]:
    emu = max(1, int(parse_size(c.size, f"{where}.size") / scale))
    sched = build_schedule(c.op, select_ranks(c.ranks, topo, f"{where}.ranks"), emu, c.algorithm)
    return [(Op(c.op, emu, tuple(sched.ranks), sched.algorithm, label=f"{c.op}/{sched.algorithm}"), sched)] * c.iters


def workload_job(exp: Experiment, base: Path, topo: Topology, dscp: int) -> Job:
    """The spec's workload as one job: a collective's iterations, or a workload file's ops; a file whose
    iteration has compute (or communication overlapping it) runs as training iterations."""
    wl = exp.workload
    if wl.collective is not None:
        return Job("job", dscp, collective_items(wl.collective, exp.qos.scale, topo))
    w = load_yaml(resolve(exp, base, "yaml_file")) if wl.yaml_file else load_simai(resolve(exp, base, "simai"))
    w = w.scaled(exp.qos.scale)
    hosts, rails = [h.name for h in topo.hosts], topo.hosts[0].nics
    if w.compute_s > 0 or any(s.overlap and s.op is not None for s in w.iteration):
        steps = [(s, None if s.op is None else op_schedule(s.op, hosts, rails, w.plan)) for s in w.iteration]
        items = [(s.op, sched) for s, sched in steps if s.op is not None] * wl.iterations
        return Job("job", dscp, items, steps, wl.iterations)
    items = [(o, op_schedule(o, hosts, rails, w.plan)) for o in w.ops for _ in range(o.repeat)]
    return Job("job", dscp, items * wl.iterations)


def jobs(exp: Experiment, base: Path, topo: Topology) -> list[Job]:
    """The experiment's jobs side by side, or its workload as one job in the lossless class."""
    dscp = {"lossless": exp.qos.lossless_dscp, "high": exp.qos.high_dscp, "default": 0}
    if exp.jobs:
        return [Job(j.name, dscp[j.priority], collective_items(j.collective, exp.qos.scale, topo,
                                                               f"jobs[{i}].collective"))
                for i, j in enumerate(exp.jobs)]
    return [workload_job(exp, base, topo, dscp["lossless"])]


def offered(job_list: list[Job], topo: Topology) -> float:
    """Real bits/s the fabric carries at most: per step, the smaller of what its senders' and its receivers'
    NICs can move (an incast is held to its receiver), the busiest step of each job, the jobs added up."""
    total = 0.0
    for job in job_list:
        busiest = 0.0
        for _o, sched in job.items:
            for step in sched.steps if sched is not None else ():
                srcs = sorted({f.src for f in step})
                dsts = sorted({f.dst for f in step})
                busiest = max(busiest, min(offered_load(topo, srcs), offered_load(topo, dsts)))
        total += busiest
    return total


def items(exp: Experiment, base: Path, topo: Topology) -> list[Item]:
    return [it for j in jobs(exp, base, topo) for it in j.items]


def resolve_scale(exp: Experiment, base: Path, topo: Topology) -> tuple[Experiment, ScaleChoice | None]:
    """The experiment with a numeric scale: `auto` becomes the scale that fits its workload's offered load
    (`offered`) into this machine's budget (testbed/qos/scale.py)."""
    if exp.qos.scale != "auto":
        return exp, None
    unscaled = exp.model_copy(update={"qos": exp.qos.model_copy(update={"scale": 1.0})})  # who sends when: scale-free
    choice = choose_scale(offered(jobs(unscaled, base, topo), topo), hosts=len(topo.hosts))
    return exp.model_copy(update={"qos": exp.qos.model_copy(update={"scale": choice.scale})}), choice
