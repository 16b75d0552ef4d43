"""An experiment built in Python instead of a YAML file: precise vs ECMP, a ToR uplink failing mid-run.

    sudo .venv/bin/python examples/run_experiment.py [--quick]

Writes a results folder (results/<date>-example-...) and prints its summary.
"""

import sys

from testbed import Experiment, run

exp = Experiment.model_validate({
    "name": "example",
    "description": "ring all-reduce on rail 0, precise routing vs ECMP, one ToR uplink down at 1 s",
    "topology": {"name": "hpn"},
    "routing": "precise",
    "qos": {"scale": 20_000},
    "workload": {"collective": {"op": "allreduce", "size": "80GB", "ranks": "rail0", "iters": 2}},
    "failures": [{"at": 1.0, "link": "tor-p0-s0-r0-a--agg-p0-pl0-0", "action": "down"}],
    "variants": [{"label": "precise"}, {"label": "ecmp", "routing": "ecmp"}],
})
out = run(exp, reduced="--quick" in sys.argv)
print((out / "summary.md").read_text())
print(f"results: {out}")
