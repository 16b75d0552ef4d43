"""The web view's HTTP server: the page and its assets, a snapshot, a stream of server-sent events (live), a
past run's data and plots (results).

It listens on 127.0.0.1 only. Every request except the page's static assets (the same for everyone: the page
script and the vendored libraries) must carry the token printed with the URL, as `?token=` or the
`X-Hpnlab-Token` header, so another local user cannot read the run.
"""

from __future__ import annotations

import errno
import hmac
import json
import logging
import os
import queue
import secrets
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from topos.errors import InputError

from .hub import Hub
from .past import results_page

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".png": "image/png"}
KEEPALIVE_S = 10.0  # a comment line now and then, so a page notices a server that is gone
LOOPBACK = "127.0.0.1"
TEXT = "text/plain; charset=utf-8"
CLIENT_TIMEOUT_S = 30.0  # a client silent this long is dropped; above Chromium's 10 s for an unused socket it
# preconnected, which it may still pick up at 10 s (at 10 s here a loaded page's first fetch failed once)
LISTEN_BACKLOG = 128  # http.server's 5 refuses a page's burst of requests on a busy machine
PLOT_SUFFIX = ".png"  # all a past run's folder serves: its own plots, directly in it


class _Server(ThreadingHTTPServer):
    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """Into the log, not a traceback on stderr over the Mininet CLI."""
        log.debug("web view: a request from %s failed", client_address, exc_info=True)


class WebServer:
    """`with WebServer(hub=Hub()) as web: print(web.url)` (live) or `WebServer(results=run_dir)` (a past run).

    The port is bound in the constructor, so a port already taken is an error before any network starts.
    """

    def __init__(self, *, hub: Hub | None = None, results: Path | None = None, port: int = 0):
        if (hub is None) == (results is None):
            raise ValueError("give a hub (live) or a results folder, not both")
        self.hub, self.results = hub, results
        self.token = secrets.token_urlsafe(18)
        self.closing = threading.Event()
        try:
            self.httpd = _Server((LOOPBACK, port), _Handler)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise InputError("the web view's port is taken", "choose another --web-port, or 0 for any free one",
                             field="web-port", value=port) from None
        self.httpd.view = self
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="web-server", daemon=True)
        self._page: dict | None = None

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/?token={self.token}"

    def start(self) -> WebServer:
        if self.hub is not None:
            self.hub.start()
        self._thread.start()
        log.info("web view on %s", self.url)
        return self

    def stop(self) -> None:
        self.closing.set()
        if self.hub is not None:
            self.hub.stop()  # its last message ends every open event stream
        if self._thread.is_alive():
            self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> WebServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def authorised(self, token: str) -> bool:
        return hmac.compare_digest(token.encode(), self.token.encode())

    def snapshot(self) -> dict:
        if self.hub is not None:
            return {"mode": "live", **self.hub.snapshot()}
        if self._page is None:
            try:
                self._page = results_page(self.results)
            except InputError as exc:  # a results.json edited or cut short: the page says so
                self._page = {"mode": "results", "run": self.results.name, "error": f"{exc.field}: {exc.what}"}
        return self._page


class _Handler(BaseHTTPRequestHandler):
    server_version = "hpnlab-web"
    timeout = CLIENT_TIMEOUT_S

    def log_message(self, fmt, *args):  # into logging, not stderr over the Mininet CLI
        log.debug("%s " + fmt, self.address_string(), *args)

    @property
    def view(self) -> WebServer:
        return self.server.view

    def do_GET(self):
        url = urlsplit(self.path)
        if url.path.startswith("/static/"):
            return self._file(STATIC, url.path.removeprefix("/static/"))
        token = parse_qs(url.query).get("token", [""])[0] or self.headers.get("X-Hpnlab-Token", "")
        if not self.view.authorised(token):
            return self._send(403, TEXT, b"403: open the URL hpnlab printed (it has the token)\n")
        if url.path == "/":
            return self._file(STATIC, "index.html")
        if url.path == "/api/snapshot":
            return self._send(200, "application/json", json.dumps(self.view.snapshot()).encode())
        if url.path == "/api/events" and self.view.hub is not None:
            return self._events(self.view.hub)
        if url.path.startswith("/api/plot/") and self.view.results is not None:
            name = url.path.removeprefix("/api/plot/")
            if "/" in name or not name.endswith(PLOT_SUFFIX):  # the run's own plots, not its other files
                return self._send(404, TEXT, b"404\n")
            return self._file(self.view.results, name)
        return self._send(404, TEXT, b"404\n")

    def _head(self, status: int, ctype: str, length: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(length))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()

    def _send(self, status: int, ctype: str, body: bytes) -> None:
        self._head(status, ctype, len(body))
        self.wfile.write(body)

    def _file(self, folder: Path, name: str) -> None:
        """A regular file directly or below `folder`, of a type the page uses; nothing outside it. Streamed: a
        large file costs a buffer, not its size in memory, per request."""
        try:
            path = (folder / name).resolve()
            if not (path.is_relative_to(folder.resolve()) and path.is_file() and path.suffix in TYPES):
                return self._send(404, TEXT, b"404\n")
            f = open(path, "rb")  # noqa: SIM115 - closed below
        except (OSError, ValueError):  # a name too long for the file system, a NUL byte
            return self._send(404, TEXT, b"404\n")
        with f:
            self._head(200, TYPES[path.suffix], os.fstat(f.fileno()).st_size)
            shutil.copyfileobj(f, self.wfile, 1 << 16)

    def _events(self, hub: Hub) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        q = hub.subscribe()
        try:
            while not self.view.closing.is_set():
                try:
                    kind, data = q.get(timeout=KEEPALIVE_S)
                except queue.Empty:
                    self.wfile.write(b": keepalive\n\n")
                    self.wfile.flush()
                    continue
                self.wfile.write(f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
                if kind == "closed":
                    break
        except (BrokenPipeError, ConnectionResetError):  # the page was closed
            pass
        finally:
            hub.unsubscribe(q)
