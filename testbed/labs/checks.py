"""One checker per lab: what the lab's tasks leave behind, compared with what the network really does.

Numbers the student reports are checked against the checker's own computation
(paths from the routing tables) or against the run they did (results.json).
"""

from __future__ import annotations

import statistics

from controllers.precise import FlowSpec, assign, least_loaded, loads
from controllers.routing import RoutingGraph, compute_tables, trace
from testbed.net.balance import cross_segment_bytes, links_used
from testbed.schema.results import Run
from topos import build
from topos.addressing import nic_address
from topos.errors import InputError
from traffic.metrics import cluster_utilization

from .evidence import Check, Evidence, StudentRun, answer_check, png_check
from .sandbox import ChildPolicy, PolicyFailed

LAB1_PAIR = ("h0", "h7")  # different segments in both fabrics: paths through the aggregation layer
LAB3_LINK, LAB3_SRC, LAB3_DST = "h5:nic0:p0", "h5", "h0"
LAB5_FLOWS = 8


def count_paths(topo_name: str, src: str, dst: str, down: tuple[str, ...] = ()) -> int:
    """Distinct switch paths (every ECMP branch) from host src to host dst's NIC 0."""
    topo = build(topo_name)
    graph = RoutingGraph(topo)
    tables = compute_tables(graph, down)
    return len(trace(graph, tables, src, nic_address(topo.nodes[dst], 0).ip))


def _run_missing(experiment: str) -> Check:
    return Check(f"a run of {experiment}", False,
                 f"run it first: hpnlab run experiments/{experiment}.yaml --quick")


def lab1(ev: Evidence) -> list[Check]:
    a = ev.answers(1)
    src, dst = LAB1_PAIR
    how = f"in the Mininet CLI of 'hpnlab lab start 1' type 'paths {src} {dst}' and count"
    return [
        png_check(ev.workdir / "hpn.png", f"hpnlab topo show hpn --png {ev.workdir}/hpn.png"),
        png_check(ev.workdir / "dcn_plus.png", f"hpnlab topo show dcn_plus --png {ev.workdir}/dcn_plus.png"),
        answer_check(a, "hpn_paths", count_paths("hpn", src, dst), how=how),
        answer_check(a, "dcn_plus_paths", count_paths("dcn_plus", src, dst),
                     how=f"start the DCN+ network with 'hpnlab up dcn_plus' and type 'paths {src} {dst}'"),
    ]


def lab2(ev: Evidence) -> list[Check]:
    run = ev.latest_run("precise_vs_ecmp")
    if run is None:
        return [_run_missing("precise_vs_ecmp")]
    return _lab2_collisions(ev, run) + _lab2_polarization(ev)


def _lab2_polarization(ev: Evidence) -> list[Check]:
    run = ev.latest_run("hash_polarization")
    if run is None:
        return [_run_missing("hash_polarization")]
    used = {k: links_used(rs[0].counters)[0] for k, rs in run.variants().items()}
    if not {"single-plane", "single-plane-seeded"} <= set(used):
        return [Check("the run has single-plane and single-plane-seeded", False,
                      "run the shipped experiments/hash_polarization.yaml, unchanged")]
    a = ev.answers(2)
    how = f"read 'agg-to-ToR links used' in 'hpnlab results show {run.name}' (its first run)"
    return [Check("one seed everywhere left aggregation-to-ToR links idle that per-switch seeds used",
                  used["single-plane"] < used["single-plane-seeded"],
                  "compare the two single-plane variants' 'agg-to-ToR links used'"),
            answer_check(a, "polarized_links", used["single-plane"], close=0, how=how),
            answer_check(a, "seeded_links", used["single-plane-seeded"], close=0, how=how)]


def _lab2_collisions(ev: Evidence, run: StudentRun) -> list[Check]:
    v = run.variants()
    frac = {k: statistics.mean(o.fraction_of_ideal for r in rs for o in r.ops) for k, rs in v.items()}
    a = ev.answers(2)
    how = f"read 'of ideal' in 'hpnlab results show {run.name}'"
    checks = [Check("the run has hpn-precise and hpn-ecmp", {"hpn-precise", "hpn-ecmp"} <= set(frac),
                    "run the shipped experiments/precise_vs_ecmp.yaml, unchanged")]
    if not checks[0].ok:
        return checks
    return checks + [
        answer_check(a, "ecmp_fraction", frac["hpn-ecmp"], close=0.03, how=how),
        answer_check(a, "precise_fraction", frac["hpn-precise"], close=0.03, how=how),
        answer_check(a, "faster", "precise" if frac["hpn-precise"] > frac["hpn-ecmp"] else "ecmp",
                     how="which routing mode gave the higher busbw?"),
    ]


def lab3(ev: Evidence) -> list[Check]:
    a = ev.answers(3)
    checks = [answer_check(a, "paths_before", count_paths("hpn", LAB3_SRC, LAB3_DST),
                           how=f"type 'paths {LAB3_SRC} {LAB3_DST}' before failing the link"),
              answer_check(a, "paths_after", count_paths("hpn", LAB3_SRC, LAB3_DST, (LAB3_LINK,)),
                           how=f"type 'fail {LAB3_LINK}', then 'paths {LAB3_SRC} {LAB3_DST}' again")]
    run = ev.latest_run("dual_tor_failover")
    if run is None:
        return checks + [_run_missing("dual_tor_failover")]
    halted = {k: any(r.halted for r in rs) for k, rs in run.variants().items()}
    how = f"look for 'halted' in 'hpnlab results show {run.name}'"
    return checks + [answer_check(a, "dual_tor_halted", halted.get("dual-tor-hpn", False), how=how),
                     answer_check(a, "single_tor_halted", halted.get("single-tor-rail", False), how=how)]


def lab4(ev: Evidence) -> list[Check]:
    return _lab4_incast(ev) + _lab4_storm(ev) + _lab4_deadlock(ev)


def _lab4_deadlock(ev: Evidence) -> list[Check]:
    run = ev.latest_run("pfc_deadlock")
    if run is None:
        return [_run_missing("pfc_deadlock")]
    v = run.variants()
    if not (v.get("deadlock") and v.get("watchdog") and all(r.pfc for k in ("deadlock", "watchdog") for r in v[k])):
        return [Check("the run has the deadlock and watchdog variants", False,
                      "run the shipped experiments/pfc_deadlock.yaml, unchanged")]
    held = [h for r in v["deadlock"] for h in r.pfc.get("deadlocks") or []]
    broken = [h for r in v["watchdog"] for h in r.pfc.get("deadlocks") or []]
    a = ev.answers(4)
    how = f"read the PFC deadlock lines in 'hpnlab results show {run.name}'"
    return [
        Check("without the watchdog the cycle closed and held until the job halted",
              any(h["to_end"] for h in held) and all(r.halted for r in v["deadlock"]),
              "not in your run: did both failures fire? see its failures and PFC deadlock lines"),
        Check("the watchdog broke every deadlock and the jobs finished",
              bool(broken) and not any(h["to_end"] for h in broken) and not any(r.halted for r in v["watchdog"]),
              "not in your run: see the watchdog variant's PFC watchdog and deadlock lines"),
        answer_check(a, "deadlock_held_s", max((h["longest_s"] for h in held), default=0.0), close=0.05, how=how),
        answer_check(a, "deadlock_closed", sum(h["closed"] for h in broken), close=0, how=how),
    ]


def _lab4_storm(ev: Evidence) -> list[Check]:
    run = ev.latest_run("pfc_storm")
    if run is None:
        return [_run_missing("pfc_storm")]
    v = run.variants()
    wd = [(r.pfc or {}).get("watchdog") for r in v.get("storm-watchdog", [])]
    if not (wd and all(wd) and v.get("storm") and v.get("healthy")):
        return [Check("the run has the healthy, storm and storm-watchdog variants", False,
                      "run the shipped experiments/pfc_storm.yaml, unchanged")]
    slowest = {k: max(o.seconds for r in v[k] for o in r.ops if o.job == "innocent") for k in ("healthy", "storm")}
    a = ev.answers(4)
    how = f"read the PFC watchdog line in 'hpnlab results show {run.name}'"
    return [
        # the storm lasts 1.5 s: an innocent op that met it waited for most of it
        Check("without the watchdog the storm stalled the innocent job", slowest["storm"] - slowest["healthy"] > 0.75,
              f"the innocent job's slowest op took {slowest['storm']:.2f} s in the storm, {slowest['healthy']:.2f} s "
              "healthy: was the run CPU-bound? see its fidelity lines"),
        Check("the watchdog found the storm", all(w["storms"] > 0 for w in wd),
              "the watchdog found no storm: did the storm fire? see the run's failures"),
        answer_check(a, "watchdog_storms", sum(w["storms"] for w in wd), close=0, how=how),
        answer_check(a, "watchdog_drops", sum(w["drops"] for w in wd), close=0, how=how),
    ]


def _lab4_incast(ev: Evidence) -> list[Check]:
    run = ev.latest_run("pfc_incast")
    if run is None:
        return [_run_missing("pfc_incast")]
    v = run.variants()
    drops = {k: sum(r.drops.lossless for r in rs) for k, rs in v.items()}
    pauses = sum(t["pause_events"] for r in v.get("pfc-on", []) for t in (r.pfc or {})
                 .get("pauses_by_tier", {}).values())
    a = ev.answers(4)
    how = f"read the drops and pauses in 'hpnlab results show {run.name}'"
    return [
        Check("PFC on kept the lossless class lossless", drops.get("pfc-on", -1) == 0,
              "the pfc-on variant dropped packets: was the run CPU-bound? see its fidelity line"),
        Check("PFC off overflowed the lossless queues", drops.get("pfc-off", 0) > 0,
              "the pfc-off variant dropped nothing: run experiments/pfc_incast.yaml without --quick"),
        answer_check(a, "drops_pfc_off", drops.get("pfc-off", 0), close=0, how=how),
        answer_check(a, "pause_events_pfc_on", pauses, close=0, how=how),
    ]


def lab5_flows(topo) -> list[FlowSpec]:
    """One flow from each host of segment 0 to a host of segment 1 on each NIC port's worth of source ports."""
    hosts = [h.name for h in topo.hosts]
    half = len(hosts) // 2
    return [FlowSpec(hosts[i % half], nic_address(topo.nodes[hosts[half + i % half]], 0).ip, "tcp", 40000 + i, 9000)
            for i in range(LAB5_FLOWS)]


def measure_policy(policy) -> dict:
    """Place the lab's flows with a policy; the busiest link's flow count and the ToR uplinks used."""
    topo = build("hpn")
    graph = RoutingGraph(topo)
    tables = compute_tables(graph)
    flows = lab5_flows(topo)
    result = assign(graph, tables, flows, policy=policy)
    load = loads({f.key: f for f in flows}, result.paths)
    uplinks = {h for h in load if topo.nodes[h[0]].role == "tor" and topo.nodes[graph.peer[h]].role == "agg"}
    return {"max_load": max(load.values()), "uplinks": len(uplinks), "placed": len(result.paths)}


def lab5(ev: Evidence) -> list[Check]:
    path = ev.workdir / "lab5_policy.py"
    if not path.exists():
        return [Check("your policy file", False, f"{path} is missing: 'hpnlab lab start 5' makes it")]
    try:  # the student's code answers from a child process of its own (testbed/labs/sandbox.py)
        with ChildPolicy(path) as policy:
            got = measure_policy(policy)
    except (PolicyFailed, ValueError, InputError) as exc:  # ValueError: an index out of range (precise.assign)
        return [Check("your policy runs", False, f"{type(exc).__name__}: {exc}")]
    best = measure_policy(least_loaded)
    return [
        Check(f"every flow placed ({got['placed']} of {LAB5_FLOWS})", got["placed"] == LAB5_FLOWS,
              "choose() must return an index into candidates"),
        Check(f"busiest link carries {got['max_load']} flow(s) (best possible {best['max_load']})",
              got["max_load"] == best["max_load"],
              f"{LAB5_FLOWS} flows went over {got['uplinks']} ToR uplink(s): pick the candidate whose links "
              "are least loaded (look them up in `load`)"),
    ]


def _utilization(runs: list[Run]) -> float:
    gpus = {j: d["gpus"] for r in runs for j, d in r.jobs.items()}
    return cluster_utilization([i.model_dump() for r in runs for i in r.iterations], gpus)[0]


def lab6(ev: Evidence) -> list[Check]:
    a = ev.answers(6)
    checks = []
    run = ev.latest_run("crux_multi_job")
    if run is None:
        checks.append(_run_missing("crux_multi_job"))
    else:
        v = run.variants()
        how = f"read the cluster table in 'hpnlab results show {run.name}'"
        crux = [r.crux for r in v.get("crux-priorities", [])[:1] if r.crux]
        first = (crux[0].get("order") or ["?"])[0] if crux else "?"
        one, paths = (_utilization(v.get(k, [])) for k in ("ecmp-one-class", "crux-priorities-paths"))
        checks += [Check("Crux put the most GPU-intensive job (A) first", first == "A",
                         f"the scheduler put {first} first: was the run complete? see its results.json"),
                   Check("Crux priorities and paths raised the cluster's GPU utilization", paths > one,
                         "not in your run: was it CPU-bound? see its fidelity lines"),
                   answer_check(a, "first_job", first, how=how),
                   answer_check(a, "util_one_class", round(one, 3), close=0.02, how=how),
                   answer_check(a, "util_crux_paths", round(paths, 3), close=0.02, how=how)]
    run = ev.latest_run("placement")
    if run is None:
        return checks + [_run_missing("placement")]
    v = run.variants()
    compact, scattered = (statistics.mean([cross_segment_bytes(r.counters) for r in v.get(k, [])] or [0]) for k in
                          ("compact", "scattered"))
    ratio = compact / scattered if scattered else 0.0
    how = f"divide the two cross-segment byte counts in 'hpnlab results show {run.name}'"
    return checks + [Check("compact placement sent fewer bytes across segments", ratio < 1,
                           "not in your run: compare the variants' cross-segment bytes"),
                     answer_check(a, "crossing_ratio", round(ratio, 3), close=0.05, how=how)]


def lab7(ev: Evidence) -> list[Check]:
    a = ev.answers(7)
    return _lab7_campaign(ev, a) + _lab7_gray(ev, a)


def _lab7_campaign(ev: Evidence, a: dict) -> list[Check]:
    run = ev.latest_run("failure_campaign")
    if run is None:
        return [_run_missing("failure_campaign")]
    c = {k: rs[0].campaign for k, rs in run.variants().items()}
    if not (c.get("dual-tor-hpn") and c.get("single-tor-rail")):
        return [Check("the run has dual-tor-hpn and single-tor-rail campaigns", False,
                      "run the shipped experiments/failure_campaign.yaml, unchanged")]
    restarts = {k: sum(s["restarts"] for s in c[k]["summary"].values()) for k in ("dual-tor-hpn", "single-tor-rail")}
    slow = [o["slowdown"] for o in c["dual-tor-hpn"]["outcomes"]
            if o["kind"] == "nic-tor" and o["outcome"] == "slowdown"]
    how = f"read the Failure campaign tables in 'hpnlab results show {run.name}'"
    checks = [Check("dual-ToR rode out every outage (no restart)", restarts["dual-tor-hpn"] == 0,
                    "a dual-ToR job restarted: was the run CPU-bound? see its fidelity lines"),
              Check("single-ToR: the watchdog restarted the job", restarts["single-tor-rail"] > 0,
                    "no single-ToR restart: see the run's outcomes (confounded outages are not counted)"),
              answer_check(a, "dual_tor_restarts", restarts["dual-tor-hpn"], close=0, how=how),
              answer_check(a, "single_tor_restarts", restarts["single-tor-rail"], close=0, how=how)]
    if slow:
        checks.append(answer_check(a, "dual_tor_slowdown", round(statistics.mean(slow), 2), close=0.02, how=how))
    return checks


def _lab7_gray(ev: Evidence, a: dict) -> list[Check]:
    run = ev.latest_run("gray_failures")
    if run is None:
        return [_run_missing("gray_failures")]
    lossy = [d for r in run.variants().get("lossy-1e-3", []) for d in (r.gray or {}).get("delays", [])]
    if not lossy:
        return [Check("the run has the lossy-1e-3 variant", False,
                      "run the shipped experiments/gray_failures.yaml, unchanged")]
    d = lossy[0]
    how = f"read the Gray failures table in 'hpnlab results show {run.name}'"
    if d["named_after_s"] is None:
        return [Check("the detector named the lossy link", False,
                      "it never did in your run: were any frames lost? see the table's 'frames lost'")]
    return [Check("the detector named the lossy link", True),
            answer_check(a, "lossy_link", d["links"][0], how=how),
            answer_check(a, "named_after_s", d["named_after_s"], close=max(0.002, 0.05 * d["named_after_s"]),
                         how=how)]


CHECKERS = {1: lab1, 2: lab2, 3: lab3, 4: lab4, 5: lab5, 6: lab6, 7: lab7}
