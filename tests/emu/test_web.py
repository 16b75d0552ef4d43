"""The web view in Debian's Chromium (headless, driven by Playwright): the page a user opens while `hpnlab up`
or `hpnlab run` runs, and a past run's folder. The checks read the page's own model (window.hpnlab: the
Cytoscape graph and what the charts hold), so they see what is drawn, not only what the server sent.

Screenshots go to results/screenshots/ (the docs' picture docs/img/web-view.png is one of them)."""

from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from topos import build

pytestmark = pytest.mark.slow

HPNLAB = str(Path(sys.executable).parent / "hpnlab")
CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(__file__).resolve().parents[2] / "results" / "screenshots"
FAIL_SHOWN_WITHIN_S = 2.0

EXPERIMENT = """
name: web_allreduce
topology: {name: hpn}
routing: precise
qos: {scale: 10000}
time: {dilation: 2}
workload:
  collective: {op: allreduce, size: 40GB, algorithm: ring, ranks: rail0, iters: 2}
"""
# Time dilated 2x at half the bytes scale: the links are shaped at rate / 20,000 and carry the bytes of 80 GB at
# 1/20,000, as before dilation; the page must name the two apart (bytes scale, and time).
DILATED = r"scale 1/10.000 · time dilated 2x"


class Command:
    """An `hpnlab` command in the background; its output is read line by line as it comes."""

    def __init__(self, args: list[str], cwd: Path, preexec_fn=None):
        self.p = subprocess.Popen([HPNLAB, *args], cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, bufsize=1, preexec_fn=preexec_fn)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.p.stdout:
            self.lines.put(line)

    def wait_for(self, pattern: str, timeout: float) -> re.Match:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.p.poll() is not None and self.lines.empty():
                    break
                continue
            self.seen.append(line)
            m = re.search(pattern, line)
            if m:
                return m
        raise AssertionError(f"no line matching {pattern!r} in {timeout} s; output:\n{''.join(self.seen)[-3000:]}")

    def send(self, line: str) -> None:
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def finish(self, timeout: float = 120) -> int:
        try:
            return self.p.wait(timeout)
        finally:
            if self.p.poll() is None:
                self.p.kill()
                self.p.wait()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs it (scripts/browser.sh)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])  # root in CI: no user namespace
        yield b
        b.close()


def open_page(browser, url: str):
    page = browser.new_page(viewport={"width": 1500, "height": 1050})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    # what a page that never ran its script would not say as an error (CI once: the page loaded, no `hpnlab`)
    trouble = TROUBLE.setdefault(id(page), [])
    page.on("requestfailed", lambda r: trouble.append(f"{r.url.split('?')[0]} failed: {r.failure}"))
    page.on("response", lambda r: r.status >= 400 and trouble.append(f"{r.url.split('?')[0]}: {r.status}"))
    page.on("console", lambda m: m.type == "error" and trouble.append(f"console: {m.text}"))
    page.goto(url)
    return page, errors


TROUBLE: dict[int, list[str]] = {}  # id(page) -> its failed requests, error answers and console errors


PAGE_MODEL = """() => ({states: window.hpnlab && hpnlab.states, drawn: !!(window.hpnlab && hpnlab.cy),
  status: document.querySelector('#link-status').textContent,
  events: window.hpnlab ? hpnlab.events.map(e => e.text).slice(-10) : null})"""


def wait_drawn(page, errors: list[str], expression: str, timeout_s: float, cmd: Command | None = None) -> None:
    """wait_for_function that, on a timeout, says what the page holds and what the command printed."""
    from playwright.sync_api import TimeoutError as PageTimeout

    try:
        page.wait_for_function(expression, timeout=timeout_s * 1000)
    except PageTimeout:
        said = "".join(cmd.seen)[-2000:] if cmd else ""
        raise AssertionError(f"{expression!r} not true in {timeout_s} s; page: {page.evaluate(PAGE_MODEL)}; "
                             f"page errors: {errors}; requests and console: {TROUBLE.get(id(page))}; "
                             f"command output:\n{said}") from None


def test_live_view_draws_the_fabric_and_shows_a_cli_failure_within_2s(tmp_path, browser, no_leftovers):
    topo = build("hpn")
    cmd = Command(["up", "hpn", "--routing", "controller", "--qos", "--web"], tmp_path)
    try:
        url = cmd.wait_for(r"web view: (http://127\.0\.0\.1:\d+/\?token=\S+)", 60)[1]
        cmd.wait_for(r"network up in", 180)
        page, errors = open_page(browser, url)
        # the first states need the page loaded and the sampler's first two reads; the bound that matters is below
        wait_drawn(page, errors, "window.hpnlab && hpnlab.states >= 2", 60, cmd)
        # one node per switch and host, one edge per link, named as the topology names them
        assert page.evaluate("hpnlab.cy.nodes().length") == len(topo.switches) + len(topo.hosts) == 24
        assert page.evaluate("hpnlab.cy.edges().length") == len(topo.links) == 64
        assert sorted(page.evaluate("hpnlab.cy.nodes().map(n => n.id())")) == sorted(topo.nodes)
        assert sorted(page.evaluate("hpnlab.cy.edges().map(e => e.id())")) == sorted(l.name for l in topo.links)
        assert page.evaluate("hpnlab.cy.edges('.failed').length") == 0

        link = "tor-p0-s0-r0-a:5-agg-p0-pl0-0:1"
        t0 = time.monotonic()
        cmd.send(f"fail {link}")
        wait_drawn(page, errors, f"hpnlab.cy.$id('{link}').hasClass('failed')", 10, cmd)
        shown_s = time.monotonic() - t0
        assert shown_s < FAIL_SHOWN_WITHIN_S, f"the failure showed after {shown_s:.2f} s"
        assert page.evaluate("hpnlab.cy.edges('.failed').map(e => e.id())") == [link]
        assert page.inner_text("#failed").strip() == link
        assert link in page.inner_text("#events")
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "live-link-failed.png"))

        t0 = time.monotonic()
        cmd.send(f"restore {link}")
        wait_drawn(page, errors, f"!hpnlab.cy.$id('{link}').hasClass('failed')", 10, cmd)
        assert time.monotonic() - t0 < FAIL_SHOWN_WITHIN_S
        assert errors == []
        print(f"failure shown on the page {shown_s:.2f} s after the CLI command")
    finally:
        if cmd.p.poll() is None:
            cmd.send("exit")
        assert cmd.finish() == 0, "".join(cmd.seen)[-2000:]


def test_run_shows_utilization_flows_and_busbw_then_the_results_folder(tmp_path, browser, no_leftovers,
                                                                       as_from_a_terminal):
    (tmp_path / "web.yaml").write_text(EXPERIMENT)
    cmd = Command(["run", "web.yaml", "--web"], tmp_path, as_from_a_terminal)
    try:
        url = cmd.wait_for(r"web view: (http://127\.0\.0\.1:\d+/\?token=\S+)", 60)[1]
        page, errors = open_page(browser, url)
        wait_drawn(page, errors, "window.hpnlab && hpnlab.states >= 1", 120, cmd)
        host_util = "Math.max(...hpnlab.cy.edges('[kind=\"host-tor\"]').map(e => e.data('util') || 0))"
        first = page.evaluate(host_util)
        peak, shot, flows, flow_edges = first, False, 0, 0
        while page.evaluate("hpnlab.ops.length") < 2 and cmd.p.poll() is None:
            u = page.evaluate(host_util)
            peak = max(peak, u)
            # while the ring runs: read after its last op, the flows may be withdrawn already (seen once: 0)
            flows = max(flows, page.evaluate("hpnlab.state.flows.length"))
            flow_edges = max(flow_edges, page.evaluate("hpnlab.cy.edges('.flow').length"))
            if u > 0.5 and not shot:  # the docs' picture: the all-reduce in flight
                page.wait_for_timeout(600)
                SHOTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SHOTS / "live-allreduce.png"))
                shot = True
            page.wait_for_timeout(200)
        ops = page.evaluate("hpnlab.ops")
        progress = page.inner_text("#progress-text")
        title, caption = page.inner_text("#title"), page.inner_text("#busbw-caption")
        assert cmd.finish(300) == 0, "".join(cmd.seen)[-2000:]
        print(f"host-link utilization on the page: first {first:.2f}, peak {peak:.2f}; {flows} precise flows on "
              f"{flow_edges} links; busbw {[round(o['busbw_bps'] / 1e6, 2) for o in ops]} Mbit/s")
        # a ring on 8 hosts drives every host link: from idle to more than half its shaped rate
        assert first < 0.2 and peak > 0.5
        assert flows >= 8 and flow_edges >= 16  # each ring neighbour pair pinned, host links plus ToR uplinks
        out = next((tmp_path / "results").iterdir())
        recorded = json.loads((out / "results.json").read_text())["runs"][0]["ops"]
        assert [o["busbw_bps"] for o in ops] == [o["busbw_bps"] for o in recorded] and len(ops) == 2
        assert all(o["busbw_bps"] > 0 for o in ops)
        assert re.search(r"2/2 ops", progress), progress
        assert re.search(DILATED, title) and "per second of the fabric's time" in caption, (title, caption)
        assert errors == []
    finally:
        if cmd.p.poll() is None:
            cmd.p.send_signal(signal.SIGINT)
        cmd.finish()

    # the same run's folder, after the fact
    show = Command(["results", "show", out.name, "--web"], tmp_path, as_from_a_terminal)  # stopped with Ctrl-C
    try:
        url = show.wait_for(r"(http://127\.0\.0\.1:\d+/\?token=\S+)", 30)[1]
        page, errors = open_page(browser, url)
        page.wait_for_function("window.hpnlab && hpnlab.mode === 'results' && hpnlab.ops.length > 0", timeout=20_000)
        page.wait_for_function("[...document.querySelectorAll('#plots img')].every(i => i.complete)", timeout=20_000)
        widths = page.evaluate("[...document.querySelectorAll('#plots img')].map(i => i.naturalWidth)")
        assert len(widths) == len(list(out.glob("*.png"))) >= 3 and min(widths) > 100
        assert "web_allreduce" in page.inner_text("#summary")
        assert page.evaluate("hpnlab.cy.nodes().length") == 24
        timeline = json.loads((out / "results.json").read_text())["runs"][0]["timeline"]
        assert page.evaluate("hpnlab.charts.throughput.data.datasets[0].data.length") == len(timeline) > 3
        assert len(page.evaluate("hpnlab.ops")) == 2
        assert re.search(DILATED, page.inner_text("#title")), page.inner_text("#title")
        assert page.evaluate("hpnlab.charts.throughput.options.scales.x.title.text") == "s of the fabric's time"
        page.screenshot(path=str(SHOTS / "results.png"), full_page=True)
        assert errors == []
    finally:
        show.p.send_signal(signal.SIGINT)
        assert show.finish(30) == 0
