"""--web and --web-port, shared by the commands that start a network (up, run, lab start) or show a run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click

from .common import console

LIVE = "Serve the live web view on 127.0.0.1 (the URL with its token is printed)."


def web_opts(what: str = LIVE):
    """--web (doing `what`) and --web-port."""
    def add(f):
        f = click.option("--web-port", type=click.IntRange(0, 65535), default=0, show_default=True,
                         help="With --web: the port on 127.0.0.1 (0: any free one; a fixed one for an SSH "
                              "tunnel).")(f)
        return click.option("--web", is_flag=True, help=what)(f)

    return add


@contextmanager
def live_view(enabled: bool, port: int) -> Iterator:
    """The web view's Hub (the runner's Watch) while the block runs, or None without --web. The port is bound
    before the block starts, so a taken port stops the command before any network exists."""
    if not enabled:
        yield None
        return
    from testbed.web import Hub, WebServer

    with WebServer(hub=Hub(), port=port) as web:
        console.print(f"web view: {web.url}", soft_wrap=True, highlight=False)
        yield web.hub


def serve_results(run_dir, port: int) -> None:
    """A past run's folder in the web view until Ctrl-C."""
    import threading

    from testbed.web import WebServer

    with WebServer(results=run_dir, port=port) as web:
        console.print(f"web view of {run_dir.name}: {web.url} (Ctrl-C to stop)", soft_wrap=True, highlight=False)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
