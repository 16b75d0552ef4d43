"""Workloads: what collectives one job (or several) runs, in three forms.

(a) a small YAML format of our own:

    ops:
      - {op: allreduce, size: 64MB, group: dp, algorithm: ring, repeat: 2}
      - {op: alltoall,  size: 8MB,  group: [h0:0, h1:0, h2:0, h3:0], compute: 5ms}
      - {compute: 20ms}                              # compute only
      - {op: allreduce, size: 1GB, group: dp, compute: 30ms, overlap: true}

    `compute` is every rank's compute before the op's communication (real time,
    s/ms/us); `overlap: true` lets the communication run on under what follows.

(b) `from_plan(...)`: one training iteration's communication from a
    parallelism plan (TP, PP, DP, EP sizes, model size);
(c) `load_simai(path)`: SimAI/AICB workload files.

Groups are symbolic ("tp", "dp", "ep", "pp") until they are placed: a plan's
(a SimAI file's) TP, DP and EP groups as GPUs in Megatron's order by `gpu_groups`
(inside a server: NVLink; across servers: collectives.among_gpus); groups without a
plan by `map_groups`, one rank per NIC: DP (and EP) rail-aligned across all hosts,
one group per rail, all rails at once; a TP group that fits in a host stays there
(NVLink: no network bytes), a larger one spans consecutive hosts, rail-aligned;
PP pairs neighbouring hosts.
Sizes are real bytes; `scaled(scale)` divides them by the bandwidth scale so
completion times stay comparable with the real fabric. Compute is not scaled:
it stays real time, as communication times do after scaling. `Workload.iteration`
is the iteration with its compute, in SimAI's order (traffic/iteration.py);
`Workload.ops` is its communication alone.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from topos import inputs
from topos.errors import InputError, hides_values

from .collectives import ALGORITHMS, Rank
from .iteration import Step, transformer_order
from .iteration import scaled as scaled_steps

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


MAX_SWEEP = 64  # sizes in one sweep: each is a collective of its own on the fabric


def size_sweep(spec: str, where: str = "sizes") -> list[int]:
    """nccl-tests' -b/-e/-f (or -i) as one string: MIN:MAX:xFACTOR or MIN:MAX:+STEP, e.g. 1MB:1GB:x2."""
    parts = spec.split(":") if type(spec) is str else []
    if len(parts) != 3 or parts[2][:1] not in ("x", "+"):
        raise InputError("a sweep is MIN:MAX:xFACTOR or MIN:MAX:+STEP", "e.g. 1MB:1GB:x2", field=where, value=spec)
    lo, hi = parse_size(parts[0], where), parse_size(parts[1], where)
    if hi < lo:
        raise InputError("the sweep's MAX is below its MIN", "e.g. 1MB:1GB:x2", field=where, value=spec)
    if parts[2][0] == "x":
        if not parts[2][1:].isdigit() or int(parts[2][1:]) < 2:
            raise InputError("the factor is a whole number of 2 or more", "e.g. x2", field=where, value=spec)
        factor, step = int(parts[2][1:]), 0
    else:
        factor, step = 1, parse_size(parts[2][1:], where)
    out, n = [], lo
    while n <= hi:
        out.append(n)
        if len(out) > MAX_SWEEP:
            raise InputError(f"a sweep has at most {MAX_SWEEP} sizes", "a larger factor or step, or a narrower "
                             "range", field=where, value=spec)
        n = n * factor if factor > 1 else n + step
    return out


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
    iteration: list[Step] = field(default_factory=list)  # with compute; empty: the ops back to back

    def scaled(self, scale: float) -> Workload:
        def op(o: Op) -> Op:
            return replace(o, size=max(1, int(o.size / scale)))

        return Workload(self.name, [op(o) for o in self.ops], dict(self.plan), scaled_steps(self.iteration, op))

    @property
    def compute_s(self) -> float:
        return sum(s.compute_s for s in self.iteration)


DURATION_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
MAX_COMPUTE_S = 3600.0


def parse_duration(value: Any, where: str = "compute") -> float:
    """Seconds from 5ms, 200us, 1.5s or a number of seconds; at most an hour."""
    m = re.fullmatch(r"\s*([0-9]{1,12}(?:\.[0-9]{1,9})?)\s*(s|ms|us|ns)\s*", value) if type(value) is str else None
    if type(value) in (int, float) and math.isfinite(value):
        t = float(value)
    elif m:
        t = float(m.group(1)) * DURATION_UNITS[m.group(2)]
    else:
        raise InputError("not a duration", "write seconds or a number with s/ms/us/ns, e.g. 5ms", field=where,
                         value=value)
    if not 0 <= t <= MAX_COMPUTE_S:
        raise InputError(f"a compute time is 0 to {MAX_COMPUTE_S:.0f} s", "e.g. 5ms", field=where, value=value)
    return t




def _check_op(op: str, where: str) -> None:
    if not isinstance(op, str) or op not in ALGORITHMS:  # YAML may give a list or a mapping here
        raise InputError("unknown collective", f"use one of: {', '.join(ALGORITHMS)}", field=where, value=op)


# -- (a) YAML -----------------------------------------------------------------------
@hides_values
def load_yaml(path: str | Path) -> Workload:
    data = inputs.load_yaml(inputs.read_text(path, "file"), "file") or {}
    if not isinstance(data, dict) or not isinstance(data.get("ops"), list):
        raise InputError("a workload file needs a list under 'ops'", "see traffic/workload.py for the format",
                         field="ops", value=type(data.get("ops") if isinstance(data, dict) else data).__name__)
    unknown = set(data) - {"name", "ops"}
    if unknown:
        raise InputError("unknown key in workload", "use name and ops", field=sorted(unknown)[0], value=None)
    ops: list[Op] = []
    steps: list[Step] = []
    for i, raw in enumerate(data["ops"]):
        where = f"ops[{i}]"
        if not isinstance(raw, dict):
            raise InputError("each op is a mapping", "e.g. {op: allreduce, size: 8MB, group: dp}", field=where,
                             value=raw)
        bad = set(raw) - {"op", "size", "group", "algorithm", "repeat", "label", "compute", "overlap"}
        if bad:
            raise InputError("unknown key in op", "use op, size, group, algorithm, repeat, label, compute, overlap",
                             field=f"{where}.{sorted(bad)[0]}", value=raw[sorted(bad)[0]])
        compute = parse_duration(raw.get("compute", 0), f"{where}.compute")
        overlap = raw.get("overlap", False)
        if type(overlap) is not bool:
            raise InputError("overlap is true or false", "e.g. overlap: true", field=f"{where}.overlap", value=overlap)
        if set(raw) <= {"compute", "label"} and "compute" in raw:  # compute only
            steps.append(Step(compute, None, layer=_label(raw, where)))
            continue
        _check_op(raw.get("op"), f"{where}.op")
        group = raw.get("group", "dp")
        if isinstance(group, list):
            group = tuple(parse_rank(r, f"{where}.group") for r in group)
        elif group not in GROUPS:
            raise InputError("unknown group", f"use one of {', '.join(GROUPS)} or a list like [h0:0, h1:0]",
                             field=f"{where}.group", value=group)
        repeat = raw.get("repeat", 1)
        if type(repeat) is not int or not 1 <= repeat <= MAX_REPEAT:
            raise InputError(f"repeat is an integer 1..{MAX_REPEAT}", "e.g. repeat: 3", field=f"{where}.repeat",
                             value=repeat)
        algorithm = raw.get("algorithm")
        if algorithm is not None and type(algorithm) is not str:
            raise InputError("algorithm is a name", "e.g. algorithm: ring", field=f"{where}.algorithm",
                             value=algorithm)
        op = Op(raw["op"], parse_size(raw.get("size"), f"{where}.size"), group, algorithm, repeat,
                _label(raw, where))
        ops.append(op)
        single = replace(op, repeat=1)
        steps += [Step(compute if k == 0 else 0.0, single, overlap) for k in range(repeat)]
        if len(steps) > MAX_OPS:
            raise InputError(f"more than the {MAX_OPS:,} ops a workload may have (repeats included)",
                             "fewer ops or repeats", field=f"{where}.repeat", value=repeat)
    return Workload(str(data.get("name", Path(path).stem))[:64], ops, iteration=steps)


MAX_REPEAT = 10_000
# Ops one workload may hold: 4x the 2,581 rows of the largest public SimAI file we know. Each op costs the
# emulator tens of milliseconds at least, so 10,000 already replay for minutes; planning one costs ~0.5 ms
# (a 200,000-row file planned for over 5 minutes in 9 GB before this cap).
MAX_OPS = 10_000
MAX_SIMAI_BYTES = 4 << 20  # 10,000 rows of ~100 characters is 1 MB


def _label(raw: dict, where: str) -> str:
    label = raw.get("label", "")
    if type(label) not in (str, int) or len(str(label)) > 128:
        raise InputError("a label is a short text", "at most 128 characters", field=f"{where}.label", value=label)
    return str(label)


def parse_rank(text: Any, where: str) -> Rank:
    m = re.fullmatch(r"(h\d+):(\d+)", str(text))
    if not m:
        raise InputError("a rank is HOST:NIC", "e.g. h3:0", field=where, value=text)
    return m.group(1), int(m.group(2))


def group_members(kind: str, plan: dict[str, int]) -> list[range]:
    """Every group of a kind as ranks, in Megatron's order (rank = stage x TP x DP + DP index x TP + TP index):
    TP ranks consecutive; a DP group at a stride of TP; an EP group a block of consecutive DP indices; a PP
    group the same place in every stage."""
    tp, dp, pp, ep = (plan.get(k, 1) for k in ("tp", "dp", "pp", "ep"))
    stage = tp * dp
    if kind == "tp":
        return [range(r, r + tp) for r in range(0, stage * pp, tp)]
    if kind == "pp":
        return [range(x, stage * pp, stage) for x in range(stage)]
    size = dp if kind == "dp" else ep
    return [range(s * stage + b * tp + t, s * stage + (b + size) * tp, tp)
            for s in range(pp) for t in range(tp) for b in range(0, dp, size)]


def job_gpus(ranks, hosts: list[str], per_host: int) -> list[Rank]:
    """Ranks as the job's GPUs, its servers filled in order: rank r is GPU r % per_host of hosts[r // per_host]."""
    return [(hosts[r // per_host], r % per_host) for r in ranks]


def fits_server(kind: str, plan: dict[str, int], per_host: int) -> bool:
    """Every group of this kind lies inside one server of `per_host` GPUs (the job's GPUs filled server by
    server): then it runs on NVLink."""
    return all(g[0] // per_host == g[-1] // per_host for g in group_members(kind, plan))


def gpu_groups(op: Op, hosts: list[str], plan: dict[str, int], per_host: int) -> list[list[Rank]] | None:
    """A plan's TP, DP or EP groups as GPUs (host, GPU index) in Megatron's order (rank = stage x TP x DP +
    DP index x TP + TP index; an EP group a block of consecutive DP indices), the job's GPUs filled host by
    host: [] when every group stays inside one server (NVLink); None when the plan does not give the group's
    size (map_groups places it one rank per NIC) or the job has too few GPUs for the plan."""
    if not isinstance(op.group, str) or op.group not in ("tp", "dp", "ep") or op.group not in plan:
        return None
    tp, dp, pp = plan.get("tp", 1), plan.get("dp", 1), plan.get("pp", 1)
    if tp * dp * pp > len(hosts) * per_host or (op.group == "ep" and dp % plan["ep"]):
        return None
    if fits_server(op.group, plan, per_host):
        return []
    return [job_gpus(m, hosts, per_host) for m in group_members(op.group, plan)]


def in_host_gpus(op: Op, plan: dict[str, int], gpus: int) -> int:
    """The GPUs of one server an op runs among when map_groups keeps it inside the server (a TP group that fits
    it, or any group of a job on one server)."""
    if isinstance(op.group, tuple):
        return len(op.group)
    if op.group == "pp":
        return 2
    return min(gpus, plan.get(op.group, gpus))


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
              seq: int = 4096, micro_batch: int = 1, bytes_per_param: int = 2, tflops: float | None = None) -> Workload:
    """One iteration of a Megatron-style transformer: per layer TP all-gather/reduce-scatter (fwd and bwd),
    PP activations between stages, EP all-to-all (MoE) and a DP gradient reduce-scatter + all-gather.

    With `tflops` (what one GPU achieves), each layer gets its compute: 2 x parameters x tokens FLOPs
    forward, as much again for the input and for the weight gradients, shared by the TP x PP ranks."""
    for name, v in (("tp", tp), ("pp", pp), ("dp", dp), ("ep", ep), ("layers", layers)):
        if type(v) is not int or not 1 <= v <= 1 << 16:
            raise InputError("parallelism sizes are positive integers", "e.g. tp=8 pp=1 dp=8", field=name, value=v)
    if tflops is not None and not (type(tflops) in (int, float) and 0 < tflops <= 1e5):
        raise InputError("tflops is what one GPU achieves, in TFLOP/s", "e.g. tflops=150", field="tflops",
                         value=tflops)
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
    flops = 2 * params_b * 1e9 / layers * seq * micro_batch / (tp * pp)  # one layer's forward, per rank
    c = 0.0 if tflops is None else flops / (tflops * 1e12)
    by = {o.label: replace(o, repeat=1) for o in ops}
    steps: list[Step] = []
    # a stage's layers forward, then backward in reverse; per layer and pass one TP all-gather, one
    # reduce-scatter and one EP all-to-all (the counts of `ops`)
    tp_ep = [Step(0.0, by.get("tp bwd")), Step(0.0, by.get("moe dispatch/combine"))]
    for k in range(per_stage):
        steps += [Step(c, by.get("tp fwd"), phase="fwd", layer=f"layer{k}"), *tp_ep]
    steps.append(Step(0.0, by.get("pp activations/gradients")))
    for k in reversed(range(per_stage)):
        steps += [Step(c, by.get("tp fwd"), phase="ig", layer=f"layer{k}"), *tp_ep,
                  Step(c, None, phase="wg", layer=f"layer{k}")]
    steps += [Step(0.0, by.get("pp activations/gradients")), Step(0.0, by.get("dp gradients")),
              Step(0.0, by.get("dp parameters"))]
    steps = [s for s in steps if s.op is not None or s.compute_s > 0]
    return Workload(f"plan-tp{tp}-pp{pp}-dp{dp}-ep{ep}", ops, {"tp": tp, "pp": pp, "dp": dp, "ep": ep}, steps)


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


@hides_values
def load_simai(path: str | Path) -> Workload:
    """Header `HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 8 ep: 1 pp: 1 ... all_gpus: 64`,
    a row count, then per layer: name, reserved, then (compute time, comm type, comm bytes) for forward,
    input-gradient and weight-gradient, and an update percentage. Forward and input-gradient communication
    is in the tensor-parallel group, weight-gradient in the data-parallel group (SimAI's convention)."""
    path = Path(path)
    text = inputs.read_text(path, "file", max_bytes=MAX_SIMAI_BYTES)
    if "\x00" in text:  # a layer name is printed and written into records: no NUL in it
        raise InputError(f"line {text.count(chr(10), 0, text.index(chr(0))) + 1}: a NUL character",
                         "save the workload as plain text", field="file", value=str(path))
    lines = text.splitlines()
    if len(lines) < 2:
        raise InputError("too short for a SimAI workload", "header, count line, rows", field="file",
                         value=str(path))
    head = lines[0].split()
    kv = {head[i].rstrip(":"): head[i + 1] for i in range(1, len(head) - 1) if head[i].endswith(":")}
    # Errors name the file and line, never the text: the file could be any file root reads.
    plan = {}
    for key, name, default in (("tp", "model_parallel_NPU_group", None), ("ep", "ep", "1"), ("pp", "pp", "1"),
                               ("ga", "ga", "1"), ("all_gpus", "all_gpus", None)):
        raw = kv.get(name, default)
        if raw is None or not (raw.isascii() and raw.isdigit() and 0 < int(raw) <= 1 << 20):
            raise InputError(f"line 1: header needs '{name}: N' with N a positive integer",
                             "expect model_parallel_NPU_group: N ... all_gpus: N", field="file", value=str(path))
        plan[key] = int(raw)
    plan["dp"] = plan["all_gpus"] // (plan["tp"] * plan["pp"])
    if plan["dp"] < 1:
        raise InputError("line 1: all_gpus is smaller than model_parallel_NPU_group x pp",
                         "all_gpus = tp x pp x dp", field="file", value=str(path))
    count_text = (lines[1].split() or [""])[0]
    if not (count_text.isascii() and count_text.isdigit()):  # int() takes '1_0' and other scripts' digits
        raise InputError("line 2: expected the number of rows", "a single integer", field="file", value=str(path))
    count = int(count_text)
    if count > MAX_OPS:
        raise InputError(f"line 2: {count:,} rows, more than the {MAX_OPS:,} a workload may have",
                         "keep fewer layers, or split the file", field="file", value=str(path))
    rows = [l for l in lines[2:] if l.strip()]
    if len(rows) != count:
        raise InputError(f"line 2 announces {count} rows, the file has {len(rows)}",
                         "fix the count or the rows", field="file", value=str(path))
    ops: list[Op] = []
    layers = []  # (name, fwd, ig, wg), each phase (compute seconds, op or None)
    for lineno, line in enumerate(lines[2:], start=3):
        if not line.strip():
            continue
        f = line.split()
        if len(f) < 11:
            raise InputError(f"line {lineno}: {len(f)} fields, need at least 11",
                             "name, reserved, then 3 x (time, type, bytes)", field="file", value=str(path))
        name = f[0][:64]
        phases = []
        for phase, (tc, ci, bi), group in (("fwd", (2, 3, 4), "tp"), ("ig", (5, 6, 7), "tp"),
                                           ("wg", (8, 9, 10), "dp")):
            kind = _simai_type(f[ci], group, path, lineno)
            nbytes = _simai_int(f[bi], MAX_SIZE, f"line {lineno}: {phase} bytes", path)
            # nanoseconds; SimAI writes 1 where no compute was recorded
            ns = _simai_int(f[tc], int(MAX_COMPUTE_S * 1e9), f"line {lineno}: {phase} compute time", path)
            op = Op(kind[0], nbytes, kind[1], label=f"{name}:{phase}") if kind is not None and nbytes > 0 else None
            if op is not None:
                ops.append(op)
            phases.append((ns * 1e-9 if ns > 1 else 0.0, op))
        layers.append((name, *phases))
    return Workload(path.stem, ops, plan, transformer_order(layers))


def _simai_int(text: str, most: int, what: str, path: Path) -> int:
    """A non-negative integer column (bytes, nanoseconds) up to `most`."""
    if not (text.isascii() and text.isdigit() and len(text) <= 18 and int(text) <= most):
        raise InputError(f"{what} is not an integer 0..{most}", "a count in the file's units", field="file",
                         value=str(path))
    return int(text)


# -- placing groups on the emulated fabric ---------------------------------------------
def map_groups(op: Op, hosts: list[str], rails: int, plan: dict[str, int] | None = None,
               gpus: int | None = None) -> list[list[Rank]]:
    """Concrete rank groups for an op: several groups run concurrently (one per rail for DP/EP). `gpus`: GPUs
    per host (default: one per rail); a TP group of at most that many stays inside its server."""
    if isinstance(op.group, tuple) and op.group and isinstance(op.group[0], int):
        return trace_ranks(op, hosts, gpus or rails)
    if isinstance(op.group, tuple):
        return [list(op.group)]
    if op.group == "tp":
        per_host = gpus or rails
        tp = (plan or {}).get("tp", per_host)
        if fits_server("tp", {"tp": tp}, per_host):
            return []  # inside a host: NVLink, no network bytes
        k = -(-tp // per_host)  # hosts a TP group spans
        return [[(h, r) for h in hosts[i:i + k]] for i in range(0, len(hosts) - k + 1, k) for r in range(rails)]
    if len(hosts) == 1:  # a job on one server: every group is inside it, on NVLink
        return []
    if op.group in ("dp", "ep") and op.group in (plan or {}) and fits_server(op.group, plan, gpus or rails):
        return []
    if op.group in ("dp", "ep"):
        return [[(h, r) for h in hosts] for r in range(rails)]
    if op.group == "pp":  # neighbouring stages: pairs of hosts, rail 0
        pairs = [(h, 0) for h in hosts[: len(hosts) // 2 * 2]]
        return [pairs]
    raise InputError("unknown group", f"use one of {', '.join(GROUPS)}", field="group", value=op.group)


def trace_ranks(op: Op, hosts: list[str], per_host: int) -> list[list[Rank]]:
    """A trace's ranks (traffic/chakra.py: ints) as the job's GPUs in order, GPU g of a host on its NIC g: none
    when they all sit in one server (NVLink). A send/recv step's pairs inside one server go over NVLink and are
    left out of the fabric's flows."""
    need = max(op.group) + 1
    if need > len(hosts) * per_host:
        raise InputError(f"the trace has {need} ranks, the job {len(hosts) * per_host} GPUs ({len(hosts)} hosts x "
                         f"{per_host})", "give the job as many GPUs as the trace has ranks", field="chakra",
                         value=need)
    gpu = job_gpus(op.group, hosts, per_host)
    if op.op == "sendrecv":  # one group per pair, all at once: a rank may send and receive in one step
        return [[a, b] for a, b in zip(gpu[::2], gpu[1::2], strict=True) if a[0] != b[0]]
    return [gpu] if len({h for h, _ in gpu}) > 1 else []
