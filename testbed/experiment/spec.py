"""Experiment files: one YAML says what to build, how to route and shape, what to replay, what to break when.

    name: precise-vs-ecmp
    topology: {name: hpn, preset: mini, params: {segments_per_pod: 2}}
    routing: precise                 # ecmp | precise | precise-host | shortest
    hashing: asic                    # ovs | asic | asic-seeded (how switches hash ECMP)
    qos: {scale: 20000, pfc: {enabled: true}}
    time: {dilation: 10}             # the emulation runs 10x slower than the fabric (traffic/timebase.py)
    transport: auto                  # auto | tcp | roce | rdma
    channels: 2                      # connections per peer
    connection_choice: channel       # channel | least-outstanding
    nic_port_choice: hash            # hash | round-robin (under ecmp)
    workload:                        # one of: a collective, a YAML workload, a SimAI file
      collective: {op: allreduce, size: 160GB, algorithm: ring, ranks: rail0, iters: 3}
      # or: {simai: gpt13b.txt, iterations: 2}  (a file with compute replays as training iterations)
    failures:
      - {at: 2.0, link: "tor-p0-s0-r0-a:5-agg-p0-pl0-0:1", action: down}
      - {at: 4.0, node: tor-p0-s1-r0-b, action: down}
      - {at: 1.0, link: "h3:nic0:p0", action: flap, period: 0.5, count: 3}
    random_failures: {link_down_per_min: 0.5, repair_after: 1.0}
    repetitions: 2
    seed: 1

Instead of `workload`, `jobs:` runs several jobs side by side, each with its own
connections and traffic class (`priority: lossless | high | default`, or the
802.1p number of one of `qos.lossless`); a job is a collective or a workload
file on its own hosts (a file with compute runs as training iterations):
    jobs:
      - {name: A, collective: {op: allreduce, size: 40GB, ranks: "h0:0,h1:0"}}
      - {name: B, priority: default, collective: {op: allreduce, size: 40GB, ranks: "h2:0,h3:0"}}
      - {name: C, workload: {simai: gpt.txt, iterations: 3}, hosts: "h4,h5,h6,h7"}
With `scheduler: crux` the controller's Crux-style scheduler (controllers/crux.py,
POST /jobs) orders the jobs by GPU intensity and gives each one of the
lossless priorities (`qos.lossless`, most important first).

Unknown keys are errors; every error names the field path, the value and what
is allowed. Cross-checks against the topology (link and node names) happen in
`check_against`, still before anything touches the system.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from controllers.hashing import HashModel
from testbed.qos.spec import QosSpec
from topos.errors import InputError, hides_values
from topos.inputs import confined, load_yaml, read_text
from traffic.collectives import ALGORITHMS
from traffic.timebase import MAX_DILATION, Timebase
from traffic.workload import MAX_OPS, MAX_SWEEP, parse_size

from .failure_spec import TCP_RTO_FLOOR_S, CampaignSpec, FailureSpec, RandomFailures, ResilienceSpec
from .spec_base import DAY_S, NAME_FIX, NAME_PATTERN, FieldError, Name, Strict

MAX_SPEC_BYTES = 1 << 20


class TopologySpec(Strict):
    name: str = Field("hpn", max_length=64, description="a builder: hpn, dcn_plus, rail_optimized, spine_leaf, "
                                                       "fat_tree (`hpnlab topo list`)")
    preset: str | None = Field(None, max_length=64, description="a named parameter set of the builder, e.g. mini "
                                                                "or paper (default: mini)")
    params: dict[str, Any] = Field(default_factory=dict, description="builder parameters over the preset, e.g. "
                                                                     "{hosts_per_segment: 8, rails: 2}")
    file: str | None = Field(None, max_length=255, description="instead of name, preset and params: a topology "
                             "file beside the experiment file, read into the hpn builder's parameters it amounts "
                             "to (`hpnlab topo export NAME --format simai` writes one)")
    format: Literal["simai"] = Field("simai", description="the file's format: simai (SimAI's topology file)")
    source: str | None = Field(None, max_length=300, description="the file the parameters were read from (set "
                                                                 "when the experiment is loaded)")

    @model_validator(mode="after")
    def _one_source(self) -> TopologySpec:
        if self.file is not None and (self.preset is not None or self.params or self.name != "hpn"):
            raise InputError("a topology file gives the whole topology", "leave name, preset and params out",
                             field="topology.file", value=self.file)
        return self

    def build(self):
        from topos import build_from

        if self.file is not None:
            raise InputError("a topology file is read when the experiment is loaded from its file",
                             "run the experiment file (hpnlab run FILE)", field="topology.file", value=self.file)
        return build_from(self.name, self.preset, self.params)

    def read_file(self, base: Path) -> TopologySpec:
        """The spec with the file's parameters in place of the file (an experiment file's folder: `base`)."""
        from topos.simai_topo import load_params

        if self.file is None:
            return self
        params = load_params(confined(self.file, base, "topology.file"), "topology.file")
        return TopologySpec(name="hpn", params=params, source=f"{self.file} ({self.format})")


class CollectiveSpec(Strict):
    op: str = Field("allreduce", description="the collective: allreduce, allgather, reducescatter, alltoall, "
                                             "broadcast, sendrecv, incast (traffic/collectives.py)")
    size: str | int | list[str | int] = Field("160GB", description="one size, or a list: a sweep, each size "
                                                                 "`iters` times in turn (nccl-tests' -b/-e/-f)")
    algorithm: str | None = Field(None, max_length=32, description="the op's algorithm: ring, "
                                  "halving_doubling or hierarchical for allreduce (default: the op's first)")
    ranks: str = Field("rail0", max_length=4096, description="which NICs take part: railN (NIC N of every "
                       "host), all (every NIC), or host NICs h0:0,h1:0,...")
    iters: int = Field(3, ge=1, le=10_000, description="how many times the op runs back to back (each size of a "
                                                     "sweep)")

    @field_validator("op")
    @classmethod
    def _op(cls, v: str) -> str:
        if v not in ALGORITHMS:
            raise FieldError(InputError("unknown collective", f"use one of: {', '.join(ALGORITHMS)}", value=v))
        return v

    @field_validator("size")
    @classmethod
    def _size(cls, v: str | int | list[str | int]) -> str | int | list[str | int]:
        if isinstance(v, list) and not 1 <= len(v) <= MAX_SWEEP:
            raise FieldError(InputError(f"a list of 1 to {MAX_SWEEP} sizes", "e.g. [1MB, 2MB, 4MB]", value=len(v)))
        try:
            for one in v if isinstance(v, list) else [v]:
                parse_size(one)
        except InputError as exc:
            raise FieldError(exc) from None
        return v

    @model_validator(mode="after")
    def _ops(self) -> CollectiveSpec:
        n = self.iters * (len(self.size) if isinstance(self.size, list) else 1)
        if n > MAX_OPS:
            raise FieldError(InputError(f"iters x sizes is {n:,} ops, more than the {MAX_OPS:,} a workload may have",
                                         "fewer iters or sizes", value=self.iters))
        return self

    @property
    def sizes(self) -> list[int]:
        return [parse_size(one) for one in (self.size if isinstance(self.size, list) else [self.size])]


class WorkloadSpec(Strict):
    collective: CollectiveSpec | None = Field(None, description="one collective, run iters times")
    yaml_file: str | None = Field(None, alias="file", max_length=255, description="a workload YAML file (ops with "
                                  "sizes, groups, compute), beside the experiment file")
    simai: str | None = Field(None, max_length=255, description="a SimAI/AICB workload file, beside the "
                              "experiment file")
    chakra: str | None = Field(None, max_length=255, description="Chakra execution traces: the prefix of the "
                               "per-rank files PREFIX.RANK.et, beside the experiment file (traffic/chakra.py)")
    groups: dict[Annotated[str, Field(max_length=128)], list[Annotated[int, Field(ge=0, lt=1 << 20)]]] | None = \
        Field(None, max_length=4096, description="chakra: each process group's ranks by its pg_name (default: "
                                                 "a collective without pg_name runs over every rank)")
    iterations: int = Field(1, ge=1, le=1000, description="file/simai/chakra: training iterations to replay, each "
                                                           "with its compute when the workload has some")

    @model_validator(mode="after")
    def _one(self) -> WorkloadSpec:
        given = [k for k in ("collective", "yaml_file", "simai", "chakra") if getattr(self, k) is not None]
        if len(given) != 1:
            raise InputError("give exactly one of collective, file, simai, chakra", "e.g. workload: {collective: "
                             "{op: allreduce, size: 160GB}}", field="workload", value=given or None)
        if self.groups is not None and self.chakra is None:
            raise InputError("groups name a Chakra trace's process groups", "give them with chakra: PREFIX",
                             field="workload.groups", value=sorted(self.groups)[:3])
        if self.collective is not None and self.iterations != 1:
            raise InputError("a collective repeats with its own iters", "use collective.iters",
                             field="workload.iterations", value=self.iterations)
        return self


class JobSpec(Strict):
    """One of several jobs sharing the fabric at once (each its own connections and traffic class)."""

    name: Name
    collective: CollectiveSpec | None = Field(None, description="the job is this collective")
    workload: WorkloadSpec | None = Field(None, description="a workload file (file, simai or chakra) on `hosts`")
    hosts: str | None = Field(None, max_length=4096, description="workload: the hosts its ranks map onto, "
                                                                 "h0,h1,... (default: every host)")
    gpus: int | None = Field(None, ge=1, le=1 << 20, description="workload: place this many GPUs (host NICs) by "
                                                                 "the experiment's placement policy instead")
    priority: Literal["lossless", "high", "default"] | Annotated[int, Field(ge=0, le=7)] = Field(
        "lossless", description="a class, or the 802.1p priority of one of qos.lossless")

    @model_validator(mode="after")
    def _one(self) -> JobSpec:
        if (self.collective is None) == (self.workload is None):
            raise InputError("a job is either a collective or a workload file", "give collective: or workload:",
                             field="jobs[].collective", value=None)
        if self.workload is not None and self.workload.collective is not None:
            raise InputError("a job's collective goes under collective:", "move it up one level",
                             field="jobs[].workload.collective", value=None)
        for what in ("hosts", "gpus"):
            if getattr(self, what) is not None and self.workload is None:
                raise InputError(f"{what} places a workload file's ranks; a collective names its own",
                                 "use collective.ranks", field=f"jobs[].{what}", value=getattr(self, what))
        if self.hosts is not None and self.gpus is not None:
            raise InputError("give a job its hosts or its GPUs (placed by the policy), not both",
                             "drop one of hosts, gpus", field="jobs[].gpus", value=self.gpus)
        return self


# a link that keeps running: losing frames, slower, its host NIC pausing it for good, or well again
class TimeSpec(Strict):
    """The emulation's clock against the fabric's (traffic/timebase.py)."""

    dilation: float | Literal["auto"] = Field(
        "auto", description="wall seconds per virtual second: links run at rate / (qos.scale x dilation) and every "
                            "time written here (compute, failures, timeouts) is the fabric's; the emulator's own "
                            "latencies shrink by it. auto (the default): the least that makes this machine's per-op "
                            "latency 5% of every op's ideal time, within max_wall_s (testbed/qos/scale.py); 1 when "
                            "the workload has no op to weigh; 1 for bulk ops of a small fabric")
    max_wall_s: float | None = Field(None, gt=0, le=7 * 86_400,
                                     description="with dilation auto: the most wall time the traffic may take "
                                                 "(default 600 s); ops the cap leaves latency-bound are named")
    skip_compute: bool = Field(True, description="jump the clock over stretches where every rank of every training "
                                                 "job computes and nothing is in flight, instead of sleeping "
                                                 "through them (traffic/skip.py); virtual times stay exact")

    @model_validator(mode="after")
    def _check(self) -> TimeSpec:
        if self.dilation != "auto" and not 1 <= self.dilation <= MAX_DILATION:
            raise InputError(f"dilation must be 1 to {MAX_DILATION:,.0f} (or auto)",
                             "e.g. time: {dilation: 100}, or time: {dilation: auto}", field="time.dilation",
                             value=self.dilation)
        if self.max_wall_s is not None and self.dilation != "auto":
            raise InputError("max_wall_s caps what dilation auto chooses", "set time.dilation: auto, or leave "
                             "max_wall_s out", field="time.max_wall_s", value=self.max_wall_s)
        return self


class Experiment(Strict):
    """An experiment: what to build, how to route and shape it, what to replay and what to break when. Every key
    is in the experiment-file reference; `load` reads one from YAML, `run` runs it."""

    name: Name
    description: str = Field("", max_length=4000, description="what the experiment asks; shown in the summary")
    topology: TopologySpec = Field(default_factory=TopologySpec, description="the fabric to build")
    routing: Literal["ecmp", "precise", "precise-host", "shortest"] = Field(
        "ecmp", description="ecmp: switches hash; precise: the controller places each connection with exact-match "
                            "rules (Hedera-style); precise-host: hosts pick source ports that the switches' asic "
                            "hashes take onto disjoint paths (HPN), no per-flow switch rules; shortest: one path")
    hashing: HashModel = Field(
        "ovs", description="how switches pick among ECMP next hops (controllers/hashing.py)")
    qos: QosSpec = Field(default_factory=lambda: QosSpec(scale="auto"),
                         description="shaping, priorities, PFC, ECN and congestion control")
    time: TimeSpec = Field(default_factory=TimeSpec, description="time dilation and compute skipping")
    transport: Literal["auto", "tcp", "roce", "rdma"] = Field(
        "auto", description="tcp; roce (the agents' queue pairs: RoCEv2 frames, go-back-N, on any kernel); rdma "
                            "(soft-RoCE, where the kernel has it); auto: rdma where it works and no failure takes a "
                            "host link down, else tcp")
    channels: int | None = Field(None, ge=1, le=8, description="connections per peer (default: ports per NIC)")
    nic_port_choice: Literal["hash", "round-robin"] = Field(
        "hash", description="under ecmp/shortest, which NIC port a connection leaves on: the host's multipath hash, "
                            "or a peer's connections alternate over the ports (RoCE LAG queue affinity)")
    connection_choice: Literal["channel", "least-outstanding"] = Field(
        "channel", description="channel: a channel's chunks stay on its connection; least-outstanding: each chunk "
                               "goes on the peer's connection with the fewest unacknowledged bytes (HPN)")
    workload: WorkloadSpec | None = Field(None, description="what one job replays (or give jobs)")
    jobs: list[JobSpec] = Field(default_factory=list, max_length=16,
                                description="several jobs at once, instead of workload")
    failures: list[FailureSpec] = Field(default_factory=list, max_length=1000,
                                        description="scheduled failures, fired in the data plane")
    random_failures: RandomFailures | None = Field(None, description="a Poisson process of link failures per link")
    campaign: CampaignSpec | None = Field(None, description="outages sampled from production failure rates")
    resilience: ResilienceSpec = Field(default_factory=ResilienceSpec,
                                       description="what a failure costs a job: watchdog, restart, checkpoints")
    repetitions: int = Field(1, ge=1, le=100, description="runs of every variant, with seeds seed, seed+1, ...")
    quick_iters: int | None = Field(None, ge=1, le=10_000, description="with failures scheduled, the iterations "
                                    "--quick keeps of each collective at full size (default: all; the failures are "
                                    "timed against them, so keep enough for the last one to fire)")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seeds hashing, random failures and campaigns")
    horizon_s: float = Field(30.0, gt=0, le=DAY_S, description="how far ahead random failures are drawn")
    step_timeout_s: float = Field(60.0, gt=0, le=3600, description="a step stalled this long means the job halted")
    placement: Literal["compact", "scattered"] = Field(
        "compact", description="where jobs given as gpus: go: fewest segments, or dealt across segments "
                               "(controllers/placement.py)")
    scheduler: Literal["none", "crux"] = Field(
        "none", description="crux: jobs get lossless priorities by GPU intensity from the controller (POST /jobs)")
    variants: list[dict[str, Any]] = Field(default_factory=list, max_length=32,
                                           description="runs that override fields, e.g. [{routing: ecmp}]")
    paper: dict[str, Any] = Field(default_factory=dict, description="the paper's figure, shown beside ours")

    @model_validator(mode="after")
    def _workload_or_jobs(self) -> Experiment:
        if self.qos.dilated_by != 1:
            raise InputError("qos.dilated_by is set by the runner from time.dilation", "leave it out and give "
                             "time: {dilation: D}", field="qos.dilated_by", value=self.qos.dilated_by)
        if (self.workload is None) == (not self.jobs):
            raise InputError("give either workload or jobs", "e.g. workload: {collective: {op: allreduce}}",
                             field="workload", value=None)
        if self.nic_port_choice != "hash" and self.routing in ("precise", "precise-host"):
            raise InputError(f"with routing {self.routing} the {'controller' if self.routing == 'precise' else 'host'}"
                             " chooses each connection's NIC port", "leave nic_port_choice out, or use routing: ecmp",
                             field="nic_port_choice", value=self.nic_port_choice)
        if self.routing == "precise-host" and self.hashing == "ovs":
            raise InputError("precise-host routing needs switches whose hash a host can compute",
                             "set hashing: asic (or asic-seeded)", field="hashing", value=self.hashing)
        if self.connection_choice == "least-outstanding" and self.transport == "rdma":
            raise InputError("least-outstanding choice is the TCP agents' (perftest runs one flow per pair)",
                             "use transport: tcp, or connection_choice: channel", field="transport",
                             value=self.transport)
        if self.routing == "precise-host" and self.transport == "rdma":
            raise InputError("precise-host routing picks TCP source ports; the rdma transport pins ports itself",
                             "use transport: tcp, or routing: precise", field="transport", value=self.transport)
        timer = self.resilience.retry_timer_s
        if timer is not None and timer < TCP_RTO_FLOOR_S and self.transport != "roce":
            raise InputError(f"the hosts' TCP cannot cap its retransmission timeout below {TCP_RTO_FLOOR_S:g} s; "
                             "only the roce transport's retry timer goes lower",
                             f"set it to {TCP_RTO_FLOOR_S:g} or more, or use transport: roce",
                             field="resilience.retry_timer_s", value=timer)
        if self.transport == "roce" and self.qos.cc in ("ecn", "dctcp"):
            raise InputError(f"cc {self.qos.cc} is TCP's; a RoCE NIC runs DCQCN", "qos.cc: dcqcn or none with "
                             "transport roce, or transport tcp", field="qos.cc", value=self.qos.cc)
        if self.transport == "roce" and (self.routing == "precise-host" or self.nic_port_choice == "round-robin"):
            # the hosts' source-port rules that pin a NIC port are TCP's (testbed/net/static_routes.py): UDP
            # ones would take soft-RoCE's queue pairs, whose source ports share the range
            raise InputError("the hosts pin TCP connections to NIC ports, not yet the roce transport's queue pairs",
                             "use transport: tcp, or routing: ecmp/precise with nic_port_choice: hash",
                             field="transport", value=self.transport)
        lossless = {c.priority for c in self.qos.lossless}
        for i, j in enumerate(self.jobs):
            if isinstance(j.priority, int) and j.priority not in lossless:
                raise InputError("not one of the lossless priorities", f"use one of {sorted(lossless)}, or add it "
                                 "to qos.lossless", field=f"jobs[{i}].priority", value=j.priority)
            if self.scheduler == "crux" and j.priority != "lossless":
                raise InputError("with scheduler crux the scheduler gives each job its lossless priority",
                                 "leave priority out", field=f"jobs[{i}].priority", value=j.priority)
        storm = next((i for i, f in enumerate(self.failures) if f.action == "pfc_storm"), None)
        if storm is not None and not self.qos.pfc.enabled:
            raise InputError("a pause storm needs PFC", "leave qos.pfc.enabled out (or true)",
                             field=f"failures[{storm}].action", value="pfc_storm")
        if self.scheduler == "crux" and len(self.jobs) < 2:
            raise InputError("the crux scheduler orders several jobs", "give two or more jobs:",
                             field="scheduler", value=self.scheduler)
        self._campaign()
        names = [j.name for j in self.jobs]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise InputError("two jobs have the same name", "give each job its own name", field="jobs[].name",
                             value=dup)
        return self

    def _campaign(self) -> None:
        c = self.campaign
        if c is None:
            return
        if self.failures or self.random_failures is not None:
            raise InputError("a campaign plays its own outages, one at a time, so that each one's cost is its own",
                             "leave failures and random_failures out, or the campaign", field="campaign",
                             value="with failures" if self.failures else "with random_failures")
        if c.hold_s <= self.resilience.watchdog_s:
            raise InputError("an outage held no longer than the watchdog cannot fail a job",
                             f"set campaign.hold_s above resilience.watchdog_s ({self.resilience.watchdog_s:g})",
                             field="campaign.hold_s", value=c.hold_s)
        if all(k in c.rates and c.rates[k].monthly == 0 for k in c.kinds):
            raise InputError("no kind of component can fail", "give one of campaign.kinds a monthly rate above 0",
                             field="campaign.rates", value="all 0")

    @property
    def timebase(self) -> Timebase:
        if self.time.dilation == "auto":
            raise ValueError("resolve dilation auto first (testbed.experiment.jobs.resolve_time)")
        return Timebase(self.time.dilation)

    @property
    def switch_mode(self) -> str:
        """What the switches do: precise-host is plain ECMP there (the hosts choose the paths)."""
        return "ecmp" if self.routing == "precise-host" else self.routing

    def repetition(self, rep: int) -> Experiment:
        """Repetition `rep` (0 is the experiment itself): its own seed, so it draws its own random failures and
        campaign."""
        return self.model_copy(update={"seed": self.seed + rep})

    def expand(self) -> list[tuple[str, Experiment]]:
        """(label, experiment) per variant; the experiment itself when there are none."""
        if not self.variants:
            return [(self.routing, self)]
        out = []
        # what the file says, not every default: a default dumped here would read as the user's own choice
        # (a variant with cc: dctcp would meet an explicit ecn.enabled: false)
        base = self.model_dump(by_alias=True, exclude={"variants"}, exclude_unset=True)
        seen: set[str] = set()
        for i, v in enumerate(self.variants):
            label = v.get("label", f"variant{i}")
            if not isinstance(label, str) or not re.fullmatch(NAME_PATTERN, label):
                raise InputError("a variant label names its folders", NAME_FIX, field=f"variants[{i}].label",
                                 value=label)
            if label in seen:
                raise InputError("two variants have the same label (their runs would merge)",
                                 "give each variant its own label", field=f"variants[{i}].label", value=label)
            seen.add(label)
            if "variants" in v:  # it would be dropped: variants are one level, each a change to the base
                raise InputError("a variant cannot have variants of its own", "list every combination as a variant "
                                 "of the experiment", field=f"variants[{i}].variants", value=None)
            merged = _merge(base, {k: val for k, val in v.items() if k != "label"})
            try:
                out.append((label, Experiment.model_validate(merged)))
            except ValidationError as exc:
                e = _first_error(exc)
                raise InputError(e.what, e.fix, field=f"variants[{i}].{e.field}", value=e.value) from None
        return out


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


_UNION_TAGS = {"float", "int", "str", "bool", "none", "dict[str,any]"}


def _first_error(exc: ValidationError) -> InputError:
    err = exc.errors()[0]
    # pydantic names the member of a union it tried (qos.scale.float); the user wrote qos.scale
    path = ".".join(str(p) for p in err["loc"] if str(p) not in _UNION_TAGS and not str(p).startswith(
        ("literal[", "function-"))) or "?"
    if err["type"] == "extra_forbidden":
        return InputError("unknown key", "remove it or check the spelling (see testbed/experiment/spec.py)", field=path,
                          value=err.get("input"))
    if err["type"] == "value_error" and isinstance(err.get("ctx", {}).get("error"), FieldError):
        e = err["ctx"]["error"].error
        return InputError(e.what, e.fix, field=path, value=e.value)
    if err["type"] == "string_pattern_mismatch":
        return InputError("not a name", NAME_FIX, field=path, value=err.get("input"))
    allowed = err.get("ctx", {}).get("expected")
    return InputError(err["msg"].lower(), f"use {allowed}" if allowed else "see testbed/experiment/spec.py", field=path,
                      value=err.get("input"))


def from_dict(data: dict) -> Experiment:
    """An Experiment from plain data (a parsed file, or built by a command); errors name the field."""
    try:
        return Experiment.model_validate(data)
    except ValidationError as exc:
        raise _first_error(exc) from None


@hides_values
def load(path: str | Path) -> Experiment:
    """An experiment file read and checked whole: the model, and its workload files found beside it; an
    InputError naming the field, the value and the fix otherwise."""
    p = Path(path)
    if not p.is_file():
        raise InputError("no such experiment file",
                         "give the path of a YAML file, e.g. experiments/precise_vs_ecmp.yaml",
                         field="file", value=str(path))
    data = load_yaml(read_text(p, "file", MAX_SPEC_BYTES), "file")
    if not isinstance(data, dict):
        raise InputError("an experiment file is a mapping", "start with 'name: ...'", field="file", value=str(path))
    from traffic.chakra import first_file  # networkx with it: only when a file is loaded

    exp = from_dict(data)
    exp.topology = exp.topology.read_file(p.parent)
    for where, wl in workloads(exp):
        for attr in ("yaml_file", "simai", "chakra"):
            if getattr(wl, attr) is not None:
                f = resolve(wl, p.parent, attr, where)
                if not (first_file(f) if attr == "chakra" else f).is_file():
                    raise InputError("workload file not found", "give a path relative to the experiment file"
                                     + (" (the prefix of PREFIX.0.et, PREFIX.1.et, ...)" if attr == "chakra" else ""),
                                     field=_workload_field(attr, where), value=getattr(wl, attr))
    return exp


def workloads(exp: Experiment) -> list[tuple[str, WorkloadSpec]]:
    """(field path, workload) of the experiment's workload and of each job's."""
    out = [("workload", exp.workload)] if exp.workload is not None else []
    return out + [(f"jobs[{i}].workload", j.workload) for i, j in enumerate(exp.jobs) if j.workload is not None]


def _workload_field(attr: str, where: str = "workload") -> str:
    return f"{where}.{'file' if attr == 'yaml_file' else attr}"


def resolve(wl: WorkloadSpec, base: Path, attr: str, where: str = "workload") -> Path:
    """A workload file named in the spec: inside the spec's folder (a spec may come from someone else, and the
    testbed reads files as root)."""
    return confined(getattr(wl, attr), base, _workload_field(attr, where))


def check_degraded_rate(link, gbps: float, field: str) -> None:
    """A degraded link runs slower than its rate (the experiment file's check and the CLI's `degrade`)."""
    if not 0 < gbps < link.rate_gbps:
        raise InputError(f"the link runs at {link.rate_gbps:g} Gbit/s: a degraded one is slower",
                         f"e.g. {link.rate_gbps / 4:g}", field=field, value=gbps)


def check_against(exp: Experiment, topo) -> None:
    """Names in the failure schedule exist in the topology; a link degraded to less than its rate."""
    for i, f in enumerate(exp.failures):
        if f.link is not None:
            try:
                link = topo.find_link(f.link)
            except InputError as e:
                raise InputError(e.what, e.fix, field=f"failures[{i}].link", value=f.link) from None
            if f.action == "degrade":
                check_degraded_rate(link, f.rate_gbps, f"failures[{i}].rate_gbps")
            if f.action == "pfc_storm" and link.kind != "host-tor":
                raise InputError("a pause storm comes from a host NIC", "name a host link, e.g. h3:nic0:p0",
                                 field=f"failures[{i}].link", value=f.link)
        elif f.node not in topo.nodes or topo.nodes[f.node].role == "host":
            raise InputError("no such switch", "use a switch name from 'hpnlab topo export'",
                             field=f"failures[{i}].node",
                             value=f.node)
