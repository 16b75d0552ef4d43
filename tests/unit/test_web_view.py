"""The web view without a browser or a network: the elements drawn, the counters parsed, the hub's events, the
server's token and paths, a results folder's page. (tests/emu/test_web.py drives the page in Chromium.)"""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import socket
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed.experiment.spec import Experiment
from testbed.net import checks
from testbed.web import Hub, WebServer
from testbed.web.elements import elements, flow_links, port_links
from testbed.web.fabric import FabricProbe
from tests.records import a_run, an_op, results_json
from topos import build
from topos.errors import InputError

VENDOR = Path(__file__).resolve().parents[2] / "testbed" / "web" / "static" / "vendor"


def test_elements_one_node_per_switch_and_host_one_edge_per_link_by_tier():
    topo = build("hpn")
    el = elements(topo)
    assert len(el["nodes"]) == len(topo.switches) + len(topo.hosts) == 24
    assert sorted(e["data"]["id"] for e in el["edges"]) == sorted(l.name for l in topo.links)
    ids = {n["data"]["id"] for n in el["nodes"]}
    assert all(e["data"]["source"] in ids and e["data"]["target"] in ids for e in el["edges"])
    y = {role: {n["position"]["y"] for n in el["nodes"] if n["data"]["role"] == role}
         for role in ("host", "tor", "agg")}
    assert all(len(v) == 1 for v in y.values())  # one row per tier, hosts at the bottom of the screen
    assert min(y["host"]) > min(y["tor"]) > min(y["agg"])
    planes = {n["data"]["plane"] for n in el["nodes"] if n["data"]["role"] == "tor"}
    assert planes == {0, 1}


def test_a_declared_flow_is_drawn_on_its_host_port_and_every_switch_hop():
    topo = build("hpn")
    ports = port_links(topo)
    h0, h1 = (next(l for l in topo.links_of(h) if l.kind == "host-tor" and l.nic_port == 0) for h in ("h0", "h1"))
    tor = h0.b
    assert h1.b == tor  # same segment: h0 -> ToR -> h1
    flow = {"src": "h0", "egress": {"port": h0.a_port}, "path": [{"switch": tor, "port": h1.b_port}]}
    assert flow_links(flow, ports) == [h0.name, h1.name]
    assert ports[(tor, h1.b_port)] == (h1.name, "ba") and ports[("h0", h0.a_port)] == (h0.name, "ab")
    assert flow_links({"src": "h0", "egress": None, "path": None}, ports) == []


DPCTL = """netdev@ovs-netdev:
  lookups: hit:84 missed:78 lost:1
  port 0: ovs-netdev (tap)
    RX packets:0 errors:0 dropped:0 overruns:0 frame:0
    RX bytes:0  TX bytes:0
  port 6: t0-eth1
    RX packets:90000 errors:0 dropped:0 overruns:0 frame:0
    TX packets:7 errors:0 dropped:0 aborted:0 carrier:0
    collisions:0
    RX bytes:133903945 (127.7 MiB)  TX bytes:1170 (1.1 KiB)
  port 7: t0-eth2
    RX packets:2 errors:0 dropped:0 overruns:0 frame:0
    RX bytes:176  TX bytes:119498763 (114.0 MiB)
"""


def test_datapath_counters_read_every_port_also_with_human_sizes(monkeypatch):
    # a large count is followed by "(127.7 MiB)": a pattern expecting "TX bytes" right after the number read the
    # next port's figures instead, and a busy link showed idle on the page
    monkeypatch.setattr(checks, "run", lambda cmd: SimpleNamespace(stdout=DPCTL))
    assert checks.datapath_counters() == {"ovs-netdev": (0, 0), "t0-eth1": (133903945, 1170),
                                          "t0-eth2": (176, 119498763)}


def test_probe_turns_counter_deltas_into_rates_and_utilization(monkeypatch):
    topo = build("hpn")
    link = next(l for l in topo.links if l.name == "h0:nic0:p0")  # host end in its namespace, ToR end t?-ethN
    ifname = f"{topo.nodes[link.b].short}-eth{link.b_port}"
    readings = iter([{ifname: (0, 0)}, {ifname: (1_250_000, 250_000)}])  # +10 Mbit host->ToR, +2 Mbit back
    clock = iter([100.0, 101.0])
    monkeypatch.setattr("testbed.web.fabric.datapath_counters", lambda: next(readings))
    monkeypatch.setattr("testbed.web.fabric.operstate", lambda i: "down" if i == ifname else "up")
    monkeypatch.setattr("testbed.web.fabric.time.monotonic", lambda: next(clock))
    probe = FabricProbe(topo, "run", scale=20000)
    probe.sample()
    st = probe.sample()["links"]["h0:nic0:p0"]
    assert st == {"up": False, "ab_bps": 10_000_000, "ba_bps": 2_000_000, "util": 1.0}  # 200G / 20000 = 10 Mbit/s


def fake_net(run_id: str = "r1"):
    return SimpleNamespace(topo=build("hpn"), owner=SimpleNamespace(run_id=run_id), routing="static", mode="ecmp",
                           hashing="ovs", qos_spec=None, qos=None, controller=None)


def test_hub_pushes_states_and_a_link_event_on_each_change(monkeypatch):
    states = iter([False, False, True, True, False])  # link l down on the 3rd and 4th samples
    name = "h0:nic0:p0"

    def sample(self):
        down = next(states, False)
        return {"t": time.time(), "links": {l.name: {"up": not (down and l.name == name), "ab_bps": 0, "ba_bps": 0,
                                                     "util": None} for l in self.topo.links},
                "ports": {}, "flows": []}

    monkeypatch.setattr(FabricProbe, "sample", sample)
    hub = Hub(period_s=0.01)
    q = hub.subscribe()
    assert q.get(timeout=1)[0] == "snapshot"
    net = fake_net()
    hub.network_up(net, "v")
    hub.start()
    got, kinds = [], []
    while len(got) < 2:
        kind, data = q.get(timeout=5)
        kinds.append(kind)
        if kind == "event":
            got.append((data["kind"], data["link"]))
    hub.network_down(net)
    hub.stop()
    assert kinds[0] == "network" and got == [("link-down", name), ("link-up", name)]
    assert kinds.count("state") >= 4
    assert [e["kind"] for e in hub.snapshot()["events"]] == ["link-down", "link-up", "network-down"]


def test_the_page_is_told_the_bytes_scale_and_the_time_dilation_apart():
    """Under dilation D the network is shaped at scale x D: the page names the bytes scale and D, not their
    product (it said 'scale 1/200,000' for a run at 1/20,000 dilated 10x)."""
    hub = Hub(period_s=0.01)
    net = fake_net()
    net.qos_spec = SimpleNamespace(scale=200_000)
    hub.network_up(net, "v", 10)
    network = hub.snapshot()["network"]
    assert (network["scale"], network["dilation"]) == (20_000, 10)
    hub.network_up(fake_net("r2"), "w")
    assert hub.snapshot()["network"]["dilation"] == 1


def test_a_sample_that_raises_is_said_once_and_sampling_goes_on(monkeypatch):
    calls = {"n": 0}

    def sample(self):
        calls["n"] += 1
        if calls["n"] <= 3:  # an error the sampler does not expect, three times over
            raise KeyError("tor-x:9")
        return {"t": time.time(), "links": {l.name: {"up": True, "ab_bps": 0, "ba_bps": 0, "util": None}
                                            for l in self.topo.links}, "ports": {}, "flows": []}

    monkeypatch.setattr(FabricProbe, "sample", sample)
    hub = Hub(period_s=0.01)
    hub.network_up(fake_net(), "v")
    q = hub.subscribe()
    hub.start()
    kinds, texts = [], []
    while kinds.count("state") < 3:
        kind, data = q.get(timeout=5)
        kinds.append(kind)
        if kind == "event":
            texts.append(data["text"])
    hub.stop()
    assert calls["n"] >= 6
    assert texts == ["could not read the fabric (KeyError: 'tor-x:9'); the view may lag"]


def get(port: int, path: str, headers: dict | None = None) -> tuple[int, str, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, r.getheader("Content-Type"), body


def test_server_asks_for_the_token_serves_assets_and_nothing_outside_them():
    with WebServer(hub=Hub()) as web:
        assert web.url.startswith("http://127.0.0.1:")
        assert get(web.port, "/")[0] == 403
        assert get(web.port, "/?token=wrong")[0] == 403
        status, ctype, body = get(web.port, f"/?token={web.token}")
        assert status == 200 and ctype.startswith("text/html") and b"/static/vendor/cytoscape.min.js" in body
        status, ctype, body = get(web.port, "/static/vendor/cytoscape.min.js")
        assert status == 200 and ctype.startswith("text/javascript") and len(body) > 100_000
        for path in ("/static/../server.py", "/static/%2e%2e/server.py", "/static/vendor/README.md",
                     f"/api/plot/x.png?token={web.token}"):
            assert get(web.port, path)[0] == 404, path
        status, _, body = get(web.port, "/api/snapshot", {"X-Hpnlab-Token": web.token})
        snap = json.loads(body)
        assert status == 200 and snap["mode"] == "live" and snap["network"] is None
        assert web.httpd.server_address[0] == "127.0.0.1"


def test_server_streams_events_to_a_page():
    with WebServer(hub=Hub()) as web:
        s = socket.create_connection(("127.0.0.1", web.port), timeout=5)
        s.sendall(f"GET /api/events?token={web.token} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        buf = b""
        while b"event: snapshot" not in buf:
            buf += s.recv(65536)
        web.hub.iteration_done({"job": "A", "iteration": 0, "seconds": 1.5, "gpu_utilization": 0.4})
        while b"event: event" not in buf:
            buf += s.recv(65536)
        assert b"text/event-stream" in buf
        data = json.loads(re.search(rb"event: event\ndata: (.*)\n\n", buf)[1])
        assert data["kind"] == "iteration" and "1.50 s" in data["text"] and "40.0%" in data["text"]
        s.close()


def test_a_port_in_use_is_a_one_line_error_before_anything_starts():
    with WebServer(hub=Hub()) as web:
        with pytest.raises(InputError) as exc:
            WebServer(hub=Hub(), port=web.port)
    assert exc.value.field == "web-port" and exc.value.value == web.port


def test_results_folder_page(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "results" / "20261122-000000-tiny-abc1234"
    run.mkdir(parents=True)
    exp = Experiment.model_validate({"name": "tiny", "topology": {"name": "hpn"}, "qos": {"scale": "auto"},
                                     "workload": {"collective": {"op": "allreduce", "size": "1GB"}}})
    op = an_op(job="main", label="allreduce/ring", start=0.2, seconds=3.0, busbw_bps=18e6, fraction_of_ideal=0.9)
    sample = a_run()["timeline"][0]
    fired = {"t": 1.0, "wall_t": 4.0, "planned_t": 1.0, "time": 1.8e9, "up": False, "links": ["h0:nic0:p0"],
             "cause": "down h0:nic0:p0", "outage": None}
    runs = [a_run(variant="ecmp", repetition=0, scale=20000, dilation=4, ops=[op, op],
                  timeline=[{**sample, "t": 0.5, "host_tx_bps": 100_000_000}], failures=[fired])]
    (run / "results.json").write_text(results_json(exp.model_dump(by_alias=True), runs))
    (run / "summary.md").write_text("# tiny\n")
    (run / "busbw.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    with WebServer(results=run) as web:
        status, _, body = get(web.port, f"/api/snapshot?token={web.token}")
        page = json.loads(body)
        assert status == 200 and page["mode"] == "results" and page["summary"] == "# tiny\n"
        assert page["plots"] == ["busbw.png"] and len(page["ops"]) == 2 and page["failures"][0]["links"] == [
            "h0:nic0:p0"]
        assert len(page["network"]["elements"]["nodes"]) == 24
        assert (page["network"]["scale"], page["network"]["dilation"]) == (20000, 4)  # the run's, not auto
        assert page["timeline"] == [{"series": "ecmp #0", "points": [[0.5, 100_000_000]]}]
        status, ctype, _ = get(web.port, f"/api/plot/busbw.png?token={web.token}")
        assert status == 200 and ctype == "image/png"
        assert get(web.port, f"/api/plot/results.json?token={web.token}")[0] == 404
        assert get(web.port, "/api/plot/busbw.png")[0] == 403
        assert get(web.port, f"/api/events?token={web.token}")[0] == 404  # nothing live in a past run


def test_vendored_libraries_are_the_pinned_npm_files():
    rows = re.findall(r"^\| (\S+\.js) \| (\S+) .*\| ([0-9a-f]{64}) \|$", (VENDOR / "README.md").read_text(), re.M)
    assert {r[0] for r in rows} == {p.name for p in VENDOR.glob("*.js")} == {"cytoscape.min.js", "chart.umd.min.js"}
    for name, _pkg, digest in rows:
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name


def test_hostile_paths_get_an_answer_and_print_nothing(capfd):
    """A 300-character name or a NUL byte: an answer (no token needed to try), no traceback on stderr."""
    with WebServer(hub=Hub()) as web:
        for path in ("/static/" + "a" * 300 + ".js", "/static/x%00.js", f"/{'b' * 300}?token={web.token}"):
            assert get(web.port, path)[0] == 404, path
    assert "Traceback" not in capfd.readouterr().err


def test_idle_clients_are_dropped_and_the_backlog_takes_a_burst(monkeypatch):
    from testbed.web import server

    monkeypatch.setattr(server._Handler, "timeout", 0.5)
    with WebServer(hub=Hub()) as web:
        assert web.httpd.request_queue_size >= 128
        idle = [socket.create_connection(("127.0.0.1", web.port), timeout=30) for _ in range(20)]
        closed = sum(1 for s in idle if s.recv(1) == b"")  # the server hangs up on each (no thread held)
        for s in idle:
            s.close()
        assert closed == 20 and get(web.port, f"/?token={web.token}")[0] == 200


def _results_run(tmp_path, runs):
    run = tmp_path / "results" / "20261122-000000-tiny-abc1234"
    run.mkdir(parents=True)
    exp = Experiment.model_validate({"name": "tiny", "topology": {"name": "hpn"}, "qos": {"scale": 20000},
                                     "workload": {"collective": {"op": "allreduce", "size": "1GB"}}})
    (run / "results.json").write_text(results_json(exp.model_dump(by_alias=True), runs))
    (run / "summary.md").write_text("# tiny\n")
    return run


def test_a_past_run_serves_only_its_own_plots(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = _results_run(tmp_path, [])
    (run / "page.html").write_text("<script>alert(1)</script>")
    (run / "sub").mkdir()
    (run / "sub" / "x.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    big = run / "big.png"
    with open(big, "wb") as f:  # sparse: 400 MB on paper, streamed, never read whole
        f.truncate(400 << 20)
    with WebServer(results=run) as web:
        for name in ("page.html", "sub/x.png", "summary.md"):
            assert get(web.port, f"/api/plot/{name}?token={web.token}")[0] == 404, name
        c = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
        c.request("GET", f"/api/plot/big.png?token={web.token}")
        r = c.getresponse()
        assert r.status == 200 and int(r.getheader("Content-Length")) == 400 << 20
        first = r.read(1 << 20)
        c.close()
        assert len(first) == 1 << 20


def test_a_malformed_results_file_gives_the_page_a_message(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = _results_run(tmp_path, [a_run(variant="a", timeline=[{"t": "x"}])])
    with WebServer(results=run) as web:
        status, _, body = get(web.port, f"/api/snapshot?token={web.token}")
    page = json.loads(body)
    assert status == 200 and "results.json is unreadable (runs.0.timeline.0" in page["error"], page["error"]
