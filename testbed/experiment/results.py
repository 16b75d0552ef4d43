"""Results folders: CSVs, plots and a summary.md from a run's records; listing and showing them."""

from __future__ import annotations

import csv
import io
import os
import re
import socket
import statistics
import time
from pathlib import Path

from testbed.net.balance import cross_segment_bytes, links_used, nic_balance, ratio_text
from testbed.schema.results import Results, Run, load
from testbed.system.versions import git_revision, revision_text
from topos.errors import InputError
from topos.inputs import open_output, read_text, save_figure, write_file
from traffic.metrics import cluster_utilization
from traffic.report import Dump, inspector_lines

from .sections import campaign_lines, gray_lines, pfc_lines, roce_lines, time_lines

RESULTS = Path("results")


def cluster_summary(runs: list[Run]) -> dict:
    """Over runs of one variant: each training job's GPUs, class and mean utilization, and the GPU-weighted
    mean (traffic.metrics.cluster_utilization); a job's class is the lossless priority Crux gave it, else
    its DSCP."""
    info = {j: d for r in runs for j, d in r.jobs.items()}
    crux = {j: d for r in runs for j, d in (r.crux or {}).get("jobs", {}).items()}
    total, means = cluster_utilization([i.model_dump() for r in runs for i in r.iterations],
                                       {j: d["gpus"] for j, d in info.items()})
    return {"utilization": total, "jobs": {
        j: {"gpus": info.get(j, {}).get("gpus", 1), "utilization": u,
            "class": f"p{crux[j]['lossless_priority']}" if j in crux else f"DSCP {info.get(j, {}).get('dscp')}"}
        for j, u in means.items()}}


def _mean_sd(xs: list[float]) -> tuple[float, float]:
    return (statistics.mean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0) if xs else (0.0, 0.0)


def _fired(rs: list[Run]) -> str:
    fired = sum(len(r.failures) for r in rs)
    return f"{fired} of {fired + sum(len(r.failures_not_fired) for r in rs)}"


def _balance_row(variant: str, rs: list[Run]) -> str | None:
    per_run = [(nic_balance(r.counters, min_bytes=1 << 20), links_used(r.counters)) for r in rs]
    per_run = [(nics, used) for nics, used in per_run if nics]
    if not per_run:
        return None
    cells = [
        ", ".join(f"{w.nic} {ratio_text(w.imbalance)}" for w in (max(nics, key=lambda n: n.imbalance)
                                                              for nics, _ in per_run)),
        ", ".join(ratio_text(statistics.median(n.imbalance for n in nics)) for nics, _ in per_run),
        ", ".join(f"{sum(n.imbalance >= 2 for n in nics)} of {len(nics)}" for nics, _ in per_run),
        ", ".join(f"{max(n.deepest_queue for n in nics) / 1e3:.0f}" for nics, _ in per_run),
        ", ".join(f"{u} of {t}" for _, (u, t) in per_run),
    ]
    return f"| {variant} | " + " | ".join(cells) + " |"


def cluster_line(cluster: dict) -> str:
    """One sentence on the servers a run spread over (a run record's `cluster`, ClusterRun.record())."""
    placed = cluster["placement"]
    servers = ", ".join(f"{name} ({len(placed['servers'][name])} nodes, {s['datapath']} datapath, "
                        f"kernel {s['versions']['kernel']}, hpnlab {s['versions']['git']})"
                        for name, s in cluster["servers"].items())
    return (f"Spread over {len(cluster['servers'])} servers: {servers}; {len(placed['crossing_links'])} links "
            f"cross between them over {cluster['tunnel']} tunnels")


def write_reports(outdir: Path, exp, runs: list[Run]) -> None:
    """ops.csv, timeline.csv, the three figures and summary.md of a results folder."""
    import matplotlib

    matplotlib.use("Agg")
    _write_csvs(outdir, runs)
    _plot_busbw(outdir, exp, runs)
    _plot_throughput(outdir, runs)
    _plot_queues(outdir, runs)
    _plot_campaign(outdir, runs)
    write_file(outdir / "summary.md", "\n".join(summary_lines(exp, runs)) + "\n", "summary.md")


def _csv(path: Path):
    """A CSV file opened through open_output (never through a link at its name)."""
    return io.TextIOWrapper(open_output(path, path.name), newline="")


def _write_csvs(outdir: Path, runs: list[Run]) -> None:
    with _csv(outdir / "ops.csv") as f:
        w = csv.writer(f)
        w.writerow(["variant", "repetition", "label", "op", "algorithm", "ranks", "size", "start_s", "seconds",
                    "algbw_bps", "busbw_bps", "ideal_busbw_bps", "fraction_of_ideal", "bytes_ok"])
        for r in runs:
            for o in r.ops:
                w.writerow([r.variant, r.repetition, o.label, o.op, o.algorithm, o.ranks, o.size,
                            o.start, o.seconds, round(o.algbw_bps), round(o.busbw_bps),
                            round(o.ideal_busbw_bps), round(o.fraction_of_ideal, 4), o.bytes_ok])
    _write_inspector(outdir, runs)
    with _csv(outdir / "timeline.csv") as f:
        w = csv.writer(f)
        # t: the fabric's (virtual) time; wall_t and host_tx_bps: this machine's clock (D x slower when dilated)
        w.writerow(["variant", "repetition", "t", "wall_t", "cpu_idle", "host_tx_bps"])
        for r in runs:
            for row in r.timeline:
                w.writerow([r.variant, r.repetition, row.t, row.wall_t, row.cpu_idle, row.host_tx_bps])


def _write_inspector(outdir: Path, runs: list[Run]) -> None:
    """nccl_inspector.jsonl: every op in the NCCL inspector plugin's records (traffic/report.py)."""
    rev = revision_text(*git_revision())
    dump = Dump(rev, socket.gethostname(), os.getpid(), int(time.time() * 1e6))
    lines = [line for r in runs for line in inspector_lines(
        [o.model_dump() | {"bytes_ok": o.bytes_ok} for o in r.ops], r.scale, r.dilation,
        {j: len(d.get("hosts") or []) for j, d in r.jobs.items()}, dump,
        {"variant": r.variant, "repetition": r.repetition})]
    write_file(outdir / "nccl_inspector.jsonl", "".join(f"{line}\n" for line in lines), "nccl_inspector.jsonl")


def _by_variant(runs: list[Run]) -> tuple[list[str], dict[str, list[float]], dict[str, list[float]]]:
    """The variants in run order, and each one's ops' busbw (Mbit/s) and fraction of ideal."""
    variants = list(dict.fromkeys(r.variant for r in runs))
    fr = {v: [o.fraction_of_ideal for r in runs if r.variant == v for o in r.ops] for v in variants}
    bw = {v: [o.busbw_bps / 1e6 for r in runs if r.variant == v for o in r.ops] for v in variants}
    return variants, bw, fr


def _plot_busbw(outdir: Path, exp, runs: list[Run]) -> None:
    import matplotlib.pyplot as plt

    variants, bw, fr = _by_variant(runs)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    means = [_mean_sd(bw[v]) for v in variants]
    ax.bar(variants, [m for m, _ in means], yerr=[s for _, s in means], capsize=4, color="#1f77b4")
    for i, v in enumerate(variants):
        ax.text(i, means[i][0], f"{_mean_sd(fr[v])[0]:.0%} of ideal", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("busbw (Mbit/s, emulated)")
    ax.set_title(f"{exp.name}: busbw per variant")
    fig.tight_layout()
    save_figure(fig, outdir / "busbw.png", "busbw.png")
    plt.close(fig)


def _plot_throughput(outdir: Path, runs: list[Run]) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4), dpi=110)
    for r in runs:
        ts = [row.t for row in r.timeline]
        d = r.dilation  # the same bytes in 1/D of the time: the fabric's rate
        ax.plot(ts, [row.host_tx_bps * d / 1e6 for row in r.timeline], label=f"{r.variant} #{r.repetition}")
        for ev in r.failures:
            ax.axvline(ev.t, color="green" if ev.up else "red", alpha=0.4, lw=1)
    ax.set_xlabel("time (s, the fabric's); red: link down, green: link up")
    ax.set_ylabel("all hosts' NICs sending (Mbit/s)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, outdir / "throughput.png", "throughput.png")
    plt.close(fig)


def _plot_queues(outdir: Path, runs: list[Run]) -> None:
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(9, 6), dpi=110, sharex=True)
    drew = False
    for r in runs:
        samples = (r.pfc or {}).get("samples") or []
        if not samples:
            continue
        drew = True
        deepest = sorted(r.pfc["queues"].items(), key=lambda kv: -kv[1]["max_backlog"])[:2]
        ts = [x["t"] for x in samples]
        for key, _q in deepest:
            ax.plot(ts, [x["backlog"].get(key, 0) / 1000 for x in samples],
                    label=f"{r.variant} #{r.repetition} {key}")
        ax2.plot(ts, [len(x["paused"]) for x in samples], label=f"{r.variant} #{r.repetition}")
    ax.set_ylabel("lossless backlog (KB)")
    ax.set_title("PFC: the deepest lossless queues and paused ports over time" if drew else "no PFC samples")
    ax2.set_ylabel("ports paused")
    ax2.set_xlabel("time (s)")
    if drew:
        ax.legend(fontsize=7)
        ax2.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, outdir / "queues.png", "queues.png")
    plt.close(fig)


def summary_lines(exp, runs: list[Run]) -> list[str]:
    """summary.md: the variants, then per job, training iterations, placement, NIC balance, fidelity."""
    variants = list(dict.fromkeys(r.variant for r in runs))
    lines = [f"# {exp.name}", "", exp.description or "", "", *_variant_table(runs)]
    lines += _per_job(variants, runs)
    lines += _iterations(variants, runs)
    lines += _placement(exp, variants, runs)
    balance = [row for v in variants if (row := _balance_row(v, [r for r in runs if r.variant == v]))]
    if balance:
        lines += ["", "Load on the two ToR ports facing each receiving NIC (more/less loaded bytes), the deepest "
                  "lossless queue at those ports, and the aggregation-to-ToR links that carried traffic "
                  "(testbed/net/balance.py), per run:", "",
                  "| variant | worst NIC | median over NICs | NICs >= 2x | deepest queue (KB) "
                  "| agg-to-ToR links used |",
                  "|---|---|---|---|---|---|", *balance]
    if runs and runs[0].cluster:
        lines += ["", cluster_line(runs[0].cluster) + " (results.json: each run's `cluster`)."]
    lines += pfc_lines(runs)
    lines += campaign_lines(runs)
    lines += gray_lines(runs)
    lines += roce_lines(runs)
    lines += time_lines(runs)
    if exp.paper:
        lines += ["", "The paper's figure, beside ours: " + ", ".join(f"{k}: {v}" for k, v in exp.paper.items())]
    return lines + _fidelity_lines(runs) + [
        "", "Files: ops.csv, nccl_inspector.jsonl (NCCL inspector records), timeline.csv, results.json, busbw.png, "
        "throughput.png, queues.png, environment.json"
        + (", campaign.png." if any(r.campaign for r in runs) else ".")]


def _plot_campaign(outdir: Path, runs: list[Run]) -> None:
    """campaign.png: each outage's stall per run, against the watchdog."""
    rs = [r for r in runs if r.campaign]
    if not rs:
        return
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for r in rs:
        outs = [o for o in r.campaign["outcomes"] if o["stall_s"] is not None]
        ax.plot([o["outage"] for o in outs], [o["stall_s"] for o in outs], "o",
                label=f"{r.variant} #{r.repetition}")
    ax.axhline(rs[0].campaign["resilience"]["watchdog_s"], color="red", linestyle="--", label="watchdog")
    ax.set_xlabel("outage")
    ax.set_ylabel("longest step without progress (s, fabric time)")
    ax.set_yscale("log")
    ax.legend(fontsize="small")
    fig.tight_layout()
    save_figure(fig, outdir / "campaign.png", "campaign.png", dpi=100)
    plt.close(fig)


def _faithful_cell(rs: list[Run]) -> str:
    """'yes' only when every run was judged faithful; runs not judged (unknown) are counted apart."""
    no = sum(1 for r in rs if r.fidelity.status == "not faithful")
    unknown = sum(1 for r in rs if r.fidelity.status == "unknown")
    cells = ([f"NO ({no} of {len(rs)})"] if no else []) + ([f"unknown ({unknown} of {len(rs)})"] if unknown else [])
    return ", ".join(cells) or "yes"


def _variant_table(runs: list[Run]) -> list[str]:
    variants, bw, fr = _by_variant(runs)
    lines = ["| variant | ops | busbw (Mbit/s, mean ± sd) | of ideal (mean ± sd) | drops (lossless/default) "
             "| failures fired (of planned) | halted | faithful |",
             "|---|---|---|---|---|---|---|---|"]
    for v in variants:
        rs = [r for r in runs if r.variant == v]
        m, s = _mean_sd(bw[v])
        fm, fs = _mean_sd(fr[v])
        halted = [r.halted for r in rs if r.halted]
        halted_text = f"{len(halted)} of {len(rs)} (first at {halted[0].at} s)" if halted else "no"
        drops = f"{sum(r.drops.lossless for r in rs)}/{sum(r.drops.default for r in rs)}"
        lines.append(f"| {v} | {len(bw[v])} | {m:.2f} ± {s:.2f} | {fm:.1%} ± {fs:.1%} | {drops} | "
                     f"{_fired(rs)} | {halted_text} | {_faithful_cell(rs)} |")
    return lines


def _fidelity_lines(runs: list[Run]) -> list[str]:
    bad = [r for r in runs if not r.fidelity.bytes_ok]
    lines = ["", f"Bytes delivered equal the closed forms in {len(runs) - len(bad)} of {len(runs)} runs.", "",
             "Fidelity (testbed/experiment/fidelity.py): a run is faithful when the CPU never ran out (idle >= 5% "
             "in every sample), the hypervisor's steal stayed <= 5%, the PFC agent kept its poll period and the "
             "lossless class dropped nothing with PFC on, no op slower than its ideal time was made of more than "
             "5% of the emulator's own latency, and no op ran faster than its links allow; it is unknown when a "
             "measurement it relies on is missing. Runs not faithful:"]
    return lines + ([f"- {r.variant} #{r.repetition}: " + "; ".join(r.fidelity.why())
                     for r in runs if not r.fidelity.faithful] or ["- none"])


def _per_job(variants: list[str], runs: list[Run]) -> list[str]:
    lines: list[str] = []
    jobs = sorted({o.job for r in runs for o in r.ops})
    if len(jobs) > 1:
        lines += ["", "Per job: iteration (op) time, mean ± sd:", "", "| variant | " + " | ".join(jobs) + " |",
                  "|---|" + "---|" * len(jobs)]
        for v in variants:
            cells = []
            for j in jobs:
                ts = [o.seconds for r in runs if r.variant == v for o in r.ops if o.job == j]
                m, sd = _mean_sd(ts)
                cells.append(f"{m:.2f} ± {sd:.2f} s ({len(ts)} ops)")
            lines.append(f"| {v} | " + " | ".join(cells) + " |")
    return lines


def _iterations(variants: list[str], runs: list[Run]) -> list[str]:
    lines: list[str] = []
    iters = [(r.variant, i) for r in runs for i in r.iterations]
    if iters:
        lines += ["", "Training iterations (compute as timed waits, then communication in SimAI's order; "
                  "predicted: traffic/iteration.py at the fabric's ideal rate; "
                  "SimAI-analytical: the same file as SimAI's analytical backend would estimate it, "
                  "traffic/simai_analytical.py), mean ± sd:", "",
                  "| variant | job | iterations | time (s) | predicted (s) | SimAI-analytical (s) | NVLink (s) "
                  "| exposed comm (s) | GPU utilization | predicted utilization |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for v in variants:
            for j in sorted({i.job for vv, i in iters if vv == v}):
                its = [i for vv, i in iters if vv == v and i.job == j]
                t, ts = _mean_sd([i.seconds for i in its])
                e, _ = _mean_sd([i.exposed_comm_s for i in its])
                u, us = _mean_sd([i.gpu_utilization for i in its])
                simai = _simai_estimate(runs, v, j)
                lines.append(f"| {v} | {j} | {len(its)} | {t:.3f} ± {ts:.3f} | {its[0].predicted_s:.3f} | {simai} "
                             f"| {its[0].nvlink_s:.3f} | {e:.3f} | {u:.1%} ± {us:.1%} "
                             f"| {its[0].predicted_gpu_utilization:.1%} |")
        cluster = {v: cluster_summary([r for r in runs if r.variant == v]) for v in variants}
        if any(len(c["jobs"]) > 1 for c in cluster.values()):
            lines += ["", "Cluster GPU utilization (each job's mean utilization weighted by its GPUs), and the "
                      "lossless priority each job got:", "", "| variant | cluster utilization | jobs |",
                      "|---|---|---|"]
            lines += [f"| {v} | {c['utilization']:.1%} | " + ", ".join(
                f"{j} ({d['gpus']} GPUs, {d['utilization']:.1%}, {d['class']})" for j, d in c["jobs"].items()) + " |"
                for v, c in cluster.items() if c["jobs"]]
    return lines


def _simai_estimate(runs: list[Run], variant: str, job: str) -> str:
    """A job's SimAI-Analytical estimate (its file's, the same in every repetition), or '-'."""
    for r in runs:
        est = r.jobs.get(job, {}).get("simai_analytical") if r.variant == variant else None
        if est:
            return f"{est['seconds']:.3f}"
    return "-"


def _placement(exp, variants: list[str], runs: list[Run]) -> list[str]:
    lines: list[str] = []
    if exp.jobs and all(r.jobs for r in runs):
        lines += ["", "Where the jobs ran (controllers/placement.py: segments spanned, share of the rail rings' hops "
                  "between segments) and the bytes that crossed segments (up the ToR uplinks, OVS counters), "
                  "mean over runs:", "", "| variant | cross-segment bytes | job | hosts | segments | ring hops "
                  "crossing |", "|---|---|---|---|---|---|"]
        for v in variants:
            rs = [r for r in runs if r.variant == v]
            up, _ = _mean_sd([cross_segment_bytes(r.counters) for r in rs])
            for j, d in rs[0].jobs.items():
                lines.append(f"| {v} | {up / 1e6:,.1f} MB | {j} | {','.join(d['hosts'])} | {d['segments']} "
                             f"| {d['ring_hops_crossing']:.0%} |")
    return lines


def load_results(run_dir: Path) -> Results:
    """A run's results.json, typed, or an InputError saying it is unreadable (a run killed mid-write, an edited
    file, one from another version)."""
    try:
        return load(read_text(run_dir / "results.json", "results.json"))
    except ValueError as exc:
        raise InputError(f"results.json is unreadable ({str(exc)[:120]})",
                         "run the experiment again, or remove the folder", field="run", value=run_dir.name) from None


def list_runs() -> list[dict]:
    """Every results folder; one that cannot be read is listed as such instead of stopping the listing."""
    out = []
    for d in sorted(RESULTS.glob("*/results.json")):
        try:
            data = load_results(d.parent)
            name = str(data.experiment.get("name", "(no name)"))
            out.append({"run": d.parent.name, "experiment": name, "runs": len(data.runs)})
        except InputError as exc:
            out.append({"run": d.parent.name, "experiment": f"(unreadable: {exc.what})", "runs": None})
    return out


def find(run: str) -> Path:
    """The results folder a run name (or a unique part of one) names: only folders directly inside results/."""
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", run) or run.strip(".") == "":
        raise InputError("not a run name", "give a folder name from 'hpnlab results list' (no '/', no wildcards)",
                         field="run", value=run)
    root = RESULTS.resolve()
    dirs = [p for p in RESULTS.iterdir() if p.is_dir() and not p.is_symlink()] if RESULTS.is_dir() else []
    exact = [p for p in dirs if p.name == run]
    cands = [p for p in exact or dirs if run in p.name and (p / "results.json").is_file()]
    if len(cands) != 1:
        raise InputError("no such run" if not cands else "more than one run matches",
                         "see 'hpnlab results list'", field="run", value=run)
    if not cands[0].resolve().is_relative_to(root):
        raise InputError("outside results/", "see 'hpnlab results list'", field="run", value=run)
    return cands[0]


def summary(run: str) -> str:
    """A run's summary.md, by the run's name."""
    return folder_summary(find(run))


def folder_summary(d: Path) -> str:
    """The summary.md of a results folder (a regular file of that folder, not a link to elsewhere)."""
    f = d / "summary.md"
    if f.is_symlink() or not f.resolve().is_relative_to(d.resolve()):
        raise InputError("summary.md is not a file of the run's folder", "run the experiment again", field="run",
                         value=d.name)
    return read_text(f, "summary.md")


def _per_variant(run_dir: Path) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[list, list]] = {}
    for r in load_results(run_dir).runs:
        bw, fr = out.setdefault(r.variant, ([], []))
        bw += [o.busbw_bps / 1e6 for o in r.ops]
        fr += [o.fraction_of_ideal for o in r.ops]
    return {v: (_mean_sd(bw)[0], _mean_sd(fr)[0]) for v, (bw, fr) in out.items()}


def compare(run_a: str, run_b: str) -> tuple[list[tuple[str, ...]], Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    da, db = find(run_a), find(run_b)
    a, b = _per_variant(da), _per_variant(db)
    variants = list(dict.fromkeys([*a, *b]))
    rows = []
    for v in variants:
        (ba, fa), (bb, fb) = a.get(v, (0.0, 0.0)), b.get(v, (0.0, 0.0))
        rows.append((v, f"{ba:.2f}", f"{fa:.1%}", f"{bb:.2f}", f"{fb:.1%}", f"{bb / ba:.2f}x" if ba else "-"))
    fig, ax = plt.subplots(figsize=(8, 4), dpi=110)
    x = range(len(variants))
    ax.bar([i - 0.2 for i in x], [a.get(v, (0, 0))[0] for v in variants], 0.4, label=da.name)
    ax.bar([i + 0.2 for i in x], [b.get(v, (0, 0))[0] for v in variants], 0.4, label=db.name)
    ax.set_xticks(list(x), variants)
    ax.set_ylabel("busbw (Mbit/s, emulated)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    png = RESULTS / f"compare-{da.name}-vs-{db.name}.png"
    try:
        save_figure(fig, png, "compare picture")
    finally:
        plt.close(fig)
    return rows, png
