"""Start the controller app in this process: os-ken's app manager, OpenFlow and REST on loopback.

os-ken 4.x ships no manager command, so this is the small one the testbed
needs. Under Ryu, `ryu-manager controllers.app` works too with the same
HPNLAB_* environment.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time

from .client import read_token
from .hashing import MODELS as HASH_MODELS
from .peers import listening, own_listener
from .state import MODES

# A switch that stops answering echo requests for ~10 s is disconnected (a hung or stopped
# ovs-vswitchd); userspace OVS under full load answers within a second or two.
ECHO_INTERVAL_S = 2.0
ECHO_UNREPLIED = 5
LISTEN_WAIT_S = 10.0


def leave(status: int, remove: tuple[str, ...]) -> None:
    """os._exit, after removing the files this process was given to remove (exit handlers never run)."""
    for f in remove:
        with contextlib.suppress(OSError):
            os.unlink(f)
    logging.shutdown()
    os._exit(status)


def fail(message: str, remove: tuple[str, ...] = ()) -> None:
    print(f"hpnlab controller: {message}", file=sys.stderr)
    leave(2, remove)


def app_environment(topology: str, mode: str, hashing: str, rest_port: int, token_file: str | None,
                    remote_switches: dict[str, str] | None = None) -> dict[str, str]:
    """The HPNLAB_* variables controllers/app.py reads its configuration from, under any runtime."""
    return {"HPNLAB_TOPOLOGY": os.path.abspath(topology), "HPNLAB_MODE": mode, "HPNLAB_HASHING": hashing,
            "HPNLAB_REST_PORT": str(rest_port), "HPNLAB_REST_TOKEN_FILE": os.path.abspath(token_file or ""),
            "HPNLAB_REMOTE_SWITCHES": json.dumps(remote_switches or {})}


def run(topology: str, mode: str, of_port: int, rest_port: int, verbose: bool = False, hashing: str = "ovs",
        token_file: str | None = None, remove_at_exit: tuple[str, ...] = (), of_host: str = "127.0.0.1",
        remote_switches: dict[str, str] | None = None) -> None:
    if rest_port and rest_port == of_port:  # the REST socket would answer the check that OpenFlow listens
        fail(f"--rest-port={rest_port}: the same as --of-port; give the REST API a port of its own", remove_at_exit)
    if rest_port and not token_file:
        fail("--token-file: the REST API needs a token file (mode 0600; 'hpnlab controller' makes one)",
             remove_at_exit)
    if token_file:
        try:
            read_token(token_file)
        except (OSError, ValueError) as exc:
            fail(f"--token-file={token_file}: {exc}", remove_at_exit)
    os.environ.update(app_environment(topology, mode, hashing, rest_port, token_file, remote_switches))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s.%(msecs)03d %(name)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("os_ken", "ryu"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        from os_ken import cfg
        from os_ken.base.app_manager import AppManager
        from os_ken.controller import controller  # noqa: F401  (registers the OpenFlow options set below)
        project = "os_ken"
    except ImportError:  # pragma: no cover
        from ryu import cfg  # type: ignore[no-redef]
        from ryu.base.app_manager import AppManager  # type: ignore[no-redef]
        from ryu.controller import controller  # type: ignore[no-redef]  # noqa: F401
        project = "ryu"
    cfg.CONF(args=["--ofp-listen-host", of_host, "--ofp-tcp-listen-port", str(of_port)], project=project)
    cfg.CONF.set_override("echo_request_interval", ECHO_INTERVAL_S)
    cfg.CONF.set_override("maximum_unreplied_echo_requests", ECHO_UNREPLIED)
    # Not AppManager.run_apps: with os-ken's native threads its shutdown path
    # calls a kill() its threads do not have. Start the apps, wait for a signal,
    # close them, and leave.
    if listening(of_port):  # before os-ken binds it, a listener there is another process's
        fail(f"--of-port={of_port}: another process listens there; choose a free port", remove_at_exit)
    mgr = AppManager.get_instance()
    mgr.load_apps(["controllers.app"])
    try:
        mgr.instantiate_apps(**mgr.create_contexts())
    except OSError as exc:  # the REST port is bound in the app's constructor
        fail(f"--rest-port={rest_port}: cannot listen on 127.0.0.1 ({exc.strerror}); choose a free port",
             remove_at_exit)
    # os-ken listens for OpenFlow in a thread of its own and only logs a failed bind:
    # a controller whose port another process holds would run on with no switch able to reach it.
    deadline = time.monotonic() + LISTEN_WAIT_S
    while not own_listener(of_port):
        if time.monotonic() > deadline:
            fail(f"--of-port={of_port}: not listening on {of_host} after {LISTEN_WAIT_S:.0f} s (another process "
                 f"holds the port?); choose a free port", remove_at_exit)
        time.sleep(0.05)
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, lambda *_: stop.set())
    stop.wait()
    try:
        mgr.close()
    finally:
        leave(0, remove_at_exit)  # switch connection threads are not daemons; nothing else is left to flush


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m controllers.launcher")
    ap.add_argument("--topology", required=True)
    ap.add_argument("--mode", choices=MODES, default="ecmp")
    ap.add_argument("--hashing", choices=HASH_MODELS, default="ovs")
    ap.add_argument("--of-port", type=int, default=6653)
    ap.add_argument("--rest-port", type=int, default=8080)
    ap.add_argument("--of-host", default="127.0.0.1",
                    help="address to take OpenFlow on: loopback, or a cluster run's own address on its first server")
    ap.add_argument("--remote-switches", type=json.loads, default=None,
                    help='JSON {"switch": "address"}: switches on other servers, admitted only from that address')
    ap.add_argument("--token-file", help="0600 file with the token REST requests must carry")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    run(a.topology, a.mode, a.of_port, a.rest_port, a.verbose, a.hashing, a.token_file, of_host=a.of_host,
        remote_switches=a.remote_switches)


if __name__ == "__main__":
    main()
