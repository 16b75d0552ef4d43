"""Every builder's counts against closed forms written here from the definitions,
the structural invariants walked link by link, and the paper-scale figures."""

from __future__ import annotations

import pytest

from topos import BUILDERS, InputError, build
from topos.fabric import check_invariants, shape


def hpn_expected(pods, segs, hosts, rails, aggs, uplinks, dual_tor=True, dual_plane=True, backup=0, core_ratio=1,
                 rail_opt=True, core=None):
    """HPN/Clos closed forms, derived by hand (independently of topos.fabric)."""
    t = 2 if dual_tor else 1
    planes = 2 if dual_plane else 1
    groups = rails if rail_opt else 1
    tors = pods * segs * groups * t
    agg_down = segs * groups * t // planes * uplinks // aggs
    has_core = pods > 1 if core is None else core
    agg_up = agg_down // core_ratio if has_core else 0
    return {
        "hosts": pods * segs * (hosts + backup),
        "tors": tors,
        "aggs": pods * planes * aggs,
        "cores": planes * aggs * agg_up,
        "links host-tor": pods * segs * (hosts + backup) * rails * t,
        "links tor-agg": tors * uplinks,
        "links agg-core": pods * planes * aggs * agg_up,
        "tor_ports": (hosts + backup) * rails // groups + uplinks,
    }


def fat_tree_expected(k):
    return {"hosts": k**3 // 4, "tors": k * k // 2, "aggs": k * k // 2, "cores": k * k // 4,
            "links host-tor": k**3 // 4, "links tor-agg": k**3 // 4, "links agg-core": k**3 // 4, "tor_ports": k}


CASES = [
    ("hpn", {}, hpn_expected(1, 2, 4, 2, 4, 4)),
    ("hpn", {"preset": "mini-core"}, hpn_expected(2, 2, 2, 2, 2, 2, core_ratio=2)),
    ("hpn", dict(pods=3, segments_per_pod=2, hosts_per_segment=3, rails=4, aggs_per_plane=2, tor_uplinks=4,
                 core_oversubscription=2, backup_hosts_per_segment=1),
     hpn_expected(3, 2, 3, 4, 2, 4, backup=1, core_ratio=2)),
    ("hpn", dict(dual_plane=False), hpn_expected(1, 2, 4, 2, 4, 4, dual_plane=False)),
    ("hpn", dict(dual_plane=False, dual_tor=False), hpn_expected(1, 2, 4, 2, 4, 4, dual_plane=False, dual_tor=False)),
    ("dcn_plus", {}, hpn_expected(2, 1, 4, 2, 2, 4, dual_plane=False, rail_opt=False, core_ratio=2, core=True)),
    ("dcn_plus", {"preset": "mini-single-tor"},
     hpn_expected(2, 1, 4, 2, 2, 4, dual_tor=False, dual_plane=False, rail_opt=False, core_ratio=2, core=True)),
    ("rail_optimized", {}, hpn_expected(1, 2, 4, 2, 2, 2, dual_tor=False, dual_plane=False)),
    ("spine_leaf", dict(leaves=5, hosts_per_leaf=3, spines=3),
     hpn_expected(1, 5, 3, 1, 3, 3, dual_tor=False, dual_plane=False, rail_opt=False)),
    ("fat_tree", dict(k=4), fat_tree_expected(4)),
    ("fat_tree", dict(k=6), fat_tree_expected(6)),
    ("fat_tree", dict(k=8), fat_tree_expected(8)),
]


@pytest.mark.parametrize("name,params,want", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_counts_match_closed_forms(name, params, want):
    topo = build(name, **params)
    c = topo.counts()
    for key in ("hosts", "tors", "aggs", "cores"):
        assert c[key] == want[key], key
    for kind in ("host-tor", "tor-agg", "agg-core"):
        assert c.get(f"links {kind}", 0) == want[f"links {kind}"], kind
    ports = topo.port_counts()
    assert {ports[t.name] for t in topo.by_role("tor")} == {want["tor_ports"]}
    assert topo.figures["tor_ports"] == want["tor_ports"]


@pytest.mark.parametrize("name", list(BUILDERS))
def test_port_numbers_unique_and_dense(name):
    topo = build(name)
    used: dict[str, list[int]] = {n: [] for n in topo.nodes}
    for l in topo.links:
        used[l.a].append(l.a_port)
        used[l.b].append(l.b_port)
    for n, ports in used.items():
        base = 0 if topo.nodes[n].role == "host" else 1
        assert sorted(ports) == list(range(base, base + len(ports))), n


@pytest.mark.parametrize("params", [{}, {"preset": "mini-core"}, {"preset": "paper"}])
def test_hpn_dual_plane_invariants_by_walking_links(params):
    topo = build("hpn", **params)
    nodes = topo.nodes
    nic_ports: dict[tuple[str, int], list] = {}
    for l in topo.links:
        a, b = nodes[l.a], nodes[l.b]
        if l.kind == "host-tor":
            nic_ports.setdefault((l.a, l.nic), []).append(b)
            assert b.rail == l.nic and b.plane == l.nic_port
        else:
            assert a.plane == b.plane, l.name
    assert len(nic_ports) == sum(h.nics for h in topo.hosts)
    for (_host, _nic), tors in nic_ports.items():
        assert len(tors) == 2
        assert tors[0].name != tors[1].name
        assert {t.plane for t in tors} == {0, 1}


def test_paper_scale_figures():
    topo = build("hpn", preset="paper")
    f = topo.figures
    assert f["gpus_per_segment"] == 1024
    assert f["gpus_per_pod"] == 15360
    assert f["tor_oversubscription"] == pytest.approx(25600 / 24000, abs=1e-3)  # 1.067:1
    assert len(topo.by_role("tor")) == 240
    assert len(topo.by_role("agg")) == 120
    assert f["tor_ports"] == 136 + 60
    # With a second pod the 15:1 aggregation-to-core ratio gives 8 uplinks per aggregation switch.
    two = shape(BUILDERS["hpn"].params(**{**BUILDERS["hpn"].presets["paper"], "pods": 2}))
    assert two.agg_down == 120 and two.agg_up == 8


def test_fat_tree_has_full_bisection():
    topo = build("fat_tree", k=6)
    assert topo.figures["tor_oversubscription"] == 1.0
    assert topo.figures["agg_oversubscription"] == 1.0


def test_check_invariants_catches_a_cross_plane_link():
    topo = build("hpn")
    from dataclasses import replace

    i, bad = next((i, l) for i, l in enumerate(topo.links) if l.kind == "tor-agg" and topo.nodes[l.a].plane == 0)
    wrong_agg = next(n for n in topo.by_role("agg") if n.plane == 1)
    topo.links[i] = replace(bad, b=wrong_agg.name)
    p = BUILDERS["hpn"].params(**BUILDERS["hpn"].presets["mini"])
    with pytest.raises(AssertionError, match="plane"):
        check_invariants(topo, p, shape(p))


@pytest.mark.parametrize("name,params,field", [
    ("hpn", {"pods": -1}, "pods"),
    ("hpn", {"hosts_per_segment": 0}, "hosts_per_segment"),
    ("hpn", {"bogus": 1}, "bogus"),
    ("hpn", {"hosts_per_segment": 300}, "tor_capacity_gbps"),  # 300x200G + 4x400G > 51.2T
    ("hpn", {"segments_per_pod": 200, "aggs_per_plane": 2, "tor_uplinks": 2}, "agg_capacity_gbps"),
    ("hpn", {"dual_tor": False}, "dual_plane"),
    ("hpn", {"tor_uplinks": 6}, "tor_uplinks"),
    ("hpn", {"pods": 2, "core_oversubscription": 3}, "core_oversubscription"),
    ("hpn", {"preset": "huge"}, "preset"),
    ("dcn_plus", {"dual_plane": True}, "dual_plane"),
    ("fat_tree", {"k": 5}, "k"),
    ("nope", {}, "topology"),
])
def test_bad_input_names_field_and_fix(name, params, field):
    with pytest.raises(InputError) as exc:
        build(name, **params)
    line = exc.value.line()
    assert exc.value.field == field
    assert line.startswith(f"{field}=") and "; fix: " in line and "\n" not in line
