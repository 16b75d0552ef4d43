"""The failures an experiment file schedules: one at a time (`failures:`), drawn at random
(`random_failures:`), sampled from production failure rates (`campaign:`), and what a failure costs a job
(`resilience:`). Part of the experiment file's schema (spec.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from topos.errors import InputError

from .spec_base import DAY_S, Strict

MAX_EVENTS = 100_000  # failure events after expansion (flaps, random failures); each is a real interface change
TCP_RTO_FLOOR_S = 1.0  # tcp_rto_max_ms takes 1,000 ms at the least


GRAY = ("lossy", "degrade", "pfc_storm", "restore")


class FailureSpec(Strict):
    at: float = Field(ge=0, le=DAY_S, description="when, in seconds of the fabric's time after the traffic starts")
    action: Literal["down", "up", "flap", "lossy", "degrade", "pfc_storm", "restore"] = Field(
        "down", description="down, up, flap (down and up every period), lossy (loses frames), degrade (a lower "
                            "rate), pfc_storm (the host NIC on the link pauses its ToR for good: a stuck NIC; "
                            "needs PFC), restore (the link well again)")
    link: str | None = Field(None, max_length=128, description="the link, by one end's port: h3:nic0:p0 (a host "
                             "port) or t0-a1 (two switches)")
    node: str | None = Field(None, max_length=64, description="a switch that fails whole: every link of it goes "
                             "down (down/up only)")
    period: float | None = Field(None, ge=0.001, le=3600, description="flap: seconds between down and up")
    count: int = Field(1, ge=1, le=10_000, description="flap: how many down/up cycles")
    loss: float | None = Field(None, gt=0, le=1, description="lossy: the probability each frame is lost, each way")
    rate_gbps: float | None = Field(None, gt=0, le=100_000, description="degrade: the rate the link falls to")

    @model_validator(mode="after")
    def _target(self) -> FailureSpec:
        if (self.link is None) == (self.node is None):
            raise InputError("a failure names exactly one link or one node", "e.g. link: h3:nic0:p0",
                             field="failures[].link", value=self.link or self.node)
        if self.action == "flap" and self.period is None:
            raise InputError("a flap needs a period", "e.g. period: 0.5", field="failures[].period", value=None)
        if self.action in GRAY and self.link is None:
            raise InputError(f"{self.action} is a link's", "name the link: link: h3:nic0:p0", field="failures[].node",
                             value=self.node)
        for field, action, fix in (("loss", "lossy", "e.g. loss: 0.0001"),
                                   ("rate_gbps", "degrade", "e.g. rate_gbps: 100")):
            if (getattr(self, field) is None) == (self.action == action):
                raise InputError(f"{field} goes with action {action}, and action {action} needs it",
                                 fix if self.action == action else f"leave {field} out",
                                 field=f"failures[].{field}", value=getattr(self, field))
        return self


class RandomFailures(Strict):
    link_down_per_min: float = Field(gt=0, le=60, description="per-link failure rate (HPN's production statistics)")
    repair_after: float = Field(1.0, gt=0, le=3600, description="seconds until a failed link comes back")
    kinds: list[Literal["host-tor", "tor-agg", "agg-core"]] = Field(default_factory=lambda: ["tor-agg"],
                                                                    description="which links may fail")


class RateSpec(Strict):
    """One component kind's failure rate and repair time (testbed/campaign/model.py has the defaults)."""

    monthly: float = Field(ge=0, lt=1, description="probability that one component of the kind fails in a month")
    repair_median_s: float = Field(3600.0, gt=0, le=30 * DAY_S, description="median of the lognormal repair time")
    repair_shape: float = Field(1.0, ge=0, le=5, description="sigma of the lognormal repair time")


class CampaignSpec(Strict):
    """Outages sampled from production failure rates, played one after another on the running jobs: each is
    held down `hold_s` of the fabric's time (long enough for the watchdog to decide), then repaired, then
    `settle_s` before the next (testbed/campaign)."""

    outages: int = Field(20, ge=1, le=1000, description="how many outages to sample and play")
    kinds: list[Literal["nic-tor", "tor", "agg", "tor-agg"]] = Field(
        default_factory=lambda: ["nic-tor", "tor", "agg", "tor-agg"], min_length=1,
        description="component kinds that fail")
    rates: dict[Literal["nic-tor", "tor", "agg", "tor-agg"], RateSpec] = Field(
        default_factory=dict, description="a kind's rate and repair time instead of the published default")
    start_s: float = Field(2.0, ge=0, le=DAY_S, description="the first outage, after the jobs warmed up")
    hold_s: float = Field(3.0, gt=0, le=3600, description="how long each outage is held in the emulation")
    settle_s: float = Field(2.0, ge=0, le=3600, description="after a repair, before the next outage")


class ResilienceSpec(Strict):
    """What a failure costs a job (NCCL's watchdog, and the training framework's restart)."""

    watchdog_s: float = Field(2.0, gt=0, le=3600, description="a collective with no progress this long fails "
                                                                "the job (NCCL's timeout), in the fabric's time")
    restart_s: float = Field(600.0, ge=0, le=DAY_S, description="what a restart costs (reschedule, reload)")
    checkpoint_s: float = Field(3600.0, gt=0, le=30 * DAY_S, description="how often the job checkpoints: a restart "
                                                                          "loses the work since the last one")
    retry_timer_s: float | None = Field(None, ge=0.001, le=120, description="the hosts' TCP never waits longer "
                                        "than this to retransmit (a RoCE NIC retries on a fixed timer: "
                                        "NCCL_IB_TIMEOUT 18 is 1.07 s), so a repaired link is used again within "
                                        "it; with transport roce, the queue pairs' retry timer (from 1 ms: "
                                        "NCCL_IB_TIMEOUT 8; TCP's from 1 s, the kernel's floor); default: TCP's "
                                        "own doubling backoff up to 120 s, NCCL's 1.07 s for roce")
