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

import math
import statistics

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
        # the op's own bus factor (its record's busbw over algbw): a hierarchical or grouped schedule counts
        # the ranks of one group, as traffic.metrics does
        factor = os[0]["busbw_bps"] / os[0]["algbw_bps"] if os[0]["algbw_bps"] else busbw_factor(op, os[0]["ranks"])
        out.append({"op": op, "size": real, "count": real // WORD, "time_us": t * 1e6, "algbw": algbw,
                    "busbw": algbw * factor, "wrong": math.ceil(missing / WORD), "iters": len(os)})
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
