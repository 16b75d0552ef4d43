"""The controller as its own process (controllers.launcher), OpenFlow and REST on loopback ports picked free."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from controllers.client import ControllerClient, write_token
from controllers.peers import own_listener
from testbed.system.ownership import RUN_DIR, Ownership
from topos.model import Topology


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ControllerProcess:
    def __init__(self, topo: Topology, mode: str, log_dir: Path, hashing: str = "ovs"):
        self.topo, self.mode, self.hashing = topo, mode, hashing
        self.log_path = log_dir / "controller.log"
        self.proc: subprocess.Popen | None = None
        self.client: ControllerClient | None = None
        self.of_port: int | None = None
        self.token_file: Path | None = None

    def start(self, owner: Ownership, topo_file: str) -> int:
        """Start it and wait until it listens, so switches get a controller at once; returns the OpenFlow port.

        The REST token goes in the run's own 0600 file beside its record (removed with it)."""
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        self.token_file = RUN_DIR / f"{owner.run_id}.token"
        token = write_token(str(self.token_file))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "w")
        for _ in range(3):  # a port picked free can be taken before the controller binds it; it then exits 2
            self.of_port, rest_port = free_port(), free_port()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "controllers.launcher", "--topology", topo_file, "--mode", self.mode,
                 "--hashing", self.hashing, "--of-port", str(self.of_port), "--rest-port", str(rest_port),
                 "--token-file", str(self.token_file)],
                stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
            owner.process(self.proc.pid, "hpnlab controller")
            self.client = ControllerClient(rest_port, token)
            if self._listening(deadline=time.monotonic() + 30):
                return self.of_port
            if self.proc.poll() != 2:
                break
        raise RuntimeError(f"controller did not start; see {self.log_path}")

    def _listening(self, deadline: float) -> bool:
        while self.alive() and time.monotonic() < deadline:
            if own_listener(self.of_port, self.proc.pid):
                return True
            time.sleep(0.05)
        return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout: float = 60) -> dict:
        """Until every switch is connected and routed (a barrier confirmed its rules)."""
        return self.client.wait_ready(timeout, alive=self.alive)

    def stop(self) -> None:
        p = self.proc
        if p is None:
            return
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self._log.close()
        self.proc = None
