"""The docs' table of what `make vagrant-test` took, step by step, from a run's results folder.

    python -m bench.vagrant_times results/vagrant-<date>

The run (tests/vagrant, scripts/vm/vagrant-test.sh) writes times-setup.json (the box, adding it) and
times.json (each step in the guest, as it finished); this prints them as a table and writes it into docs/benchmarks.md
between the `vagrant` markers, or the `vagrant-offline` ones for a run of the offline box (BOX=offline).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.tables import BENCHMARKS, replace_block, stamp, table

STEPS = {  # key in the run's files -> what the docs call it, in the order a teacher meets them
    "box_s": "make vagrant-box (0 when cached)",  # of the kind the run names
    "box_add_s": "vagrant box add",
    "up_to_first_provisioner": "vagrant up: box volume, domain, boot, SSH key, rsync",
    "provision_kernel": "provisioner kernel (backports kernel) and its reboot",
    "provision_bootstrap": "provisioner bootstrap (packages, Open vSwitch, venv)",
    "provision_doctor": "provisioner doctor",
    "vagrant_up": "vagrant up in all",
    "lab1_check": "lab 1 as typed, to `hpnlab lab check 1`",
    "experiment_failover_quick": "an experiment in the guest (failover.yaml --quick)",
    "results_copied_out": "its results folder copied out (scp)",
    "web_view_drawn": "web view through vagrant ssh -L, drawn in Chromium",
    "vagrant_provision_again": "vagrant provision again (nothing changes)",
    "vagrant_destroy": "vagrant destroy -f",
}


def times(run: Path) -> dict:
    got = {}
    for name in ("times-setup.json", "times.json"):
        if (run / name).exists():
            got.update(json.loads((run / name).read_text()))
    return got


def rows(got: dict) -> list[list[str]]:
    return [[label, f"{got[key]:,.0f} s"] for key, label in STEPS.items() if key in got]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a results/vagrant-<date> folder")
    a = ap.parse_args()
    got = times(a.run)
    kind = got.get("box_kind", "plain")  # runs before the offline box wrote no kind: the plain box
    text = table([f"step ({kind} box; TCG emulation, 2 cores)", "wall time"], rows(got))
    print(text)
    replace_block(BENCHMARKS, "vagrant" if kind == "plain" else f"vagrant-{kind}", text, stamp())


if __name__ == "__main__":
    main()
