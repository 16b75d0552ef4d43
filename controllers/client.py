"""A small client for the controller's REST API (stdlib only), used by the testbed, tests and benchmarks."""

from __future__ import annotations

import json
import os
import secrets
import stat
import time
import urllib.error
import urllib.request

from topos.inputs import create_new


def write_token(path: str) -> str:
    """A new REST token in a new file only its owner reads (never through an existing file or link)."""
    token = secrets.token_hex(24)
    create_new(path, (token + "\n").encode(), 0o600)
    return token


def read_token(path: str) -> str:
    """The token from a file that is private to its owner (a token others can read protects nothing)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077:
            raise PermissionError(f"token file {path}: must be a regular file with mode 0600, is "
                                  f"{stat.filemode(st.st_mode)}")
        token = f.read(256).strip()
    if len(token) < 16:
        raise ValueError(f"token file {path}: holds no token (at least 16 characters)")
    return token


class ControllerError(RuntimeError):
    def __init__(self, status: int, body: dict):
        super().__init__(f"HTTP {status}: {body.get('error', body)}")
        self.status = status
        self.body = body


CHUNK = 1024  # flows per request: the server's MAX_FLOWS


class ControllerClient:
    def __init__(self, port: int, token: str, host: str = "127.0.0.1", timeout: float = 10.0):
        self.base = f"http://{host}:{port}"
        self.timeout = timeout
        self.headers = {"Authorization": f"Bearer {token}"}

    def request(self, method: str, path: str, body: object | None = None, timeout: float | None = None) -> object:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={**self.headers, **({"Content-Type": "application/json"} if data else {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as exc:
            raise ControllerError(exc.code, json.loads(exc.read() or b"{}")) from None

    def get(self, path: str, timeout: float | None = None) -> object:
        return self.request("GET", path, timeout=timeout)

    def health(self) -> dict:
        return self.get("/health")

    def declare(self, flows: list[dict]) -> list[dict]:
        return [v for i in range(0, len(flows), CHUNK)
                for v in self.request("POST", "/flows", {"flows": flows[i:i + CHUNK]})["flows"]]

    def withdraw(self, keys: list[str] | None = None) -> int:
        if keys is None:
            return self.request("DELETE", "/flows")["withdrawn"]
        return sum(self.request("DELETE", "/flows", {"flows": keys[i:i + CHUNK]})["withdrawn"]
                   for i in range(0, len(keys), CHUNK))

    def wait_ready(self, timeout: float, alive=lambda: True) -> dict:
        """Until every switch is connected and routed; `alive` tells if the controller process still runs."""
        deadline = time.monotonic() + timeout
        last: dict = {}
        while time.monotonic() < deadline:
            if not alive():
                raise RuntimeError("the controller process exited during start-up")
            try:
                last = self.health()
                if last.get("ready"):
                    return last
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.05)
        raise TimeoutError(f"controller not ready after {timeout:.0f} s: {last}")
