"""`hpnlab run FILE`: build, route, shape, replay, break, measure, tear down; leave a results folder.

results/<date>-<name>-<hash>/
    spec.yaml            the experiment file as run
    environment.json     capability probe, versions (kernel, OVS, Mininet, os-ken, project git revision)
    results.json         per variant and repetition: every op's times and bandwidths, failure and
                         controller event logs, the PFC agent's report, the fidelity verdict
    ops.csv, timeline.csv
    busbw.png, throughput.png, queues.png
    summary.md
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import shutil
import statistics
import subprocess
import threading
import time
from pathlib import Path


from .capabilities import probe
from .failures import Injector, expand
from .network import Network
from .spec import Experiment, check_against, load, resolve

log = logging.getLogger(__name__)
RESULTS = Path("results")


def versions() -> dict:
    def out(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=5).stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return None

    import importlib.metadata as md

    def pkg(name):
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return None

    return {"kernel": platform.release(), "python": platform.python_version(), "ovs": out(["ovs-vswitchd", "--version"]),
            "mininet": probe().mininet_version, "os-ken": pkg("os-ken"), "ryu": pkg("ryu"), "pyroute2": pkg("pyroute2"),
            "git": out(["git", "-C", str(Path(__file__).parents[1]), "rev-parse", "--short", "HEAD"]),
            "git_dirty": bool(out(["git", "-C", str(Path(__file__).parents[1]), "status", "--porcelain"]))}


class Sampler:
    """Every `period` s: CPU idle share and the bytes all host NICs sent (the fabric's offered load)."""

    def __init__(self, net: Network, period: float = 0.5):
        self.net, self.period = net, period
        self.rows: list[dict] = []
        self._stop = threading.Event()

    @staticmethod
    def _cpu() -> tuple[int, int]:
        f = open("/proc/stat").readline().split()[1:]
        vals = [int(x) for x in f]
        return vals[3] + vals[4], sum(vals)  # idle + iowait, total

    def _host_bytes(self) -> int:
        from .qos import ROOT

        stats = self.net.qos.stats(ROOT, [p for p in self.net.qos.ports.values() if p.is_host])
        return sum(q[0].bytes for q in stats.values() if q)

    def start(self) -> None:
        self.t0 = time.time()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        idle0, tot0 = self._cpu()
        b0, t_prev = self._host_bytes(), time.time()
        while not self._stop.wait(self.period):
            idle, tot = self._cpu()
            b, t = self._host_bytes(), time.time()
            self.rows.append({"t": round(t - self.t0, 3), "cpu_idle": round((idle - idle0) / max(1, tot - tot0), 4),
                              "host_tx_bps": round((b - b0) * 8 / (t - t_prev))})
            idle0, tot0, b0, t_prev = idle, tot, b, t

    def stop(self) -> None:
        self._stop.set()


def _collective_items(c, scale: float, topo, where: str = "workload.collective"):
    from traffic.collectives import build_schedule
    from traffic.workload import Op, parse_size

    from .traffic_cli import _ranks

    emu = max(1, int(parse_size(c.size, f"{where}.size") / scale))
    sched = build_schedule(c.op, _ranks(c.ranks, topo), emu, c.algorithm)
    return [(Op(c.op, emu, tuple(sched.ranks), sched.algorithm, label=f"{c.op}/{sched.algorithm}"), sched)] * c.iters


def _items(exp: Experiment, base: Path, topo):
    from traffic.replay import op_schedule
    from traffic.workload import load_simai, load_yaml

    hosts, rails = [h.name for h in topo.hosts], topo.hosts[0].nics
    if exp.jobs:
        return [it for i, j in enumerate(exp.jobs) for it in _collective_items(j.collective, exp.qos.scale, topo,
                                                                             f"jobs[{i}].collective")]
    wl = exp.workload
    if wl.collective is not None:
        return _collective_items(wl.collective, exp.qos.scale, topo)
    w = (load_yaml(resolve(exp, base, "yaml_file")) if wl.yaml_file else load_simai(resolve(exp, base, "simai")))
    w = w.scaled(exp.qos.scale)
    return [(o, op_schedule(o, hosts, rails, w.plan)) for o in w.ops for _ in range(o.repeat)]


def run_one(label: str, exp: Experiment, base: Path, outdir: Path, rep: int, progress=None) -> dict:
    from traffic.replay import Replayer
    from traffic.transports import choose, make

    from .owner import exit_cleanly_on_signals

    topo = exp.topology.build()
    check_against(exp, topo)
    kind = choose(exp.transport, probe().rxe_in_netns)
    items = _items(exp, base, topo)
    events = expand(exp, topo)
    exit_cleanly_on_signals()
    channels = exp.channels or (2 if topo.params.get("dual_tor") else 1)
    rec: dict = {"variant": label, "repetition": rep, "ops": [], "halted": None}
    dscp = {"lossless": exp.qos.lossless_dscp, "high": exp.qos.high_dscp, "default": 0}
    # One job per workload, or the experiment's jobs side by side: own agents, port, source ports, class.
    jobs = [(j.name, dscp[j.priority], _collective_items(j.collective, exp.qos.scale, topo, f"jobs[{i}].collective"))
            for i, j in enumerate(exp.jobs)] or [("job", dscp["lossless"], items)]
    with Network(topo, routing="controller", mode=exp.routing, qos=exp.qos,
                 log_dir=str(outdir / f"{label}-rep{rep}")) as net:
        runners = []
        for i, (name, tos_dscp, job_items) in enumerate(jobs):
            tr = make(kind, net, tos=tos_dscp << 2, index=i)
            tr.start()
            rp = Replayer(net, tr, channels=channels, precise=exp.routing == "precise",
                          step_timeout=exp.step_timeout_s, sport_offset=5000 * i)
            runners.append((name, tr, rp, job_items))
        sampler, injector = Sampler(net), Injector(net, events)
        sampler.start()
        injector.start()
        t0 = time.time()

        def run_job(name, rp, job_items):
            for o, sched in job_items:
                if sched is None or rec["halted"]:
                    continue
                start = time.time() - t0
                try:
                    r = rp.run(sched)
                except (TimeoutError, RuntimeError) as exc:  # a step that never ends: the job is halted
                    rec["halted"] = {"at": round(time.time() - t0, 3), "op": o.label or o.op, "why": str(exc),
                                     "job": name}
                    log.warning("%s rep %d halted: %s", label, rep, exc)
                    return
                rec["ops"].append({"job": name, "label": o.label or f"{r.op}/{r.algorithm}", "op": r.op,
                                   "algorithm": r.algorithm, "ranks": r.ranks, "size": r.size,
                                   "start": round(start, 4), "seconds": round(r.seconds, 4),
                                   "algbw_bps": r.algbw_bps, "busbw_bps": r.busbw_bps,
                                   "ideal_busbw_bps": r.ideal_busbw_bps, "fraction_of_ideal": r.fraction_of_ideal,
                                   "bytes_delivered": r.bytes_delivered, "bytes_expected": r.bytes_expected,
                                   "step_seconds": r.step_seconds})
                if progress:
                    progress()

        try:
            threads = [threading.Thread(target=run_job, args=(name, rp, job_items), daemon=True)
                       for name, _tr, rp, job_items in runners]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            injector.stop()
            sampler.stop()
            for _name, tr, rp, _items_ in runners:
                rp.close()
                tr.stop()
            rec["failures"] = injector.log
            rec["controller_events"] = net.controller.get("/events") if net.controller else []
            rec["timeline"] = sampler.rows
            from .qos import LEAF_HANDLE, ROOT

            rec["drops"] = {cls: sum(q[0].drops for q in net.qos.stats(handle).values() if q)
                            for cls, handle in LEAF_HANDLE.items()}
            # bytes each ToR sent down to each host port: the balance between a NIC's two ToRs
            down = [p for p in net.qos.ports.values() if not p.is_host and net.topo.nodes[p.peer].role == "host"]
            rec["host_port_rx"] = {f"{p.peer}:{p.peer_port}": q[0].bytes
                                   for p, q in zip(down, net.qos.stats(ROOT, down).values()) if q}
            rec["pfc"] = net.stop_qos()
    idle = [r["cpu_idle"] for r in rec["timeline"]]
    rec["fidelity"] = {"cpu_idle_min": min(idle, default=None), "cpu_idle_mean": round(statistics.mean(idle), 4)
                       if idle else None, "cpu_bound": bool(idle) and min(idle) < 0.05,
                       "bytes_ok": all(o["bytes_delivered"] == o["bytes_expected"] for o in rec["ops"])}
    return rec


def quick(exp: Experiment) -> Experiment:
    """The reduced size CI runs: one repetition, collectives a quarter of the size and 2 iterations at most.

    An experiment with scheduled failures keeps its traffic: its failures are timed against it, and a
    shrunken job could end before the first one fires (a single-ToR job would then not halt).
    """
    from traffic.workload import parse_size

    if exp.failures or exp.random_failures:
        return exp.model_copy(update={"repetitions": 1})

    def small(c):
        return c.model_copy(update={"size": max(1, parse_size(c.size) // 4), "iters": min(c.iters, 2)})

    upd: dict = {"repetitions": 1, "jobs": [j.model_copy(update={"collective": small(j.collective)})
                                            for j in exp.jobs]}
    if exp.workload is not None and exp.workload.collective is not None:
        upd["workload"] = exp.workload.model_copy(update={"collective": small(exp.workload.collective)})
    return exp.model_copy(update=upd)


def run(path: str | Path, reduced: bool = False) -> Path:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    exp = load(path)
    base = Path(path).parent
    variants = [(label, quick(v) if reduced else v) for label, v in exp.expand()]  # variants may bring jobs
    built = {label: v.topology.build() for label, v in variants}
    for label, v in variants:  # every variant's names checked before anything starts
        check_against(v, built[label])
    probe().require_root("running an experiment")
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:7]
    outdir = RESULTS / f"{time.strftime('%Y%m%d-%H%M%S')}-{exp.name}{'-quick' if reduced else ''}-{digest}"
    outdir.mkdir(parents=True)
    shutil.copy(path, outdir / "spec.yaml")
    (outdir / "environment.json").write_text(json.dumps({"capabilities": probe().to_dict(), "versions": versions()},
                                                        indent=1))
    runs = []
    total = sum(len(_items(v, base, built[label])) * v.repetitions for label, v in variants)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} ops"),
                  TimeElapsedColumn()) as prog:
        task = prog.add_task(exp.name, total=total)
        for label, v in variants:
            for rep in range(v.repetitions):
                prog.update(task, description=f"{exp.name}: {label} rep {rep + 1}/{v.repetitions}")
                v_rep = v.model_copy(update={"seed": v.seed + rep})
                runs.append(run_one(label, v_rep, base, outdir, rep, progress=lambda: prog.advance(task)))
    (outdir / "results.json").write_text(json.dumps({"experiment": exp.model_dump(by_alias=True), "runs": runs},
                                                    indent=1))
    from .results import write_reports

    write_reports(outdir, exp, runs)
    return outdir
