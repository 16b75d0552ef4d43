"""SimAI/AICB workload text, written by the project itself: files of every shape its tests and benches need.

The format (read by `traffic.workload.load_simai`): a header line
`HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: TP ep: EP pp: PP vpp: 1 ga: 1 all_gpus: N ...`,
a line with the number of rows, then one tab-separated row per layer: name, a reserved -1, and for the
forward, input-gradient and weight-gradient passes each (compute time in ns, communication type, bytes),
then an update percentage. A compute time of 1 means "none recorded". Forward and input-gradient
communication is in the tensor-parallel group and weight-gradient communication in the data-parallel group,
unless the type names another (`ALLTOALL_EP`, `ALLGATHER_DP_EP`).

`transformer(...)` lays out a Megatron-style model the way AICB's generator does (gradient rows first, then
per layer the column- and row-parallel halves of attention and MLP, a MoE dispatch and combine where ep > 1);
`SHAPES` names the ones the tests use, and `python -m traffic.simai DIR` writes them all.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from topos.inputs import write_file

NONE_NS = 1  # SimAI's "no compute recorded"


@dataclass(frozen=True)
class Phase:
    compute_ns: int = NONE_NS
    comm: str = "NONE"
    size: int = 0

    def columns(self) -> list[str]:
        return [str(self.compute_ns), self.comm, str(self.size if self.comm != "NONE" else 0)]


@dataclass(frozen=True)
class Row:
    name: str
    fwd: Phase = Phase()
    ig: Phase = Phase()
    wg: Phase = Phase()

    def line(self) -> str:
        return "\t".join([self.name, "-1", *self.fwd.columns(), *self.ig.columns(), *self.wg.columns(), "100"])


@dataclass(frozen=True)
class Plan:
    """The header: tensor-, expert- and pipeline-parallel sizes and the GPU count (dp = gpus / (tp x pp))."""
    tp: int
    gpus: int
    ep: int = 1
    pp: int = 1
    pp_comm: int = 0  # the pipeline send size in bytes

    def header(self) -> str:
        return (f"HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: {self.tp} ep: {self.ep} pp: {self.pp} "
                f"vpp: 1 ga: 1 all_gpus: {self.gpus} checkpoints: 0 checkpoint_initiates: 0 pp_comm: {self.pp_comm}")


@dataclass(frozen=True)
class SimaiFile:
    plan: Plan
    rows: list[Row] = field(default_factory=list)

    def text(self) -> str:
        return "\n".join([self.plan.header(), str(len(self.rows)), *(r.line() for r in self.rows)]) + "\n"

    def write(self, path: Path) -> Path:
        write_file(path, self.text(), "path")
        return path


@dataclass(frozen=True)
class Model:
    """What sizes the rows: a transformer layer's activation (seq x hidden x 2 bytes per micro-batch) and the
    parameters each DP rank holds; `layer_ns` is one layer half's forward compute (0: no compute recorded)."""
    layers: int = 4
    hidden: int = 4096
    seq: int = 2048
    params: int = 7_000_000_000
    layer_ns: int = 0

    @property
    def activation(self) -> int:
        return self.seq * self.hidden * 2


def transformer(plan: Plan, model: Model) -> SimaiFile:
    """One iteration in AICB's row order. TP communication only where tp > 1, the MoE rows only where ep > 1;
    the input gradient computes as long as the forward and the weight gradient as long again."""
    dp_bytes = 2 * model.params // (plan.tp * plan.pp)
    c = model.layer_ns or NONE_NS
    tp_comm = plan.tp > 1
    act = model.activation

    def half(name: str, fwd: str, bwd: str) -> Row:
        return Row(name, Phase(c, fwd if tp_comm else "NONE", act), Phase(c, bwd if tp_comm else "NONE", act),
                   Phase(c))

    rows = [Row("grad_gather", wg=Phase(NONE_NS, "ALLGATHER", dp_bytes // 2)),
            Row("grad_param_comm", wg=Phase(NONE_NS, "REDUCESCATTER", dp_bytes)),
            Row("grad_param_compute", ig=Phase(c))]
    if plan.ep > 1:
        rows += [Row("moe_grad_norm1", wg=Phase(NONE_NS, "ALLGATHER_DP_EP", dp_bytes // 4)),
                 Row("moe_grad_norm2", wg=Phase(NONE_NS, "REDUCESCATTER_DP_EP", dp_bytes // 2))]
    for k in range(model.layers // plan.pp):
        rows += [half(f"attention_column{k}", "ALLGATHER", "REDUCESCATTER"),
                 half(f"attention_row{k}", "REDUCESCATTER", "ALLGATHER")]
        if plan.ep > 1:
            rows += [Row(f"moe_dispatch{k}", Phase(NONE_NS, "ALLTOALL_EP", act), Phase(NONE_NS, "ALLTOALL_EP", act)),
                     half(f"mlp_expert{k}", "ALLGATHER", "REDUCESCATTER"),
                     Row(f"moe_combine{k}", Phase(NONE_NS, "ALLTOALL_EP", act), Phase(NONE_NS, "ALLTOALL_EP", act))]
        else:
            rows += [half(f"mlp_column{k}", "ALLGATHER", "REDUCESCATTER"),
                     half(f"mlp_row{k}", "REDUCESCATTER", "ALLGATHER")]
    rows.append(Row("embedding_norm", Phase(c, "ALLREDUCE" if tp_comm else "NONE", act), Phase(c), Phase(c)))
    return SimaiFile(plan, rows)


def collectives(plan: Plan, comm: str, sizes: list[int], compute_ns: int = NONE_NS) -> SimaiFile:
    """One forward collective per row in the model-parallel group, nothing else (a micro-benchmark)."""
    return SimaiFile(plan, [Row("embedding_layer", Phase(compute_ns, comm, s)) for s in sizes])


def data_parallel(gpus: int, layers: int, compute_ns: int, grads: int) -> SimaiFile:
    """Pure data parallelism: per layer forward and input-gradient compute, the weight gradient's all-reduce
    overlapping the layers still to go backward."""
    return SimaiFile(Plan(1, gpus), [Row(f"layer{k}", Phase(compute_ns), Phase(compute_ns // 3),
                                         Phase(compute_ns // 3, "ALLREDUCE", grads)) for k in range(layers)])


MiB = 1 << 20
# The shapes the tests read (tests/data/simai_<name>.txt). Each names what it exercises.
SHAPES: dict[str, SimaiFile] = {
    # two all-reduces of 16 and 64 MiB across 8 GPUs of one TP group, 0.556 ms of compute before each
    "allreduce_8g": collectives(Plan(8, 8), "ALLREDUCE", [16 * MiB, 64 * MiB], compute_ns=556_000),
    # TP 8 x DP 8 with no compute recorded (communication only): TP all-gathers and reduce-scatters
    "tp8_dp8_64g": transformer(Plan(8, 64), Model(layers=8)),
    # TP 4 x DP 4 with compute in every layer: 12 ms of forward per layer half
    "tp4_dp4_16g": transformer(Plan(4, 16), Model(layers=6, params=13_000_000_000, layer_ns=12_000_000)),
    # MoE: TP 2, PP 2, EP 4 over 32 GPUs, expert all-to-alls, _DP_EP groups, a pipeline send size
    "moe_tp2_pp2_ep4_32g": transformer(Plan(2, 32, ep=4, pp=2, pp_comm=8 * MiB),
                                       Model(layers=4, params=16_000_000_000, layer_ns=3_000_000)),
    # DP 16, two layers of 0.3 s forward with 10 GB weight-gradient all-reduces overlapping the backward pass
    "dp16_two_layers": data_parallel(16, 2, 300_000_000, 10_000_000_000),
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m traffic.simai", description="Write the SimAI workload shapes.")
    ap.add_argument("dir", type=Path, help="folder to write simai_<shape>.txt into")
    ap.add_argument("--shape", choices=sorted(SHAPES), action="append", help="only these (default: all)")
    a = ap.parse_args(argv)
    for name in a.shape or sorted(SHAPES):
        print(SHAPES[name].write(a.dir / f"simai_{name}.txt"))


if __name__ == "__main__":
    main()
