"""What results.json holds, field by field: the reference the docs print and a test holds recorded runs to.

The record is built as plain JSON by the runner and its measurements (testbed/experiment/runner.py, record.py,
measure.py); these tables say what each key means. `tests/unit/test_results_schema.py` checks every key of the
recorded runs in tests/data/runs against them, both ways, so a key added to the record without a line here (or
a line left for a key that is gone) fails. A description starting "only " names a key that some runs lack.
Pure: no imports beyond the standard library.
"""

from __future__ import annotations

FILE_FIELDS = {
    "experiment": "the experiment as run: every key of the experiment file with its defaults filled in",
    "complete": "true when every variant and repetition ran to the end (false: stopped early, e.g. Ctrl-C)",
    "runs": "one record per variant and repetition, in the order they ran (the fields below)",
}

RUN_FIELDS = {
    "variant": "the variant's label (the experiment's name when it has no variants)",
    "repetition": "0, 1, ... within the variant",
    "transport": "tcp or rdma, as chosen for this run",
    "channels": "connections per peer",
    "scale": "the bytes scale: emulated rate = real rate / (scale x dilation)",
    "scale_auto": "why scale auto chose this scale (null when the scale was given)",
    "dilation": "time dilation D: wall seconds per second of the fabric",
    "dilation_auto": "why dilation auto chose D: what set it, the floor, the wall time to expect (null when given)",
    "jobs": "per job: its hosts, GPUs, DSCP, the segments it spans and its ring hops that cross segments; for a "
            "SimAI file, simai_analytical: the iteration as SimAI-Analytical would estimate it (seconds, "
            "compute_s, comm_s per group, exposed_s, bubble_s; traffic/simai_analytical.py)",
    "ops": "every op as it finished (the fields of an op below)",
    "iterations": "every training iteration as it finished (the fields of an iteration below)",
    "halted": "null, or the first step that never ended: {at, op, why, job}",
    "failures": "every failure as fired: planned_t, virtual t, wall_t, its cause, the links and whether up",
    "failures_not_fired": "scheduled failures the traffic ended before",
    "controller_events": "the controller's own log of link changes: time, link, recompute ms, rules and flows moved",
    "timeline": "every 0.5 s of the run: virtual t, wall_t, CPU idle and steal, Open vSwitch's thread, the "
                "hosts' sending rate",
    "links": "every host link's bytes and packets from its host (from, to, gbps), from the port counters",
    "fabric_links": "every switch-to-switch link's bytes over the traffic, with its kind (tor-agg, agg-core)",
    "host_port_rx": "bytes each host NIC port received, keyed HOST:PORT",
    "host_port_tor": "the ToR each host NIC port is wired to, keyed HOST:PORT",
    "drops": "drops per traffic class (high, lossless, default) in the shapers, Open vSwitch's own (switch), "
             "and ports that could not be read (unread)",
    "pfc": "the PFC agent's report (null without PFC): pauses per tier and priority, queue depths, XOFF "
           "crossings, reaction or poll figures, headroom_covers_ms, the agent's CPU share",
    "ecn": "marks per queue and the hosts' congestion-control counters (null without ECN)",
    "tcp": "the hosts' TCP counters over the run: timeouts, loss probes, fast retransmits, DSACKs, reorderings",
    "traffic_s": "the traffic's time: virtual (the fabric's), wall, and what compute skipping jumped",
    "sampler_error": "null, or why the CPU sampler failed (the verdict is then unknown)",
    "fidelity": "the verdict: status (faithful, NOT faithful, unknown), its reasons and the figures behind it",
    "tcp_timers_not_dilated": "only under dilation: hosts whose kernel could not dilate TCP's timers",
    "tcp_rto_not_capped": "only with resilience.retry_timer_s: hosts whose kernel could not cap TCP's timeout",
    "crux": "only with scheduler crux: each job's intensity, priority, lossless level and the order of placement",
    "campaign": "only with campaign: the outages played, each one's outcome and cost, the months they span",
    "gray": "only with lossy, degraded or flapping links: what the detector named, when, and the counters",
    "cluster": "only over several servers: every server's address and versions, the tunnel and the placement",
}

OP_FIELDS = {
    "job": "the job the op belongs to",
    "label": "op/algorithm, as in summary.md",
    "op": "the collective",
    "algorithm": "its algorithm",
    "ranks": "how many ranks took part",
    "size": "the emulated size in bytes (the real size divided by the scale)",
    "start": "virtual seconds from the traffic's start",
    "seconds": "how long it took, in the fabric's time",
    "step_seconds": "each step's time, from the pieces' own timestamps",
    "algbw_bps": "size / seconds, in the real fabric's bits per second",
    "busbw_bps": "algbw times nccl-tests' bus factor for the op",
    "ideal_busbw_bps": "the busbw the ranks' NIC ports allow at their rate",
    "fraction_of_ideal": "busbw_bps / ideal_busbw_bps",
    "bytes_expected": "what the schedule sent",
    "bytes_delivered": "what the receivers got",
    "bytes_closed_form": "what the collective moves by definition (traffic/closed_form.py)",
}

ITERATION_FIELDS = {
    "job": "the training job",
    "iteration": "0, 1, ...",
    "start": "virtual seconds from the traffic's start",
    "seconds": "the iteration's time in the fabric's time",
    "compute_s": "its compute",
    "nvlink_s": "its communication inside the servers, timed at their NVLink (topology parameter gpu)",
    "exposed_comm_s": "the fabric's communication not hidden under compute and NVLink",
    "gpu_utilization": "compute / seconds",
    "predicted_s": "the closed form: compute plus each op at the ideal rate, in SimAI's order",
    "predicted_gpu_utilization": "compute / predicted_s",
    "bytes_ok": "every op of the iteration delivered its closed form's bytes",
}

TABLES = {"results.json": FILE_FIELDS, "a run (runs[])": RUN_FIELDS, "an op (runs[].ops[])": OP_FIELDS,
          "an iteration (runs[].iterations[])": ITERATION_FIELDS}


def optional(description: str) -> bool:
    """A key some runs lack (its description says when it is there)."""
    return description.startswith("only ")
