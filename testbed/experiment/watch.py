"""What a run tells whoever watches it as it goes (the live web view, the progress bar): a base class whose
every method does nothing, so the runner calls them unconditionally and a watcher overrides what it shows."""

from __future__ import annotations


class Watch:
    def network_up(self, net, label: str, dilation: float = 1.0) -> None:
        """A variant's network is built, routed and shaped; its time runs `dilation` times slower than the
        fabric's (its links are shaped at real rate / (scale x dilation))."""

    def network_down(self, net) -> None:
        """That network is about to be taken down."""

    def op_done(self, op: dict) -> None:
        """One op finished: the runner's op record (job, label, size, seconds, busbw_bps, fraction_of_ideal...)."""

    def iteration_done(self, it: dict) -> None:
        """One training iteration of a job finished (its record in results.json)."""

    def progress(self, done: int, total: int, text: str) -> None:
        """Ops done of the whole run, and what runs now."""

    def gray_found(self, finding: dict) -> None:
        """The detector named a gray link (testbed/experiment/detector.py): link, kind (lossy, degraded), t."""
