"""A run's scratch folder: command batches and scripts handed to ip, ovs-ofctl and host shells.

Mininet's node.cmd() writes one line to a shell on a pty, and very long lines
never complete: long work goes through files written here.
"""

from __future__ import annotations

import tempfile
from pathlib import Path


class Workdir:
    def __init__(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="hpnlab-")
        self.path = Path(self._tmp.name)

    def write(self, name: str, lines: list[str]) -> str:
        path = self.path / name
        path.write_text("\n".join(lines) + "\n")
        return str(path)

    def cleanup(self) -> None:
        self._tmp.cleanup()
