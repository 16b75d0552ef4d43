"""From an experiment to what runs, in one pass: the typed `Plan` that `hpnlab run`, `hpnlab validate`,
`hpnlab traffic run` and the predictions share.

Per variant: the topology built and checked against the machine and the spec, the workload files read once,
the jobs scheduled at real size for `auto` and at the emulated size to run, the failure schedule expanded and
the transport chosen. A repetition differs from repetition 0 only in its seed (`Plan.at`): its own random
failures and campaign, the same jobs, numbers and transport, so that the repetitions compare.

Nothing here touches the system; the transport's choice reads the capability probe.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from testbed.cluster.spec import ClusterSpec
from testbed.net.preflight import require_emulable
from testbed.system.capabilities import probe
from topos.errors import InputError
from topos.model import Topology
from traffic.transports import choose

from .failure_spec import GRAY
from .failures import Event, expand, host_links_down_in_any_rep
from .jobs import Auto, Item, Job, Workloads, channels_of, jobs, resolve_auto
from .spec import CollectiveSpec, Experiment, check_against

log = logging.getLogger(__name__)

QUICK_OUTAGES = 3  # a campaign's outages in --quick


@dataclass(frozen=True)
class Plan:
    """One variant's repetition as it will run, every check passed."""

    label: str
    exp: Experiment  # the repetition, with numbers where the file said auto
    topo: Topology
    auto: Auto  # what scale and dilation auto chose, and why
    transport: str  # the kind the agents run: tcp, roce or rdma
    jobs: list[Job]
    events: list[Event]  # the failure schedule of this repetition
    channels: int  # connections per peer
    rep: int = 0
    notes: list[str] = field(default_factory=list)  # what the plan chose for the user and why

    @property
    def items(self) -> list[Item]:
        return [it for j in self.jobs for it in j.items]

    def at(self, rep: int) -> Plan:
        """Repetition `rep`: its own seed, so its own random failures and campaign; jobs of its own (Crux sets
        their traffic class while running)."""
        if rep == self.rep:
            return self
        exp = self.exp.repetition(rep - self.rep)
        return replace(self, exp=exp, rep=rep, events=expand(exp, self.topo), jobs=[replace(j) for j in self.jobs])


def plan(exp: Experiment, base: Path, reduced: bool = False, cluster: ClusterSpec | None = None) -> list[Plan]:
    """Every variant's repetition 0. `reduced`: at --quick size (quick); `base`: where relative workload files
    are (the spec's folder); `cluster`: the servers the networks spread over."""
    variants = exp.expand()  # variants may bring jobs
    failing = any(v.failures or v.random_failures for _label, v in variants)
    return [plan_variant(label, quick(v, keep_traffic=failing) if reduced else v, base, cluster)
            for label, v in variants]


def plan_variant(label: str, exp: Experiment, base: Path, cluster: ClusterSpec | None = None) -> Plan:
    """One variant (an experiment without variants) as repetition 0 will run."""
    topo = exp.topology.build()
    require_emulable(topo, len(cluster.servers) if cluster is not None else 1)
    check_against(exp, topo)
    _refuse_gray_on_a_cluster(exp, cluster)
    _refuse_ingress_pfc_on_a_cluster(exp, cluster)
    files = Workloads(base)
    kind, notes = _transport(exp, topo, cluster)
    resolved, auto = resolve_auto(exp, files, topo, kind)
    job_list = jobs(resolved, files, topo)
    items = [it for j in job_list for it in j.items]
    if not any(sched is not None for _op, sched in items):  # nothing to measure
        raise InputError(f"variant '{label}': the workload sends nothing over the network ({len(items)} op(s), "
                         "none between hosts: rows of NONE, counts of 0, or every group inside one host)",
                         "give a workload with at least one collective between hosts", field="workload", value=label)
    return Plan(label, resolved, topo, auto, kind, job_list, expand(resolved, topo), channels_of(resolved, topo),
                notes=auto.lines() + notes)


def _refuse_gray_on_a_cluster(exp: Experiment, cluster: ClusterSpec | None) -> None:
    gray = [f.action for f in exp.failures if f.action in GRAY]
    if cluster is not None and gray:
        raise InputError("a lossy, degraded or storming link is set on the link's two shaped ports, which must be "
                         "on this server", "run it on one server (leave --cluster out)", field="failures[].action",
                         value=gray[0])


def _refuse_ingress_pfc_on_a_cluster(exp: Experiment, cluster: ClusterSpec | None) -> None:
    pfc = exp.qos.pfc
    if cluster is not None and pfc.enabled and pfc.model == "ingress":
        raise InputError("PFC model ingress counts frames by the switch port they came in by, which the links "
                         "between servers do not carry yet", "model: egress, or run it on one server",
                         field="qos.pfc.model", value="ingress")


def _transport(exp: Experiment, topo: Topology, cluster: ClusterSpec | None) -> tuple[str, list[str]]:
    """The transport every repetition runs on (chosen from the host links any of them takes down), and why,
    where `auto` had a choice to make."""
    caps, failing = probe(), host_links_down_in_any_rep(exp, topo)
    if not caps.root and exp.transport in ("auto", "rdma"):  # soft-RoCE is probed by root only
        return "tcp", [f"transport {exp.transport}: soft-RoCE between namespaces is probed as root only, where "
                       "the run decides"]
    rxe = caps.rxe_in_netns
    kind = choose(exp.transport, rxe, len(cluster.servers) if cluster else 1, failing, caps.rxe_failure)
    if exp.transport == "auto" and rxe and failing:  # choose took tcp for them
        return kind, [f"transport auto: tcp, not rdma: the failures take host link {failing[0]} down, and "
                      "soft-RoCE's queue pairs end with their port"]
    return kind, []


def quick(exp: Experiment, keep_traffic: bool = False) -> Experiment:
    """The reduced size CI runs: one repetition, collectives a quarter of the size and 2 iterations at most.

    An experiment with scheduled failures keeps its traffic: its failures are timed against it, and a
    shrunken job could end before the first one fires (a single-ToR job would then not halt). So does each
    variant of an experiment where some variant has failures (`keep_traffic`): a variant without them is the
    healthy run the others are measured against. Its `quick_iters`, where the file gives it, caps the
    iterations only (the author knows when the last failure fires).
    """
    if exp.failures or exp.random_failures or keep_traffic:
        if exp.quick_iters is None:
            return exp.model_copy(update={"repetitions": 1})
        n = exp.quick_iters
        return _shrink(exp, lambda c: c.model_copy(update={"iters": min(c.iters, n)}), lambda k: min(k, n))
    if exp.campaign is not None:  # its jobs run until its last outage is repaired: fewer outages, same traffic
        return exp.model_copy(update={"repetitions": 1, "campaign": exp.campaign.model_copy(
            update={"outages": min(exp.campaign.outages, QUICK_OUTAGES)})})

    def small(c):
        sizes = [max(1, n // 4) for n in c.sizes]
        return c.model_copy(update={"size": sizes if isinstance(c.size, list) else sizes[0], "iters": min(c.iters, 2)})

    return _shrink(exp, small, lambda k: min(k, 2))


def _shrink(exp: Experiment, collective: Callable[[CollectiveSpec], CollectiveSpec],
            iterations: Callable[[int], int]) -> Experiment:
    """One repetition, each collective (a job's or the workload's) through `collective`, each job's workload
    file to `iterations` of its training iterations."""
    def job(j):
        if j.collective is not None:
            return j.model_copy(update={"collective": collective(j.collective)})
        return j.model_copy(update={"workload": j.workload.model_copy(
            update={"iterations": iterations(j.workload.iterations)})})

    upd: dict = {"repetitions": 1, "jobs": [job(j) for j in exp.jobs]}
    if exp.workload is not None and exp.workload.collective is not None:
        upd["workload"] = exp.workload.model_copy(update={"collective": collective(exp.workload.collective)})
    return exp.model_copy(update=upd)
