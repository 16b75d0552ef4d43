"""SimAI's topology files both ways (topos/simai_topo.py): our fabrics written in SimAI's form, with the counts
and wiring SimAI's own HPN template gives the paper's pod; files read back into the fabric they describe; bad
files refused with one line naming the line or node."""

from __future__ import annotations

from collections import defaultdict

import pytest

from topos import build, build_from
from topos.errors import InputError
from topos.simai_topo import check_built, export, parse, read

# SimAI's gen_Topo_Template.py, AlibabaHPN with --dp: its defaults and its closed forms for the header
# (nodes = GPUs + ToRs + aggregation switches + NVSwitches; links = the aggregation switches of a plane times
# all ToRs, two NIC links per GPU, one NVLink per GPU), written here from its documented parameters.
TEMPLATE = {"gpu": 15360, "gpu_per_server": 8, "asw_switch_num": 240, "psw_switch_num": 120,
            "nics_per_aswitch": 128, "nv_switch_per_server": 1}


def _template_header() -> list[int]:
    t = TEMPLATE
    servers = t["gpu"] // t["gpu_per_server"]
    nv = servers * t["nv_switch_per_server"]
    links = t["psw_switch_num"] // 2 * t["asw_switch_num"] + servers * 2 * t["gpu_per_server"] \
        + servers * t["nv_switch_per_server"] * t["gpu_per_server"]
    return [t["gpu"] + t["asw_switch_num"] + t["psw_switch_num"] + nv, t["gpu_per_server"], nv,
            t["asw_switch_num"] + t["psw_switch_num"], links]


@pytest.fixture(scope="module")
def paper() -> tuple[str, object]:
    text = export(build("hpn", "paper"))
    return text, parse(text)


def test_the_paper_pod_has_the_header_of_simais_hpn_template(paper):
    text, f = paper
    head = text.splitlines()[0].split()
    assert [int(w) for w in head[:5]] == _template_header() and head[5] == "H100"
    assert (len(f.gpus), len(f.nvswitches), len(f.switches)) == (15360, 1920, 360)


def test_the_paper_pod_is_wired_as_the_template_wires_it(paper):
    """GPU g of a server on the rail-g ToR of each plane in its segment (1,024 GPUs, 16 ToRs); a plane's ToRs
    meet only that plane's 60 aggregation switches, each ToR all 60 of them."""
    _text, f = paper
    nbrs = defaultdict(set)
    for l in f.links:
        nbrs[l.src].add(l.dst)
        nbrs[l.dst].add(l.src)
    tors_of = {g: sorted(nbrs[g] & f.switches) for g in f.gpus}
    assert all(len(t) == 2 for t in tors_of.values())
    tors = {t for ts in tors_of.values() for t in ts}
    aggs = f.switches - tors
    assert (len(tors), len(aggs)) == (240, 120)
    up = {t: frozenset(nbrs[t] & aggs) for t in tors}
    planes = set(up.values())
    assert len(planes) == 2 and all(len(p) == 60 for p in planes) and not set.intersection(*map(set, planes))
    assert all(up[a] != up[b] for a, b in tors_of.values())  # a NIC's two ports in the two planes
    for g, (a, b) in tors_of.items():
        server, local = divmod(g, 8)
        segment = server // 128
        peers = {x for x in f.gpus if set(tors_of[x]) == {a, b}}
        assert peers == {s * 8 + local for s in range(segment * 128, segment * 128 + 128)}
        if g > 64:  # one segment's rail checked whole is enough
            break


def test_the_paper_pod_read_back_builds_the_same_fabric(paper):
    text, _f = paper
    params = read(text)
    built = build_from("hpn", None, params)
    check_built(built, parse(text))
    paper_pod = build("hpn", "paper")
    assert built.counts()["tors"] == paper_pod.counts()["tors"] == 240
    assert built.counts()["aggs"] == 120 and built.figures["gpus_total"] == paper_pod.figures["gpus_total"] == 15360
    assert built.counts()["links tor-agg"] == paper_pod.counts()["links tor-agg"]


@pytest.mark.parametrize("name,params", [("hpn", {}), ("hpn", {"dual_plane": False}), ("rail_optimized", {}),
                                         ("spine_leaf", {}), ("hpn", {"rails": 4, "hosts_per_segment": 2})])
def test_every_one_pod_fabric_reads_back_to_itself(name, params):
    topo = build(name, **params)
    text = export(topo)
    got = read(text)
    again = build_from("hpn", None, got)
    check_built(again, parse(text))
    assert export(again) == text  # the same file again: same ids, links, rates
    for key in ("rails", "dual_tor", "dual_plane", "aggs_per_plane", "tor_uplinks", "port_gbps", "uplink_gbps"):
        assert got[key] == build_from("hpn", None, got).params[key]


# A file as SimAI's generator lays it out: a seventh header field, the ids over two lines, two servers of two
# GPUs, one ToR pair in one plane (dual-ToR, single plane), two aggregation switches at 400G.
HAND = """\
10 2 2 4 14 A100 2
4 5
6 7 8 9
0 4 2400Gbps 0.000025ms 0
0 6 200Gbps 0.0005ms 0
0 7 200Gbps 0.0005ms 0
1 4 2400Gbps 0.000025ms 0
1 6 200Gbps 0.0005ms 0
1 7 200Gbps 0.0005ms 0
2 5 2400Gbps 0.000025ms 0
2 6 200Gbps 0.0005ms 0
2 7 200Gbps 0.0005ms 0
3 5 2400Gbps 0.000025ms 0
3 6 200Gbps 0.0005ms 0
3 7 200Gbps 0.0005ms 0
6 8 400Gbps 0.0005ms 0
7 9 400Gbps 0.0005ms 0
"""


def test_a_file_laid_out_as_simais_generator_writes_it_is_read():
    """ToR 6 and ToR 7 each serve both GPUs of both servers: not rail-optimized, one segment of two hosts,
    dual-ToR; each ToR reaches its own aggregation switch, so the two ToRs of a NIC are in two planes."""
    got = read(HAND)
    assert got == {"segments_per_pod": 1, "hosts_per_segment": 2, "rails": 2, "gpus_per_host": 2,
                   "rail_optimized": False, "dual_tor": True, "dual_plane": True, "aggs_per_plane": 1,
                   "tor_uplinks": 1, "port_gbps": 200.0, "uplink_gbps": 400.0, "nvlink_gbps": 2400.0,
                   "gpu": "A100"}
    check_built(build_from("hpn", None, got), parse(HAND))


@pytest.mark.parametrize("text,field,says", [
    ("10 2 2 4\n", "file line 1", "starts with"),
    (HAND.replace("10 2 2 4 14", "10 2 2 4 15"), "file line 1", "promises 15 links"),
    (HAND.replace("3 7 200Gbps 0.0005ms 0", "3 7 200Gbps 0.0005ms 0.001"), "file line 15", "lossy"),
    (HAND.replace("3 7 200Gbps", "3 7 100Gbps"), "file line 15", "one rate"),
    (HAND.replace("7 9 400Gbps", "7 9 fastGbps"), "file line 17", "bandwidth"),
    (HAND.replace("0 6 200Gbps 0.0005ms 0", "0 13 200Gbps 0.0005ms 0"), "file line 5", "between two nodes"),
])
def test_a_bad_file_gets_one_line_naming_where(text, field, says):
    with pytest.raises(InputError) as exc:
        read(text)
    assert exc.value.field == field and says in exc.value.what, exc.value.line()
    assert "\n" not in exc.value.line()


def test_a_fabric_of_several_pods_or_with_gpus_sharing_nics_is_refused():
    with pytest.raises(InputError, match="above the aggregation tier"):
        read(export(build("dcn_plus")))  # its core tier
    with pytest.raises(InputError, match="a NIC of its own") as exc:
        export(build("hpn", gpus_per_host=4))
    assert exc.value.field == "gpus_per_host"


WORKLOAD = {"collective": {"op": "allreduce"}}


def test_an_experiment_reads_its_topology_file_beside_it(tmp_path):
    from testbed.experiment.spec import from_dict, load

    (tmp_path / "fab.topo").write_text(export(build("hpn", hosts_per_segment=2)))
    body = "name: t\ntopology: {file: fab.topo, format: simai}\nworkload: {collective: {op: allreduce}}\n"
    (tmp_path / "e.yaml").write_text(body)
    exp = load(tmp_path / "e.yaml")
    assert exp.topology.file is None and exp.topology.source == "fab.topo (simai)"
    assert exp.topology.build().counts() == build("hpn", hosts_per_segment=2).counts()
    with pytest.raises(InputError, match="gives the whole topology"):
        from_dict({"name": "t", "topology": {"file": "fab.topo", "params": {"rails": 4}}, "workload": WORKLOAD})
    with pytest.raises(InputError, match="read when the experiment is loaded"):
        from_dict({"name": "t", "topology": {"file": "fab.topo"}, "workload": WORKLOAD}).topology.build()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "e.yaml").write_text(body.replace("fab.topo", "../fab.topo"))
    with pytest.raises(InputError, match="outside the experiment file's folder"):
        load(tmp_path / "sub" / "e.yaml")
