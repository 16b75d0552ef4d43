"""A training iteration as each rank's own program, chained in the agents (pure: no sockets, no clocks).

NCCL runs a rank's collectives on one stream: its next op starts once its own part of the previous one is
done and the compute before it is over, with no process in between. Coordinating every op from one process
instead (hand the op out, wait for the reports, hand the next out) costs each op a round trip through
the coordinator: milliseconds of the emulator's own time per op, which a workload of thousands of small ops
pays thousands of times. So the coordinator hands every rank its whole iteration at once, one `Stage` per op
the rank takes part in, and only collects timestamps; the agents run the stages (traffic/agent.py).

A rank's own part of an op is done when every piece it sends has been acknowledged by its receiver and every
piece addressed to it has arrived. Per rank, with `gpu` (when its compute so far ends) and `net` (when its
part of the op before ends), as traffic/iteration.predict does for the whole job:

    gpu += compute before the op        (the compute-only steps and the ops it takes no part in included)
    if an overlapping op is pending:    net = its end
    release the op at max(gpu, net)
    a blocking op:                      gpu = net = its end; an overlapping one stays pending
    after the last stage:               gpu += the trailing compute; the rank ends at max(gpu, net)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .collectives import Rank
from .plan import Piece


@dataclass
class Stage:
    op: int  # the op's index in the iteration
    compute_s: float  # the rank's compute between its previous stage (or the iteration's start) and this op
    overlap: bool  # the op runs on under the compute that follows (weight gradients)
    sends: list[Piece] = field(default_factory=list)  # in sending order
    expects: list[str] = field(default_factory=list)  # ids of the pieces it receives


@dataclass
class Program:
    rank: Rank
    stages: list[Stage] = field(default_factory=list)
    tail_s: float = 0.0  # compute after its last stage


def rank_programs(steps: list[tuple[float, bool, list[Piece] | None]]) -> dict[Rank, Program]:
    """Each rank's program from the iteration's steps in order: (compute, overlap, the op's pieces or None for
    compute only). Every rank computes every step (data parallelism: the same model on every GPU)."""
    ranks = list(dict.fromkeys(r for _c, _o, ps in steps for p in ps or () for r in (p.src, p.dst)))
    progs = {r: Program(r) for r in ranks}
    for k, (compute, overlap, ps) in enumerate(steps):
        for prog in progs.values():
            prog.tail_s += compute  # until the rank's next stage takes it
        for p in ps or ():
            for r in (p.src, p.dst):
                prog = progs[r]
                if not prog.stages or prog.stages[-1].op != k:
                    prog.stages.append(Stage(k, prog.tail_s, overlap))
                    prog.tail_s = 0.0
            progs[p.src].stages[-1].sends.append(p)
            progs[p.dst].stages[-1].expects.append(p.id)
    return progs


def op_spans(released: dict[Rank, dict[int, float]], arrived: dict[str, float],
             pieces_of: dict[int, list[Piece]]) -> dict[int, tuple[float, float]]:
    """Per op: (its start, its end): the first release of it by any rank, the last arrival of its pieces."""
    out = {}
    for k, ps in pieces_of.items():
        starts = [times[k] for times in released.values() if k in times]
        out[k] = (min(starts), max(arrived[p.id] for p in ps))
    return out
