"""Links, priorities and lossless queues: what is asked (spec), which ports (ports), the qdiscs that do it
(shaper, through pyroute2 and the raw netlink fast path), the PFC-like pause agent (pfc), and reading it back
from another process (show). Takes ports, namespaces and rates; knows nothing of Mininet or the Network."""

from .spec import PfcSpec, QosSpec

__all__ = ["PfcSpec", "QosSpec"]
