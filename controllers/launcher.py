"""Start the controller app in this process: os-ken's app manager, OpenFlow and REST on loopback.

os-ken 4.x ships no manager command, so this is the small one the testbed
needs. Under Ryu, `ryu-manager controllers.app` works too with the same
HPNLAB_* environment.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading

from .hashing import MODELS as HASH_MODELS
from .state import MODES


def run(topology: str, mode: str, of_port: int, rest_port: int, verbose: bool = False, hashing: str = "ovs") -> None:
    os.environ.update(HPNLAB_TOPOLOGY=os.path.abspath(topology), HPNLAB_MODE=mode, HPNLAB_REST_PORT=str(rest_port),
                      HPNLAB_HASHING=hashing)
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s.%(msecs)03d %(name)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("os_ken", "ryu"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        from os_ken import cfg
        from os_ken.base.app_manager import AppManager
        project = "os_ken"
    except ImportError:  # pragma: no cover
        from ryu import cfg  # type: ignore[no-redef]
        from ryu.base.app_manager import AppManager  # type: ignore[no-redef]
        project = "ryu"
    cfg.CONF(args=["--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port", str(of_port)], project=project)
    # Not AppManager.run_apps: with os-ken's native threads its shutdown path
    # calls a kill() its threads do not have. Start the apps, wait for a signal,
    # close them, and leave.
    mgr = AppManager.get_instance()
    mgr.load_apps(["controllers.app"])
    mgr.instantiate_apps(**mgr.create_contexts())
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, lambda *_: stop.set())
    stop.wait()
    try:
        mgr.close()
    finally:
        logging.shutdown()
        os._exit(0)  # switch connection threads are not daemons; nothing else is left to flush


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m controllers.launcher")
    ap.add_argument("--topology", required=True)
    ap.add_argument("--mode", choices=MODES, default="ecmp")
    ap.add_argument("--hashing", choices=HASH_MODELS, default="ovs")
    ap.add_argument("--of-port", type=int, default=6653)
    ap.add_argument("--rest-port", type=int, default=8080)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    run(a.topology, a.mode, a.of_port, a.rest_port, a.verbose, a.hashing)


if __name__ == "__main__":
    main()
