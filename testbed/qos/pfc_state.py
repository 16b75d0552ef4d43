"""PFC's state machine, pure: each lossless queue's XOFF/XON hysteresis, and the pauses it holds upstream.

The agent (pfc.py) feeds it what it sees, however it sees it: a crossing the
kernel reported (`QueueState.crossed`), or a backlog a poll read
(`QueueState.level`, the same hysteresis decided here); and what it is told:
another server's pauses on our ports. It acts on what comes back: a port's
priority to stop or resume (`PauseState`), a PAUSE frame to put on a link toward
another server's port (`HeldElsewhere`). Nothing here touches the system.

A pause is held by every congested queue that asked for it and ends when the
last of them lets go, as a port paused by several neighbours of a switch sends
again only once none of them holds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from .ports import Port
from .spec import PfcPlan

Key = tuple[str, int]  # (port key, 802.1p priority)
Hold = tuple[str, int, str]  # (paused port, priority, the congested queue's port holding it)


def pauses_whom(p: Port, by_node: dict[str, list[Port]], ingress: bool) -> list[str]:
    """Whom the lossless queue of port `p` pauses (port keys, seen from their side; `by_node`: every port by the
    device that sends on it). Model ingress: a switch port stands for its ingress account, which pauses the one
    neighbour whose frames it holds; model egress: every ingress neighbour of the switch but the one p sends to.
    A host pauses nobody."""
    if p.is_host:
        return []
    if ingress:
        return [f"{p.peer}:{p.peer_port}"]
    return [f"{q.peer}:{q.peer_port}" for q in by_node[p.node] if q.key != p.key]


@dataclass
class QueueState:
    """One lossless queue: whether it stands above XOFF (it then holds its upstream paused), with its figures."""

    port: Port
    priority: int
    plan: PfcPlan  # the port's numbers for this priority (port.plan.lossless[priority])
    upstream: list[str]  # keys of the egress ports whose same priority this queue pauses
    xoff: bool = False
    max_backlog: int = 0
    xoff_events: int = 0
    drops: int = 0

    def crossed(self, above: bool) -> bool:
        """A crossing reported (XOFF upward when `above`, XON downward otherwise): True when it changes the
        queue's state (the kernel reports each once; one the agent already acted on changes nothing)."""
        if above == self.xoff:
            return False
        self.xoff = above
        self.xoff_events += above
        return True

    def level(self, backlog: int) -> bool | None:
        """A backlog read (a poll): the crossing it makes, applied (True: XOFF, False: XON), None for none. Past
        XOFF pauses, below XON resumes, in between nothing changes; a queue with nobody upstream keeps its
        depth only."""
        self.max_backlog = max(self.max_backlog, backlog)
        if not self.upstream:
            return None
        if not self.xoff and backlog > self.plan.xoff:
            self.crossed(True)
            return True
        if self.xoff and backlog < self.plan.xon:
            self.crossed(False)
            return False
        return None


@dataclass
class PauseState:
    """One port's priority, as the queues that hold it paused see it: who holds it, how often and how long it
    was paused."""

    by: set[Key] = field(default_factory=set)  # congested queues holding this port paused
    events: int = 0
    since: float | None = None
    paused_s: float = 0.0

    def hold(self, by: Key, now: float) -> bool:
        """`by` holds the pause from `now`: True when it starts it (stop the port's priority)."""
        starts = not self.by
        if starts:
            self.events += 1
            self.since = now
        self.by.add(by)
        return starts

    def release(self, by: Key, now: float) -> bool:
        """`by` lets go: True when it was the last (resume the port's priority)."""
        self.by.discard(by)
        return not self.by and self.end(now)

    def end(self, now: float) -> bool:
        """The pause over at `now` whoever held it (the agent stopping): True if one was on."""
        if self.since is None:
            return False
        self.paused_s += now - self.since
        self.since = None
        self.by.clear()
        return True


@dataclass
class HeldElsewhere:
    """The pauses our queues hold on other servers' ports, per server: their agents apply them, we say them."""

    by_server: dict[str, set[Hold]] = field(default_factory=dict)

    def hold(self, server: str, target: Key, by: Key) -> bool:
        """True when `target` was not held before (a PAUSE frame goes toward it)."""
        held = self.by_server.setdefault(server, set())
        first = not any(h[:2] == target for h in held)
        held.add((*target, by[0]))
        return first

    def release(self, server: str, target: Key, by: Key) -> bool:
        """True when nothing holds `target` any more (a resume frame goes toward it)."""
        held = self.by_server.get(server, set())
        held.discard((*target, by[0]))
        return not any(h[:2] == target for h in held)

    def held(self, server: str) -> list[Hold]:
        return sorted(self.by_server.get(server, ()))

    def servers(self) -> list[str]:
        """The servers we hold something on now."""
        return [s for s, h in self.by_server.items() if h]


class RemotePauses(Protocol):
    """Pauses to and from the agents of other servers (testbed.cluster.pauses.PauseWire)."""

    ports: dict[str, Port]  # the other servers' ports, by key
    refresh_s: float  # how often held pauses are said again (a lost message is repaired by the next)
    expire_s: float  # pauses from a server that said nothing for this long are released

    def server_of(self, key: str) -> str: ...
    def fileno(self) -> int: ...
    def send(self, server: str, holds: list[Hold]) -> None: ...
    def receive(self) -> list[tuple[str, list[Hold]]]: ...
    def silent_since(self, server: str) -> float: ...
    def report(self) -> dict: ...
