"""A site: a machine that holds part of a run, with its own ownership record, link group and shell.

On one machine there is one site, this one (LocalSite). A cluster run has this one and a server agent per
other server (testbed.cluster.servers.ServerAgent), with the same methods, so the network layer builds,
records and removes things the same way wherever they are.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from topos.inputs import write_file

from .linkgroup import delete_links, group_links
from .ownership import Ownership


class LocalSite:
    name = "local"

    def __init__(self, owner: Ownership, scratch: Path):
        self.owner, self.scratch = owner, scratch

    @property
    def run_id(self) -> str:
        return self.owner.run_id

    @property
    def link_group(self) -> int:
        return self.owner.link_group

    def intend(self, kind: str, names: list[str]) -> None:
        self.owner.intend(kind, names)

    def process(self, pid: int, what: str, netns: bool = False) -> None:
        self.owner.process(pid, what, netns)

    def group(self, names: list[str]) -> None:
        group_links(names, self.owner.link_group)

    def delete_links(self, names: list[str]) -> int:
        return delete_links(names, self.owner.link_group)

    def sh(self, script: str, timeout: float = 120) -> tuple[int, str]:
        # on standard input, not as `sh -c` argument: the kernel caps one argument at 128 KiB, and the
        # offloads script of a 128-host HPN (1,536 ports) is longer
        r = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True, timeout=timeout)
        return r.returncode, r.stdout + r.stderr

    def write(self, name: str, text: str) -> str:
        return str(write_file(self.scratch / name, text, "scratch file"))
