"""A small client for the controller's REST API (stdlib only), used by the testbed, tests and benchmarks."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request


class ControllerError(RuntimeError):
    def __init__(self, status: int, body: dict):
        super().__init__(f"HTTP {status}: {body.get('error', body)}")
        self.status = status
        self.body = body


class ControllerClient:
    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0):
        self.base = f"http://{host}:{port}"
        self.timeout = timeout

    def request(self, method: str, path: str, body: object | None = None) -> object:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as exc:
            raise ControllerError(exc.code, json.loads(exc.read() or b"{}")) from None

    def get(self, path: str) -> object:
        return self.request("GET", path)

    def health(self) -> dict:
        return self.get("/health")

    def declare(self, flows: list[dict]) -> list[dict]:
        return self.request("POST", "/flows", {"flows": flows})["flows"]

    def withdraw(self, keys: list[str] | None = None) -> int:
        return self.request("DELETE", "/flows", None if keys is None else {"flows": keys})["withdrawn"]

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
