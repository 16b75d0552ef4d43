"""Naming a gray link while the run goes, from the counters an operator reads (testbed/net/gray.py).

Every `period_s` of the fabric's time the detector reads each gray link's counters: a link whose receiving
port counted input errors since it last looked is named lossy; a port running below its planned rate (its
operational speed, as a switch reports it) is named degraded. Each (link, kind) is named once, at the time it
was first seen. How soon after the failure that is (`delays`) is the detector's detection time: for a lossy
link it waits for the first lost frame, so at a loss rate p and r frames a second on the link it is about
1 / (p r) plus the period (the emulated fabric's frame rate is the real one divided by the bytes scale).
"""

from __future__ import annotations

import threading

from traffic.timebase import Clock, stamp

PERIOD_S = 0.1  # the fabric's seconds between two looks


class Detector:
    def __init__(self, read, clock: Clock, period_s: float = PERIOD_S, on_found=lambda finding: None):
        """read(): the gray links' counters now (GrayLinks.counters), {} while there are none; on_found: told of
        each finding as it is made (the live view marks the link)."""
        self.read, self.clock, self.period_s, self.on_found = read, clock, period_s, on_found
        self.found: list[dict] = []
        self._seen: set[tuple[str, str]] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="hpnlab-detector", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.clock.timebase.wall(self.period_s)):
                self.look(self.read())
        except Exception as exc:  # noqa: BLE001 - the run goes on; its record says the detector stopped
            self.error = f"{type(exc).__name__}: {exc}"

    def look(self, counters: dict[str, dict]) -> None:
        """One look at the counters: name what shows for the first time."""
        for link, c in counters.items():
            errors = sum(c.get("errors", {}).values())
            for kind, shows in (("lossy", errors > 0), ("degraded", c.get("rate_fraction", 1.0) < 1.0)):
                if shows and (link, kind) not in self._seen:
                    self._seen.add((link, kind))
                    self.found.append({"link": link, "kind": kind, "t": stamp(self.clock.now()),
                                       **({"errors": errors} if kind == "lossy" else
                                          {"rate_fraction": c["rate_fraction"]})})
                    self.on_found(self.found[-1])

    def stop(self) -> list[dict]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        return self.found


def delays(found: list[dict], fired: list[dict]) -> list[dict]:
    """Each gray failure that fired (the injector's log), with when the detector named its link (None: never),
    in the fabric's time after it fired."""
    out = []
    for f in fired:
        if not f.get("gray") or f["gray"][0] == "restore":
            continue
        kind = {"lossy": "lossy", "degrade": "degraded"}[f["gray"][0]]
        seen = [d for d in found if d["kind"] == kind and d["link"] in f["links"] and d["t"] >= f["t"]]
        out.append({"links": f["links"], "failure": f["gray"][0], "value": f["gray"][1], "at": f["t"],
                    "named_after_s": stamp(min(d["t"] for d in seen) - f["t"]) if seen else None})
    return out
