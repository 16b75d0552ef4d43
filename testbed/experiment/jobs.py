"""What an experiment replays: its jobs, each a name, a traffic class and a list of (op, schedule) items.

Pure: schedules are built from the spec and the topology, at the emulated size
(real size / scale). `hpnlab run` and `hpnlab traffic run` both come through here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from controllers.placement import place
from testbed.qos.cpu import fit, max_scale
from testbed.qos.ports import switch_ports
from testbed.qos.scale import (
    Budget,
    DilationChoice,
    IterationLoad,
    OpTime,
    ScaleChoice,
    choose_dilation,
    choose_scale,
    load_budget,
    offered_load,
)
from topos.addressing import nic_address
from topos.errors import InputError
from topos.model import Topology
from topos.server import nvlink_of
from traffic import chakra
from traffic.collectives import Schedule, build_schedule
from traffic.iteration import Step, predict
from traffic.nvlink import nvlink_seconds
from traffic.replay import op_schedule
from traffic.simai_analytical import Estimate, busbw_of, estimate
from traffic.workload import Op, Workload, in_host_gpus, load_simai, load_yaml, select_ranks

from .spec import CollectiveSpec, Experiment, JobSpec, WorkloadSpec, resolve

Item = tuple[Op, Schedule | None]  # None: the op stays inside hosts (NVLink) and is not replayed


@dataclass
class Job:
    name: str
    dscp: int  # its traffic class on the wire
    items: list[Item]  # every op it replays, in order (all iterations)
    # a training job: one iteration's steps with their schedules (compute, then communication), run
    # `iterations` times by Replayer.run_iteration; empty: `items` back to back (`iterations` of them)
    iteration: list[tuple[Step, Schedule | None]] = field(default_factory=list)
    iterations: int = 1
    hosts: list[str] = field(default_factory=list)  # where it runs (every host it sends from or to)
    simai_analytical: Estimate | None = None  # a SimAI file's iteration as SimAI-Analytical would estimate it

    @property
    def compute_s(self) -> float:
        return sum(s.compute_s for s, _sched in self.iteration)

    @property
    def one_iteration(self) -> list[tuple[Step, Schedule | None]]:
        """One iteration's steps with their schedules; a job without compute: its items of one iteration."""
        return self.iteration or [(Step(0.0, o), sched) for o, sched in self.items[:len(self.items) // self.iterations]]


class Workloads:
    """An experiment's workload files, each read and parsed once however often its jobs are scheduled (at real
    size for `auto`, at the emulated size to run): the files in `base`, the spec's folder."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self._read: dict[tuple, Workload] = {}

    def get(self, wl: WorkloadSpec, where: str) -> Workload:
        attr = "yaml_file" if wl.yaml_file else "simai" if wl.simai else "chakra"
        path = resolve(wl, self.base, attr, where)
        key = (path, tuple(sorted((wl.groups or {}).items())) if attr == "chakra" else ())
        if key not in self._read:
            self._read[key] = load_yaml(path) if wl.yaml_file else load_simai(path) if wl.simai else \
                chakra.load(path, wl.groups)
        return self._read[key]


Files = Path | Workloads  # where workload files are read from: a folder, or the reader that has read them


def workloads(files: Files) -> Workloads:
    return files if isinstance(files, Workloads) else Workloads(files)


def collective_items(c: CollectiveSpec, scale: float, topo: Topology, where: str = "workload.collective") -> list[Item]:
    """`iters` of the collective at each of its sizes in turn."""
    ranks = select_ranks(c.ranks, topo, f"{where}.ranks")
    out: list[Item] = []
    for size in c.sizes:
        emu = max(1, int(size / scale))
        sched = build_schedule(c.op, ranks, emu, c.algorithm)
        op = Op(c.op, emu, tuple(sched.ranks), sched.algorithm, label=f"{c.op}/{sched.algorithm}")
        out += [(op, sched)] * c.iters
    return out


def collective_job(name: str, dscp: int, c: CollectiveSpec, scale: float, topo: Topology, where: str) -> Job:
    job = Job(name, dscp, collective_items(c, scale, topo, where), iterations=c.iters)
    job.hosts = list(dict.fromkeys(r[0] for _o, sched in job.items[:1] for r in sched.ranks))  # in ring order
    return job


def workload_job(wl: WorkloadSpec, exp: Experiment, files: Files, topo: Topology, dscp: int, name: str = "job",
                 hosts: list[str] | None = None, where: str = "workload") -> Job:
    """A workload as one job: a collective's iterations, or a workload file's ops on `hosts` (default: every
    host); a file whose iteration has compute, communication overlapping it, or communication inside the
    servers (timed at their NVLink) runs as training iterations."""
    if wl.collective is not None:
        return collective_job(name, dscp, wl.collective, exp.qos.scale, topo, f"{where}.collective")
    real = workloads(files).get(wl, where)
    w = real.scaled(exp.qos.scale)
    hosts = _hosts_for(real, hosts or [h.name for h in topo.hosts], topo, where)
    steps = _placed_steps(real, w, hosts, topo)
    estimated = simai_estimate(real, topo) if wl.simai else None
    if any(s.compute_s > 0 or s.nvlink_s > 0 or (s.overlap and s.op is not None) for s, _sched in steps):
        items = [(s.op, sched) for s, sched in steps if s.op is not None] * wl.iterations
        return Job(name, dscp, items, steps, wl.iterations, hosts, estimated)
    placed = {s.op: sched for s, sched in steps if s.op is not None}  # back to back, in the file's order
    items = [(o, placed[replace(o, repeat=1)]) for o in w.ops for _ in range(o.repeat)]
    return Job(name, dscp, items * wl.iterations, iterations=wl.iterations, hosts=hosts, simai_analytical=estimated)


def _hosts_for(w: Workload, hosts: list[str], topo: Topology, where: str) -> list[str]:
    """The servers a file written for N GPUs (a SimAI header's all_gpus) runs on: the first that hold N GPUs.
    On fewer its groups cannot be laid out as the file says, and it is refused."""
    need = w.plan.get("all_gpus") or w.plan.get("ranks")  # a SimAI header's GPUs, a Chakra trace's ranks
    if need is None:
        return hosts
    per_host = topo.hosts[0].gpus or topo.hosts[0].nics
    servers = -(-need // per_host)
    if servers > len(hosts):
        raise InputError(f"the file is written for {need} GPUs and the job has {len(hosts)} hosts of {per_host} "
                         f"GPUs", f"give it at least {servers} hosts (topology hosts_per_segment, segments_per_pod) "
                         "or more gpus_per_host", field=f"{where}.{'simai' if 'all_gpus' in w.plan else 'chakra'}",
                         value=need)
    return hosts[:servers]


def _placed_steps(real: Workload, w: Workload, hosts: list[str], topo: Topology) -> list[tuple[Step, Schedule | None]]:
    """The scaled workload's steps (its ops back to back when it has no iteration) with their schedules on
    `hosts`; an op that stays inside the servers gets its time at their NVLink, from its real size."""
    rails = topo.hosts[0].nics
    gpus = topo.hosts[0].gpus or rails
    link = nvlink_of(topo.params)

    def steps_of(x: Workload) -> list[Step]:
        return x.iteration or [Step(0.0, o) for o in x.ops for _ in range(o.repeat)]

    out = []
    for r, s in zip(steps_of(real), steps_of(w), strict=True):
        sched = None if s.op is None else op_schedule(s.op, hosts, rails, w.plan, gpus)
        if s.op is not None and sched is None:
            s = replace(s, nvlink_s=nvlink_seconds(r.op.op, r.op.size, in_host_gpus(r.op, w.plan, gpus), link))
        out.append((s, sched))
    return out


def simai_estimate(real: Workload, topo: Topology) -> Estimate:
    """SimAI-Analytical's estimate of a SimAI file's iteration on this topology's servers (traffic/simai_analytical):
    NVLink from the topology's `gpu`, the network's share per GPU from a host's NIC ports."""
    host = topo.hosts[0]
    nic_bps = sum(l.rate_gbps for l in topo.links_of(host.name) if l.kind == "host-tor") * 1e9
    gpus = host.gpus or host.nics
    return estimate(real, busbw_of(nvlink_of(topo.params), nic_bps, gpus, real.plan))


def job_hosts(spec: str, topo: Topology, where: str) -> list[str]:
    """`h0,h1,...`: distinct hosts of the topology."""
    hosts = [h.strip() for h in spec.split(",")]
    for h in hosts:
        if h not in topo.nodes or topo.nodes[h].role != "host":
            raise InputError("no such host", "name hosts of this topology, e.g. h0,h1,h2,h3", field=where, value=h)
    if len(set(hosts)) != len(hosts):
        raise InputError("a host is named twice", "name each host once", field=where, value=spec)
    return hosts


def dscp_of(exp: Experiment, priority: str | int) -> int:
    if isinstance(priority, int):
        return exp.qos.lossless_dscp_of(priority)
    return {"lossless": exp.qos.lossless_dscp, "high": exp.qos.high_dscp, "default": 0}[priority]


def _spec_job(exp: Experiment, files: Files, topo: Topology, i: int, j: JobSpec, hosts: list[str] | None) -> Job:
    dscp = dscp_of(exp, j.priority)
    if j.collective is not None:
        return collective_job(j.name, dscp, j.collective, exp.qos.scale, topo, f"jobs[{i}].collective")
    return workload_job(j.workload, exp, files, topo, dscp, j.name, hosts, f"jobs[{i}].workload")


def placed_hosts(exp: Experiment, topo: Topology) -> dict[str, list[str]]:
    """Hosts of each job that names them, then of each job given as GPUs, placed in file order by the
    experiment's policy around the named ones (controllers/placement.py)."""
    out = {j.name: job_hosts(j.hosts, topo, f"jobs[{i}].hosts") for i, j in enumerate(exp.jobs) if j.hosts}
    asked = [(j.name, j.gpus) for j in exp.jobs if j.gpus is not None]
    if asked:
        try:
            ranks = place(topo, asked, exp.placement, taken=[h for hs in out.values() for h in hs])
        except ValueError as exc:
            raise InputError(str(exc), "ask for fewer GPUs, or a larger topology", field="jobs[].gpus",
                             value=sum(g for _n, g in asked)) from None
        out.update({n: list(dict.fromkeys(h for h, _nic in r)) for n, r in ranks.items()})
    return out


def jobs(exp: Experiment, files: Files, topo: Topology) -> list[Job]:
    """The experiment's jobs side by side, or its workload as one job in the lossless class."""
    files = workloads(files)
    if exp.jobs:
        hosts = placed_hosts(exp, topo)
        return [_spec_job(exp, files, topo, i, j, hosts.get(j.name)) for i, j in enumerate(exp.jobs)]
    return [workload_job(exp.workload, exp, files, topo, exp.qos.lossless_dscp)]


def demand(job: Job, index: int, topo: Topology, scale: float, channels: int = 1) -> dict:
    """A job as the controller's scheduler takes it (POST /jobs): GPUs, compute per iteration, the share of its
    communication hidden under compute, and one iteration's bytes per (source host, destination NIC, channel)
    at real size, each with ports of its own (the scheduler keys flows by their 5-tuple).

    The hidden share is 1 - exposed / total communication of the iteration alone at the NICs' rate
    (traffic/iteration.py's predict): Crux's k_j, the part of a delay in its network time that the job
    feels."""
    steps = job.one_iteration
    pairs: dict[tuple[str, str], int] = {}
    for _step, sched in steps:
        for st in sched.steps if sched is not None else ():
            for f in st:
                key = (f.src[0], nic_address(topo.nodes[f.dst[0]], f.dst[1]).ip)
                pairs[key] = pairs.get(key, 0) + f.bytes
    flows = [{"src": src, "dst": dst, "proto": "tcp", "sport": 1 + channels * k + c, "dport": 10_000 + index,
              "bytes": max(1, int(n * scale / channels))}
             for k, ((src, dst), n) in enumerate(sorted(pairs.items())) for c in range(channels)]

    def alone_s(sched: Schedule) -> float:
        return ideal_s(sched, topo, channels) * scale

    comm = sum(alone_s(sched) for _s, sched in steps if sched is not None)
    alone = predict([replace(s, op=sched) for s, sched in steps], alone_s)
    return {"name": job.name, "gpus": job_gpus(job, topo), "compute_s": round(job.compute_s, 6),
            "overlap": round(1 - alone.exposed_comm_s / comm, 6) if comm else 0.0, "flows": flows}


def job_gpus(job: Job, topo: Topology) -> int:
    return len(job.hosts) * max(1, topo.nodes[job.hosts[0]].gpus) if job.hosts else 1


def nic_bps(topo: Topology, rank: tuple[str, int], channels: int) -> float:
    """What a rank sends at, real bits/s: its NIC's ports in use (one per channel)."""
    ports = [l.rate_gbps for l in topo.links_of(rank[0]) if l.kind == "host-tor" and l.nic == rank[1]]
    return min(ports) * 1e9 * min(channels, len(ports))


def ideal_s(sched: Schedule, topo: Topology, channels: int) -> float:
    """An op alone on the fabric, at its size: the busiest rank's bytes out or in at its NIC's rate."""
    return sched.busiest_s(lambda r: nic_bps(topo, r, channels))


def ideal_iteration_s(job: Job, topo: Topology, channels: int) -> float:
    """One iteration's ideal time, as traffic/iteration.py predicts it (compute, then each op at its ideal
    time); a job of back-to-back ops: one iteration's ops in turn."""
    steps = [replace(s, op=sched) for s, sched in job.one_iteration]
    return predict(steps, lambda sched: ideal_s(sched, topo, channels)).seconds


def virtual_s(job: Job, topo: Topology, channels: int) -> float:
    """A job's ideal time in the fabric: its iterations, or its ops back to back."""
    if job.iteration:
        return ideal_iteration_s(job, topo, channels) * job.iterations
    return sum(ideal_s(sched, topo, channels) for _o, sched in job.items if sched is not None)


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


def items(exp: Experiment, files: Files, topo: Topology) -> list[Item]:
    return [it for j in jobs(exp, files, topo) for it in j.items]


def _real_jobs(exp: Experiment, files: Files, topo: Topology) -> list[Job]:
    """The jobs at their real sizes: who sends what when does not depend on the scale."""
    return jobs(exp.model_copy(update={"qos": exp.qos.model_copy(update={"scale": 1.0})}), files, topo)


def resolve_time(exp: Experiment, real: list[Job], topo: Topology, channels: int) -> tuple[Experiment,
                                                                                           DilationChoice | None]:
    """The experiment with a numeric dilation: `auto` becomes the least that makes this machine's per-op floor
    small against every op of its jobs at real size (`real`) it replays, within the wall-time cap
    (testbed/qos/scale.py)."""
    if exp.time.dilation != "auto":
        return exp, None

    def op_times(items) -> list[OpTime]:
        return [OpTime(f"{o.label or sched.op} of {o.size:,} B", ideal_s(sched, topo, channels), len(sched.steps))
                for o, sched in items if sched is not None]

    # a back-to-back job's every op is a figure of its own; a training job's figure is its iteration
    ops = [t for j in real if not j.iteration for t in op_times(j.items)]
    iterations = [IterationLoad(f"job '{j.name}'", ideal_iteration_s(j, topo, channels),
                                tuple(op_times((s.op, sched) for s, sched in j.iteration)))
                  for j in real if j.iteration]
    if not ops and not any(it.ops for it in iterations):
        if "dilation" not in exp.time.model_fields_set:  # auto by default: nothing to weigh, nothing to dilate
            return exp.model_copy(update={"time": exp.time.model_copy(update={"dilation": 1.0})}), None
        raise InputError("dilation auto weighs the ops that cross the network, and this workload has none",
                         "leave time.dilation out (nothing crosses the network, nothing to dilate); a run also "
                         "needs at least one collective between hosts", field="time.dilation", value="auto")
    span = max(virtual_s(j, topo, channels) for j in real)  # the jobs run side by side
    busy = None
    if exp.time.skip_compute and all(j.iteration for j in real):  # only ops in flight cost wall time
        busy = min(span, sum(t.ideal_s for it in iterations for t in it.ops) * max(j.iterations for j in real))
    choice = choose_dilation(ops, span, hosts=len(topo.hosts), max_wall_s=exp.time.max_wall_s,
                             iterations=[it for it in iterations if it.ops], busy_s=busy, ports=switch_ports(topo))
    return exp.model_copy(update={"time": exp.time.model_copy(update={"dilation": choice.dilation})}), choice


def channels_of(exp: Experiment, topo: Topology) -> int:
    """Connections per peer: as given, else one per port of a dual-ToR NIC."""
    return exp.channels or (2 if topo.params.get("dual_tor") else 1)


@dataclass(frozen=True)
class Auto:
    """What `auto` became, and why (None: the value was given)."""

    scale: ScaleChoice | None = None
    time: DilationChoice | None = None

    def lines(self) -> list[str]:
        return [c.why() for c in (self.time, self.scale) if c is not None]


def resolve_auto(exp: Experiment, files: Files, topo: Topology, transport: str = "tcp") -> tuple[Experiment, Auto]:
    """The experiment with numbers for `auto`: the dilation first (the scale that fits depends on it), both
    from the jobs at real size, scheduled once, within the budget of the transport the run takes."""
    if exp.time.dilation != "auto" and exp.qos.scale != "auto":
        return exp, Auto()
    real = _real_jobs(exp, files, topo)
    channels = channels_of(exp, topo)
    exp, dilation = resolve_time(exp, real, topo, channels)
    load = offered(real, topo)
    budget = fabric_budget(load, topo, transport)
    if dilation is not None:  # D takes what the scale cannot without steps of too few frames (testbed/qos/cpu.py)
        largest = max_scale(step_bytes(real, topo, channels))
        scale = exp.qos.scale if exp.qos.scale != "auto" else largest
        if scale is not None:
            dilation = fit(dilation, load, budget, scale)
            exp = exp.model_copy(update={"time": exp.time.model_copy(update={"dilation": dilation.dilation})})
    exp, scale = _resolve_scale(exp, load, budget, topo)
    return exp, Auto(scale, dilation)


def fabric_budget(load: float, topo: Topology, transport: str = "tcp") -> Budget:
    """This machine's budget for jobs offering `load` (real bits/s, `offered`): held lower the more host ports
    send at once (testbed/qos/cpu.py)."""
    port_bps = next(l.rate_gbps for l in topo.links if l.kind == "host-tor") * 1e9
    return load_budget(hosts=len(topo.hosts), ports=round(load / port_bps), transport=transport)


def step_bytes(real: list[Job], topo: Topology, channels: int) -> list[tuple[float, int]]:
    """Per op that crosses the network: its ideal time and its smallest step's bytes per connection (the
    largest flow of that step over the channels), at real size."""
    return [(ideal_s(sched, topo, channels), min(max(f.bytes for f in st) for st in sched.steps if st) // channels)
            for j in real for _o, sched in j.items if sched is not None and any(sched.steps)]


def _resolve_scale(exp: Experiment, load: float, budget: Budget, topo: Topology) -> tuple[Experiment,
                                                                                         ScaleChoice | None]:
    """The experiment with a numeric scale: `auto` becomes the scale that fits its workload's offered load
    (`offered`, from its jobs at real size) into this fabric's budget (testbed/qos/scale.py), at its dilation,
    which resolve_auto has made a number first."""
    if exp.qos.scale != "auto":
        return exp, None
    choice = choose_scale(load, hosts=len(topo.hosts), dilation=exp.time.dilation, budget=budget)
    return exp.model_copy(update={"qos": exp.qos.model_copy(update={"scale": choice.scale})}), choice
