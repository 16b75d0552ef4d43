"""Experiment files: one YAML says what to build, how to route and shape, what to replay, what to break when.

    name: precise-vs-ecmp
    topology: {name: hpn, preset: mini, params: {segments_per_pod: 2}}
    routing: precise                 # ecmp | precise | precise-host | shortest
    hashing: asic                    # ovs | asic | asic-seeded (how switches hash ECMP)
    qos: {scale: 20000, pfc: {enabled: true}}
    transport: auto                  # auto | tcp | rdma
    channels: 2                      # connections per peer
    connection_choice: channel       # channel | least-outstanding
    nic_port_choice: hash            # hash | round-robin (under ecmp)
    workload:                        # one of: a collective, a YAML workload, a SimAI file
      collective: {op: allreduce, size: 160GB, algorithm: ring, ranks: rail0, iters: 3}
    failures:
      - {at: 2.0, link: "tor-p0-s0-r0-a:5-agg-p0-pl0-0:1", action: down}
      - {at: 4.0, node: tor-p0-s1-r0-b, action: down}
      - {at: 1.0, link: "h3:nic0:p0", action: flap, period: 0.5, count: 3}
    random_failures: {link_down_per_min: 0.5, repair_after: 1.0}
    repetitions: 2
    seed: 1

Instead of `workload`, `jobs:` runs several collectives side by side, each with
its own connections and traffic class (`priority: lossless | high | default`):
    jobs:
      - {name: A, collective: {op: allreduce, size: 40GB, ranks: "h0:0,h1:0"}}
      - {name: B, priority: default, collective: {op: allreduce, size: 40GB, ranks: "h2:0,h3:0"}}

Unknown keys are errors; every error names the field path, the value and what
is allowed. Cross-checks against the topology (link and node names) happen in
`check_against`, still before anything touches the system.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from controllers.hashing import HashModel
from testbed.qos.spec import QosSpec
from topos.errors import InputError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TopologySpec(_Strict):
    name: str = "hpn"
    preset: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)

    def build(self):
        from topos import build

        return build(self.name, preset=self.preset, **self.params)


class CollectiveSpec(_Strict):
    op: str = "allreduce"
    size: str | int = "160GB"
    algorithm: str | None = None
    ranks: str = "rail0"
    iters: int = Field(3, ge=1)


class WorkloadSpec(_Strict):
    collective: CollectiveSpec | None = None
    yaml_file: str | None = Field(None, alias="file")
    simai: str | None = None

    @model_validator(mode="after")
    def _one(self) -> WorkloadSpec:
        given = [k for k in ("collective", "yaml_file", "simai") if getattr(self, k) is not None]
        if len(given) != 1:
            raise InputError("give exactly one of collective, file, simai", "e.g. workload: {collective: {op: "
                             "allreduce, size: 160GB}}", field="workload", value=given or None)
        return self


class JobSpec(_Strict):
    """One of several jobs sharing the fabric at once (each its own connections and traffic class)."""

    name: str
    collective: CollectiveSpec
    priority: Literal["lossless", "high", "default"] = "lossless"


class FailureSpec(_Strict):
    at: float = Field(ge=0)
    action: Literal["down", "up", "flap"] = "down"
    link: str | None = None
    node: str | None = None
    period: float | None = Field(None, gt=0, description="flap: seconds between down and up")
    count: int = Field(1, ge=1, description="flap: how many down/up cycles")

    @model_validator(mode="after")
    def _target(self) -> FailureSpec:
        if (self.link is None) == (self.node is None):
            raise InputError("a failure names exactly one link or one node", "e.g. link: h3:nic0:p0",
                             field="failures[].link", value=self.link or self.node)
        if self.action == "flap" and self.period is None:
            raise InputError("a flap needs a period", "e.g. period: 0.5", field="failures[].period", value=None)
        return self


class RandomFailures(_Strict):
    link_down_per_min: float = Field(gt=0, description="per-link failure rate (HPN's production statistics)")
    repair_after: float = Field(1.0, gt=0)
    kinds: list[Literal["host-tor", "tor-agg", "agg-core"]] = Field(default_factory=lambda: ["tor-agg"])


class Experiment(_Strict):
    name: str
    description: str = ""
    topology: TopologySpec = Field(default_factory=TopologySpec)
    routing: Literal["ecmp", "precise", "precise-host", "shortest"] = Field(
        "ecmp", description="ecmp: switches hash; precise: the controller places each connection with exact-match "
                            "rules (Hedera-style); precise-host: hosts pick source ports that the switches' asic "
                            "hashes take onto disjoint paths (HPN), no per-flow switch rules; shortest: one path")
    hashing: HashModel = Field(
        "ovs", description="how switches pick among ECMP next hops (controllers/hashing.py)")
    qos: QosSpec = Field(default_factory=lambda: QosSpec(scale="auto"))
    transport: Literal["auto", "tcp", "rdma"] = "auto"
    channels: int | None = Field(None, ge=1, le=8, description="connections per peer (default: ports per NIC)")
    nic_port_choice: Literal["hash", "round-robin"] = Field(
        "hash", description="under ecmp/shortest, which NIC port a connection leaves on: the host's multipath hash, "
                            "or a peer's connections alternate over the ports (RoCE LAG queue affinity)")
    connection_choice: Literal["channel", "least-outstanding"] = Field(
        "channel", description="channel: a channel's chunks stay on its connection; least-outstanding: each chunk "
                               "goes on the peer's connection with the fewest unacknowledged bytes (HPN)")
    workload: WorkloadSpec | None = None
    jobs: list[JobSpec] = Field(default_factory=list, description="several jobs at once, instead of workload")
    failures: list[FailureSpec] = Field(default_factory=list)
    random_failures: RandomFailures | None = None
    repetitions: int = Field(1, ge=1, le=100)
    seed: int = 0
    horizon_s: float = Field(30.0, gt=0, description="how far ahead random failures are drawn")
    step_timeout_s: float = Field(60.0, gt=0, description="a step stalled this long means the job halted")
    variants: list[dict[str, Any]] = Field(default_factory=list,
                                           description="runs that override fields, e.g. [{routing: ecmp}]")
    paper: dict[str, Any] = Field(default_factory=dict, description="the paper's figure, shown beside ours")

    @model_validator(mode="after")
    def _workload_or_jobs(self) -> Experiment:
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
        return self

    @property
    def switch_mode(self) -> str:
        """What the switches do: precise-host is plain ECMP there (the hosts choose the paths)."""
        return "ecmp" if self.routing == "precise-host" else self.routing

    def expand(self) -> list[tuple[str, Experiment]]:
        """(label, experiment) per variant; the experiment itself when there are none."""
        if not self.variants:
            return [(self.routing, self)]
        out = []
        base = self.model_dump(by_alias=True, exclude={"variants"})
        for i, v in enumerate(self.variants):
            label = str(v.get("label", f"variant{i}"))
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


def _first_error(exc: ValidationError) -> InputError:
    err = exc.errors()[0]
    path = ".".join(str(p) for p in err["loc"]) or "?"
    if err["type"] == "extra_forbidden":
        return InputError("unknown key", "remove it or check the spelling (see testbed/experiment/spec.py)", field=path,
                          value=err.get("input"))
    allowed = err.get("ctx", {}).get("expected")
    return InputError(err["msg"].lower(), f"use {allowed}" if allowed else "see testbed/experiment/spec.py", field=path,
                      value=err.get("input"))


def from_dict(data: dict) -> Experiment:
    """An Experiment from plain data (a parsed file, or built by a command); errors name the field."""
    try:
        return Experiment.model_validate(data)
    except ValidationError as exc:
        raise _first_error(exc) from None


def load(path: str | Path) -> Experiment:
    p = Path(path)
    if not p.is_file():
        raise InputError("no such experiment file",
                         "give the path of a YAML file, e.g. experiments/precise_vs_ecmp.yaml",
                         field="file", value=str(path))
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise InputError(f"not valid YAML ({str(exc).splitlines()[0]})", "fix the syntax", field="file",
                         value=str(path)) from None
    if not isinstance(data, dict):
        raise InputError("an experiment file is a mapping", "start with 'name: ...'", field="file", value=str(path))
    exp = from_dict(data)
    base = p.parent
    wl = exp.workload
    for attr in ("yaml_file", "simai") if wl is not None else ():
        f = getattr(wl, attr)
        if f is not None and not (base / f).is_file() and not Path(f).is_file():
            raise InputError("workload file not found", "give a path relative to the experiment file",
                             field=f"workload.{'file' if attr == 'yaml_file' else attr}", value=f)
    return exp


def resolve(exp: Experiment, base: Path, attr: str) -> Path:
    f = getattr(exp.workload, attr)
    return base / f if (base / f).is_file() else Path(f)


def check_against(exp: Experiment, topo) -> None:
    """Names in the failure schedule exist in the topology."""
    for i, f in enumerate(exp.failures):
        if f.link is not None:
            try:
                topo.find_link(f.link)
            except InputError as e:
                raise InputError(e.what, e.fix, field=f"failures[{i}].link", value=f.link) from None
        elif f.node not in topo.nodes or topo.nodes[f.node].role == "host":
            raise InputError("no such switch", "use a switch name from 'hpnlab topo export'",
                             field=f"failures[{i}].node",
                             value=f.node)
