"""The controller's REST API: JSON over HTTP on loopback only (os-ken ships no wsgi).

    GET    /health                 switches connected/routed, mode, LLDP wiring check
    GET    /topology               the topology JSON the controller runs on
    GET    /links                  every link with its state
    GET    /paths?src=H&dst=IP     all current shortest paths; for declared flows, which source port takes which
    GET    /path?src=H&dst=IP&proto=udp&sport=S&dport=D   the path of one flow (pinned if declared)
    GET    /flows                  declared flows and their paths
    POST   /flows                  {"flows": [{"src","dst","proto","sport","dport"}, ...]}  (precise mode)
    DELETE /flows                  {"flows": [key, ...]} or no body for all
    GET    /counters/ports         per switch port bytes/packets/drops
    GET    /counters/flows         per declared flow, bytes per switch
    GET    /events                 link-down/up log with times and recompute cost

Bad requests get a 4xx JSON error and the controller keeps running.
"""

from __future__ import annotations

import json
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from .precise import FlowSpec, candidate_paths

log = logging.getLogger("hpnlab.rest")


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _flow_from(d: object) -> FlowSpec:
    if not isinstance(d, dict):
        raise ApiError(400, "each flow must be an object with src, dst, proto, sport, dport")
    unknown = set(d) - {"src", "dst", "proto", "sport", "dport"}
    if unknown:
        raise ApiError(400, f"unknown flow field(s) {sorted(unknown)}; allowed: src, dst, proto, sport, dport")
    try:
        return FlowSpec(src=str(d["src"]), dst=str(d["dst"]), proto=str(d.get("proto", "udp")),
                        sport=int(d.get("sport", 0)), dport=int(d.get("dport", 0)))
    except KeyError as exc:
        raise ApiError(400, f"flow field {exc.args[0]!r} is required") from None
    except (TypeError, ValueError):
        raise ApiError(400, "sport and dport must be integers") from None


class RestServer:
    def __init__(self, app, port: int, host: str = "127.0.0.1"):
        self.app = app
        handler = type("Handler", (_Handler,), {"app": app})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="hpnlab-rest", daemon=True)

    def start(self) -> None:
        self.thread.start()
        log.info("REST API on http://%s:%d", *self.httpd.server_address)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    app = None  # set per server
    server_version = "hpnlab-controller"

    def log_message(self, fmt, *args):  # route http.server's stderr lines into logging
        log.debug("%s " + fmt, self.address_string(), *args)

    def _reply(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> object:
        n = int(self.headers.get("Content-Length") or 0)
        if not n:
            return None
        try:
            return json.loads(self.rfile.read(n))
        except ValueError as exc:
            raise ApiError(400, f"body is not JSON: {exc}") from None

    def _dispatch(self, method: str) -> None:
        url = urlparse(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        route = getattr(self, f"{method}_{url.path.strip('/').replace('/', '_') or 'root'}", None)
        try:
            if route is None:
                raise ApiError(404 if method == "get" or url.path.strip("/") != "flows" else 405,
                               f"no {method.upper()} {url.path}; see GET /health and the README")
            self._reply(200, route(q))
        except ApiError as exc:
            self._reply(exc.status, {"error": str(exc)})
        except (ValueError, KeyError) as exc:
            self._reply(400, {"error": str(exc.args[0]) if exc.args else repr(exc)})
        except Exception as exc:  # keep serving whatever one request did
            log.exception("REST %s %s failed", method, url.path)
            self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"internal error: {exc}"})

    def do_GET(self):
        self._dispatch("get")

    def do_POST(self):
        self._dispatch("post")

    def do_DELETE(self):
        self._dispatch("delete")

    # -- routes -----------------------------------------------------------------
    def get_health(self, q):
        return self.app.health()

    def get_topology(self, q):
        return self.app.topo.to_dict()

    def get_links(self, q):
        down = self.app.state.down
        return [{"name": l.name, "a": l.a, "a_port": l.a_port, "b": l.b, "b_port": l.b_port, "kind": l.kind,
                 "up": l.name not in down} for l in self.app.topo.links]

    def _src_dst(self, q):
        st = self.app.state
        src, dst = q.get("src"), q.get("dst")
        if not src or not dst:
            raise ApiError(400, "give src (a host name) and dst (a host address)")
        if src not in st.topo.nodes or st.topo.nodes[src].role != "host":
            raise ApiError(400, f"src={src!r}: not a host")
        if dst not in st.ip_owner:
            raise ApiError(400, f"dst={dst!r}: not a host address")
        return src, dst

    @staticmethod
    def _path_view(p):
        return {"host_port": p.host_port, "hops": [{"switch": s, "port": port} for s, port in p.hops]}

    def get_paths(self, q):
        src, dst = self._src_dst(q)
        st = self.app.state
        with st.lock:
            cands = candidate_paths(st.graph, st.tables, src, dst)
            index = {p: i for i, p in enumerate(cands)}
            sports = [{"flow": k, "proto": f.proto, "sport": f.sport, "dport": f.dport,
                       "path": index.get(st.assignment.paths.get(k))}
                      for k, f in st.flows.items() if f.src == src and f.dst == dst]
        return {"src": src, "dst": dst, "paths": [self._path_view(p) for p in cands], "declared": sports}

    def get_path(self, q):
        src, dst = self._src_dst(q)
        try:
            f = FlowSpec(src, dst, q.get("proto", "udp"), int(q.get("sport", 0)), int(q.get("dport", 0)))
        except ValueError:
            raise ApiError(400, "sport and dport must be integers") from None
        st = self.app.state
        with st.lock:
            if f.key in st.flows:
                return {"pinned": True, **st.flow_view(f.key)}
            cands = candidate_paths(st.graph, st.tables, src, dst)
        return {"pinned": False, "flow": f.key, "note": "undeclared: OVS hashes it onto one of these",
                "paths": [self._path_view(p) for p in cands]}

    def get_flows(self, q):
        st = self.app.state
        with st.lock:
            return [st.flow_view(k) for k in st.flows]

    def post_flows(self, q):
        body = self._body()
        if not isinstance(body, dict) or not isinstance(body.get("flows"), list):
            raise ApiError(400, 'send {"flows": [{"src": "h0", "dst": "10.0.0.5", "proto": "udp", '
                                '"sport": 5000, "dport": 7000}, ...]}')
        flows = [_flow_from(d) for d in body["flows"]]
        if self.app.state.mode != "precise":
            raise ApiError(409, f"mode={self.app.state.mode!r}: flows are declared in precise mode")
        return {"flows": self.app.declare(flows)}

    def delete_flows(self, q):
        body = self._body()
        keys = None
        if body is not None:
            if not isinstance(body, dict) or not isinstance(body.get("flows"), list):
                raise ApiError(400, 'send {"flows": ["udp:h0:5000->10.0.0.5:7000", ...]} or no body for all')
            keys = [str(k) for k in body["flows"]]
        try:
            return {"withdrawn": self.app.withdraw(keys)}
        except KeyError as exc:
            raise ApiError(404, str(exc.args[0])) from None

    def get_counters_ports(self, q):
        return self.app.port_counters()

    def get_counters_flows(self, q):
        return self.app.flow_counters()

    def get_events(self, q):
        return self.app.state.events
