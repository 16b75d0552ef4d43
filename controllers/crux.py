"""A Crux-style scheduler for several training jobs on one fabric (Cao et al., SIGCOMM '24). Pure.

Crux's insight: over a long run, cluster GPU utilization equals the GPU intensity
carried over the bottleneck links, so the flows of the jobs with the highest
GPU intensity should go first. Three steps, each after the paper:

1. GPU intensity I_j = W_j / t_j (its Equation 2): W_j the job's computation per
   iteration (here GPU-seconds: GPUs x compute seconds per GPU), t_j the longest
   time any one link needs for the job's bytes of an iteration (bytes on the
   link / its rate), on the paths the job's flows take.
2. Path selection (its §4.1): jobs in decreasing intensity each place their
   flows, least-loaded first (the precise-routing greedy), around the flows of
   the more intense jobs already placed, so the most intense jobs get the
   least-contended paths.
3. Priority assignment and compression (§4.2-4.3): P_j = k_j x I_j; two jobs
   contend when their paths share a directed link; a job's level is one below
   the lowest level of the more important jobs it contends with (jobs that share
   nothing share a level), and when that needs more levels than the fabric's
   lossless priorities, the two adjacent levels whose merging puts the least
   priority weight of contending jobs together are merged, until it fits.

Simplified here, and said so: k_j (the paper fits it per job from how its
compute and communication overlap) is 1 - the share of the job's communication
that overlaps its compute; compression merges adjacent levels greedily instead
of the paper's search over the contention DAG; W_j is compute time, not FLOPs
(jobs on the same GPU type compare the same way).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .precise import Assignment, FlowSpec, Hop, assign, path_links
from .routing import RoutingGraph, Tables


@dataclass(frozen=True)
class JobDemand:
    """What a job tells the scheduler: its GPUs, compute and one iteration's flows (with bytes)."""

    name: str
    gpus: int
    compute_s: float  # per GPU and iteration
    flows: tuple[tuple[FlowSpec, int], ...]  # (flow, bytes per iteration)
    overlap: float = 0.0  # share of its communication hidden under its compute (0..1)


@dataclass
class Schedule:
    order: list[str]  # jobs by priority, most important first
    intensity: dict[str, float]  # I_j
    priority: dict[str, float]  # P_j = k_j x I_j
    level: dict[str, int]  # 0 = highest lossless priority
    paths: Assignment = field(default_factory=Assignment)
    contends: set[frozenset[str]] = field(default_factory=set)


def _link_bytes(job: JobDemand, a: Assignment) -> dict[Hop, int]:
    out: dict[Hop, int] = {}
    for f, nbytes in job.flows:
        p = a.paths.get(f.key)
        if p is not None:
            for h in path_links(f, p):
                out[h] = out.get(h, 0) + nbytes
    return out


def intensity(job: JobDemand, link_bytes: dict[Hop, int], rate_bps) -> float:
    """W_j / t_j; `rate_bps(link)` is a directed link's rate. A job that sends nothing is infinitely intense."""
    t = max((8 * b / rate_bps(h) for h, b in link_bytes.items()), default=0.0)
    w = job.gpus * job.compute_s
    return float("inf") if t == 0 else w / t


def schedule(graph: RoutingGraph, tables: Tables, jobs: Iterable[JobDemand], rate_bps, levels: int) -> Schedule:
    """Paths, priorities and lossless-priority levels for `jobs` (rate_bps(link) -> bit/s)."""
    if levels < 1:
        raise ValueError("levels: at least one lossless priority")
    jobs = list(jobs)
    # intensity needs paths and path selection needs the order: first alone on an empty fabric (t_j as if
    # uncontended), then placed in that order, then measured again on the chosen paths
    alone = {j.name: intensity(j, _link_bytes(j, assign(graph, tables, [f for f, _ in j.flows])), rate_bps)
             for j in jobs}
    placed = Assignment()
    for j in sorted(jobs, key=lambda j: (-alone[j.name], j.name)):
        a = assign(graph, tables, [f for f, _ in j.flows], load=placed.load)
        placed = Assignment(paths={**placed.paths, **a.paths}, load=a.load)
    link_bytes = {j.name: _link_bytes(j, placed) for j in jobs}
    inten = {j.name: intensity(j, link_bytes[j.name], rate_bps) for j in jobs}
    prio = {j.name: (1.0 - min(max(j.overlap, 0.0), 1.0)) * inten[j.name] for j in jobs}
    order = sorted(prio, key=lambda n: (-prio[n], n))
    contends = {frozenset((a, b)) for i, a in enumerate(order) for b in order[i + 1:]
                if set(link_bytes[a]) & set(link_bytes[b])}
    return Schedule(order, inten, prio, compress(order, contends, prio, levels), placed, contends)


def compress(order: list[str], contends: set[frozenset[str]], prio: dict[str, float], levels: int) -> dict[str, int]:
    """Levels by contention layering (most important first), merged down to `levels`."""
    level: dict[str, int] = {}
    for n in order:
        above = [level[m] for m in level if frozenset((n, m)) in contends]
        level[n] = max(above, default=-1) + 1
    layers = [[n for n in order if level[n] == k] for k in range(max(level.values(), default=-1) + 1)]

    def cost(a: list[str], b: list[str]) -> float:  # priority weight that would no longer be separated
        return sum(min(prio[x], prio[y]) for x in a for y in b if frozenset((x, y)) in contends)

    while len(layers) > levels:
        k = min(range(len(layers) - 1), key=lambda i: (cost(layers[i], layers[i + 1]), -i))
        layers[k:k + 2] = [layers[k] + layers[k + 1]]
    return {n: k for k, layer in enumerate(layers) for n in layer}
