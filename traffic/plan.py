"""A schedule turned into each rank's own work, with dependencies instead of a barrier per step (pure).

NCCL has no global barrier between the steps of a collective: a rank sends
step k's chunk as soon as it holds what step k needs, which in ring-style
algorithms is what it received in step k-1. Here every piece of a flow
carries `after`, the ids of the pieces this rank must have received first:

- a piece of step k on channel c from rank r waits for the step k-1 pieces
  that arrive at r on channel c (channels are independent, like NCCL's rings);
  if none arrive on that channel (a flow too small to split), for all that
  arrive at r in step k-1;
- an all-to-all's pieces wait for nothing (`Schedule.independent_steps`): each block is the sender's own
  data, and NCCL posts the sends and receives to every peer in one group;
- with `pipeline` P > 1 each channel's share is cut into P chunks, and chunk j
  of step k waits only for chunk j of step k-1: the first chunks of a step go
  out while the last ones of the previous step are still on the wire.

The agents run these pieces per connection, in order, each once its
dependencies arrived; the coordinating process only hands the plan out and
collects completions. The pieces add up to the schedule's flows exactly, so
the bytes delivered stay the closed forms.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .collectives import Rank, Schedule


@dataclass(frozen=True)
class Piece:
    id: str
    step: int
    src: Rank
    dst: Rank
    channel: int
    chunk: int
    bytes: int
    after: tuple[str, ...]  # ids of pieces `src` must have received before this one may start


def split(total: int, parts: int) -> list[int]:
    """`total` bytes in `parts` near-equal shares (the first ones one byte larger)."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def pieces(schedule: Schedule, channels: int, op_id: str, pipeline: int = 1) -> list[Piece]:
    """Every piece of the schedule, in step order (the order each connection sends them)."""
    out: list[Piece] = []
    arrived: dict[tuple[Rank, int, int], list[str]] = {}  # (rank, channel, chunk) -> ids received last step
    arrived_any: dict[Rank, list[str]] = {}
    for k, step in enumerate(schedule.steps):
        now: dict[tuple[Rank, int, int], list[str]] = {}
        now_any: dict[Rank, list[str]] = {}
        for i, f in enumerate(step):
            for c, per_channel in enumerate(split(f.bytes, channels)):
                for j, nbytes in enumerate(split(per_channel, pipeline)):
                    if not nbytes:
                        continue
                    pid = f"{op_id}.{k}.{i}.{c}.{j}"
                    after = () if schedule.independent_steps else (arrived.get((f.src, c, j))
                                                                   or arrived_any.get(f.src, []))
                    out.append(Piece(pid, k, f.src, f.dst, c, j, nbytes, tuple(after)))
                    now.setdefault((f.dst, c, j), []).append(pid)
                    now_any.setdefault(f.dst, []).append(pid)
        arrived, arrived_any = now, now_any
    return out


def per_connection(ps: list[Piece], key: Callable[[Piece], tuple]) -> dict[tuple, list[Piece]]:
    """Pieces grouped by the connection that carries them, each list in sending order."""
    out: dict[tuple, list[Piece]] = {}
    for p in ps:
        out.setdefault(key(p), []).append(p)
    return out


def step_seconds(ps: list[Piece], started: dict[str, float], ended: dict[str, float]) -> list[float]:
    """Per step: from its first piece's start to its last piece's arrival (steps overlap when pipelined)."""
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    for p in ps:
        first[p.step] = min(first.get(p.step, started[p.id]), started[p.id])
        last[p.step] = max(last.get(p.step, ended[p.id]), ended[p.id])
    return [last[k] - first[k] for k in sorted(first)]
