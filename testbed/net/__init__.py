"""The emulated network's lifecycle: Mininet + OVS from a Topology, hosts, routes, steering, the controller
process and checks, behind the `Network` facade."""

from .checks import PingResult
from .network import Network

__all__ = ["Network", "PingResult"]
