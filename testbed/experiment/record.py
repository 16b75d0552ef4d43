"""One variant-repetition's record as its jobs write it: ops, iterations and a halt, from several job threads.

Every change goes through a method under one lock, so two jobs finishing at once cannot interleave their
records, and the first halt is the one kept (later ones come from the same cause: the network stopped).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from testbed.schema.results import exact_bytes
from traffic.timebase import Clock, Timebase, stamp

from .watch import Watch

log = logging.getLogger(__name__)


def op_record(job: str, label: str, start: float, r, closed_form: int | None = None) -> dict:
    """An op's row in results.json and ops.csv (r: a traffic.metrics.OpResult; closed_form: the bytes its
    collective puts on the wire by definition, traffic/closed_form.py)."""
    return {"job": job, "label": label, "op": r.op, "algorithm": r.algorithm, "ranks": r.ranks, "size": r.size,
            "start": stamp(start), "seconds": stamp(r.seconds), "algbw_bps": r.algbw_bps,
            "busbw_bps": r.busbw_bps, "ideal_busbw_bps": r.ideal_busbw_bps, "fraction_of_ideal": r.fraction_of_ideal,
            "bytes_delivered": r.bytes_delivered, "bytes_expected": r.bytes_expected,
            "bytes_closed_form": closed_form, "step_seconds": r.step_seconds}


def bytes_ok(o: dict) -> bool:
    """An op's row (op_record) delivered exactly its bytes (testbed.schema.results.exact_bytes)."""
    return exact_bytes(o["bytes_delivered"], o["bytes_expected"], o.get("bytes_closed_form"))


class RunRecord:
    """The record of one run (`data`, what results.json keeps), written by the job threads."""

    def __init__(self, label: str, rep: int, watch: Watch, progress: Callable[[], None] | None = None,
                 timebase: Timebase | None = None, **fields):
        self.label, self.rep, self.watch, self.progress = label, rep, watch, progress
        self.clock = Clock(timebase)
        self.data: dict = {"variant": label, "repetition": rep, "dilation": self.clock.timebase.dilation, **fields,
                           "ops": [], "iterations": [], "halted": None}
        self._lock = threading.Lock()

    def start_clock(self) -> None:
        """Times in the record count from here: the traffic's start."""
        self.clock.restart()

    def now(self) -> float:
        """Virtual seconds since the traffic's start."""
        return self.clock.now()

    @property
    def halted(self) -> bool:
        with self._lock:
            return self.data["halted"] is not None

    def halt(self, job: str, what: str, exc: Exception) -> None:
        """A step that never ended: its job stops, and the run says where (the first halt only)."""
        with self._lock:
            if self.data["halted"] is None:
                self.data["halted"] = {"at": round(self.now(), 3), "op": what, "why": str(exc), "job": job}
        log.warning("%s rep %d halted: %s", self.label, self.rep, exc)

    def op(self, job: str, name: str, start: float, result, closed_form: int | None = None) -> None:
        row = op_record(job, name, start, result, closed_form)
        with self._lock:
            self.data["ops"].append(row)
        self.watch.op_done({"variant": self.label, "repetition": self.rep, **row})
        if self.progress:
            self.progress()

    def iteration(self, row: dict) -> None:
        with self._lock:
            self.data["iterations"].append(row)
        self.watch.iteration_done({"variant": self.label, "repetition": self.rep, **row})
