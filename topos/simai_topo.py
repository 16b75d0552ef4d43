"""SimAI's topology files, both ways (pure).

SimAI (Alibaba's simulator of AI-training fabrics) reads a fabric from one text file, in the form its topology
generator (gen_Topo_Template.py) writes: a header `nodes gpus_per_server nvswitches switches links gpu_type`
(some versions add a seventh field), the NVSwitches' ids and then the switches' ids, then one line per link
`src dst bandwidth latency error_rate`, e.g. `3 15368 200Gbps 0.0005ms 0`. Every GPU is a node with its NIC's
links: GPU g of a server is its NIC g (one GPU per NIC), linked to the server's NVSwitch and to the ToR (or the
two ToRs) of rail g in its segment. Ids: GPUs first, then NVSwitches, ToRs (plane 0's, then plane 1's),
aggregation switches (the same), cores.

`export` writes any of our fabrics so (active hosts only: the format has no spares). `read` takes a file back to
the builder parameters it amounts to (the `hpn` builder's, which are the common fabric's), and `check_built`
holds the built fabric against the file's counts; what the fabric builder cannot express (rates that differ
from link to link, several pods, a ToR on two rails) is refused, naming the line or the switch. Latency and
error rate are written as SimAI's template defaults and not read: the emulation's latency is its own, and a
lossy link is a gray failure of an experiment.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .errors import InputError
from .inputs import read_text
from .model import Topology
from .server import DEFAULT_GPU, GPUS, nvlink_of

NIC_LATENCY, NVLINK_LATENCY = "0.0005ms", "0.000025ms"  # SimAI's template defaults
ROLE_ORDER = {"tor": 0, "agg": 1, "core": 2}
RATE = re.compile(r"^(\d+(?:\.\d+)?)(M|G|T)bps$")
RATE_UNIT = {"M": 1e-3, "G": 1.0, "T": 1e3}
MAX_TOPOLOGY_BYTES = 16 << 20  # the paper's pod is 1.5 MB
FIX = "write it with SimAI's gen_Topo_Template.py or `hpnlab topo export NAME --format simai`"


@dataclass(frozen=True)
class SimaiLink:
    src: int
    dst: int
    gbps: float
    line: int  # in the file, 1-based


@dataclass
class SimaiFile:
    """A parsed file: who is what, and the links."""

    gpus_per_server: int
    gpu_type: str
    nvswitches: set[int]
    switches: set[int]
    gpus: list[int]
    links: list[SimaiLink] = field(default_factory=list)


def export(topo: Topology) -> str:
    """The topology as SimAI's topology file."""
    hosts = [h for h in topo.hosts if not h.backup]
    per = {h.gpus for h in hosts}
    if len(per) != 1 or any(h.nics != h.gpus for h in hosts):
        raise InputError("SimAI's format gives every GPU a NIC of its own, and every server as many GPUs",
                         "give the topology gpus_per_host equal to rails", field="gpus_per_host",
                         value=sorted(per))
    (gps,) = per
    n_gpus = len(hosts) * gps
    switches = sorted(topo.switches, key=lambda n: (ROLE_ORDER[n.role], n.plane or 0, n.index))
    ids = {n.name: n_gpus + len(hosts) + i for i, n in enumerate(switches)}
    nvlink = nvlink_of(topo.params).bps("allreduce") / 1e9
    ports = defaultdict(list)
    for l in topo.links:
        if l.kind == "host-tor":
            ports[l.a, l.nic].append(l)
    lines = []
    for i, h in enumerate(hosts):
        for g in range(gps):
            gpu = i * gps + g
            lines.append(_line(gpu, n_gpus + i, nvlink, NVLINK_LATENCY))
            lines += [_line(gpu, ids[l.b], l.rate_gbps) for l in sorted(ports[h.name, g], key=lambda l: l.nic_port)]
    lines += [_line(ids[l.a], ids[l.b], l.rate_gbps) for l in topo.links if l.kind != "host-tor"]
    gpu_type = topo.params.get("gpu") or DEFAULT_GPU
    head = f"{n_gpus + len(hosts) + len(switches)} {gps} {len(hosts)} {len(switches)} {len(lines)} {gpu_type}"
    ids_line = " ".join(str(n_gpus + i) for i in range(len(hosts) + len(switches)))
    return "\n".join([head, ids_line, *lines]) + "\n"


def _line(a: int, b: int, gbps: float, latency: str = NIC_LATENCY) -> str:
    return f"{a} {b} {gbps:g}Gbps {latency} 0"


def parse(text: str, name: str = "file") -> SimaiFile:
    """The file's header, ids and links, each checked; an InputError names the line."""
    rows = [ln.split() for ln in text.splitlines()]
    words = [w for row in rows for w in row]
    head = words[:6]
    if len(head) < 6 or not all(w.isdigit() for w in head[:5]):
        raise InputError("a SimAI topology starts with `nodes gpus_per_server nvswitches switches links gpu_type`",
                         FIX, field=f"{name} line 1", value=" ".join(rows[0]) if rows else "")
    nodes, gps, n_nv, n_sw, n_links = (int(w) for w in head[:5])
    first = 7 if len(rows[0]) >= 7 else 6  # a seventh header field in some versions
    id_words = words[first:first + n_nv + n_sw]
    if len(id_words) < n_nv + n_sw or not all(w.isdigit() and int(w) < nodes for w in id_words):
        raise InputError(f"the header promises {n_nv} NVSwitch and {n_sw} switch ids below {nodes}", FIX,
                         field=f"{name} line 2", value=" ".join(id_words[:8]))
    ids = [int(w) for w in id_words]
    f = SimaiFile(gps, head[5], set(ids[:n_nv]), set(ids[n_nv:]), [])
    f.gpus = [i for i in range(nodes) if i not in f.nvswitches and i not in f.switches]
    if gps < 1 or not f.gpus or len(f.gpus) % gps:
        raise InputError(f"{len(f.gpus)} GPUs do not fill servers of {gps}", FIX, field=f"{name} line 1",
                         value=" ".join(rows[0]))
    link_rows = [(i + 1, row) for i, row in enumerate(rows) if i >= _first_link_row(rows, first, n_nv + n_sw) and row]
    for num, row in link_rows:
        f.links.append(_link(row, num, nodes, name))
    if len(f.links) != n_links:
        raise InputError(f"the header promises {n_links} links, the file has {len(f.links)}", FIX,
                         field=f"{name} line 1", value=" ".join(rows[0]))
    return f


def _first_link_row(rows: list[list[str]], first: int, n_ids: int) -> int:
    """The row after the header's and the ids' words (the ids may wrap over several lines)."""
    seen = 0
    for i, row in enumerate(rows):
        seen += len(row)
        if seen >= first + n_ids:
            return i + 1
    return len(rows)


def _link(row: list[str], num: int, nodes: int, name: str) -> SimaiLink:
    where = f"{name} line {num}"
    if len(row) != 5 or not (row[0].isdigit() and row[1].isdigit()) or int(row[0]) >= nodes \
            or int(row[1]) >= nodes or row[0] == row[1]:
        raise InputError("a link is `src dst bandwidth latency error_rate` between two nodes of the header",
                         FIX, field=where, value=" ".join(row))
    rate = RATE.match(row[2])
    if rate is None or float(rate[1]) <= 0:
        raise InputError("bandwidth is a rate such as 200Gbps", FIX, field=where, value=row[2])
    try:
        lossy = float(row[4]) != 0
    except ValueError:
        lossy = True
    if lossy:
        raise InputError("a lossy link is not part of the fabric here", "write error_rate 0 and make the link "
                         "lossy with a failure (action: lossy) in the experiment", field=where, value=row[4])
    return SimaiLink(int(row[0]), int(row[1]), float(rate[1]) * RATE_UNIT[rate[2]], num)


def read(text: str | SimaiFile, name: str = "file") -> dict:
    """The fabric builder parameters (topos.fabric.FabricParams) a SimAI topology file (its text, or as parsed)
    amounts to."""
    return _Reader(parse(text, name) if isinstance(text, str) else text, name).params()


class _Reader:
    """Who is what in a parsed file: servers by their NVSwitch, ToRs by their GPUs, aggregation switches by
    their ToRs, planes by which aggregation switches a ToR reaches."""

    def __init__(self, f: SimaiFile, name: str):
        self.f, self.name = f, name
        self.nbrs: dict[int, list[SimaiLink]] = defaultdict(list)
        for l in f.links:
            self.nbrs[l.src].append(l)
            self.nbrs[l.dst].append(l)

    def refuse(self, what: str, node: int, fix: str = FIX) -> InputError:
        return InputError(what, fix, field=f"{self.name} node {node}", value=node)

    def other(self, l: SimaiLink, me: int) -> int:
        return l.dst if l.src == me else l.src

    def params(self) -> dict:
        f = self.f
        local = self.servers()
        gpu_tors = {g: [self.other(l, g) for l in self.nbrs[g] if self.other(l, g) in f.switches] for g in f.gpus}
        per_gpu = {len(t) for t in gpu_tors.values()}
        if per_gpu - {1, 2} or len(per_gpu) != 1:
            raise self.refuse("every GPU's NIC has one port or two (dual-ToR), the same for all",
                              next(g for g, t in gpu_tors.items() if len(t) not in (1, 2) or len(t) != len(
                                  gpu_tors[f.gpus[0]])))
        tors = {t for ts in gpu_tors.values() for t in ts}
        aggs = self.tier_above(tors)
        planes = self.planes(gpu_tors, aggs)
        rails = {t: {local[g][1] for g in f.gpus if t in gpu_tors[g]} for t in tors}
        rail_optimized = f.gpus_per_server > 1 and all(len(r) == 1 for r in rails.values())
        servers_of = {t: frozenset(local[g][0] for g in f.gpus if t in gpu_tors[g]) for t in tors}
        segments = set(servers_of.values())
        hosts = {len(s) for s in segments}
        if len(hosts) != 1 or sum(len(s) for s in segments) != len(f.gpus) // f.gpus_per_server:
            raise self.refuse("segments hold the same number of servers, each server in one segment",
                              min(tors))
        uplinks = {len([l for l in self.nbrs[t] if self.other(l, t) in aggs]) for t in tors}
        if len(uplinks) != 1:
            raise self.refuse("every ToR has as many uplinks", min(tors))
        out = {"segments_per_pod": len(segments), "hosts_per_segment": hosts.pop(), "rails": f.gpus_per_server,
               "gpus_per_host": f.gpus_per_server, "rail_optimized": rail_optimized, "dual_tor": per_gpu == {2},
               "dual_plane": planes == 2, "aggs_per_plane": len(aggs) // planes, "tor_uplinks": uplinks.pop(),
               "port_gbps": self.rate(lambda a, b: a in f.gpus and b in f.switches, "GPU-ToR"),
               "uplink_gbps": self.rate(lambda a, b: a in tors and b in aggs, "ToR-aggregation")}
        nvlink = [l.gbps for l in f.links if {l.src, l.dst} & f.nvswitches]
        if nvlink:
            out["nvlink_gbps"] = self.rate(lambda a, b: a in f.gpus and b in f.nvswitches, "GPU-NVSwitch")
        if f.gpu_type in GPUS:
            out["gpu"] = f.gpu_type
        return out

    def servers(self) -> dict[int, tuple[int, int]]:
        """(server, GPU index in it) of every GPU: the GPUs of one NVSwitch, else consecutive ids."""
        f = self.f
        by_nv = {nv: sorted(self.other(l, nv) for l in self.nbrs[nv]) for nv in sorted(f.nvswitches)}
        if not by_nv:
            return {g: divmod(i, f.gpus_per_server) for i, g in enumerate(f.gpus)}
        out = {}
        for s, members in enumerate(by_nv.values()):
            if len(members) != f.gpus_per_server or any(m not in f.gpus for m in members):
                raise self.refuse(f"an NVSwitch links the {f.gpus_per_server} GPUs of one server",
                                  sorted(f.nvswitches)[s])
            out |= {g: (s, k) for k, g in enumerate(members)}
        if len(out) != len(f.gpus):
            raise self.refuse("every GPU belongs to one server's NVSwitch", min(set(f.gpus) - set(out)))
        return out

    def tier_above(self, tors: set[int]) -> set[int]:
        """The aggregation switches: the switches the ToRs link to. Anything else (a core tier, a switch
        between two ToRs) is a fabric of more than one pod, or not a Clos: refused."""
        f = self.f
        aggs = {self.other(l, t) for t in tors for l in self.nbrs[t]} & f.switches
        if aggs & tors:
            raise self.refuse("two ToRs link to each other", min(aggs & tors))
        rest = f.switches - tors - aggs
        if rest:
            raise self.refuse("a switch above the aggregation tier: several pods are not read yet", min(rest),
                              "export one pod")
        if any(self.other(l, a) in aggs for a in aggs for l in self.nbrs[a]):
            raise self.refuse("two aggregation switches link to each other", min(aggs))
        return aggs

    def planes(self, gpu_tors: dict[int, list[int]], aggs: set[int]) -> int:
        """2 when the two ToRs of every NIC reach disjoint aggregation switches (dual-plane), else 1."""
        reach = {t: frozenset(self.other(l, t) for l in self.nbrs[t]) & aggs
                 for ts in gpu_tors.values() for t in ts}
        pairs = [ts for ts in gpu_tors.values() if len(ts) == 2]
        return 2 if pairs and all(not (reach[a] & reach[b]) for a, b in pairs) else 1

    def rate(self, pick, what: str) -> float:
        rates = Counter(l.gbps for l in self.f.links if pick(l.src, l.dst) or pick(l.dst, l.src))
        if len(rates) != 1:
            odd = next(l for l in self.f.links if (pick(l.src, l.dst) or pick(l.dst, l.src))
                       and l.gbps != rates.most_common(1)[0][0])
            raise InputError(f"every {what} link has one rate here ({rates.most_common(1)[0][0]:g} Gbit/s)",
                             "give them one rate", field=f"{self.name} line {odd.line}", value=f"{odd.gbps:g}Gbps")
        return next(iter(rates))


def check_built(topo: Topology, f: SimaiFile, name: str = "file") -> None:
    """The fabric built from a parsed file's parameters has the file's counts: GPUs, servers, switches and links
    of each kind; else what differs (the file's wiring is not one the fabric builder makes)."""
    want, got = _counts(f), _counts(parse(export(topo), "built"))
    if want != got:
        diff = ", ".join(f"{k}: file {want[k]}, built {got[k]}" for k in want if want[k] != got[k])
        raise InputError(f"the file's wiring is not a fabric the builder makes ({diff})", FIX, field=name,
                         value=None)


def _counts(f: SimaiFile) -> dict[str, int]:
    """GPUs, NVSwitches, ToRs (switches with a GPU), other switches, and the links of each kind."""
    nv, sw = f.nvswitches, f.switches
    kinds = Counter("nvlink links" if {l.src, l.dst} & nv else "switch links" if l.src in sw and l.dst in sw
                    else "NIC links" for l in f.links)
    tors = {n for l in f.links if not {l.src, l.dst} & nv and not (l.src in sw and l.dst in sw)
            for n in (l.src, l.dst) if n in sw}
    return {"GPUs": len(f.gpus), "NVSwitches": len(nv), "ToRs": len(tors), "switches above the ToRs":
            len(sw - tors), **kinds}


def load_params(path: Path, field: str) -> dict:
    """A SimAI topology file's builder parameters (the `hpn` builder's), checked by building them: the built
    fabric has the file's counts."""
    from . import build_from

    f = parse(read_text(path, field, MAX_TOPOLOGY_BYTES), field)  # parsed once: read and checked from it
    params = read(f, field)
    check_built(build_from("hpn", None, params), f, field)
    return params
