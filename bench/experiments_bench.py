"""Run every shipped experiment at full size and write experiments/README.md's tables (between markers).

    sudo .venv/bin/python -m bench.experiments_bench [--quick] [--only NAME ...]
    sudo .venv/bin/python -m bench.experiments_bench --from RESULTS_DIR ...   (tables from finished runs)

The whole bench runs every file at full size (about two hours here, failure_campaign alone ~40 min); `--only` or
`--from` rewrite those experiments' lines and keep the others' as they were measured, each experiment under its
own stamp (machine, commit, date), so the tables can be brought up to date a few experiments at a time.

Three generated parts, nothing typed: what each file asks and the paper's figure (from the files themselves),
the paper's figure beside ours with whether it is reproduced (`COMPARE`, computed from the runs), and one row
per variant: busbw, fraction of ideal, drops, halted, per-job iteration time, cluster GPU utilization, Crux's
order, cross-segment bytes, load balance and the fidelity verdict.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.tables import markers, replace_block, stamp, stamp_of_results
from testbed.experiment.results import cluster_summary
from testbed.experiment.sections import frames_lost, healthy_op_s
from testbed.experiment.spec_base import NAME_PATTERN
from testbed.net.balance import cross_segment_bytes, describe, links_used, nic_balance, nic_port_queue, ratio_text
from testbed.qos.spec import MTU, OVS_BATCH
from testbed.schema.results import Results, Run, load

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "experiments" / "README.md"


def _runs(data: Results, variant: str) -> list[Run]:
    return [r for r in data.runs if r.variant == variant]


def _variants(data: Results) -> list[str]:
    return list(dict.fromkeys(r.variant for r in data.runs))


def frac(data: Results, variant: str) -> float:
    """Mean fraction of ideal of a variant's ops."""
    fr = [o.fraction_of_ideal for r in _runs(data, variant) for o in r.ops]
    return statistics.mean(fr) if fr else 0.0


def _gain(data: Results, better: str, worse: str) -> str:
    a, b = frac(data, better), frac(data, worse)
    return f"{better} {a:.1%} vs {worse} {b:.1%} of ideal: {a / b - 1:+.0%}" if b else "no ops"


def _job_time(data: Results, variant: str, job: str) -> float | None:
    ts = [i.seconds for r in _runs(data, variant) for i in r.iterations if i.job == job]
    ts = ts or [o.seconds for r in _runs(data, variant) for o in r.ops if o.job == job]
    return statistics.mean(ts) if ts else None


def _worst_nic(data: Results, variant: str) -> str:
    nics = nic_balance(_runs(data, variant)[0].counters, min_bytes=1 << 20)
    return ratio_text(max(n.imbalance for n in nics)) if nics else "no data"


def _deepest(data: Results, variant: str) -> float:
    nics = nic_balance(_runs(data, variant)[0].counters, min_bytes=1 << 20)
    return max((n.deepest_queue for n in nics), default=0) / 1e3


def _standing(d: Results, variant: str) -> float | None:
    """The median over a variant's first run of the deepest NIC-facing ToR queue, KB (None: not sampled)."""
    q = nic_port_queue(_runs(d, variant)[0].counters) if _runs(d, variant) else None
    return q.p50 / 1e3 if q else None


def _cut(worse: float | None, better: float | None) -> str:
    if not worse or better is None:
        return "no data"
    return f"{worse:.0f} KB vs {better:.0f} KB ({better / worse - 1:+.0%})"


def _hash_polarization(d: Results) -> str:
    single, dual = _deepest(d, "single-plane"), _deepest(d, "dual-plane")
    cc_single, cc_dual = _standing(d, "single-plane-dcqcn"), _standing(d, "dual-plane-dcqcn")
    cut = bool(cc_single and cc_dual is not None and cc_dual <= 0.2 * cc_single)
    used = {v: links_used(_runs(d, v)[0].counters)[0] for v in ("single-plane", "dual-plane")}
    return (f"worst NIC {_worst_nic(d, 'single-plane')} single-plane vs {_worst_nic(d, 'dual-plane')} dual-plane; "
            f"aggregation-to-ToR links used {used['single-plane']} (one seed) vs "
            f"{used['dual-plane']}; deepest queue at a NIC's ToR ports {single:.0f} KB vs "
            f"{dual:.0f} KB ({(dual / single - 1) if single else 0:+.0%}) without end-to-end control (every "
            f"connection fills its bottleneck up to XOFF); with DCQCN the queue standing there (median over the "
            f"run) {_cut(cc_single, cc_dual)}: "
            + ("queue cut reproduced" if cut else
               "the queue cut is NOT reproduced: " + _burst_note(cc_dual)))


def _burst_note(dual_kb: float | None) -> str:
    """Why the dual plane's queue stays: set against what one batch of userspace OVS puts on a port at once."""
    batch_kb = OVS_BATCH * MTU / 1e3
    if dual_kb is None:
        return "the dual plane's queue was not sampled"
    where = "below" if dual_kb < batch_kb else "above"
    return (f"the dual plane's standing queue ({dual_kb:.0f} KB) is {where} one batch of userspace OVS "
            f"({OVS_BATCH} frames, {batch_kb:.0f} KB), which arrives on a port at once: the emulator's burst, "
            "not congestion, sets it, and the paper's 3 KB is finer than this emulator resolves")


def _cc_incast(d: Results) -> str:
    parts = []
    for v in _variants(d):
        r = _runs(d, v)[0]
        q = nic_port_queue(r.counters)
        pauses = sum(t.get("pause_events", 0) for t in ((r.pfc or {}).get("pauses_by_tier") or {}).values())
        queue = f"median {q.p50 / 1e3:.0f} KB, p90 {q.p90 / 1e3:.0f} KB" if q else "not sampled (no PFC agent)"
        parts.append(f"{v}: {frac(d, v):.1%} of ideal, lossless drops {r.drops.lossless:,}, pauses {pauses:,}, "
                     f"marks {(r.ecn or {}).get('total') or 0:,}, queue at the receiver's ToR ports {queue}")
    return "; ".join(parts)


def _dual_tor(d: Results) -> str:
    halted = {v: sum(1 for r in _runs(d, v) if r.halted) for v in ("dual-tor-hpn", "single-tor-rail")}
    return (f"dual-ToR halted in {halted['dual-tor-hpn']} of {len(_runs(d, 'dual-tor-hpn'))} runs, single-ToR in "
            f"{halted['single-tor-rail']} of {len(_runs(d, 'single-tor-rail'))}: "
            + ("reproduced" if halted["single-tor-rail"] and not halted["dual-tor-hpn"] else "NOT reproduced"))


def _pfc_incast(d: Results) -> str:
    drops = {v: sum(r.drops.lossless for r in _runs(d, v)) for v in ("pfc-on", "pfc-off")}
    return f"lossless-queue drops with PFC {drops['pfc-on']:,}, without {drops['pfc-off']:,}"


def _crux(d: Results) -> str:
    util = {v: cluster_summary(_runs(d, v))["utilization"] for v in _variants(d) if v != "A-alone"}
    fair = util.get("ecmp-one-class-dctcp")
    alone, best = _job_time(d, "A-alone", "A"), _job_time(d, "crux-priorities-paths", "A")
    crux = _runs(d, "crux-priorities")[0].crux or {}
    return ("cluster GPU utilization " + ", ".join(f"{v} {u:.1%}" for v, u in util.items())
            + f"; Crux's order {', '.join(crux.get('order', []))}"
            + (f"; Crux's priorities and paths over the baseline with DCTCP: "
               f"{util['crux-priorities-paths'] / fair - 1:+.0%}" if fair else "")
            + (f"; job A {best:.2f} s per iteration with priorities and paths vs {alone:.2f} s alone "
               f"({best / alone - 1:+.1%})" if alone and best else ""))


def _placement(d: Results) -> str:
    up = {v: statistics.mean(cross_segment_bytes(r.counters) for r in _runs(d, v)) for v in ("compact", "scattered")}
    return (f"bytes up the ToR uplinks {up['compact'] / 1e6:.1f} MB compact vs {up['scattered'] / 1e6:.1f} MB "
            f"scattered ({up['compact'] / up['scattered'] - 1:+.0%}); the paper's DCN+ side (19 segments) is NOT "
            "reproduced: no DCN+ preset at its size")


def _restarts(d: Results, variant: str, kinds: tuple[str, ...]) -> tuple[int, int, int]:
    """(restarts, outages that met a running job, confounded ones: the job still stuck from the outage before,
    so what this one cost cannot be told) of a campaign variant's outages of these kinds."""
    outs = [o for r in _runs(d, variant) for o in (r.campaign or {}).get("outcomes", []) if o["kind"] in kinds]
    confounded = sum(1 for o in outs if o["outcome"] == "confounded")
    return sum(1 for o in outs if o["outcome"] == "restart"), len(outs) - confounded, confounded


def _campaign(d: Results) -> str:
    parts, access = [], ("nic-tor", "tor")
    for v in _variants(d):
        (ra, na, ca), (rb, nb, cb) = _restarts(d, v, access), _restarts(d, v, ("agg", "tor-agg"))
        s = next(iter(_runs(d, v)[0].campaign["summary"].values()))
        confounded = f" ({ca + cb} more confounded)" if ca + cb else ""
        parts.append(f"{v}: {ra} restarts in {na} NIC-ToR link and ToR outages, {rb} in {nb} aggregation-side "
                     f"ones{confounded}; goodput {s['goodput']:.6f}")
    dual, single = _restarts(d, "dual-tor-hpn", access), _restarts(d, "single-tor-rail", access)
    ok = dual[1] and single[1] and dual[0] <= 0.05 * dual[1] and single[0] == single[1]
    return "; ".join(parts) + (": reproduced" if ok else ": NOT reproduced")


def _gray(d: Results) -> str:
    parts, named_1e4 = [], None
    for v in _variants(d):
        runs = [r for r in _runs(d, v) if r.gray]
        if not runs:
            continue
        after = [x["named_after_s"] for r in runs for x in r.gray["delays"]]
        t, base = _job_time(d, v, "job"), healthy_op_s(d.runs, runs[0])
        parts.append(f"{v}: named after " + ", ".join("never" if a is None else f"{a:.2f} s" for a in after)
                     + (f", ops {t / base:.2f}x the healthy run's" if t and base else "") + _go_back_n(runs))
        if v == "lossy-1e-4":
            named_1e4 = after
    ok = bool(named_1e4) and all(a is not None and a <= 2.0 for a in named_1e4)
    return "; ".join(parts) + ("; 1e-4 named within 2 s: reproduced" if ok else "; 1e-4 named within 2 s: NOT met")


def _go_back_n(runs: list[Run]) -> str:
    """Over the roce transport: what a lost frame cost the queue pairs (go-back-N's resends, the retry timer)."""
    if not runs[0].roce:
        return ""
    lost, resent = sum(frames_lost(r) for r in runs), sum(r.roce["resent"] for r in runs)
    per = f"{resent / lost:.1f} frames resent per frame lost" if lost else f"{resent:,} frames resent, none lost"
    return f" (RoCE: {per}, {sum(r.roce['timeouts'] for r in runs):,} retry timeouts)"


COMPARE: dict[str, Callable[[Results], str]] = {
    "gray_failures": _gray,
    "failure_campaign": _campaign,
    "precise_vs_ecmp": lambda d: _gain(d, "hpn-precise", "hpn-ecmp"),
    "dual_plane_allreduce": lambda d: _gain(d, "dual-plane", "single-plane"),
    "multi_job_precise": lambda d: _gain(d, "precise-host", "ecmp") + "; with PFC and nothing end to end: "
                                   + _gain(d, "precise-host-pfc", "ecmp-pfc") + "; lossless ECMP against lossy: "
                                   + _gain(d, "ecmp-pfc", "ecmp") + ", with DCQCN: "
                                   + _gain(d, "ecmp-pfc-dcqcn", "ecmp"),
    "hash_polarization": _hash_polarization,
    "dual_tor_failover": _dual_tor,
    "pfc_incast": _pfc_incast,
    "cc_incast": _cc_incast,
    "crux_multi_job": _crux,
    "placement": _placement,
}


def _verdicts(runs: list[Run]) -> str:
    said = [r.fidelity.status for r in runs]
    if all(s == "faithful" for s in said):
        return "faithful"
    why = next(r.fidelity.why() for r in runs if r.fidelity.status != "faithful")
    return f"{sum(s != 'faithful' for s in said)} of {len(runs)} not: {why[0][:90]}"


def rows_of(outdir: Path) -> list[str]:
    """One row per variant of a finished run."""
    data = load((outdir / "results.json").read_text())
    name = data.experiment["name"]
    out = []
    for v in _variants(data):
        runs = _runs(data, v)
        ops = [o for r in runs for o in r.ops]
        bw = [o.busbw_bps / 1e6 for o in ops]
        jobs = sorted({o.job for o in ops} | {i.job for r in runs for i in r.iterations})
        per_job = "; ".join(f"{j} {t:.2f} s" for j in jobs if (t := _job_time(data, v, j)) is not None) \
            if len(jobs) > 1 or runs[0].iterations else ""
        util = f"{cluster_summary(runs)['utilization']:.1%}" if runs[0].iterations else ""
        halted = sum(1 for r in runs if r.halted)
        drops = sum(r.drops.lossless for r in runs), sum(r.drops.default for r in runs)
        up = statistics.mean(cross_segment_bytes(r.counters) for r in runs) / 1e6
        out.append(f"| {name} | {v} | {len(ops)} | {statistics.mean(bw) if bw else 0:.2f} | {frac(data, v):.1%} | "
                   f"{drops[0]:,}/{drops[1]:,} | {f'{halted} of {len(runs)}' if halted else 'no'} | {per_job} | "
                   f"{util} | {up:.1f} | {describe(runs[0].counters)} | {_verdicts(runs)} | {outdir.name} |")
    return out


def questions(files: list[Path]) -> list[str]:
    """What each file asks (its description) and the paper's figure (its `paper:`), from the files."""
    out = ["| experiment | question | scale | paper |", "|---|---|---|---|"]
    for f in files:
        spec = yaml.safe_load(f.read_text())
        paper = ", ".join(f"{k}: {v}" for k, v in (spec.get("paper") or {}).items()) or "—"
        desc = " ".join(str(spec.get("description", "")).split())
        out.append(f"| `{f.name}` | {desc} | 1/{spec.get('qos', {}).get('scale', 'auto'):,} | {paper} |")
    return out


@dataclass
class Measured:
    """One experiment's lines in the tables and where they were measured."""

    bullet: str | None  # the paper beside ours (COMPARE), where the experiment has one
    rows: list[str]  # one per variant
    stamp: dict  # machine, commit, date


def measured(outdir: Path, when: dict) -> tuple[str, Measured]:
    """An experiment's lines from its finished run, measured `when`."""
    data = load((outdir / "results.json").read_text())
    name = data.experiment["name"]
    paper = ", ".join(f"{k}: {v}" for k, v in (data.experiment.get("paper") or {}).items())
    bullet = f"- **{name}** (paper: {paper or '—'}): {COMPARE[name](data)}." if name in COMPARE else None
    return name, Measured(bullet, rows_of(outdir), when)


NAME = NAME_PATTERN.strip("^$")  # an experiment's name, inside a line
STAMP = re.compile(r"Measured on (?P<machine>.+); commit (?P<commit>.+); (?P<date>[\d-]+)\.$")


def kept(block: str) -> dict[str, Measured]:
    """The experiments' lines in tables written before (the text between the README's markers), by name, so a
    partial run (`--only`) rewrites its own and keeps the others' as they were measured. Tables written before
    the per-experiment stamps carry one stamp for all."""
    lines = block.splitlines()
    first = STAMP.match(lines[0]) if lines else None
    whole = first.groupdict() if first else {"machine": "not recorded", "commit": "not recorded", "date": "unknown"}
    out: dict[str, Measured] = {}
    section = ""
    for line in lines:
        if line.startswith("### "):
            section = line
        elif section.startswith("### The paper") and (m := re.match(rf"- \*\*({NAME})\*\*", line)):
            out.setdefault(m[1], Measured(None, [], whole)).bullet = line
        elif section.startswith("### Every variant") and (m := re.match(rf"\| ({NAME}) \| (?!variant )", line)):
            out.setdefault(m[1], Measured(None, [], whole)).rows.append(line)
        elif section.startswith("### Where") and (m := re.match(rf"\| ({NAME}) \| (.+) \| (.+) \| (.+) \|$", line)) \
                and m[1] != "experiment":
            out.setdefault(m[1], Measured(None, [], whole)).stamp = {"machine": m[2], "commit": m[3], "date": m[4]}
    return {k: v for k, v in out.items() if v.rows}


def tables(done: dict[str, Measured], files: list[Path], quick: bool) -> str:
    """The tables: every shipped file's question, then its lines as last measured (an experiment whose file is
    gone has none)."""
    names = [f.stem for f in files]
    head = [f"Generated by `python -m bench.experiments_bench{' --quick' if quick else ''}`. Nothing here is "
            "typed: rerun the script to refresh it (`--only NAME ...` reruns some and keeps the others' lines as "
            "they were measured, each under its own stamp).", "",
            "### What each experiment asks", "", *questions(files), "",
            "### Where each was measured", "", "| experiment | machine | commit | date |", "|---|---|---|---|"]
    got = [(n, done[n]) for n in names if n in done]
    missing = [n for n in names if n not in done]
    gap = [f"Not measured at full size yet: {', '.join(missing)} (`--only` them).", ""] if missing else []
    return "\n".join(head + [f"| {n} | {m.stamp['machine']} | {m.stamp['commit']} | {m.stamp['date']} |"
                             for n, m in got] + ["", *gap, "### The paper's figures beside ours", ""]
                     + [m.bullet for _, m in got if m.bullet] + [
        "", "### Every variant", "",
        "busbw in emulated Mbit/s (times the experiment's scale for the real fabric); cross-segment: MB up the ToR "
        "uplinks (mean over runs); per job: iteration (or op) time; utilization: cluster GPU utilization.", "",
        "| experiment | variant | ops | busbw | of ideal | drops (lossless/default) | halted | per job | "
        "utilization | cross-segment (MB) | load balance (first run) | fidelity | results folder |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|", *[r for _, m in got for r in m.rows]])


def main() -> None:
    from testbed.experiment.runner import run

    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*", help="run these; the others' lines are kept as they were measured")
    ap.add_argument("--from", dest="done", nargs="*", help="results folders of finished runs: no new runs")
    a = ap.parse_args()
    os.chdir(ROOT)
    files = sorted((ROOT / "experiments").glob("*.yaml"))
    chosen = [f for f in files if not a.only or f.stem in a.only]
    if a.done:
        fresh = dict(measured(Path(p), stamp_of_results(Path(p))) for p in a.done)
    else:
        fresh = {}
        for f in chosen:  # each stamped as it finishes: a long bench spans a day
            out = run(f, reduced=a.quick)
            fresh.update([measured(out, stamp())])
    if a.quick:  # a smoke run prints, never replaces the committed tables
        print(tables(fresh, chosen, a.quick))
        return
    start, end = markers("experiments")
    text = README.read_text()
    done = kept(text[text.index(start) + len(start):text.index(end)].strip()) | fresh
    block = tables(done, files, a.quick)
    print(block)
    replace_block(README, "experiments", block, stamp())


if __name__ == "__main__":
    main()
