"""Run a collective's schedule on a running network and measure it like nccl-tests.

With the TCP transport each rank's agent runs its own part of the schedule
(traffic/plan.py): a rank sends step k's chunk once it has received what step
k needs, chunks pipelined, no barrier between steps; this process only hands
the plan out, collects completions and times the op. Transports without plans
(rdma: one perftest pair per flow) run step by step: a step's flows start
together and the step ends when the slowest has been received. Each flow is carried by `channels`
connections (like NCCL channels; by default one per port of the NIC, so both
planes of a dual-ToR NIC are used). Connections are per (source rank,
destination rank, channel), opened once per replayer and reused by every step
and op, as NCCL does. Where a connection goes depends on `routing`:
- `ecmp` / `shortest`: the fabric's hashes decide (source ports in sequence);
  which port of its NIC a connection leaves on is the host's multipath hash
  (`nic_port_choice` hash), or a peer's connections alternate over the NIC's
  ports (round-robin, as RoCE LAG's queue affinity assigns queue pairs);
- `precise` (controller-placed, the Hedera-style baseline): each new connection
  is declared to the controller with the source port it will use, before its
  first byte; the controller installs exact-match rules for it on every switch
  of its path, and the host pins it to the NIC port the controller chose;
- `precise-host` (HPN): this side places the job's connections on disjoint
  paths and picks for each the source port whose hashes in the switches take
  that path (controllers/hostpath.py); no per-flow state in any switch.
"""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from topos.addressing import PINNED_SPORTS, nic_address

from .collectives import Schedule
from .metrics import IterationResult, OpResult, busbw_factor
from .plan import pieces, split, step_seconds
from .program import op_spans, rank_programs
from .skip import Skipper
from .timebase import Clock, Timebase
from .transports.tcp import FlowRecord, TcpTransport

GO_LEAD_S = 0.05  # wall seconds between `go` and the iteration's start: every agent has read it by then


@dataclass
class Replayer:
    net: object  # testbed.net.network.Network
    transport: TcpTransport  # or RdmaTransport: same interface
    channels: int = 2
    routing: str = "ecmp"  # ecmp | shortest | precise | precise-host (see above)
    # channel: a channel's chunks stay on its connection; least-outstanding: each chunk goes on whichever
    # of the peer's connections has the fewest bytes outstanding when it is ready (HPN's host-side choice)
    connection_choice: str = "channel"
    nic_port_choice: str = "hash"  # hash | round-robin (ecmp and shortest only, see above)
    step_timeout: float = 300.0  # virtual seconds, as every time given to it and every time it reports
    timebase: Timebase = field(default_factory=Timebase)  # the run's time dilation (traffic/timebase.py)
    clock: Clock | None = None  # the run's clock (its epoch runs ahead of the machine's by what was skipped)
    skipper: Skipper | None = None  # compute skipping (traffic/skip.py), for transports that run programs

    sport_offset: int = 0  # jobs side by side take disjoint source ports
    pipeline: int = 1  # chunks per channel and step, when the transport runs plans

    def __post_init__(self):
        self._sports: dict[tuple, int] = {}  # (src rank, dst rank, channel) -> source port
        self._declared: list[dict] = []
        self.records: list[FlowRecord] = []
        self.placed: dict[tuple, object] = {}  # precise-host: connection -> the path its source port takes
        self.candidates = 0  # precise-host: paths searched so far (HPN Table 1)
        self._load: dict | None = None  # precise-host: flows per directed link, of the connections placed so far
        self._pinned: dict[int, int] = {}  # round-robin: source ports taken per pinned range
        self.clock = self.clock or Clock(self.timebase)
        self._joined: set[str] = set()  # ranks this replayer put under the skipper
        if self.skipper is not None:
            self.use_skipper(self.skipper)

    def use_skipper(self, skipper: Skipper) -> None:
        """Compute skipping: this replayer's ranks report their computes to `skipper` and hear its jumps."""
        self.skipper = skipper
        skipper.listen(self.transport.skip)
        self.transport.on_computing, self.transport.on_finished = skipper.computing, skipper.finished

    def _connections(self, schedule: Schedule) -> None:
        """Give every new (src, dst, channel) of the schedule a source port; declare and pin them if precise."""
        new = [(f.src, f.dst, c) for step in schedule.steps for f in step for c in range(self.channels)]
        new = list(dict.fromkeys(k for k in new if k not in self._sports))
        if not new:
            return
        topo, tr = self.net.topo, self.transport
        if self.routing == "precise-host":
            self._place_by_source_port(new)
            return
        for key in new:
            if self.nic_port_choice == "round-robin":
                src, _dst, c = key
                ports = sum(1 for l in topo.links_of(src[0]) if l.kind == "host-tor" and l.nic == src[1])
                r = PINNED_SPORTS[c % ports]
                taken = self._pinned.get(r.start, 0)
                self._pinned[r.start] = taken + 1
                self._sports[key] = r[(self.sport_offset + taken) % len(r)]
            else:
                self._sports[key] = tr.sport_base + (self.sport_offset + len(self._sports)) % tr.sport_span
        if self.routing == "precise":
            views = self.net.controller.declare([
                {"src": src[0], "dst": nic_address(topo.nodes[dst[0]], dst[1]).ip, "proto": tr.proto,
                 "sport": self._sports[src, dst, c], "dport": tr.dport} for src, dst, c in new])
            for v in views:
                self.net.steer(v)
                self.transport.pin(v)
            self._declared += views

    def connect(self, schedules: list[Schedule]) -> None:
        """Open (and under precise routing, declare) the connections of these schedules now: jobs that connect
        in a chosen order get their paths placed in that order (Crux's path selection)."""
        for s in schedules:
            self._connections(s)

    def _place_by_source_port(self, new: list[tuple]) -> None:
        topo, tr = self.net.topo, self.transport
        conns = [(src[0], nic_address(topo.nodes[dst[0]], dst[1]).ip, tr.proto, tr.port) for src, dst, _c in new]
        pl = self.net.place_by_source_port(conns, taken=set(self._sports.values()), start=self.sport_offset,
                                           load=self._load)
        self._load = pl.assignment.load
        self.candidates += pl.candidates
        for key, sport, path in zip(new, pl.sports, pl.paths, strict=True):
            self._sports[key] = sport
            self.placed[key] = path

    def leave(self) -> None:
        """This replayer's job is done: its ranks no longer hold the run's clock (traffic/skip.py)."""
        if self.skipper is not None and self._joined:
            self.skipper.leave(self._joined)
            self._joined = set()

    def close(self) -> None:
        """Unpin and withdraw what this replayer declared."""
        if self._declared:
            for v in self._declared:
                self.net.unsteer(v)
            self.net.controller.withdraw([v["flow"] for v in self._declared])
            self._declared = []

    def ideal_busbw(self, schedule: Schedule) -> float:
        """The busbw bound: what a rank can send at (its NIC's ports in use, one per channel, at their
        scaled rate, in the fabric's time). For the hierarchical all-reduce, whose n = hosts x rails ranks each
        carry only a rail's share, NCCL's busbw bound is that rate x (n-1)/(hosts-1)."""
        return self.timebase.rate(self._wall_ideal_busbw(schedule))

    def _wall_ideal_busbw(self, schedule: Schedule) -> float:
        rates = []
        for host, nic in schedule.ranks:
            links = [l for l in self.net.topo.links_of(host) if l.kind == "host-tor" and l.nic == nic]
            per_port = min(self.net.port_rate_bps(l) for l in links)
            rates.append(per_port * min(self.channels, len(links)))
        if schedule.op == "incast":  # the receiver's NIC is the bottleneck
            return rates[0]
        if schedule.gpus:  # among GPUs: the busiest NIC's bytes at its rate bound the time
            t = schedule.busiest_s(dict(zip(schedule.ranks, rates, strict=True)).__getitem__)
            return busbw_factor(schedule.op, schedule.gpus) * schedule.size * 8 / t
        if schedule.algorithm == "hierarchical":
            n, hosts = len(schedule.ranks), len({h for h, _ in schedule.ranks})
            return min(rates) * (n - 1) / (hosts - 1)
        return min(rates)

    def run(self, schedule: Schedule) -> OpResult:
        return self.finish(self.start(schedule))

    def start(self, schedule: Schedule, compute_s: float = 0.0) -> dict:
        """Hand an op to the ranks; `finish` waits for it. A stepwise transport (rdma) first waits `compute_s`
        (wall seconds) of compute here, then runs the op before returning."""
        self._connections(schedule)
        self._op = getattr(self, "_op", 0) + 1
        if hasattr(self.transport, "submit"):
            return self._start_planned(schedule)
        time.sleep(compute_s)
        return {"result": self._run_stepwise(schedule)}

    def finish(self, handle: dict) -> OpResult:
        return handle["result"] if "result" in handle else self._finish_planned(handle)

    def run_iteration(self, steps: list[tuple]) -> IterationResult:
        """One training iteration: (Step, its schedule or None) in order. Each step's compute is a timed wait
        in the ranks before its communication; a blocking step's communication ends before the next step's
        compute starts, an overlapping one runs on under the compute that follows, and the iteration ends
        when every op is done. A job's ops go over the network one at a time, in order (one communicator,
        as NCCL's stream and SimAI's model have it; traffic/iteration.py predicts the same). With a
        transport that runs programs (tcp) the agents chain the ops themselves (traffic/program.py);
        otherwise this process does, op by op."""
        if hasattr(self.transport, "load"):
            return self._run_chained(steps)
        return self._run_coordinated(steps)

    def _run_chained(self, steps: list[tuple]) -> IterationResult:
        """Every rank's whole iteration handed out at once; this process only collects the times."""
        tb = self.timebase
        scheds = {k: sched for k, (_step, sched) in enumerate(steps) if sched is not None}
        pieces_of = {}
        for k, sched in scheds.items():
            self._connections(sched)
            self._op = getattr(self, "_op", 0) + 1
            pieces_of[k] = pieces(sched, self.channels, str(self._op), self.pipeline)
        progs = rank_programs([(tb.wall(step.busy_s), step.overlap, pieces_of.get(k))
                               for k, (step, _sched) in enumerate(steps)])
        if self.skipper is not None:
            keys = {self.transport.rank_key(f"{r[0]}:{r[1]}") for r in progs}
            self.skipper.join(keys)
            self._joined |= keys
        self.transport.load([{"host": r[0], "rank": f"{r[0]}:{r[1]}", "tail": prog.tail_s,
                              "stages": [{"op": st.op, "compute": st.compute_s, "overlap": st.overlap,
                                          "flows": self._flows(st.sends), "expect": st.expects}
                                         for st in prog.stages]} for r, prog in progs.items()],
                            timeout=30 + len(steps) / 100)
        t0 = self.clock.epoch() + GO_LEAD_S  # every agent reads `go` before its time comes
        ids = [p.id for ps in pieces_of.values() for p in ps]
        with _no_full_collections():
            self.transport.go(t0)
            recs = {r.id: r for r in self.transport.wait(ids, tb.wall(self.step_timeout))}
            errors = [r for r in recs.values() if r.error]
            if errors:
                raise RuntimeError(f"{len(errors)} flow(s) failed, e.g. {errors[0].error}")
            done = self.transport.wait_programs([f"{r[0]}:{r[1]}" for r in progs], tb.wall(self.step_timeout))
        self.records += list(recs.values())
        return self._chained_result(steps, scheds, pieces_of, recs, done, t0)

    def _chained_result(self, steps: list[tuple], scheds: dict, pieces_of: dict, recs: dict, done: dict,
                        t0: float) -> IterationResult:
        """The iteration's figures from the ranks' reports: an op from its first release to its last arrival,
        the iteration from `go` to its last rank's end."""
        tb = self.timebase
        released = {rank: {int(k): t for k, t in ev["released"].items()} for rank, ev in done.items()}
        spans = op_spans(released, {i: r.recv["end"] for i, r in recs.items()}, pieces_of)
        ops = []
        for k, sched in scheds.items():
            ps = pieces_of[k]
            steps_s = step_seconds(ps, {p.id: recs[p.id].sent["start"] for p in ps},
                                   {p.id: recs[p.id].recv["end"] for p in ps})
            ops.append(self._result(sched, spans[k][1] - spans[k][0], steps_s,
                                    sum(recs[p.id].recv["bytes"] for p in ps)))
        busy = sum(s.busy_s for s, _ in steps)
        end = max([ev["end"] for ev in done.values()] + [t0 + tb.wall(busy)])
        return IterationResult(tb.virtual(end - t0), *_busy_parts(steps), ops,
                               [tb.virtual(spans[k][0] - t0) for k in scheds], started_at=t0)

    def _flows(self, ps: list) -> list[dict]:
        """Pieces as the transport's flows: addresses, the source port of their connection, dependencies."""
        topo = self.net.topo
        flows = [{"id": p.id, "src": p.src[0], "dst_ip": nic_address(topo.nodes[p.dst[0]], p.dst[1]).ip,
                  "bytes": p.bytes, "sport": self._sports[p.src, p.dst, p.channel], "after": p.after} for p in ps]
        if self.connection_choice == "least-outstanding":
            for f, p in zip(flows, ps, strict=True):
                f.update(sports=[self._sports[p.src, p.dst, c] for c in range(self.channels)], lane=p.channel)
        return flows

    def _run_coordinated(self, steps: list[tuple]) -> IterationResult:
        """The iteration op by op from this process (stepwise transports: each op runs before `start`
        returns)."""
        tb = self.timebase  # the steps' compute is the fabric's time; the waits below are wall time
        t0 = time.time()
        ops: list[OpResult] = []  # in step order
        issued = []
        gpu = net = t0  # when the ranks' compute so far ends, and when the network is done with the ops so far
        for step, sched in steps:
            gpu += tb.wall(step.busy_s)
            if sched is None:  # compute only, or communication inside the hosts (NVLink)
                continue
            at = max(gpu, net)
            issued.append(at - t0)
            ops.append(self.finish(self.start(sched, max(0.0, at - time.time()))))
            net = time.time()
            if not step.overlap:
                gpu = net
        time.sleep(max(0.0, gpu - time.time()))  # trailing compute: the ranks are busy, nothing to send
        return IterationResult(tb.virtual(max(gpu, net) - t0), *_busy_parts(steps), ops,
                               [tb.virtual(t) for t in issued], started_at=t0)

    def _result(self, schedule: Schedule, seconds: float, step_times: list[float], delivered: int) -> OpResult:
        """The op's figures in the fabric's time, from the wall times measured."""
        tb = self.timebase
        return OpResult(schedule.op, schedule.algorithm, schedule.members, schedule.size, tb.virtual(seconds),
                        self.ideal_busbw(schedule), [tb.virtual(t) for t in step_times], delivered,
                        schedule.total_bytes, groups=schedule.groups)

    def _start_planned(self, schedule: Schedule) -> dict:
        ps = pieces(schedule, self.channels, str(self._op), self.pipeline)
        flows = self._flows(ps)
        t_op = self.clock.epoch()  # the agents stamp their flows with the same clock
        self.transport.submit(flows)
        return {"schedule": schedule, "ps": ps, "ids": [f["id"] for f in flows], "t_op": t_op}

    def _finish_planned(self, h: dict) -> OpResult:
        schedule, ps, t_op = h["schedule"], h["ps"], h["t_op"]
        recs = self.transport.wait(h["ids"], self.timebase.wall(self.step_timeout))
        errors = [r for r in recs if r.error]
        if errors:
            raise RuntimeError(f"{len(errors)} flow(s) failed, e.g. {errors[0].error}")
        seconds = max(r.recv["end"] for r in recs) - t_op  # the last byte's arrival, not its report's
        self.records += recs
        steps = step_seconds(ps, {r.id: r.sent["start"] for r in recs}, {r.id: r.recv["end"] for r in recs})
        return self._result(schedule, seconds, steps, sum(r.recv["bytes"] for r in recs))

    def _run_stepwise(self, schedule: Schedule) -> OpResult:
        topo = self.net.topo
        step_times = []
        delivered = 0
        t_op = time.monotonic()
        for k, step in enumerate(schedule.steps):
            subflows = []
            for i, f in enumerate(step):
                dst_ip = nic_address(topo.nodes[f.dst[0]], f.dst[1]).ip
                for c, nbytes in enumerate(split(f.bytes, self.channels)):
                    if nbytes:
                        subflows.append((f"{self._op}.{k}.{i}.{c}", f.src[0], dst_ip, nbytes,
                                         self._sports[f.src, f.dst, c], f.src[1], c))
            t0 = time.monotonic()
            for fid, src, dst_ip, nbytes, sport, nic, c in subflows:
                self.transport.send(fid, src, dst_ip, nbytes, sport, nic=nic, channel=c)
            recs = self.transport.wait([s[0] for s in subflows], self.timebase.wall(self.step_timeout))
            step_times.append(time.monotonic() - t0)
            errors = [r for r in recs if r.error]
            if errors:
                raise RuntimeError(f"step {k}: {len(errors)} flow(s) failed, e.g. {errors[0].error}")
            delivered += sum(r.recv["bytes"] for r in recs)
            self.records += recs
        return self._result(schedule, time.monotonic() - t_op, step_times, delivered)


def _busy_parts(steps: list[tuple]) -> tuple[float, float]:
    """An iteration's compute and its NVLink time (the fabric's time): what its steps keep the GPUs busy with."""
    return sum(s.compute_s for s, _ in steps), sum(s.nvlink_s for s, _ in steps)


@contextmanager
def _no_full_collections():
    """No cyclic garbage collection while an iteration's traffic runs, and what exists by then (its flow
    records) out of later collections' way: a full collection over a large iteration's records (870,000 flows
    of the GPT-13B file, 1 s each) holds the interpreter lock, and the PFC agent and the sampler are threads
    of this process (measured: the PFC agent silent for 2,021 ms in that iteration). Records are kept, and
    what is freed is freed by reference counting."""
    gc.freeze()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
        gc.freeze()


def concurrent(schedules: list[Schedule]) -> Schedule:
    """Several collectives at once (e.g. one DP group per rail): step k of each runs together."""
    if len(schedules) == 1:
        return schedules[0]
    first = schedules[0]
    out = Schedule(first.op, first.algorithm, first.size, [r for s in schedules for r in s.ranks],
                   groups=len(schedules), independent_steps=all(s.independent_steps for s in schedules),
                   gpus=first.gpus, gpus_per_host=first.gpus_per_host)
    for k in range(max(len(s.steps) for s in schedules)):
        out.steps.append([f for s in schedules if k < len(s.steps) for f in s.steps[k]])
    return out


def op_schedule(op, hosts: list[str], rails: int, plan: dict | None = None, gpus: int | None = None) -> Schedule | None:
    """A workload op placed on the fabric; None when it stays inside hosts (on NVLink). `gpus`: per host. A
    group of a parallelism plan (a SimAI file's) runs among its GPUs (collectives.among_gpus); a group without
    one, one rank per NIC."""
    from .collectives import among_gpus, build_schedule
    from .workload import gpu_groups, map_groups

    per_host = gpus or rails
    by_gpu = gpu_groups(op, hosts, plan or {}, per_host)
    if by_gpu is not None:
        if not by_gpu:
            return None
        return concurrent([among_gpus(op.op, g, op.size, op.algorithm, lambda i: i * rails // per_host)
                           for g in by_gpu])
    groups = map_groups(op, hosts, rails, plan, gpus)
    if not groups:
        return None
    return concurrent([build_schedule(op.op, g, op.size, op.algorithm) for g in groups])
