"""The live view's state: the network being watched, a sampler thread that reads it every period, the
experiment's progress and ops, and the subscribers (one queue per open page) that every message is pushed to.

A Hub is the runner's Watch, so `hpnlab run --web` follows each variant's network as it comes and goes;
`hpnlab up --web` attaches its one network.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque

from testbed.experiment.watch import Watch

from .elements import elements, op_row
from .fabric import FabricProbe

log = logging.getLogger(__name__)

PERIOD_S = 0.5  # two pushes a second: a failed link shows within a second of its operstate changing
QUEUE_DEPTH = 64  # messages held for a page that reads slowly; past it the page misses states, not events


class Hub(Watch):
    def __init__(self, period_s: float = PERIOD_S):
        self.period_s = period_s
        self._lock = threading.Lock()
        self._subscribers: list[queue.Queue] = []
        self._probe: FabricProbe | None = None
        self._network: dict | None = None
        self._state: dict | None = None
        self._events: deque[dict] = deque(maxlen=200)
        self._ops: deque[dict] = deque(maxlen=1000)
        self._progress: dict | None = None
        self._t0 = time.time()
        self._sample_errors: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="web-sampler", daemon=True)

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> Hub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._publish("closed", {})

    # -- what the testbed tells it (Watch) ----------------------------------------
    def network_up(self, net, label: str = "", dilation: float = 1.0) -> None:
        topo = net.topo
        # the network is shaped at scale x dilation; the page names the two apart (bytes, and time)
        scale = net.qos_spec.scale / dilation if net.qos_spec is not None else None
        network = {"run": net.owner.run_id, "label": label, "kind": topo.kind, "counts": topo.counts(),
                   "routing": net.routing, "mode": net.mode, "hashing": net.hashing, "scale": scale,
                   "dilation": dilation, "elements": elements(topo)}
        with self._lock:
            self._probe, self._network, self._state = FabricProbe.of(net), network, None
        self._publish("network", network)

    def network_down(self, net) -> None:
        with self._lock:
            if self._network is None or self._network["run"] != net.owner.run_id:
                return
            self._probe = None
        self._event("network-down", f"network {net.owner.run_id} is going down")

    def op_done(self, op: dict) -> None:
        row = op_row(op)
        with self._lock:
            self._ops.append(row)
        self._publish("op", row)

    def iteration_done(self, it: dict) -> None:
        self._event("iteration", f"job {it['job']} iteration {it['iteration']}: {it['seconds']:.2f} s, "
                                 f"GPU utilization {100 * it['gpu_utilization']:.1f}%")

    def gray_found(self, finding: dict) -> None:
        self._event("gray", f"detector: link {finding['link']} is {finding['kind']} "
                            f"(seen at {finding['t']:.2f} s of the fabric's time)", link=finding["link"])

    def progress(self, done: int, total: int, text: str) -> None:
        with self._lock:
            self._progress = {"done": done, "total": total, "text": text}
        self._publish("progress", self._progress)

    # -- pages -----------------------------------------------------------------
    def snapshot(self) -> dict:
        """Everything a page needs to draw from scratch (its first message, and GET /api/snapshot)."""
        with self._lock:
            return self._snapshot()

    def subscribe(self) -> queue.Queue:
        q: queue.Queue = queue.Queue(maxsize=QUEUE_DEPTH)
        # under one lock: a network published between the snapshot and the subscription would reach neither
        with self._lock:
            q.put(("snapshot", self._snapshot()))
            self._subscribers.append(q)
        return q

    def unsubscribe(self, q: queue.Queue) -> None:
        with self._lock:
            if q in self._subscribers:
                self._subscribers.remove(q)

    # -- inside -----------------------------------------------------------------
    def _snapshot(self) -> dict:
        return {"network": self._network, "state": self._state, "events": list(self._events),
                "ops": list(self._ops), "progress": self._progress, "period_s": self.period_s}

    def _publish(self, kind: str, data: dict) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for q in subscribers:
            try:
                q.put_nowait((kind, data))
            except queue.Full:  # a page that stopped reading: it gets a fresh snapshot when it reconnects
                log.debug("a page is %d messages behind; dropping %s", QUEUE_DEPTH, kind)

    def _event(self, kind: str, text: str, **fields) -> None:
        event = {"t": round(time.time() - self._t0, 3), "kind": kind, "text": text, **fields}
        with self._lock:
            self._events.append(event)
        self._publish("event", event)

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            with self._lock:
                probe = self._probe
            if probe is None:
                continue
            try:
                state = probe.sample()
            except (OSError, RuntimeError, ValueError) as exc:  # the network went down under the sample
                log.debug("sample: %s", exc)
                continue
            except Exception as exc:  # noqa: BLE001 - a sampler that dies leaves the page frozen without a word
                self._sample_failed(exc)
                continue
            with self._lock:
                if self._probe is not probe:
                    continue
                before, self._state = self._state, state
            self._changes(before, state)
            self._publish("state", state)

    def _sample_failed(self, exc: Exception) -> None:
        """Said once per kind of error, in the log (with its traceback) and on the page; sampling goes on."""
        what = f"{type(exc).__name__}: {exc}"
        if what in self._sample_errors:
            return
        self._sample_errors.add(what)
        log.warning("the web view could not read the fabric: %s", what, exc_info=exc)
        self._event("sample-error", f"could not read the fabric ({what}); the view may lag")

    def _changes(self, before: dict | None, now: dict) -> None:
        """Events for links whose state changed since the last sample (every failed link on the first one)."""
        for name, st in now["links"].items():
            was = before["links"][name]["up"] if before else True
            if st["up"] != was:
                self._event("link-up" if st["up"] else "link-down",
                            f"link {name} {'restored' if st['up'] else 'failed'}", link=name)
