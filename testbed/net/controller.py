"""The controller as its own process, OpenFlow and REST on loopback ports picked free.

Two runtimes of the same app (controllers/app.py): os-ken through the project's launcher (the default), or
Ryu's own `ryu-manager controllers.app` from .venv-ryu (requirements-ryu.txt), configured through the
HPNLAB_* environment the app reads.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from controllers.client import ControllerClient, write_token
from controllers.launcher import app_environment
from controllers.peers import own_listener
from testbed.system.ownership import RUN_DIR, Ownership
from topos.errors import InputError
from topos.inputs import open_output
from topos.model import Topology

ROOT = Path(__file__).resolve().parents[2]
RUNTIMES = ("os-ken", "ryu-manager")


def ryu_manager() -> Path:
    """The ryu-manager of the project's Ryu venv (or HPNLAB_RYU_MANAGER)."""
    return Path(os.environ.get("HPNLAB_RYU_MANAGER", ROOT / ".venv-ryu" / "bin" / "ryu-manager"))


def free_ports(n: int) -> list[int]:
    """`n` different ports free on loopback now: all held open while picked, because a port just closed is
    handed out again (the OpenFlow and REST ports once came out equal: the REST server took it, and the
    controller's check that it listens on its OpenFlow port was answered by the REST socket)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def check_runtime(runtime: str) -> None:
    if runtime not in RUNTIMES:
        raise InputError("unknown controller runtime", f"use one of: {', '.join(RUNTIMES)}",
                         field="controller_runtime", value=runtime)
    if runtime == "ryu-manager" and not os.access(ryu_manager(), os.X_OK):
        raise InputError("no ryu-manager", "make ryu-venv (scripts/ryu_venv.sh makes .venv-ryu), or set "
                         "HPNLAB_RYU_MANAGER", field="controller_runtime", value=str(ryu_manager()))


class ControllerProcess:
    def __init__(self, topo: Topology, mode: str, log_dir: Path, hashing: str = "ovs", runtime: str = "os-ken",
                 of_host: str = "127.0.0.1", remote_switches: dict[str, str] | None = None):
        """`of_host`: where it takes OpenFlow (a cluster run: the first server's cluster address);
        `remote_switches`: switch -> the address of the other server it runs on (admitted only from there)."""
        self.topo, self.mode, self.hashing, self.runtime = topo, mode, hashing, runtime
        self.of_host, self.remote_switches = of_host, remote_switches or {}
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
        self._log = open_output(self.log_path, "controller log")
        for _ in range(3):  # a port picked free can be taken before the controller binds it; it then exits 2
            self.of_port, rest_port = free_ports(2)
            self.proc = owner.spawn(self._command(topo_file, rest_port), "hpnlab controller",
                                    env=self._env(topo_file, rest_port), cwd=ROOT, stdout=self._log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            self.client = ControllerClient(rest_port, token)
            if self._listening(deadline=time.monotonic() + 30):
                return self.of_port
            if self.proc.poll() != 2:
                break
        raise RuntimeError(f"controller did not start; see {self.log_path}")

    def _command(self, topo_file: str, rest_port: int) -> list[str]:
        if self.runtime == "ryu-manager":
            return [str(ryu_manager()), "--ofp-listen-host", self.of_host, "--ofp-tcp-listen-port", str(self.of_port),
                    "controllers.app"]
        return [sys.executable, "-m", "controllers.launcher", "--topology", topo_file, "--mode", self.mode,
                "--hashing", self.hashing, "--of-host", self.of_host, "--of-port", str(self.of_port),
                "--rest-port", str(rest_port), "--token-file", str(self.token_file),
                "--remote-switches", json.dumps(self.remote_switches)]

    def _env(self, topo_file: str, rest_port: int) -> dict[str, str]:
        """ryu-manager's configuration is the app's HPNLAB_* environment (the launcher sets the same itself)."""
        if self.runtime != "ryu-manager":
            return dict(os.environ)
        return {**os.environ, "PYTHONPATH": str(ROOT),
                **app_environment(topo_file, self.mode, self.hashing, rest_port, str(self.token_file),
                                  self.remote_switches)}

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
