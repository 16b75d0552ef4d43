"""The controller's REST API: JSON over HTTP on loopback only (os-ken ships no wsgi).

    GET    /health                 switches connected/routed, mode, LLDP wiring check
    GET    /topology               the topology JSON the controller runs on
    GET    /links                  every link with its state
    GET    /paths?src=H&dst=IP     all current shortest paths; for declared flows, which source port takes which
    GET    /path?src=H&dst=IP&proto=udp&sport=S&dport=D   the path of one flow (pinned if declared)
    GET    /flows                  declared flows and their paths
    POST   /flows                  {"flows": [{"src","dst","proto","sport","dport"}, ...]}  (precise mode)
    DELETE /flows                  {"flows": [key, ...]} or no body for all
    POST   /jobs                   {"levels": 2, "jobs": [{"name", "gpus", "compute_s", "overlap", "flows": [{"src",
                                   "dst", "proto", "sport", "dport", "bytes"}, ...]}, ...]}: Crux's order, priorities,
                                   lossless levels and paths for these jobs (controllers/crux.py); installs nothing
    GET    /counters/ports         per switch port bytes/packets/drops
    GET    /counters/flows         per declared flow, bytes per switch
    GET    /events                 link-down/up log with times and recompute cost

Every request carries the run's token (`Authorization: Bearer TOKEN`, the token
in a 0600 file only the run's owner reads); without it the answer is 401. Bad
requests of any kind (a body too large or not JSON, numbers where ports go,
unknown methods) get a 4xx JSON error and the controller keeps running; a client
that stalls is dropped after CLIENT_TIMEOUT_S.
"""

from __future__ import annotations

import hmac
import json
import logging
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from .crux import JobDemand
from .precise import FlowSpec, candidate_paths
from .state import RequestError

log = logging.getLogger("hpnlab.rest")

MAX_BODY = 1 << 20  # 1 MiB holds MAX_FLOWS flows with room to spare
MAX_FLOWS = 1024  # per request, so one request holds the state lock for tens of ms, not seconds
CLIENT_TIMEOUT_S = 10.0
LISTEN_BACKLOG = 128


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


MAX_QUERY_FIELDS = 16


def _query(text: str) -> dict[str, str]:
    """A query string's fields (the last of a repeated one), bounded in length and count."""
    if len(text) >= 2048:
        raise ApiError(414, "query string longer than 2048 characters")
    try:
        return {k: v[-1] for k, v in parse_qs(text, max_num_fields=MAX_QUERY_FIELDS).items()}
    except ValueError:
        raise ApiError(400, f"query string: more than {MAX_QUERY_FIELDS} fields") from None


def _query_int(v: str) -> int | str:
    return int(v) if v.isascii() and v.isdigit() and len(v) <= 5 else v


def _port(field: str, v: object) -> int:
    # bool is an int to Python and 5.0 would pass int(); a port is neither
    if type(v) is not int or not 0 <= v <= 65535:
        raise ApiError(400, f"{field}={_short(v)}: a port is an integer 0..65535")
    return v


def _text(field: str, v: object) -> str:
    if type(v) is not str or not 0 < len(v) <= 64 or not v.isprintable():  # no NUL, newline or other control
        raise ApiError(400, f"{field}={_short(v)}: give a string of 1-64 printable characters")
    return v


def _short(v: object) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def _flow_from(d: object) -> FlowSpec:
    if not isinstance(d, dict):
        raise ApiError(400, "each flow must be an object with src, dst, proto, sport, dport")
    unknown = set(d) - {"src", "dst", "proto", "sport", "dport"}
    if unknown:
        raise ApiError(400, f"unknown flow field(s) {_short(sorted(unknown))}; allowed: src, dst, proto, sport, dport")
    for k in ("src", "dst"):
        if k not in d:
            raise ApiError(400, f"flow field {k!r} is required")
    return FlowSpec(src=_text("src", d["src"]), dst=_text("dst", d["dst"]), proto=_text("proto", d.get("proto", "udp")),
                    sport=_port("sport", d.get("sport", 0)), dport=_port("dport", d.get("dport", 0)))


def _number(field: str, v: object, low: float, high: float) -> float:
    if type(v) not in (int, float) or not low <= v <= high:  # bool is not a number here; NaN fails the range
        raise ApiError(400, f"{field}={_short(v)}: a number {low:g}..{high:g}")
    return float(v)


def _job_from(d: object) -> JobDemand:
    if not isinstance(d, dict) or not isinstance(d.get("flows"), list):
        raise ApiError(400, "each job is an object with name, gpus, compute_s, flows (and overlap)")
    unknown = set(d) - {"name", "gpus", "compute_s", "overlap", "flows"}
    if unknown:
        raise ApiError(400, f"unknown job field(s) {_short(sorted(unknown))}; allowed: name, gpus, compute_s, "
                            "overlap, flows")
    gpus = d.get("gpus", 1)
    if type(gpus) is not int or not 1 <= gpus <= 1 << 20:
        raise ApiError(400, f"gpus={_short(gpus)}: an integer 1..{1 << 20}")
    flows = []
    for f in d["flows"]:
        if not isinstance(f, dict):
            raise ApiError(400, "each flow is an object with src, dst, bytes (and proto, sport, dport)")
        nbytes = f.get("bytes")
        if type(nbytes) is not int or not 1 <= nbytes <= 10**15:
            raise ApiError(400, f"bytes={_short(nbytes)}: an integer 1..1e15 (per iteration)")
        flows.append((_flow_from({k: v for k, v in f.items() if k != "bytes"}), nbytes))
    return JobDemand(_text("name", d.get("name")), gpus, _number("compute_s", d.get("compute_s", 0), 0, 3600),
                     tuple(flows), _number("overlap", d.get("overlap", 0), 0, 1))


def _flow_list(body: object, example: str) -> list:
    if not isinstance(body, dict) or not isinstance(body.get("flows"), list) or set(body) != {"flows"}:
        raise ApiError(400, f"send {example}")
    if len(body["flows"]) > MAX_FLOWS:
        raise ApiError(413, f"flows: {len(body['flows'])} in one request; send at most {MAX_FLOWS} per request")
    return body["flows"]


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(raw: bytes) -> object:
    """JSON with what a request may hold: no NaN/Infinity, no number that overflows, bounded nesting."""
    try:
        return json.loads(raw, parse_constant=_reject_constant, parse_float=_finite)
    except RecursionError:
        raise ApiError(400, "body is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"body is not JSON: {str(exc)[:100]}") from None


def _finite(text: str) -> float:
    v = float(text)
    if v in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:20]} is out of range")
    return v


class _Server(ThreadingHTTPServer):
    request_queue_size = LISTEN_BACKLOG  # http.server's 5 refused clients of a busy run
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """A client gone before its answer (closed, reset, timed out) is one debug line, not socketserver's
        traceback on stderr: that is the controller's log, and any local user can open connections."""
        log.debug("REST: the request from %s ended early (%s)", client_address, sys.exc_info()[1])


class RestServer:
    def __init__(self, app, port: int, token: str, host: str = "127.0.0.1"):
        if len(token) < 16:
            raise ValueError("the REST token must have at least 16 characters")
        self.app = app
        handler = type("Handler", (_Handler,), {"app": app, "token": token.encode()})
        self.httpd = _Server((host, port), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="hpnlab-rest", daemon=True)

    def start(self) -> None:
        self.thread.start()
        log.info("REST API on http://%s:%d", *self.httpd.server_address)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    app = None  # set per server
    token = b""
    server_version = "hpnlab-controller"
    timeout = CLIENT_TIMEOUT_S  # a stalled client's thread ends instead of waiting forever
    protocol_version = "HTTP/1.0"  # one request per connection: no idle keep-alive threads

    def log_message(self, fmt, *args):  # route http.server's stderr lines into logging
        log.debug("%s " + fmt, self.address_string(), *args)

    def _reply(self, status: int, body: object) -> None:
        data = json.dumps(body, allow_nan=False).encode()  # NaN/Infinity are not JSON: a 500, not a bad answer
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_error(self, code, message=None, explain=None):
        """http.server's own errors (bad request line, unknown method, header too long) as JSON, not HTML."""
        self.close_connection = True
        try:
            self._reply(code, {"error": message or HTTPStatus(code).phrase})
        except OSError:
            pass

    def _body(self) -> object:
        if self.headers.get("Transfer-Encoding"):
            raise ApiError(411, "send the body with a Content-Length, not chunked")
        raw = self.headers.get("Content-Length") or "0"
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
            raise ApiError(400, f"Content-Length={_short(raw)}: not a byte count")
        n = int(raw)
        if n > MAX_BODY:
            raise ApiError(413, f"Content-Length={n}: bodies are at most {MAX_BODY} bytes")
        if not n:
            return None
        try:
            data = self.rfile.read(n)
        except TimeoutError:
            raise ApiError(408, f"body: {n} bytes announced, not sent within {CLIENT_TIMEOUT_S:.0f} s") from None
        if len(data) < n:
            raise ApiError(400, f"body ended after {len(data)} of {n} bytes")
        return parse_json(data)

    def _authorised(self) -> bool:
        got = self.headers.get("Authorization", "")
        return got.startswith("Bearer ") and hmac.compare_digest(got[7:].strip().encode(), self.token)

    def _dispatch(self, method: str) -> None:
        url = urlparse(self.path)
        name = url.path.strip("/").replace("/", "_") or "root"
        route = getattr(self, f"{method}_{name}", None)
        try:
            if not self._authorised():
                raise ApiError(401, "send the run's token: Authorization: Bearer TOKEN (the token file is "
                                    "printed by 'hpnlab up' and readable by its owner only)")
            q = _query(url.query)
            if route is None:
                allowed = [m.upper() for m in ("get", "post", "delete") if hasattr(self, f"{m}_{name}")]
                if allowed:
                    raise ApiError(405, f"{method.upper()} {url.path}: allowed {', '.join(allowed)}")
                raise ApiError(404, f"no {method.upper()} {url.path}; the requests are in docs/reference/rest.md")
            self._reply(200, route(q))
        except ApiError as exc:
            self._reply(exc.status, {"error": str(exc)})
        except RequestError as exc:
            self._reply(400, {"error": str(exc)})
        except Exception as exc:  # the controller's own fault: logged, answered 500, and it keeps serving
            log.exception("REST %s %s failed", method, url.path)
            self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"internal error: {type(exc).__name__}"})

    def do_GET(self):
        self._dispatch("get")

    def do_POST(self):
        self._dispatch("post")

    def do_DELETE(self):
        self._dispatch("delete")

    def do_PUT(self):
        self._dispatch("put")

    def do_PATCH(self):
        self._dispatch("patch")

    def do_HEAD(self):
        self._dispatch("head")

    def do_OPTIONS(self):
        self._dispatch("options")

    # -- routes -----------------------------------------------------------------
    def get_health(self, q):
        """Switches connected and routed, seconds from start until all were routed, the mode, the LLDP wiring check
        (`lldp.mismatches`) and refused OpenFlow connections."""
        return self.app.health()

    def get_topology(self, q):
        """The topology JSON the controller runs on."""
        return self.app.topo.to_dict()

    def get_links(self, q):
        """Every link: its name, both ends and their ports, its kind, and whether it is up."""
        down = self.app.state.down
        return [{"name": l.name, "a": l.a, "a_port": l.a_port, "b": l.b, "b_port": l.b_port, "kind": l.kind,
                 "up": l.name not in down} for l in self.app.topo.links]

    def _src_dst(self, q):
        st = self.app.state
        src, dst = q.get("src"), q.get("dst")
        if not src or not dst:
            raise ApiError(400, "give src (a host name) and dst (a host address)")
        st.check_ends(src, dst)
        return src, dst

    @staticmethod
    def _path_view(p):
        return {"host_port": p.host_port, "hops": [{"switch": s, "port": port} for s, port in p.hops]}

    def get_paths(self, q):
        """Query `src=h0&dst=10.0.0.5`: every current shortest path (host port and switch hops) and, for the flows
        declared between the two, which path each takes."""
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
        """Query `src=h0&dst=10.0.0.5&proto=udp&sport=5000&dport=7000`: the flow's path if it is declared (pinned),
        else the ECMP candidates Open vSwitch hashes it onto."""
        src, dst = self._src_dst(q)
        f = FlowSpec(src, dst, _text("proto", q.get("proto", "udp")), _port("sport", _query_int(q.get("sport", "0"))),
                     _port("dport", _query_int(q.get("dport", "0"))))
        st = self.app.state
        with st.lock:
            if f.key in st.flows:
                return {"pinned": True, **st.flow_view(f.key)}
            cands = candidate_paths(st.graph, st.tables, src, dst)
        return {"pinned": False, "flow": f.key, "note": "undeclared: OVS hashes it onto one of these",
                "paths": [self._path_view(p) for p in cands]}

    def get_flows(self, q):
        """Declared flows with their path, host egress port and cookie."""
        st = self.app.state
        with st.lock:
            return [st.flow_view(k) for k in st.flows]

    def post_flows(self, q):
        """Body `{"flows": [{"src": "h0", "dst": "10.0.0.5", "proto": "udp", "sport": 5000, "dport": 7000}]}`: in
        precise mode, places the flows and installs their rules, answering once every switch confirmed them; each
        flow's path and host egress port (409 in other modes)."""
        example = '{"flows": [{"src": "h0", "dst": "10.0.0.5", "proto": "udp", "sport": 5000, "dport": 7000}, ...]}'
        flows = [_flow_from(d) for d in _flow_list(self._body(), example)]
        keys = [f.key for f in flows]
        if len(set(keys)) != len(keys):
            twice = next(k for k in keys if keys.count(k) > 1)
            raise ApiError(400, f"flow {_short(twice)} is named twice in one request; name each flow once")
        if self.app.state.mode != "precise":
            raise ApiError(409, f"mode={self.app.state.mode!r}: flows are declared in precise mode")
        return {"flows": self.app.declare(flows)}

    def delete_flows(self, q):
        """Body `{"flows": ["udp:h0:5000->10.0.0.5:7000"]}`, or no body for all: withdraws declared flows."""
        body = self._body()
        keys = None
        if body is not None:
            keys = [_text("flow", k) for k in _flow_list(body, '{"flows": ["udp:h0:5000->10.0.0.5:7000", ...]} '
                                                                'or no body for all')]
        try:
            return {"withdrawn": self.app.withdraw(keys)}
        except KeyError as exc:
            raise ApiError(404, str(exc.args[0])) from None

    def post_jobs(self, q):
        """Body `{"levels": 2, "jobs": [{"name": "A", "gpus": 8, "compute_s": 0.5, "flows": [{"src": "h0", "dst":
        "10.0.0.5", "bytes": 1000000}]}]}`: Crux's view of the jobs (GPU intensity, priority, lossless level
        compressed onto `levels`, which jobs contend, the order of placement); installs nothing."""
        body = self._body()
        if not isinstance(body, dict) or not isinstance(body.get("jobs"), list) or not set(body) <= {"jobs", "levels"}:
            raise ApiError(400, 'send {"levels": 2, "jobs": [{"name": "A", "gpus": 8, "compute_s": 0.5, '
                                '"flows": [{"src": "h0", "dst": "10.0.0.5", "bytes": 1000000}]}]}')
        levels = body.get("levels", 1)
        if type(levels) is not int or not 1 <= levels <= 8:
            raise ApiError(400, f"levels={_short(levels)}: the lossless priorities, 1..8 (802.1Qbb)")
        if len(body["jobs"]) > 64:
            raise ApiError(413, "jobs: at most 64 jobs per request")
        jobs = [_job_from(j) for j in body["jobs"]]  # each checked for its shape before anything is counted
        if sum(len(j.flows) for j in jobs) > MAX_FLOWS:
            raise ApiError(413, f"jobs: at most {MAX_FLOWS} flows in all per request")
        if len({j.name for j in jobs}) != len(jobs):
            raise ApiError(400, "jobs: two jobs have the same name")
        return self.app.state.schedule_jobs(jobs, levels)

    def get_counters_ports(self, q):
        """Per switch port: bytes, packets and drops each way."""
        return self.app.port_counters()

    def get_counters_flows(self, q):
        """Per declared flow: bytes and packets at each switch on its path."""
        return self.app.flow_counters()

    def get_events(self, q):
        """The link-down and link-up log: time, link, where it was seen, recompute ms, rules changed, flows moved."""
        return self.app.state.events
