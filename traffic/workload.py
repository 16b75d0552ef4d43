"""Workloads: what collectives one job (or several) runs, in three forms.

(a) a small YAML format of our own:

    ops:
      - {op: allreduce, size: 64MB, group: dp, algorithm: ring, repeat: 2}
      - {op: alltoall,  size: 8MB,  group: [h0:0, h1:0, h2:0, h3:0]}

(b) `from_plan(...)`: one training iteration's communication from a
    parallelism plan (TP, PP, DP, EP sizes, model size);
(c) `load_simai(path)`: SimAI/AICB workload files.

Groups are symbolic ("tp", "dp", "ep", "pp") until `map_groups` places them on
the emulated hosts and rails (an emulated host has one GPU per rail): DP (and
EP) groups are rail-aligned across all hosts, one group per rail, all rails at
once (as on a rail-optimized fabric); a TP group that fits in a host stays there
(NVLink: no network bytes), a larger one spans consecutive hosts, rail-aligned;
PP pairs neighbouring hosts.
Sizes are real bytes; `scaled(scale)` divides them by the bandwidth scale so
completion times stay comparable with the real fabric.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from topos import inputs
from topos.errors import InputError

from .collectives import ALGORITHMS, Rank

UNITS = {"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KIB": 1024, "MIB": 1 << 20, "GIB": 1 << 30}
GROUPS = ("tp", "dp", "ep", "pp")


MAX_SIZE = 10**15  # 1 PB: beyond any collective, and far below what int() of a float loses


def parse_size(value: Any, where: str = "size") -> int:
    """Bytes from 64MB, 1.5GiB or a positive integer; anything else (-5, 1.2.3GB, true, .inf) is an error."""
    m = re.fullmatch(r"\s*([0-9]{1,16}(?:\.[0-9]{1,9})?)\s*([A-Za-z]{0,3})\s*", value) if type(value) is str else None
    if type(value) is int:
        n = value
    elif type(value) is float and math.isfinite(value) and value >= 1:
        n = int(value)
    elif m and m.group(2).upper() in UNITS:
        n = int(float(m.group(1)) * UNITS[m.group(2).upper()])
    else:
        raise InputError("not a size", "write bytes or a number with KB/MB/GB/KiB/MiB/GiB, e.g. 64MB",
                         field=where, value=value)
    if not 0 < n <= MAX_SIZE:
        raise InputError(f"a size is 1 byte to {MAX_SIZE:.0e} bytes", "e.g. 64MB", field=where, value=value)
    return n


@dataclass(frozen=True)
class Op:
    op: str
    size: int  # bytes
    group: str | tuple[Rank, ...]  # symbolic group or explicit ranks
    algorithm: str | None = None
    repeat: int = 1
    label: str = ""


@dataclass
class Workload:
    name: str
    ops: list[Op] = field(default_factory=list)
    plan: dict[str, int] = field(default_factory=dict)

    def scaled(self, scale: float) -> Workload:
        return Workload(self.name, [replace(o, size=max(1, int(o.size / scale))) for o in self.ops], dict(self.plan))




def _check_op(op: str, where: str) -> None:
    if op not in ALGORITHMS:
        raise InputError("unknown collective", f"use one of: {', '.join(ALGORITHMS)}", field=where, value=op)


# -- (a) YAML -----------------------------------------------------------------------
def load_yaml(path: str | Path) -> Workload:
    data = inputs.load_yaml(inputs.read_text(path, "file"), "file") or {}
    if not isinstance(data, dict) or not isinstance(data.get("ops"), list):
        raise InputError("a workload file needs a list under 'ops'", "see traffic/workload.py for the format",
                         field="ops", value=type(data.get("ops") if isinstance(data, dict) else data).__name__)
    unknown = set(data) - {"name", "ops"}
    if unknown:
        raise InputError("unknown key in workload", "use name and ops", field=sorted(unknown)[0], value=None)
    ops = []
    for i, raw in enumerate(data["ops"]):
        where = f"ops[{i}]"
        if not isinstance(raw, dict):
            raise InputError("each op is a mapping", "e.g. {op: allreduce, size: 8MB, group: dp}", field=where,
                             value=raw)
        bad = set(raw) - {"op", "size", "group", "algorithm", "repeat", "label"}
        if bad:
            raise InputError("unknown key in op", "use op, size, group, algorithm, repeat, label",
                             field=f"{where}.{sorted(bad)[0]}", value=raw[sorted(bad)[0]])
        _check_op(raw.get("op"), f"{where}.op")
        group = raw.get("group", "dp")
        if isinstance(group, list):
            group = tuple(parse_rank(r, f"{where}.group") for r in group)
        elif group not in GROUPS:
            raise InputError("unknown group", f"use one of {', '.join(GROUPS)} or a list like [h0:0, h1:0]",
                             field=f"{where}.group", value=group)
        repeat = raw.get("repeat", 1)
        if not isinstance(repeat, int) or repeat < 1:
            raise InputError("repeat must be a positive integer", "e.g. repeat: 3", field=f"{where}.repeat",
                             value=repeat)
        ops.append(Op(raw["op"], parse_size(raw.get("size"), f"{where}.size"), group, raw.get("algorithm"),
                      repeat, str(raw.get("label", ""))))
    return Workload(str(data.get("name", Path(path).stem)), ops)


def parse_rank(text: Any, where: str) -> Rank:
    m = re.fullmatch(r"(h\d+):(\d+)", str(text))
    if not m:
        raise InputError("a rank is HOST:NIC", "e.g. h3:0", field=where, value=text)
    return m.group(1), int(m.group(2))


def select_ranks(spec: str, topo, where: str = "ranks") -> list[Rank]:
    """Ranks named the way users write them: `all` (every NIC), `railN` (NIC N of every host), or h0:0,h1:0,..."""
    hosts = [h.name for h in topo.hosts]
    if spec == "all":
        return [(h, r) for r in range(topo.hosts[0].nics) for h in hosts]
    if spec.startswith("rail") and spec[4:].isdigit():
        rail = int(spec[4:])
        if rail >= topo.hosts[0].nics:
            raise InputError("no such rail", f"use rail0..rail{topo.hosts[0].nics - 1}", field=where, value=spec)
        return [(h, rail) for h in hosts]
    ranks = [parse_rank(r, where) for r in spec.split(",")]
    for h, n in ranks:
        if h not in topo.nodes or n >= topo.nodes[h].nics:
            raise InputError("no such host NIC", "use HOST:NIC of this topology, e.g. h0:0", field=where,
                             value=f"{h}:{n}")
    return ranks


# -- (b) parallelism plan --------------------------------------------------------------
def from_plan(tp: int, pp: int, dp: int, ep: int = 1, params_b: float = 7.0, layers: int = 32, hidden: int = 4096,
              seq: int = 4096, micro_batch: int = 1, bytes_per_param: int = 2) -> Workload:
    """One iteration of a Megatron-style transformer: per layer TP all-gather/reduce-scatter (fwd and bwd),
    PP activations between stages, EP all-to-all (MoE) and a DP gradient reduce-scatter + all-gather."""
    for name, v in (("tp", tp), ("pp", pp), ("dp", dp), ("ep", ep)):
        if not isinstance(v, int) or v < 1:
            raise InputError("parallelism sizes are positive integers", "e.g. tp=8 pp=1 dp=8", field=name, value=v)
    act = seq * micro_batch * hidden * bytes_per_param  # one layer's activation
    grads = int(params_b * 1e9 * bytes_per_param / (tp * pp))  # gradient bytes per DP rank
    ops: list[Op] = []
    per_stage = max(1, layers // pp)
    if tp > 1:
        ops += [Op("allgather", act, "tp", repeat=2 * per_stage, label="tp fwd"),
                Op("reducescatter", act, "tp", repeat=2 * per_stage, label="tp bwd")]
    if ep > 1:
        ops.append(Op("alltoall", act, "ep", repeat=2 * per_stage, label="moe dispatch/combine"))
    if pp > 1:
        ops.append(Op("sendrecv", act // tp, "pp", repeat=2, label="pp activations/gradients"))
    if dp > 1:
        ops += [Op("reducescatter", grads, "dp", label="dp gradients"),
                Op("allgather", grads, "dp", label="dp parameters")]
    return Workload(f"plan-tp{tp}-pp{pp}-dp{dp}-ep{ep}", ops, {"tp": tp, "pp": pp, "dp": dp, "ep": ep})


# -- (c) SimAI / AICB -----------------------------------------------------------------
SIMAI_TYPES = {"ALLREDUCE": "allreduce", "ALLGATHER": "allgather", "REDUCESCATTER": "reducescatter",
               "ALLTOALL": "alltoall", "BROADCAST": "broadcast"}


def _simai_type(token: str, default_group: str, path: Path, lineno: int) -> tuple[str, str] | None:
    if token == "NONE":
        return None
    base, _, suffix = token.partition("_")
    if base not in SIMAI_TYPES:
        raise InputError(f"line {lineno}: unknown communication type",
                         f"use one of {', '.join(SIMAI_TYPES)} (optionally _DP, _EP, _DP_EP) or NONE",
                         field="file", value=str(path))
    group = {"": default_group, "DP": "dp", "EP": "ep", "DP_EP": "dp", "TP": "tp"}.get(suffix)
    if group is None:
        raise InputError(f"line {lineno}: unknown group suffix", "use _DP, _EP or _DP_EP",
                         field="file", value=str(path))
    return SIMAI_TYPES[base], group


def load_simai(path: str | Path) -> Workload:
    """Header `HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 8 ep: 1 pp: 1 ... all_gpus: 64`,
    a row count, then per layer: name, reserved, then (compute time, comm type, comm bytes) for forward,
    input-gradient and weight-gradient, and an update percentage. Forward and input-gradient communication
    is in the tensor-parallel group, weight-gradient in the data-parallel group (SimAI's convention)."""
    path = Path(path)
    lines = inputs.read_text(path, "file").splitlines()
    if len(lines) < 2:
        raise InputError("too short for a SimAI workload", "header, count line, rows", field="file",
                         value=str(path))
    head = lines[0].split()
    kv = {head[i].rstrip(":"): head[i + 1] for i in range(1, len(head) - 1) if head[i].endswith(":")}
    # Errors name the file and line, never the text: the file could be any file root reads.
    plan = {}
    for key, name, default in (("tp", "model_parallel_NPU_group", None), ("ep", "ep", "1"), ("pp", "pp", "1"),
                               ("all_gpus", "all_gpus", None)):
        raw = kv.get(name, default)
        if raw is None or not (raw.isascii() and raw.isdigit() and 0 < int(raw) <= 1 << 20):
            raise InputError(f"line 1: header needs '{name}: N' with N a positive integer",
                             "expect model_parallel_NPU_group: N ... all_gpus: N", field="file", value=str(path))
        plan[key] = int(raw)
    plan["dp"] = plan["all_gpus"] // (plan["tp"] * plan["pp"])
    if plan["dp"] < 1:
        raise InputError("line 1: all_gpus is smaller than model_parallel_NPU_group x pp",
                         "all_gpus = tp x pp x dp", field="file", value=str(path))
    try:
        count = int(lines[1].split()[0])
    except (ValueError, IndexError):
        raise InputError("line 2: expected the number of rows", "a single integer", field="file",
                         value=str(path)) from None
    rows = [l for l in lines[2:] if l.strip()]
    if len(rows) != count:
        raise InputError(f"line 2 announces {count} rows, the file has {len(rows)}",
                         "fix the count or the rows", field="file", value=str(path))
    ops: list[Op] = []
    for lineno, line in enumerate(lines[2:], start=3):
        if not line.strip():
            continue
        f = line.split()
        if len(f) < 11:
            raise InputError(f"line {lineno}: {len(f)} fields, need at least 11",
                             "name, reserved, then 3 x (time, type, bytes)", field="file", value=str(path))
        name = f[0]
        for phase, (_compute_col, ci, bi), group in (("fwd", (2, 3, 4), "tp"), ("ig", (5, 6, 7), "tp"),
                                           ("wg", (8, 9, 10), "dp")):
            kind = _simai_type(f[ci], group, path, lineno)
            try:
                nbytes = int(f[bi]) if len(f[bi]) <= 16 else MAX_SIZE + 1
                if nbytes > MAX_SIZE:
                    raise ValueError
            except ValueError:
                raise InputError(f"line {lineno}: {phase} bytes is not an integer", "a byte count",
                                 field="file", value=str(path)) from None
            if kind is None or nbytes <= 0:
                continue
            ops.append(Op(kind[0], nbytes, kind[1], label=f"{name}:{phase}"))
    return Workload(path.stem, ops, plan)


# -- placing groups on the emulated fabric ---------------------------------------------
def map_groups(op: Op, hosts: list[str], rails: int, plan: dict[str, int] | None = None) -> list[list[Rank]]:
    """Concrete rank groups for an op: several groups run concurrently (one per rail for DP/EP)."""
    if isinstance(op.group, tuple):
        return [list(op.group)]
    if op.group == "tp":
        tp = (plan or {}).get("tp", rails)
        if tp <= rails:
            return []  # inside a host: NVLink, no network bytes
        k = -(-tp // rails)  # hosts a TP group spans
        return [[(h, r) for h in hosts[i:i + k]] for i in range(0, len(hosts) - k + 1, k) for r in range(rails)]
    if op.group in ("dp", "ep"):
        return [[(h, r) for h in hosts] for r in range(rails)]
    if op.group == "pp":  # neighbouring stages: pairs of hosts, rail 0
        pairs = [(h, 0) for h in hosts[: len(hosts) // 2 * 2]]
        return [pairs]
    raise InputError("unknown group", f"use one of {', '.join(GROUPS)}", field="group", value=op.group)
