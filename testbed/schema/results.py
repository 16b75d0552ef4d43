"""results.json, typed: the models a run's record is checked against when it is saved and read back as, and
the reference the docs print (each field's description).

The runner and its measurements build the record (testbed/experiment/runner.py, record.py, measure.py); `Run`
checks it key by key when results.json is written, and `load` gives readers (summary, compare, the labs, the
web view, the benchmarks) typed records instead of dictionaries. Sections whose inner keys come from other
parts (the PFC agent's report, the campaign's costs, the controller's events) are kept as they were written
and described here as a whole. A field described "only ..." is absent from runs it does not apply to.
`tests/unit/test_results_schema.py` holds the recorded runs in tests/data/runs to these models both ways.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from testbed.net.balance import Counters


def exact_bytes(delivered: int, expected: int, closed_form: int | None) -> bool:
    """The receivers got what the schedule sent, and that is what the collective moves by definition (the second
    check cannot be fooled by a schedule that lost a chunk: the receivers expect the schedule's sum)."""
    return delivered == expected and (closed_form is None or closed_form == expected)


class Record(BaseModel):
    """A part of results.json: every key it holds is a field below."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # an edited file's NaN is refused, not shown

    def dump(self) -> dict:
        """As results.json holds it: the optional keys a run does not have stay out."""
        return self.model_dump(exclude_unset=True)


def only(description: str) -> Any:
    """A field some runs lack (its description says when it is there)."""
    return Field(default=None, description=f"only {description}")


class Op(Record):
    job: str = Field(description="the job the op belongs to")
    label: str = Field(description="op/algorithm, as in summary.md")
    op: str = Field(description="the collective")
    algorithm: str = Field(description="its algorithm")
    ranks: int = Field(description="how many ranks took part")
    size: int = Field(description="the emulated size in bytes (the real size divided by the scale)")
    start: float = Field(description="virtual seconds from the traffic's start")
    seconds: float = Field(description="how long it took, in the fabric's time")
    step_seconds: list[float] = Field(description="each step's time, from the pieces' own timestamps")
    algbw_bps: float = Field(description="size / seconds, in emulated bits per second (times the scale: the real "
                                         "fabric's)")
    busbw_bps: float = Field(description="algbw times nccl-tests' bus factor for the op")
    ideal_busbw_bps: float = Field(description="the busbw the ranks' NIC ports allow at their rate")
    fraction_of_ideal: float = Field(description="busbw_bps / ideal_busbw_bps")
    bytes_expected: int = Field(description="what the schedule sent")
    bytes_delivered: int = Field(description="what the receivers got")
    bytes_closed_form: int | None = Field(description="what the collective moves by definition "
                                                      "(traffic/closed_form.py)")

    @property
    def bytes_ok(self) -> bool:
        return exact_bytes(self.bytes_delivered, self.bytes_expected, self.bytes_closed_form)


class Iteration(Record):
    job: str = Field(description="the training job")
    iteration: int = Field(description="0, 1, ...")
    start: float = Field(description="virtual seconds from the traffic's start")
    seconds: float = Field(description="the iteration's time in the fabric's time")
    compute_s: float = Field(description="its compute")
    nvlink_s: float = Field(description="its communication inside the servers, timed at their NVLink "
                                        "(topology parameter gpu)")
    exposed_comm_s: float = Field(description="the fabric's communication not hidden under compute and NVLink")
    gpu_utilization: float = Field(description="compute / seconds")
    predicted_s: float = Field(description="the closed form: compute plus each op at the ideal rate, in SimAI's "
                                           "order")
    predicted_gpu_utilization: float = Field(description="compute / predicted_s")
    bytes_ok: bool = Field(description="every op of the iteration delivered its closed form's bytes")


class Sample(Record):
    t: float = Field(description="virtual seconds from the traffic's start")
    wall_t: float = Field(description="wall seconds from the traffic's start")
    cpu_idle: float = Field(description="the CPU's idle share since the last sample (the least over servers)")
    steal: float = Field(description="the hypervisor's share (steal)")
    ovs_thread: float = Field(description="Open vSwitch's busiest thread, share of a core")
    host_tx_bps: int = Field(description="what every host port sent, bits per wall second")
    cpu_idle_by_server: dict[str, float] | None = only("over several servers: each one's idle share")
    ovs_rx_peak: int | None = only("where OVS's sockets were read: the most socket memory of frames waiting at one "
                                   "switch port for OVS's thread since the last sample (ovs_backlog.py)")
    ovs_rx_port: str | None = only("with ovs_rx_peak: that port")


class Fired(Record):
    t: float = Field(description="virtual seconds from the traffic's start")
    wall_t: float = Field(description="wall seconds from the traffic's start")
    planned_t: float = Field(description="when the schedule said (virtual seconds)")
    time: float = Field(description="the wall clock (Unix time)")
    up: bool = Field(description="the links came up (else: went down)")
    links: list[str] = Field(description="the links it changed")
    cause: str = Field(description="what the schedule or campaign said")
    outage: int | None = Field(description="the campaign outage it belongs to")
    gray: list[Any] | None = only("a gray failure: its kind and value")
    flap: float | None = only("a flapping link: its period")


class Halt(Record):
    at: float = Field(description="virtual seconds from the traffic's start")
    op: str = Field(description="the step that never ended")
    why: str = Field(description="what the agents said")
    job: str = Field(description="its job")


class Drops(Record):
    high: int = Field(description="drops in the high class's shapers")
    lossless: int = Field(description="drops in the lossless classes' shapers (every priority summed)")
    default: int = Field(description="drops in the default class's shapers")
    unread: int = Field(description="shaped ports whose counters could not be read (gone)")
    switch: int = Field(description="frames Open vSwitch itself failed to send or take in")


class Verdict(Record):
    status: Literal["faithful", "not faithful", "unknown"] = Field(description="the verdict")
    faithful: bool = Field(description="status is faithful")
    reasons: list[str] = Field(description="why not faithful: what went wrong")
    unknown: list[str] = Field(description="what was not measured (the verdict is then unknown)")
    cpu_idle_min: float | None = Field(description="the CPU's least idle share in a sample")
    cpu_idle_mean: float | None = Field(description="its mean idle share")
    steal_mean: float | None = Field(description="the hypervisor's mean share (steal)")
    ovs_thread_max: float | None = Field(description="Open vSwitch's busiest thread, share of a core")
    ovs_rx_max: int | None = only("where OVS's sockets were read: the most socket memory of frames waiting at "
                                  "one switch port for OVS's thread (they left the upstream queue: no pause holds "
                                  "them)")
    cpu_bound: bool = Field(description="idle fell below the bound")
    pfc_poll_p99_ms: float | None = Field(description="the polling PFC agent's p99 period")
    pfc_reaction_ms: dict[str, float] | None = Field(description="the kernel PFC's reaction, median and p99")
    lossless_drops: int | None = Field(description="drops in the lossless class (null: not read)")
    offered_bps: float | None = Field(description="every sending port at its emulated rate, per wall second")
    budget_bps: float | None = Field(description="what this machine forwards faithfully")
    ops_too_short: int = Field(description="ops too short to time alone, weighed by their iterations")
    of_closed_form: dict[str, float] = Field(description="per job: its closed form's time over its time")
    latency_floor: dict[str, Any] | None = Field(default=None, description="the emulator's per-op latency the "
                                                 "verdict weighed ops against")
    bytes_ok: bool | None = Field(default=None, description="every op delivered exactly its closed form's bytes")

    def line(self) -> str:
        """One line for a terminal or a summary."""
        if self.status == "faithful":
            return f"fidelity: faithful ({', '.join(self._figures())})"
        if self.status == "unknown":
            return "fidelity: unknown: " + "; ".join(self.unknown)
        return "fidelity: NOT faithful: " + "; ".join(self.why())

    def _figures(self) -> list[str]:
        figures = []
        if self.cpu_idle_min is not None:
            figures.append(f"CPU idle >= {self.cpu_idle_min:.0%}")
        if self.ovs_thread_max is not None:
            figures.append(f"OVS thread <= {self.ovs_thread_max:.0%}")
        if self.steal_mean is not None:
            figures.append(f"steal {self.steal_mean:.0%}")
        if self.pfc_poll_p99_ms is not None:
            figures.append(f"PFC poll p99 {self.pfc_poll_p99_ms:g} ms")
        if self.pfc_reaction_ms:
            figures.append(f"PFC reaction p50 {self.pfc_reaction_ms['median']:g} ms, "
                           f"p99 {self.pfc_reaction_ms['p99']:g} ms")
        if self.ops_too_short:
            figures.append(f"{self.ops_too_short:,} ops too short to time alone, weighed by their iterations")
        return figures

    def why(self) -> list[str]:
        """Why a run is not faithful: what went wrong, then what was not measured."""
        return self.reasons + self.unknown


class Run(Record):
    variant: str = Field(description="the variant's label (the experiment's name when it has no variants)")
    repetition: int = Field(description="0, 1, ... within the variant")
    transport: str = Field(description="tcp, roce or rdma, as chosen for this run")
    channels: int = Field(description="connections per peer")
    scale: float = Field(description="the bytes scale: emulated rate = real rate / (scale x dilation)")
    scale_auto: str | None = Field(description="why scale auto chose this scale (null when the scale was given)")
    dilation: float = Field(description="time dilation D: wall seconds per second of the fabric")
    dilation_auto: str | None = Field(description="why dilation auto chose D: what set it, the floor, the wall "
                                                  "time to expect (null when given)")
    jobs: dict[str, dict[str, Any]] = Field(
        description="per job: its hosts, GPUs, DSCP, the segments it spans and its ring hops that cross segments; "
                    "for a SimAI file, simai_analytical: the iteration as SimAI-Analytical would estimate it "
                    "(seconds, compute_s, comm_s per group, exposed_s, bubble_s; traffic/simai_analytical.py)")
    ops: list[Op] = Field(description="every op as it finished (the fields of an op below)")
    iterations: list[Iteration] = Field(description="every training iteration as it finished (the fields of an "
                                                    "iteration below)")
    halted: Halt | None = Field(description="null, or the first step that never ended: {at, op, why, job}")
    failures: list[Fired] = Field(description="every failure as fired: planned_t, virtual t, wall_t, its "
                                                       "cause, the links and whether up")
    failures_not_fired: list[dict[str, Any]] = Field(description="scheduled failures the traffic ended before")
    controller_events: list[dict[str, Any]] = Field(description="the controller's own log of link changes: time, "
                                                                "link, recompute ms, rules and flows moved")
    timeline: list[Sample] = Field(description="every 0.5 s of the run: virtual t, wall_t, CPU idle and "
                                                       "steal, Open vSwitch's thread, the hosts' sending rate")
    links: list[dict[str, Any]] = Field(description="every host link's bytes and packets from its host (from, to, "
                                                    "gbps), from the port counters")
    fabric_links: list[dict[str, Any]] = Field(description="every switch-to-switch link's bytes over the traffic, "
                                                           "with its kind (tor-agg, agg-core)")
    host_port_rx: dict[str, int] = Field(description="bytes each host NIC port received, keyed HOST:PORT")
    host_port_tor: dict[str, str] = Field(description="the ToR each host NIC port is wired to, keyed HOST:PORT")
    drops: Drops = Field(description="drops per traffic class (high, lossless, default) in the shapers, Open "
                                     "vSwitch's own (switch), and ports that could not be read (unread)")
    pfc: dict[str, Any] | None = Field(description="the PFC agent's report (null without PFC): pauses per tier "
                                                   "and priority, queue depths, XOFF crossings, reaction or poll "
                                                   "figures, headroom_covers_ms, the agent's CPU share, and "
                                                   "buffer_cycles: the route states (after which failure, links "
                                                   "down) whose lossless flows close a cyclic buffer dependency, "
                                                   "where PFC can deadlock, and deadlocks: those the agent's "
                                                   "samples saw closed (every queue on the cycle paused): how "
                                                   "often, the longest (s), held at the end; frozen: lossless "
                                                   "queues paused with their backlogs unchanged to the end "
                                                   "(queues, from_s, held_s; null when none)")
    ecn: dict[str, Any] | None = Field(description="marks per queue and the hosts' congestion-control counters "
                                                   "(null without ECN)")
    tcp: dict[str, int] | None = Field(description="the hosts' TCP counters over the run: timeouts, loss probes, fast "
                                            "retransmits, DSACKs, reorderings (null: no TCP)")
    roce: dict[str, int] | None = only("with transport roce: the hosts' RoCE NICs summed: data frames sent and "
                                       "resent, go-back-N episodes (rewinds), timeouts, frames received and "
                                       "dropped out of order, NAKs, CNPs sent and received, CE marks, ICRC errors, "
                                       "DCQCN's rate cuts; and "
                                       "retry_timer_ms, the QPs' retry timer in wall time")
    agents_cpu_s: float | None = only("with the tcp or roce transport: the CPU seconds (user and system) the "
                                      "hosts' traffic agents used, from start to stop: what the transport cost "
                                      "this machine")
    traffic_s: dict[str, float | int] = Field(description="the traffic's time: virtual (the fabric's), wall, and what "
                                                    "compute skipping jumped")
    sampler_error: str | None = Field(description="null, or why the CPU sampler failed (the verdict is then "
                                                  "unknown)")
    fidelity: Verdict = Field(description="the verdict: status (faithful, NOT faithful, unknown), its reasons and "
                                          "the figures behind it")
    tcp_timers_not_dilated: list[str] | None = only("under dilation: hosts whose kernel could not dilate TCP's "
                                                    "timers")
    tcp_rto_not_capped: list[str] | None = only("with resilience.retry_timer_s: hosts whose kernel could not cap "
                                                "TCP's timeout")
    crux: dict[str, Any] | None = only("with scheduler crux: each job's intensity, priority, lossless level and "
                                       "the order of placement")
    campaign: dict[str, Any] | None = only("with campaign: the outages played, each one's outcome and cost, the "
                                           "months they span")
    gray: dict[str, Any] | None = only("with lossy, degraded or flapping links: what the detector named, when, "
                                       "and the counters")
    cluster: dict[str, Any] | None = only("over several servers: every server's address and versions, the tunnel "
                                          "and the placement")

    @property
    def bytes_ok(self) -> bool:
        return all(o.bytes_ok for o in self.ops)

    @property
    def counters(self) -> Counters:
        """What the NIC-balance and link-use figures read (testbed/net/balance.py)."""
        return Counters(self.host_port_rx, self.host_port_tor, self.fabric_links, self.pfc)


class Results(Record):
    experiment: dict[str, Any] = Field(description="the experiment as run: every key of the experiment file with "
                                                   "its defaults filled in")
    complete: bool = Field(description="true when every variant and repetition ran to the end (false: stopped "
                                       "early, e.g. Ctrl-C)")
    runs: list[Run] = Field(description="one record per variant and repetition, in the order they ran (the "
                                        "fields below)")


def load(text: str) -> Results:
    """A results.json's text read back as typed records, or a ValueError naming the first field that is not
    what this version writes (pydantic's ValidationError is one)."""
    try:
        return Results.model_validate_json(text)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"{where}: {first['msg']}" if where else first["msg"]) from None


def _described(model: type[Record]) -> dict[str, str]:
    return {name: f.description or "" for name, f in model.model_fields.items()}


TABLES = {"results.json": _described(Results), "a run (runs[])": _described(Run), "an op (runs[].ops[])":
          _described(Op), "an iteration (runs[].iterations[])": _described(Iteration),
          "the verdict (runs[].fidelity)": _described(Verdict), "a sample (runs[].timeline[])": _described(Sample),
          "a failure (runs[].failures[])": _described(Fired), "drops (runs[].drops)": _described(Drops),
          "a halt (runs[].halted)": _described(Halt)}


def optional(description: str) -> bool:
    """A key some runs lack (its description says when it is there)."""
    return description.startswith("only ")
