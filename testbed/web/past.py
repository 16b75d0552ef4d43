"""A past run's results folder as the page shows it: the topology it ran on, its summary, plots, the
throughput timeline of every variant, every op's bus bandwidth and the failures that fired."""

from __future__ import annotations

from pathlib import Path

from testbed.experiment.results import folder_summary, load_results
from testbed.experiment.spec import Experiment
from testbed.schema.results import Run
from topos.errors import InputError

from .elements import elements, op_row


def results_page(run_dir: Path) -> dict:
    """The page's data, or an InputError naming what of results.json could not be read (a file edited by hand or
    from another version must give the page a message, not drop its connection)."""
    data = load_results(run_dir)
    try:
        exp = Experiment.model_validate(data.experiment)
    except ValueError as exc:
        raise InputError(f"results.json's experiment is not one this version reads ({str(exc)[:60]})",
                         "run the experiment again", field="run", value=run_dir.name) from None
    return _page(run_dir, exp, data.runs)


def _page(run_dir: Path, exp: Experiment, runs: list[Run]) -> dict:
    label, first = exp.expand()[0]
    topo = first.topology.build()
    # what the first variant (the one drawn) ran at: its spec may say auto, its run records what was chosen
    scale = runs[0].scale if runs else first.qos.scale
    dilation = runs[0].dilation if runs else 1.0
    return {
        "mode": "results", "run": run_dir.name, "experiment": exp.name,
        "network": {"run": run_dir.name, "label": label, "kind": topo.kind, "counts": topo.counts(),
                    "routing": first.routing, "scale": scale, "dilation": dilation,
                    "elements": elements(topo)},
        "summary": folder_summary(run_dir),
        "plots": sorted(p.name for p in run_dir.glob("*.png") if p.is_file() and not p.is_symlink()),
        "timeline": [{"series": f"{r.variant} #{r.repetition}",
                      "points": [[row.t, row.host_tx_bps] for row in r.timeline]} for r in runs],
        "ops": [op_row({"variant": r.variant, "repetition": r.repetition, **o.model_dump()}) for r in runs
                for o in r.ops],
        "failures": [{"series": f"{r.variant} #{r.repetition}", "t": f.t, "up": f.up, "links": f.links,
                      "cause": f.cause} for r in runs for f in r.failures],
    }
