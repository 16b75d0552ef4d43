"""A run's scratch folder: command batches and scripts handed to ip, ovs-ofctl and host shells.

Mininet's node.cmd() writes one line to a shell on a pty, and very long lines
never complete: long work goes through files written here.
"""

from __future__ import annotations

from collections.abc import Callable

from testbed.system.ownership import Ownership
from topos.inputs import write_file


class Workdir:
    def __init__(self, owner: Ownership):
        self.path = owner.make_scratch()  # named by the run's record first: a kill -9 leaves nothing unowned
        self.site_of: Callable[[str], object] | None = None  # a cluster run: node -> the site it runs on

    def write(self, name: str, lines: list[str], node: str | None = None) -> str:
        """The file's path as `node` sees it: on another server, the file is written there."""
        text = "\n".join(lines) + "\n"
        if node is not None and self.site_of is not None:
            return self.site_of(node).write(name, text)
        return str(write_file(self.path / name, text, "scratch file"))
