"""`hpnlab run FILE`: build, route, shape, replay, break, measure, tear down; leave a results folder.

results/<date>-<name>-<hash>/
    spec.yaml            the experiment as run
    environment.json     capability probe, versions (kernel, OVS, Mininet, os-ken, project git revision)
    results.json         per variant and repetition: every op's times and bandwidths, failure and
                         controller event logs, the PFC agent's report, the fidelity verdict; over several
                         servers (--cluster), each server's address and versions and the placement
    ops.csv, timeline.csv
    busbw.png, throughput.png, queues.png
    summary.md

Planning (planning.py) has checked and scheduled everything first; `execute` is
one planned repetition on a fresh network, returning its record. `hpnlab traffic
run` plans and executes a one-job experiment built in memory, so both commands
replay through the same code.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import yaml

from controllers.placement import ring_crossings, segments_spanned
from testbed.campaign import cost
from testbed.cluster.spec import ClusterSpec
from testbed.net.network import Network
from testbed.qos.cc import socket_cc
from testbed.qos.pfc_report import in_fabric_time
from testbed.qos.ports import switch_ports
from testbed.qos.scale import load_floor
from testbed.schema.results import Run
from testbed.system import stages
from testbed.system.capabilities import probe
from testbed.system.signals import exit_cleanly_on_signals
from testbed.system.versions import versions
from topos.inputs import read_text, write_file
from topos.model import Topology
from traffic import closed_form
from traffic.iteration import predict
from traffic.metrics import busbw_factor
from traffic.replay import Replayer
from traffic.skip import Skipper
from traffic.timebase import stamp
from traffic.transports import make

from .counters import ecn_record, queue_records, transport_records
from .deadlocks import buffer_cycles, recorded
from .detector import DETECTED, Detector, delays
from .failures import Injector, campaign_outages
from .fidelity import verdict
from .jobs import Job, demand, fabric_budget, job_gpus, offered
from .measure import Sampler
from .planning import Plan, plan, plan_variant
from .record import RunRecord, bytes_ok
from .results import RESULTS, write_reports
from .roce import roce_options
from .spec import Experiment, load
from .watch import Watch

log = logging.getLogger(__name__)

SPORT_STRIDE = 2500  # jobs side by side take disjoint source ports (4 per pinned NIC-port range, 8 in ECMP's)


def run_one(label: str, exp: Experiment, base: Path, log_dir: Path | None, rep: int,
            progress: Callable[[], None] | None = None, watch: Watch | None = None,
            stage: Callable[[str], None] | None = None, cluster: ClusterSpec | None = None) -> Run:
    """Repetition `rep` of variant `exp` (an experiment without variants), planned and run."""
    return execute(plan_variant(label, exp, base, cluster).at(rep), log_dir, progress, watch, stage, cluster)


def execute(p: Plan, log_dir: Path | None, progress: Callable[[], None] | None = None, watch: Watch | None = None,
            stage: Callable[[str], None] | None = None, cluster: ClusterSpec | None = None) -> Run:
    """A planned repetition on a network of its own; returns the run's record. `progress` is called after each
    op, `stage` with each stage of the network's start (minutes at 128 hosts); `watch` hears of the network,
    every op and iteration as they happen (the live web view); `cluster`: the servers it spreads over
    (testbed.cluster), recorded with their versions and the placement."""
    watch = watch or Watch()
    for why in p.notes:
        log.info("%s: %s", p.label, why)
    routes = buffer_cycles(p.exp, p.topo, p.jobs, p.events)
    for r in routes:
        log.warning("%s: %s", p.label, r.line())
    exit_cleanly_on_signals()
    rec = RunRecord(p.label, p.rep, watch, progress, timebase=p.exp.timebase, transport=p.transport,
                    channels=p.channels, scale=p.exp.qos.scale, scale_auto=p.auto.scale.why() if p.auto.scale else None,
                    dilation_auto=p.auto.time.why() if p.auto.time else None)
    e = p.exp
    shaped = e.qos.dilated(e.time.dilation)  # links at rate / (scale x D): the fabric's time runs D times slower
    with Network(p.topo, routing="controller", mode=e.switch_mode, hashing=e.hashing, qos=shaped,
                 log_dir=None if log_dir is None else str(log_dir), progress=stage, cluster=cluster) as net:
        watch.network_up(net, p.label, e.time.dilation)
        _tcp_timers(net, e, rec)
        if net.cluster is not None:
            rec.data["cluster"] = net.cluster.record()
        if stage:
            stage("traffic")
        stages.reached("traffic")
        if e.scheduler == "crux":
            rec.data["crux"] = _crux_classes(net, e, p.jobs, p.topo, p.channels)
        rec.data["jobs"] = {j.name: _job_record(j, p.topo) for j in p.jobs}
        # links a failure will make lossy: their hosts open the jobs' connections frame by frame (gray.py)
        for name in sorted({n for ev in p.events if ev.gray and ev.gray[0] == "lossy" for n in ev.links}):
            net.gray.frames_only(name)
        runners = _start_jobs(net, p, rec.data.get("crux"))
        _replay(net, p, runners, rec)
    if p.exp.campaign is not None:
        rec.data["campaign"] = _campaign(p, rec.data)
    if rec.data.get("pfc") is not None:
        rec.data["pfc"] |= recorded(routes, p.topo, rec.data["pfc"])
    rec.data["fidelity"] = _fidelity(p, rec.data)
    return Run.model_validate(rec.data)  # the record checked key by key against results.json's schema


def _tcp_timers(net: Network, e: Experiment, rec: RunRecord) -> None:
    """The hosts' TCP timers in the fabric's time (dilated with it), and capped at the transport's retry timer
    when the experiment gives one; the hosts whose kernel could not are recorded and said."""
    if e.time.dilation != 1:
        kept = rec.data["tcp_timers_not_dilated"] = net.dilate_tcp_timers(e.time.dilation)
        if kept:
            log.warning("%s: TCP's timeouts not dilated on %d host(s) (kernel without tcp_rto_min_us): "
                        "they fire %gx early in the fabric's time", rec.label, len(kept), e.time.dilation)
    if e.resilience.retry_timer_s is not None:
        kept = rec.data["tcp_rto_not_capped"] = net.cap_tcp_rto(e.resilience.retry_timer_s, e.time.dilation)
        if kept:
            log.warning("%s: TCP's retransmission timeout not capped on %d host(s) (kernel without "
                        "tcp_rto_max_ms): a repaired link waits for TCP's backoff", rec.label, len(kept))


def _start_jobs(net: Network, p: Plan, crux: dict | None) -> list[tuple[Job, object, Replayer]]:
    """Each job's transport and replayer: own agents, port, source ports and traffic class; under Crux, the
    paths placed job by job, the most important first, around those already placed."""
    runners = []
    for i, job in enumerate(p.jobs):
        tr = make(p.transport, net, tos=job.dscp << 2, index=i, cc=socket_cc(p.exp.qos.cc), **roce_options(net, p))
        tr.start()
        rp = Replayer(net, tr, channels=p.channels, routing=p.exp.routing, connection_choice=p.exp.connection_choice,
                      nic_port_choice=p.exp.nic_port_choice, step_timeout=p.exp.step_timeout_s,
                      sport_offset=SPORT_STRIDE * i, timebase=p.exp.timebase)
        runners.append((job, tr, rp))
    if crux is not None:
        rank = {n: k for k, n in enumerate(crux["order"])}
        for job, _tr, rp in sorted(runners, key=lambda r: rank[r[0].name]):
            rp.connect([sched for _step, sched in job.one_iteration if sched is not None])
    return runners


def _replay(net: Network, p: Plan, runners: list, rec: RunRecord) -> None:
    """Every job in a thread of its own while the sampler and the failure schedule run; then the record's
    measurements, gathered also when a job raised."""
    rec.start_clock()  # one clock for the record, the sampler and the failures: they agree on t = 0 and on D
    sampler, injector = Sampler(net, clock=rec.clock), Injector(net, p.events, clock=rec.clock)
    detector = (Detector(net.gray_counters, rec.clock, on_found=rec.watch.gray_found, carriers=net.carrier_changes)
                if any((e.gray and e.gray[0] in DETECTED) or e.flap for e in p.events) else None)
    skipper: Skipper | None = None
    t0_mono = time.monotonic()
    counters0 = net.port_counters()
    try:  # every thread starts inside: a Ctrl-C between two starts still stops those running before teardown
        skipper = _skipper(p, runners, rec, injector)
        sampler.start()
        injector.start()
        if detector is not None:
            detector.start()
        # a campaign's jobs go on until its last outage is repaired; other runs' jobs run what they were given
        more = injector.pending if p.exp.campaign is not None else (lambda: False)
        threads = [threading.Thread(target=_run_job, args=(job, rp, rec, more), daemon=True)
                   for job, _tr, rp in runners]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        d = rec.data
        if skipper is not None:
            skipper.stop()
        d["traffic_s"] = {"virtual": stamp(rec.clock.now()), "wall": round(rec.clock.wall_now(), 3),
                          "skipped": stamp(rec.clock.timebase.virtual(rec.clock.skipped)),
                          "jumps": skipper.jumps if skipper is not None else 0}
        d["failures_not_fired"] = injector.stop()
        if detector is not None:
            d["gray"] = {"found": detector.stop(), "delays": delays(detector.found, injector.log),
                         "counters": net.gray_counters(), "error": detector.error}
        if d["failures_not_fired"]:
            log.warning("%s rep %d: %d scheduled failure(s) never fired, the traffic ended first at %.2f s "
                        "(first planned at %.2f s): schedule them earlier or give the job more traffic",
                        rec.label, rec.rep, len(d["failures_not_fired"]), rec.now(),
                        d["failures_not_fired"][0]["planned_t"])
        sampler.stop()
        for _job, tr, rp in runners:
            rp.close()
            tr.stop()
        d.update(transport_records([tr for _job, tr, _rp in runners]))
        d["failures"] = injector.log
        d["controller_events"] = net.controller.get("/events") if net.controller else []
        d["timeline"], d["sampler_error"] = sampler.rows, sampler.error
        d.update(queue_records(net, counters0))
        rec.watch.network_down(net)
        d["ecn"] = ecn_record(net)
        d["pfc"] = in_fabric_time(net.stop_qos(since=t0_mono), rec.clock.timebase)


def _skipper(p: Plan, runners: list, rec: RunRecord, injector: Injector) -> Skipper | None:
    """Compute skipping (traffic/skip.py) when asked for and every job is a training job whose agents run
    programs: a job of back-to-back ops never computes, and would only ever hold the clock."""
    if not p.exp.time.skip_compute or not all(job.iteration and hasattr(tr, "load") for job, tr, _rp in runners):
        return None
    skipper = Skipper(rec.clock, limit=injector.next_epoch)
    for _job, _tr, rp in runners:
        rp.clock = rec.clock
        rp.use_skipper(skipper)
    skipper.start()
    return skipper


def _run_job(job: Job, rp: Replayer, rec: RunRecord, more: Callable[[], bool] = lambda: False) -> None:
    """A job's ops back to back, or its training iterations, and while `more()` another iteration's; a step
    that never ends halts it."""
    if job.iteration:
        try:
            return _run_training(job, rp, rec, more)
        finally:
            rp.leave()  # its ranks no longer hold the clock of the jobs still running
    for o, sched in _ops_while(job, more):
        if sched is None or rec.halted:
            continue
        start = rec.now()
        try:
            r = rp.run(sched)
        except (TimeoutError, RuntimeError) as exc:
            return rec.halt(job.name, o.label or o.op, exc)
        rec.op(job.name, o.label or f"{r.op}/{r.algorithm}", start, r, closed_form.of(sched))
    return None


def _ops_while(job: Job, more: Callable[[], bool]):
    """The job's items, then one iteration's items again and again while `more()`."""
    yield from job.items
    once = job.items[:len(job.items) // job.iterations]
    while once and more():
        yield from once


def _run_training(job: Job, rp: Replayer, rec: RunRecord, more: Callable[[], bool] = lambda: False) -> None:
    # the steps with their schedules in place of their ops: compute-only and in-host steps have none
    predicted = predict([replace(s, op=sched) for s, sched in job.iteration], lambda sched: _ideal_seconds(sched, rp))
    for k in itertools.count():
        if rec.halted or (k >= job.iterations and not more()):
            return
        try:
            it = rp.run_iteration(job.iteration)
        except (TimeoutError, RuntimeError) as exc:
            return rec.halt(job.name, f"iteration {k}", exc)
        start = rec.clock.at(it.started_at)
        rec.iteration({
            "job": job.name, "iteration": k, "start": stamp(start), "seconds": stamp(it.seconds),
            "compute_s": stamp(it.compute_s), "nvlink_s": stamp(it.nvlink_s),
            "exposed_comm_s": stamp(it.exposed_comm_s),
            "gpu_utilization": round(it.gpu_utilization, 4), "predicted_s": stamp(predicted.seconds),
            "predicted_gpu_utilization": round(predicted.gpu_utilization, 4), "bytes_ok": it.bytes_ok})
        scheds = [sched for _s, sched in job.iteration if sched is not None]  # it.ops are in step order
        for r, sched, at in zip(it.ops, scheds, it.issued_s, strict=True):  # each op from when it was issued
            rec.op(job.name, f"{r.op}/{r.algorithm}", start + at, r, closed_form.of(sched))


def _campaign(p: Plan, d: dict) -> dict:
    """Each outage's cost to each job, and the campaign's summary (testbed/campaign/cost.py)."""
    c, r = p.exp.campaign, p.exp.resilience
    outages, months = campaign_outages(p.exp, p.topo)
    return cost.record(outages, months, c.start_s + len(outages) * (c.hold_s + c.settle_s), d["failures"], d["ops"],
                       d["controller_events"], {name: j["gpus"] for name, j in d["jobs"].items()},
                       cost.Resilience(r.watchdog_s, r.restart_s, r.checkpoint_s), c.hold_s)


def _fidelity(p: Plan, d: dict) -> dict:
    """The verdict on a finished run, with whether every op delivered exactly the bytes its closed form says."""
    load = offered(p.jobs, p.topo)
    # the budget and the floor of this fabric, load and transport, as auto took them
    budget = fabric_budget(load, p.topo, p.transport)
    floor = load_floor(hosts=len(p.topo.hosts), ports=switch_ports(p.topo))
    lossless = None if d["drops"]["unread"] else d["drops"]["lossless"]
    v = verdict(d["timeline"], d["pfc"], p.exp.qos.pfc.enabled, lossless,
                offered_bps=load / p.exp.qos.scale / p.exp.time.dilation, budget_bps=budget.bps,
                calibrated=budget.calibrated, sampler_error=d["sampler_error"], ops=d["ops"],
                dilation=p.exp.time.dilation, lost_in_emulator=_lost_in_emulator(d), floor=floor,
                iterations=d["iterations"], links=d.get("links"), scale=p.exp.qos.scale,
                fabric_causes=_fabric_causes(d))
    v["latency_floor"] = floor.as_dict()
    v["bytes_ok"] = all(bytes_ok(o) for o in d["ops"])
    return v


def _fabric_causes(d: dict) -> list[str]:
    """What in the fabric slowed the jobs beyond their closed form besides a busy link: failures, PFC pauses,
    drops in the shapers (and the transport's recovery), ECN marks (and the senders' cut)."""
    pauses = sum(p.get("pause_events", 0) for p in ((d.get("pfc") or {}).get("by_priority") or {}).values())
    drops = sum(d["drops"][k] for k in ("high", "lossless", "default"))
    marks = (d.get("ecn") or {}).get("total") or 0
    named = {"link failures": len(d["failures"]), "PFC pauses": pauses, "shaper drops": drops, "ECN marks": marks}
    return [f"{n} {what}" for what, n in named.items() if n]


def _lost_in_emulator(d: dict) -> int:
    """In a run where no shaper dropped anything and no link went down: TCP segments retransmitted that no
    DSACK showed were spurious (lost somewhere the fabric being emulated would not lose them), and the
    reorderings TCP saw (the emulator's: in 2 of 6 dilated runs small data segments overtook queued ones and
    were taken for loss). A retransmission the receiver answered with a DSACK was not needed and cost no wait:
    at 64 hosts and D = 8, 190 tail-loss probes fired at the end of paused bursts, every one DSACKed."""
    dropped = d["drops"]["unread"] or any(d["drops"][k] for k in ("high", "lossless", "default"))
    if dropped or d["failures"]:
        return 0
    if d.get("roce"):  # a frame resent with nothing dropped: lost in the emulator, or a retry timer too short
        return d["roce"]["resent"]
    if not d.get("tcp"):
        return 0
    tcp = d["tcp"]
    unexplained = max(0, tcp["RetransSegs"] - tcp.get("TCPDSACKRecv", 0))
    return unexplained + tcp.get("TCPSACKReorder", 0) + tcp.get("TCPTSReorder", 0)


def _job_record(job: Job, topo: Topology) -> dict:
    """Where a job ran: its class, hosts, GPUs, the segments it spans and the share of its rail rings' hops that
    cross segments (controllers/placement.py)."""
    ranks = [(h, n) for h in job.hosts for n in range(topo.nodes[h].nics)]
    crossing, hops = ring_crossings(topo, ranks)
    out = {"dscp": job.dscp, "hosts": job.hosts, "gpus": job_gpus(job, topo),
           "segments": segments_spanned(topo, ranks), "ring_hops_crossing": round(crossing / hops, 4) if hops else 0}
    if job.simai_analytical is not None:
        out["simai_analytical"] = job.simai_analytical.as_dict()
    return out


def _crux_classes(net: Network, exp: Experiment, job_list: list[Job], topo: Topology, channels: int) -> dict:
    """The jobs registered with the controller's Crux-style scheduler; each job's traffic class becomes the
    lossless priority of the level it got (level 0: the first of qos.lossless)."""
    body = {"levels": len(exp.qos.lossless),
            "jobs": [demand(j, i, topo, exp.qos.scale, channels) for i, j in enumerate(job_list)]}
    ans = net.controller.request("POST", "/jobs", body)
    for j in job_list:
        level = ans["jobs"][j.name]["level"]
        j.dscp = exp.qos.lossless[level].dscp
        ans["jobs"][j.name]["lossless_priority"] = exp.qos.lossless[level].priority
    log.info("crux: order %s, levels %s", ans["order"], {n: v["level"] for n, v in ans["jobs"].items()})
    return {k: ans[k] for k in ("order", "levels", "jobs", "contending")}


def _ideal_seconds(sched, rp) -> float:
    """A schedule's time alone at the fabric's ideal rate (the closed forms): what `predict` reads an iteration
    with."""
    return busbw_factor(sched.op, sched.members // sched.groups) * sched.size * 8 / rp.ideal_busbw(sched)


def new_folder(path: Path) -> Path:
    """`path`, or `path-2`, `path-3`, ... if taken: the same experiment started twice in one second (a script, a
    run stopped and started again) named the same folder and the second one crashed on it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        candidate = path if n == 1 else path.with_name(f"{path.name}-{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise FileExistsError(f"{path} and 998 more like it exist")


def run(spec: str | Path | Experiment, reduced: bool = False, base: Path | None = None,
        results: Path = RESULTS, watch: Watch | None = None, cluster: ClusterSpec | None = None,
        plans: list[Plan] | None = None) -> Path:
    """Run an experiment file (or an Experiment built in Python) and return its results folder.

    `base` is where relative workload files are looked up (default: the file's folder, or the current one);
    `watch` hears of each network, op and the run's progress (the live web view); `cluster`: spread each network
    over these servers (each run's record keeps them and the placement); `plans`: the experiment's, when the
    caller has planned it already (planning.plan with the same arguments).
    """
    watch = watch or Watch()

    if isinstance(spec, Experiment):
        exp, base = spec, base or Path.cwd()
        text = yaml.safe_dump(exp.model_dump(by_alias=True, exclude_defaults=True), sort_keys=False)
    else:
        exp, base = load(spec), base or Path(spec).parent
        text = read_text(spec, "file")
    plans = plans if plans is not None else plan(exp, base, reduced, cluster)
    total = sum(len(p.items) * p.exp.repetitions for p in plans)
    caps = probe()
    caps.require_root("running an experiment")
    digest = hashlib.sha256(text.encode()).hexdigest()[:7]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    outdir = new_folder(results / f"{stamp}-{exp.name}{'-quick' if reduced else ''}-{digest}")
    write_file(outdir / "spec.yaml", text, "spec.yaml")
    write_file(outdir / "environment.json", json.dumps({"capabilities": caps.to_dict(), "versions": versions(caps)},
                                                       indent=1), "environment.json")
    runs: list[Run] = []
    try:
        _run_variants(exp, plans, outdir, runs, total, watch, cluster)
    except BaseException:
        if runs:  # what finished is kept, with its reports, and results.json says the run is incomplete
            _write_reports_quietly(outdir, exp, runs)
        raise
    _save(outdir, exp, runs, complete=True)
    stages.reached("results")  # results.json written, the plots and summary not yet
    write_reports(outdir, exp, runs)
    return outdir


def _run_variants(exp: Experiment, plans: list[Plan], outdir: Path, runs: list[Run], total: int, watch: Watch,
                  cluster: ClusterSpec | None) -> None:
    """Every variant's repetitions in turn, each on a fresh network, results.json rewritten after each."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} ops"),
                  TimeElapsedColumn()) as prog:
        task = prog.add_task(exp.name, total=total)

        def tell() -> None:
            watch.progress(int(prog.tasks[0].completed), total, prog.tasks[0].description)

        def advance() -> None:
            prog.advance(task)
            tell()

        for p in plans:
            for rep in range(p.exp.repetitions):
                what = f"{exp.name}: {p.label} rep {rep + 1}/{p.exp.repetitions}"

                def stage(text: str, what=what) -> None:
                    prog.update(task, description=f"{what}: {text}")
                    tell()

                stage("starting the network")
                runs.append(execute(p.at(rep), outdir / f"{p.label}-rep{rep}", progress=advance, watch=watch,
                                    stage=stage, cluster=cluster))
                _save(outdir, exp, runs, complete=False)


def _save(outdir: Path, exp: Experiment, runs: list[Run], complete: bool) -> None:
    """results.json, written whole or not at all: a run stopped mid-write leaves no truncated record behind.
    `complete` is false while variants are still to come (or when the run stopped early)."""
    tmp = outdir / "results.json.tmp"
    write_file(tmp, json.dumps({"experiment": exp.model_dump(by_alias=True), "complete": complete,
                                           "runs": [r.dump() for r in runs]},
                               indent=1, default=str), "results.json")
    tmp.replace(outdir / "results.json")


def _write_reports_quietly(outdir: Path, exp: Experiment, runs: list[Run]) -> None:
    """The reports of a run that stopped early; their own failure must not hide why it stopped."""
    try:
        write_reports(outdir, exp, runs)
    except Exception:  # noqa: BLE001 - the original error is re-raised by the caller
        log.exception("reports of the finished variants could not be written")
