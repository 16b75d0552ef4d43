"""Bytes a collective puts on the wire, written out from its definition (pure).

Independent of the flows traffic/collectives.py schedules: a run's delivered bytes are checked against both
the schedule's sum (what the receivers were told to expect) and this, so a schedule that lost, doubled or
misrouted a chunk cannot agree with itself unnoticed. Per group of n ranks, `size` as in nccl-tests:

    all-reduce            2 (n-1) size   (n ranks each send 2 (n-1)/n of the buffer)
    hierarchical          2 (hosts-1) size  (one ring per rail on size/rails; NVLink parts carry nothing)
    all-gather, reduce-scatter, all-to-all, broadcast   (n-1) size
    send/recv             n/2 size        (pairs)
    incast                size            (the schedule's size is what the receiver gets)
    among GPUs, several per server: only the hops between servers (between_servers)
"""

from __future__ import annotations


def wire_bytes(op: str, algorithm: str, ranks: int, size: int, groups: int = 1, hosts: int | None = None) -> int:
    n = ranks // groups
    if op == "allreduce" and algorithm == "hierarchical":
        if hosts is None:
            raise ValueError("a hierarchical all-reduce's closed form needs its hosts")
        per = 2 * (hosts - 1) * size
    elif op == "allreduce":
        per = 2 * (n - 1) * size
    elif op in ("allgather", "reducescatter", "alltoall", "broadcast"):
        per = (n - 1) * size
    elif op == "sendrecv":
        per = n // 2 * size
    elif op == "incast":
        per = size
    else:
        raise ValueError(f"no closed form for {op!r}")
    return groups * per


def between_servers(op: str, n: int, per_host: int, size: int) -> int:
    """A collective among n GPUs, `per_host` in each server, ring order visiting a server's GPUs in turn: the
    bytes of the hops that leave a server (the last GPU of each), the rest being NVLink. Chunks as the ring
    splits the buffer (n parts differing by at most a byte): a ring all-gather's hop i carries every chunk but
    chunk i+1, an all-reduce's hop every chunk twice but chunks i+1 and i+2; an all-to-all sends every block
    to the n - per_host GPUs of other servers."""
    base, extra = divmod(size, n)

    def chunk(j: int) -> int:
        return base + (1 if j % n < extra else 0)

    leaving = [(k + 1) * per_host - 1 for k in range(n // per_host)]
    if op == "allreduce":
        return sum(2 * size - chunk(i + 1) - chunk(i + 2) for i in leaving)
    if op in ("allgather", "reducescatter"):
        return sum(size - chunk(i + 1) for i in leaving)
    if op == "alltoall":
        return (n - per_host) * size
    raise ValueError(f"no closed form for {op!r} among GPUs")


def of(schedule) -> int:
    """The closed form for a schedule's shape (op, algorithm, ranks, size, groups), not its flows."""
    if schedule.gpus:
        return schedule.groups * between_servers(schedule.op, schedule.gpus, schedule.gpus_per_host, schedule.size)
    hosts = len({h for h, _nic in schedule.ranks})
    return wire_bytes(schedule.op, schedule.algorithm, len(schedule.ranks), schedule.size, schedule.groups, hosts)
