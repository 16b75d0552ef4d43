"""--web and --web-port, shared by the commands that start a network (up, run, lab start) or show a run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

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


def metrics_opt(f):
    return click.option("--metrics-port", type=click.IntRange(1, 65535), default=None,
                        help="Serve Prometheus metrics on 127.0.0.1:PORT/metrics while it runs (link utilization, "
                             "queue depths, pauses, ECN marks, op busbw).")(f)


@contextmanager
def live_view(enabled: bool, port: int, metrics_port: int | None = None) -> Iterator:
    """The web view's Hub (the runner's Watch) while the block runs, or None without --web or --metrics-port.
    The ports are bound before the block starts, so a taken port stops the command before any network exists."""
    if not enabled and metrics_port is None:
        yield None
        return
    from testbed.web import Hub, WebServer

    with ExitStack() as stack:
        if enabled:
            web = stack.enter_context(WebServer(hub=Hub(), port=port))
            console.print(f"web view: {web.url}", soft_wrap=True, highlight=False)
            hub = web.hub
        else:
            hub = Hub().start()
            stack.callback(hub.stop)
        if metrics_port is not None:
            from testbed.web.metrics import MetricsServer

            metrics = stack.enter_context(MetricsServer(hub, metrics_port))
            console.print(f"metrics: {metrics.url}", soft_wrap=True, highlight=False)
        yield hub


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
