"""Cyclic buffer dependencies (controllers/deadlock.py): none on up-down routes, one where failures make the
shortest paths bounce through a leaf in both directions."""

from __future__ import annotations

from itertools import permutations

from controllers.deadlock import Queue, cycles, dependencies
from controllers.routing import RoutingGraph, compute_tables
from topos import build

L = [f"tor-p0-s{i}" for i in range(4)]
S = [f"agg-p0-pl0-{i}" for i in range(2)]


def _leaf_spine():
    topo = build("spine_leaf", leaves=4, hosts_per_leaf=2, spines=2)
    return topo, RoutingGraph(topo)


def _all_pairs(topo):
    return [(a.name, 0, b.name, 0) for a, b in permutations(topo.hosts, 2)]


def _link(topo, leaf: str, spine: str) -> str:
    return next(l.name for l in topo.links if {l.a, l.b} == {leaf, spine})


def test_up_down_routes_have_no_cycle_whatever_the_traffic():
    for topo in (_leaf_spine()[0], build("hpn"), build("hpn", hosts_per_segment=2, pods=2)):  # 2 pods: a core
        graph = RoutingGraph(topo)
        deps = dependencies(graph, compute_tables(graph), _all_pairs(topo))
        assert deps.number_of_edges() > 0 and cycles(deps) == []


def test_one_failure_leaves_the_bounce_route_unused_and_no_cycle():
    """Leaf 0 loses spine 1: spine 1's route to leaf 0 bounces through another leaf, but no leaf sends to leaf 0
    by spine 1 (spine 0 is closer), so nothing takes it."""
    topo, graph = _leaf_spine()
    tables = compute_tables(graph, [_link(topo, L[0], S[1])])
    assert cycles(dependencies(graph, tables, _all_pairs(topo))) == []


def test_two_failures_make_leaves_bounce_both_ways_and_close_a_cycle():
    """Leaf 0 keeps only spine 0, leaf 2 only spine 1: leaf 0 -> leaf 2 goes S0 -> L1|L3 -> S1 and back the other
    way, and with leaf 1 <-> leaf 3 traffic the queues S0->L1, L1->S1, S1->L3, L3->S0 wait on each other."""
    topo, graph = _leaf_spine()
    tables = compute_tables(graph, [_link(topo, L[0], S[1]), _link(topo, L[2], S[0])])
    h = {leaf: [n.name for n in topo.hosts if any(l.b == leaf for l in topo.links_of(n.name))] for leaf in L}
    flows = [(h[L[0]][0], 0, h[L[2]][0], 0), (h[L[2]][0], 0, h[L[0]][0], 0),
             (h[L[1]][0], 0, h[L[3]][0], 0), (h[L[3]][0], 0, h[L[1]][0], 0)]
    found = cycles(dependencies(graph, tables, flows))
    ring = (Queue(S[0], L[1]), Queue(L[1], S[1]), Queue(S[1], L[3]), Queue(L[3], S[0]))  # from its least queue
    assert ring in {c.queues for c in found}, [str(c) for c in found]
    assert all(len(c.queues) >= 4 for c in found)  # a bounce needs two valleys to come back around
    tie = next(c for c in found if c.queues == ring)
    assert {(h[L[0]][0], h[L[2]][0]), (h[L[2]][0], h[L[0]][0])} <= set(tie.flows)
    # the leaf pair alone, without the bounced flows, is up-down again
    assert cycles(dependencies(graph, tables, flows[2:])) == []


def _experiment(failures: list[dict], pfc: bool = True):
    from testbed.experiment.spec import from_dict

    return from_dict({"name": "cbd", "topology": {"name": "spine_leaf",
                                                  "params": {"leaves": 4, "hosts_per_leaf": 2, "spines": 2}},
                      "routing": "ecmp", "qos": {"scale": 10000, "pfc": {"enabled": pfc}}, "failures": failures,
                      "workload": {"collective": {"op": "sendrecv", "size": "1MB",
                                                  "ranks": "h0:0,h4:0,h5:0,h1:0,h2:0,h6:0,h7:0,h3:0"}}})


def test_a_run_names_the_failure_after_which_its_lossless_flows_can_deadlock():
    """Leaf pairs 0<->2 and 1<->3 in both directions; at 0.2 s leaf 0 loses spine 1, at 0.5 s leaf 2 loses spine
    0 (the cycle closes), at 0.8 s leaf 0's link comes back (it opens again)."""
    from testbed.experiment.deadlocks import buffer_cycles
    from testbed.experiment.failures import expand
    from testbed.experiment.jobs import collective_job

    a, b = "tor-p0-s0:4-agg-p0-pl0-1:1", "tor-p0-s2:3-agg-p0-pl0-0:3"
    failures = [{"at": 0.2, "link": a, "action": "down"}, {"at": 0.5, "link": b, "action": "down"},
                {"at": 0.8, "link": a, "action": "up"}]
    exp = _experiment(failures)
    topo = exp.topology.build()
    job = collective_job("job", exp.qos.lossless_dscp, exp.workload.collective, 10000, topo, "workload")
    found = buffer_cycles(exp, topo, [job], expand(exp, topo))
    assert [(r.t, r.down) for r in found] == [(0.5, tuple(sorted((a, b))))]
    rec = found[0].record()
    assert rec["count"] == len(found[0].cycles) >= 1 and {"h0->h4", "h5->h1"} <= set(rec["flows"])
    assert "t=0.5 s" in found[0].line() and "PFC can deadlock" in found[0].line()
    # the same flows in the default class, or without PFC: nothing to deadlock
    lossy = collective_job("job", 0, exp.workload.collective, 10000, topo, "workload")
    assert buffer_cycles(exp, topo, [lossy], expand(exp, topo)) == []
    off = _experiment(failures, pfc=False)
    assert buffer_cycles(off, topo, [job], expand(off, topo)) == []


def test_a_flow_between_two_rails_is_traced_on_the_destinations_rail():
    """A ring over every NIC has hops from one rail's NIC to another's (failure_campaign's job): the host sends
    them by the destination rail's NIC, so their queues are that rail's, and nothing is refused."""
    topo = build("hpn")
    graph = RoutingGraph(topo)
    tables = compute_tables(graph)
    across = dependencies(graph, tables, [("h7", 0, "h0", 1)])
    same = dependencies(graph, tables, [("h7", 1, "h0", 1)])
    assert across.number_of_edges() > 0 and set(across.edges) == set(same.edges)
    assert all("-r1-" in q.switch for e in across.edges for q in e if q.switch.startswith("tor"))


def _sample(t: float, *queues: Queue, prio: int = 3) -> dict:
    topo = _leaf_spine()[0]
    from testbed.experiment.deadlocks import queue_ports

    return {"t": t, "paused": [f"{p}/p{prio}" for q in queues for p in queue_ports(topo, q)]}


def test_the_samples_say_when_a_predicted_cycle_closed_how_long_and_whether_it_held_to_the_end():
    """The ring of the test above, seen paused in the PFC agent's samples: closed twice, the second time to the
    end (a deadlock nothing broke); a sample with one queue of it running, or the ring paused in a priority that
    is not lossless, is not closed."""
    from testbed.experiment.deadlocks import RouteCycles, holds

    topo, graph = _leaf_spine()
    ring = (Queue(S[0], L[1]), Queue(L[1], S[1]), Queue(S[1], L[3]), Queue(L[3], S[0]))
    cycle = next(c for c in cycles(dependencies(graph, compute_tables(
        graph, [_link(topo, L[0], S[1]), _link(topo, L[2], S[0])]), _all_pairs(topo))) if c.queues == ring)
    routes = [RouteCycles(0.5, ("a", "b"), (cycle,))]
    samples = [_sample(0.0), _sample(0.1, *ring), _sample(0.2, *ring), _sample(0.3, *ring[:3]),
               _sample(0.4, *ring, prio=4), _sample(0.5, *ring), _sample(0.6, *ring), _sample(0.9, *ring)]
    (held,) = holds(routes, topo, samples, [3])
    assert (held.closed, held.first_s, held.longest_s, held.to_end) == (2, 0.1, 0.4, True)
    assert "still held when the traffic ended" in held.line("x #0") and str(cycle) in held.line("x #0")
    (broken,) = holds(routes, topo, samples[:5], [3])
    assert (broken.closed, broken.longest_s, broken.to_end) == (1, 0.1, False)
    assert "broken each time" in broken.line("x #0")
    assert holds(routes, topo, samples[3:5], [3]) == [] and holds(routes, topo, samples, []) == []


def _at(t: float, paused: dict[str, int], moving: dict[str, int] | None = None) -> dict:
    """A PFC agent sample: `paused` queues with their backlogs, `moving` ones not paused."""
    return {"t": t, "paused": sorted(paused), "backlog": {**paused, **(moving or {})}}


def test_queues_paused_with_frames_and_no_change_to_the_end_are_a_freeze_whatever_the_routes_predicted():
    """hash_polarization's single plane froze at full size (the egress model pauses every ingress neighbour,
    none of the routes' cycles): the samples say which lossless queues stood paused and unchanged to the end."""
    from testbed.experiment.deadlocks import MIN_FROZEN_SAMPLES, frozen

    stuck = {"agg-0:5/p3": 104_732, "tor-1:6/p3": 101_704}
    moving = [_at(i * 0.05, {"tor-0:5/p3": 3000 + i}, {"h0:0/p3": 1500}) for i in range(20)]
    held = [_at(1 + i * 0.05, stuck | {"tor-2:7/p3": 0, "h1:0/p6": 900}, {"h0:0/p3": 1500 * i})
            for i in range(MIN_FROZEN_SAMPLES + 2)]
    froze = frozen(moving + held, [3])
    assert froze is not None and froze.queues == tuple(sorted(stuck)) and froze.from_s == 1.0  # empty, p6 left out
    assert froze.held_s == round(held[-1]["t"] - 1.0, 4) and "2 lossless queue(s) paused" in froze.line("v #0")
    assert frozen(held[:MIN_FROZEN_SAMPLES - 1], [3]) is None  # too short to tell from a pause that resumes
    assert frozen(moving, [3]) is None  # paused, but its backlog keeps changing: frames still move
    assert frozen(held + [_at(2, {}, stuck)], [3]) is None  # resumed at the end


def test_the_summary_prints_a_freeze_beside_the_predicted_cycles_or_without_any():
    import json

    from testbed.experiment.sections import deadlock_lines
    from testbed.schema.results import Run
    from tests.labwork import RECORDED

    run = next(r for r in json.loads((RECORDED / "pfc_deadlock.json").read_text())["runs"]
               if r["pfc"]["buffer_cycles"])
    froze = {"queues": ["agg-0:5/p3", "tor-1:6/p3"], "from_s": 58.94, "held_s": 22.0}
    quiet = Run.model_validate(run | {"pfc": run["pfc"] | {"buffer_cycles": [], "frozen": froze}})
    (line,) = deadlock_lines(quiet)  # no cycle predicted, and still a freeze
    assert line.startswith(f"PFC froze, {quiet.variant} #0: 2 lossless queue(s)") and "t=58.94 s" in line
    predicted = Run.model_validate(run | {"pfc": run["pfc"] | {"frozen": None}})
    assert deadlock_lines(predicted) and not any("froze" in x for x in deadlock_lines(predicted))
