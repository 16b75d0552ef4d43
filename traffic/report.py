"""Collective results printed the way nccl-tests prints them, so scripts written for nccl-tests read ours (pure).

nccl-tests (NVIDIA/nccl-tests, src/common.cu) prints a three-line column header,
one row per size (`%12li  %12li  %8s  %6s  %6i` for size, count, type, redop and
root, then time, algbw, busbw and #wrong for out-of-place and for in-place), and
ends with `# Out of bounds values` and `# Avg bus bandwidth    : X` (the mean of
the rows' bus bandwidths, GB/s), the line users' scripts grep for.

Here a row is one size of a sweep (the mean over its iterations), in the real
fabric's units: sizes are the real sizes (emulated bytes x scale) and times are
what the emulation measured (bandwidth and sizes are scaled alike, so times are
not), so algbw = size / time is the real fabric's. The emulation moves bytes,
not buffers: the in-place columns repeat the out-of-place ones, and #wrong counts
the 4-byte elements that did not arrive.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections import Counter
from dataclasses import dataclass

from .metrics import busbw_factor

WORD = 4  # float
REDUCING = {"allreduce", "reducescatter", "reduce"}


def _time(us: float) -> str:
    return f"{us:7.0f}" if us >= 10_000 else f"{us:7.1f}" if us >= 100 else f"{us:7.2f}"


def rows(ops: list[dict], scale: float) -> list[dict]:
    """One row per (op, size) in order of first appearance: real size, mean time, algbw and busbw in GB/s, and
    the elements that did not arrive."""
    groups: dict[tuple[str, int], list[dict]] = {}
    for o in ops:
        groups.setdefault((o["op"], o["size"]), []).append(o)
    out = []
    for (op, size), os in groups.items():
        real = round(size * scale)
        t = statistics.mean(o["seconds"] for o in os)
        algbw = real / t / 1e9
        missing = sum(o["bytes_expected"] - o["bytes_delivered"] for o in os)
        out.append({"op": op, "size": real, "count": real // WORD, "time_us": t * 1e6, "algbw": algbw,
                    "busbw": algbw * bus_factor(os[0]), "wrong": math.ceil(missing / WORD), "iters": len(os)})
    return out


def bus_factor(o: dict) -> float:
    """The op's own bus factor (its record's busbw over algbw): a hierarchical or grouped schedule counts the
    ranks of one group, as traffic.metrics does."""
    return o["busbw_bps"] / o["algbw_bps"] if o["algbw_bps"] else busbw_factor(o["op"], o["ranks"])


# NCCL's names for its collectives; alltoall, sendrecv and incast NCCL runs as grouped sends and receives
NCCL_COLL = {"allreduce": "AllReduce", "allgather": "AllGather", "reducescatter": "ReduceScatter",
             "broadcast": "Broadcast", "reduce": "Reduce", "alltoall": "AllToAll", "sendrecv": "SendRecv",
             "incast": "Incast"}


@dataclass(frozen=True)
class Dump:
    """Who wrote the records, as the NCCL inspector plugin's metadata says it."""

    git_rev: str
    hostname: str
    pid: int
    timestamp_us: int


def inspector_lines(ops: list[dict], scale: float, dilation: float, nodes: dict[str, int], dump: Dump,
                    run: dict) -> list[str]:
    """One JSON line per op in the NCCL inspector plugin's form (header, metadata, coll_perf: format v4.0),
    in the real fabric's units as nccl_tests() prints them, with ours beside it under `hpnlab`: the job, the
    fabric's and the wall's seconds, the ideal and its fraction. One record stands for the op as a whole (the
    inspector writes one per rank: here rank 0, the op's time being its last rank's). `nodes`: hosts per job;
    `run`: the run's variant and repetition."""
    out, seq = [], Counter()
    for o in ops:
        real = round(o["size"] * scale)
        algbw = real / o["seconds"] / 1e9 if o["seconds"] else 0.0
        comm = hashlib.sha1(f"{run['variant']}/{run['repetition']}/{o['job']}".encode()).hexdigest()[:14]
        seq[o["job"]] += 1
        out.append(json.dumps({
            "header": {"id": f"0x{comm}", "rank": 0, "n_ranks": o["ranks"], "nnodes": nodes.get(o["job"], 0)},
            "metadata": {"inspector_output_format_version": "v4.0", "git_rev": dump.git_rev,
                         "rec_mechanism": "hpnlab_emulation", "dump_timestamp_us": dump.timestamp_us,
                         "hostname": dump.hostname, "pid": dump.pid},
            "coll_perf": {"coll": NCCL_COLL.get(o["op"], o["op"]), "coll_sn": seq[o["job"]],
                          "coll_msg_size_bytes": real, "coll_exec_time_us": round(o["seconds"] * 1e6, 3),
                          "coll_timing_source": "hpnlab_emulation", "coll_algobw_gbs": round(algbw, 6),
                          "coll_busbw_gbs": round(algbw * bus_factor(o), 6)},
            "hpnlab": {**run, "job": o["job"], "op": o["label"], "fabric_s": o["seconds"],
                       "wall_s": round(o["seconds"] * dilation, 6),
                       "ideal_busbw_gbs": round(o["ideal_busbw_bps"] * scale / 8e9, 6),
                       "fraction_of_ideal": o["fraction_of_ideal"],
                       "bytes_ok": o.get("bytes_ok", o["bytes_delivered"] == o["bytes_expected"])}}))
    return out


def nccl_tests(ops: list[dict], scale: float, title: str) -> str:
    table = rows(ops, scale)
    lines = [f"# hpnlab traffic run: {title}",
             f"# emulated at scale 1/{scale:,.0f}: sizes and bandwidths are the real fabric's (bytes x scale), "
             "times as measured",
             "# in-place columns repeat out-of-place (the emulation moves bytes, not buffers); #wrong: elements "
             "not delivered",
             "#",
             f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}           out-of-place                       "
             "in-place          ",
             f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>7}  {'algbw':>6}  "
             f"{'busbw':>6} {'#wrong':>6}  {'time':>7}  {'algbw':>6}  {'busbw':>6} {'#wrong':>6}",
             f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  "
             f"{'(GB/s)':>6}  {'':>5}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>5}"]
    for r in table:
        redop = "sum" if r["op"] in REDUCING else "none"
        result = f"  {_time(r['time_us'])}  {r['algbw']:6.2f}  {r['busbw']:6.2f}  {r['wrong']:5d}"
        lines.append(f"{r['size']:12d}  {r['count']:12d}  {'float':>8}  {redop:>6}  {-1:6d}" + result * 2)
    bad = sum(r["wrong"] for r in table)
    lines += [f"# Out of bounds values : {bad} {'OK' if bad == 0 else 'FAILED'}",
              f"# Avg bus bandwidth    : {statistics.mean(r['busbw'] for r in table) if table else 0:g} ",
              "#"]
    return "\n".join(lines) + "\n"
