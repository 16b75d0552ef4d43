"""The web view: the fabric drawn live in a browser (topology by tiers, planes and rails, link utilization from
OVS's counters, queues and PFC pauses, failed links, precise flows, an experiment's progress and bus bandwidth),
or a past run's results folder. Served on 127.0.0.1 with a token; the page's libraries are in static/vendor."""

from .hub import Hub
from .server import WebServer

__all__ = ["Hub", "WebServer"]
