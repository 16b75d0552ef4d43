"""hpnlab's Python API: build a network, shape it, run experiments.

    from testbed import Network, QosSpec, Experiment, run
    from topos import build

    with Network(build("hpn"), routing="controller", mode="precise", qos=QosSpec(scale=10_000)) as net:
        net.set_link("h5:nic0:p0", up=False)
        print(net.pingall().loss)

    out = run("experiments/precise_vs_ecmp.yaml", reduced=True)   # a results folder

Packages, lowest layer first: system/ (capabilities, ownership) <- qos/ <- net/
<- experiment/, labs/ <- cli/. Names are loaded on first use, so importing one
sub-package does not import the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .experiment.runner import run
    from .experiment.spec import Experiment, load
    from .net.network import Network
    from .qos.spec import PfcSpec, QosSpec

_HOMES = {"Network": "testbed.net.network", "QosSpec": "testbed.qos.spec", "PfcSpec": "testbed.qos.spec",
          "Experiment": "testbed.experiment.spec", "load": "testbed.experiment.spec",
          "run": "testbed.experiment.runner"}

__all__ = ["Experiment", "Network", "PfcSpec", "QosSpec", "load", "run"]


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'testbed' has no attribute {name!r}")
