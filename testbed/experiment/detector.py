"""Naming a gray link while the run goes, from the counters an operator reads (testbed/net/gray.py).

Every `period_s` of the fabric's time the detector reads each gray link's counters: a link whose receiving
port counted input errors since it last looked is named lossy; a port running below its planned rate (its
operational speed, as a switch reports it) is named degraded. It also reads every link's carrier changes (the
switch port's link up/down count): a link that changed FLAP_CHANGES times within FLAP_WINDOW_S is named
flapping, as a switch's link-flap alarm would. Each (link, kind) is named once, at the time it was first
seen. How soon after the failure that is (`delays`) is the detector's detection time: for a lossy link it
waits for the first lost frame, so at a loss rate p and r frames a second on the link it is about 1 / (p r)
plus the period (the emulated fabric's frame rate is the real one divided by the bytes scale); for a flapping
link, until its fifth flap.
"""

from __future__ import annotations

import threading
from collections import deque

from traffic.timebase import Clock, stamp

PERIOD_S = 0.1  # the fabric's seconds between two looks
# the gray failures it names from counters, by the failure action (a pause storm is the PFC watchdog's to find)
DETECTED = {"lossy": "lossy", "degrade": "degraded"}
# A link-flap alarm: 5 flaps (down and up: 10 carrier changes) within 10 s, the default of Cisco's errdisable
# link-flap detection; a single failure and its repair (2 changes) never reaches it.
FLAP_CHANGES, FLAP_WINDOW_S = 10, 10.0


class Detector:
    def __init__(self, read, clock: Clock, period_s: float = PERIOD_S, on_found=lambda finding: None,
                 carriers=lambda: {}):
        """read(): the gray links' counters now (GrayLinks.counters), {} while there are none; carriers(): every
        link's carrier changes so far (Network.carrier_changes); on_found: told of each finding as it is made
        (the live view marks the link)."""
        self.read, self.carriers, self.clock, self.period_s, self.on_found = read, carriers, clock, period_s, on_found
        self.found: list[dict] = []
        self._seen: set[tuple[str, str]] = set()
        self._changes: dict[str, deque] = {}  # link -> (t, carrier changes so far) within the flap window
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="hpnlab-detector", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.look_carriers(self.carriers())  # the counts before anything fired
            while not self._stop.wait(self.clock.timebase.wall(self.period_s)):
                self.look(self.read())
                self.look_carriers(self.carriers())
        except Exception as exc:  # noqa: BLE001 - the run goes on; its record says the detector stopped
            self.error = f"{type(exc).__name__}: {exc}"

    def _name(self, link: str, kind: str, seen: dict) -> None:
        if (link, kind) not in self._seen:
            self._seen.add((link, kind))
            self.found.append({"link": link, "kind": kind, "t": stamp(self.clock.now()), **seen})
            self.on_found(self.found[-1])

    def look(self, counters: dict[str, dict]) -> None:
        """One look at the gray links' counters: name what shows for the first time."""
        for link, c in counters.items():
            errors = sum(c.get("errors", {}).values())
            if errors > 0:
                self._name(link, "lossy", {"errors": errors})
            if c.get("rate_fraction", 1.0) < 1.0:
                self._name(link, "degraded", {"rate_fraction": c["rate_fraction"]})

    def look_carriers(self, changes: dict[str, int]) -> None:
        """One look at every link's carrier changes: a link that changed FLAP_CHANGES times within the window."""
        now = self.clock.now()
        for link, n in changes.items():
            window = self._changes.setdefault(link, deque())
            window.append((now, n))
            while now - window[0][0] > FLAP_WINDOW_S:
                window.popleft()
            if n - window[0][1] >= FLAP_CHANGES:
                self._name(link, "flapping", {"carrier_changes": n - window[0][1]})

    def stop(self) -> list[dict]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        return self.found


def delays(found: list[dict], fired: list[dict]) -> list[dict]:
    """Each gray failure that fired and each flapping link (the injector's log; from its first down), with when the
    detector named its link (None: never), in the fabric's time after it fired."""
    out, flaps = [], set()
    for f in fired:
        if f.get("gray") and f["gray"][0] in DETECTED:
            kind, failure, value = DETECTED[f["gray"][0]], *f["gray"]
        elif f.get("flap") and not f["up"] and f["cause"] not in flaps:  # a link named flapping is named once
            flaps.add(f["cause"])
            kind, failure, value = "flapping", "flap", f["flap"]
        else:
            continue
        seen = [d for d in found if d["kind"] == kind and d["link"] in f["links"] and d["t"] >= f["t"]]
        out.append({"links": f["links"], "failure": failure, "value": value, "at": f["t"],
                    "named_after_s": stamp(min(d["t"] for d in seen) - f["t"]) if seen else None})
    return out
