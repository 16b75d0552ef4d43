"""A PFC-like pause agent: lossless queues that never drop, with pauses that propagate hop by hop.

How the agent sees a queue cross its thresholds (`pfc.detect`):
- kernel (the default where this machine can): BPF programs on the qdisc tracepoints re-read every lossless
  queue of a port at each packet into or out of it and put each XOFF or XON crossing on a ring buffer
  (kqueues.py); the agent sleeps on it and acts the moment one arrives. Its reaction (the crossing in the
  kernel to the upstream class changed) is measured per crossing and reported.
- poll: every poll the agent reads the backlog of every lossless egress queue (one netlink qdisc dump per
  namespace: the root namespace holds every switch port). Used where BPF is not available (doctor says why).
Each lossless 802.1p priority has its own queue per port, its own thresholds
and its own pauses, as in 802.1Qbb: when the priority-p queue of switch S
toward port p passes XOFF, S "sends PAUSE(p)" on its other ports: the
neighbours' egress toward S (switch ports or host NICs) get their priority-p
queue stopped (its gate, shaper.py), and their other priorities run on. Below XON the
pause is released.
A paused neighbour's own queue then fills and, past its XOFF, pauses its own
upstream: the pause walks back to the sending hosts, as real PFC does.

Whom a congested switch pauses (`pfc.model`): with egress, every ingress
neighbour of the congested switch, not only those feeding the congested port
(how PFC head-of-line blocking spreads to innocent flows); with ingress
(802.1Qbb, kernel detection), the kernel counts each lossless frame on the
switch port it came in by, against the switch's shared buffer and a dynamic
threshold (kmmu.py), and that port's crossings pause its one neighbour: the
agent's queue of a switch port then stands for the port's ingress account.
Host NIC queues never pause anyone (nothing is upstream of a host) and are
large: a host does not drop its own lossless traffic.

Counted per port and priority (keys `node:port/p3`): pause events, paused
time; per lossless queue: XOFF events and the maximum depth; for the agent
itself: achieved poll period and CPU.

The decisions are pfc_state.py's (pure: each queue's hysteresis, who holds
which pause); this module sees crossings, acts on ports and keeps time. Its
report is put together in pfc_report.py; PAUSE frames are pfc_frames.py's.

Over several servers (testbed.cluster) each server runs its own agent over its own ports. A queue
whose upstream port lives on another server pauses it with a message (`remote`, a RemotePauses: the
agent names the pauses it holds there, the other agent applies them as its own), as a switch sends
PAUSE to its neighbour: the same hold and release, one message later.

With `pfc.watchdog` on, the agent also looks at every paused switch queue each watchdog poll and mitigates a
storm (pfc_storms.py: a queue held paused with frames and no progress); a storm can be asked for (`stuck`: the
NIC behind a port pauses it for good, the failure action pfc_storm).

With `pfc.frames`, each pause and resume is also put on the wire as a real
802.1Qbb PAUSE frame (built with scapy: MAC Control opcode 0x0101, the
priority's enable bit and timer, pause time 0xFFFF to pause and 0 to resume), sent by the congested switch out
of its port toward the paused neighbour, so tcpdump or Wireshark on that link
(a host NIC in a lab) shows PFC as on a real fabric. The frames are for
watching: the gates above are what enforce the pause.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.system.poll import readable

from .netlink import QdiscDumper, dumper_in
from .pfc_frames import PauseFrames
from .pfc_report import agent_report
from .pfc_state import HeldElsewhere, Hold, Key, PauseState, QueueState, RemotePauses, pauses_whom
from .pfc_statefile import StateWriter, realtime
from .pfc_storms import STUCK_PEER, StormGuard, StuckPeers
from .ports import Port, queue_key
from .shaper import Shaper, lossless_leaf

if TYPE_CHECKING:
    from .kqueues import Crossing, KernelQueues

log = logging.getLogger(__name__)

KERNEL_WAKE_S = 0.05  # with kernel detection the agent wakes at least this often: samples, state, liveness


class PfcAgent:
    def __init__(self, shaper: Shaper, state_file: Path | None = None, host_every: int = 10,
                 remote: RemotePauses | None = None, kernel: KernelQueues | None = None):
        """kernel: queues already watched in the kernel by the network (which then closes them); without one,
        the agent loads its own when `pfc.detect` allows (auto, kernel) and closes it at stop."""
        self.shaper = shaper
        self.remote = remote
        self.spec = shaper.spec.pfc
        self.period = self.spec.poll_ms / 1000
        self.state_file = state_file
        self.host_every = host_every  # host queues pause nobody: sampled every Nth poll, for depth only
        self.priorities = [c.priority for c in shaper.spec.lossless]
        self.queues: dict[Key, QueueState] = {}
        self.pauses: dict[Key, PauseState] = {}
        # every port this agent may pause: its own, and (over several servers) the others' it has a link to
        self.all_ports = shaper.ports | (remote.ports if remote is not None else {})
        by_node: dict[str, list[Port]] = {}
        for p in self.all_ports.values():
            by_node.setdefault(p.node, []).append(p)
        self.ingress = self.spec.model == "ingress"
        for p in shaper.ports.values():
            ups = [u for u in pauses_whom(p, by_node, self.ingress) if u in self.all_ports]
            for prio in self.priorities:
                self.queues[p.key, prio] = QueueState(p, prio, p.plan.lossless[prio], ups)
                self.pauses[p.key, prio] = PauseState()
        self._leaves = {lossless_leaf(prio): prio for prio in self.priorities}
        self._handles = frozenset(self._leaves)
        self._by_ifindex = {(p.netns, p.ifindex): p.key for p in shaper.ports.values()}
        wd = self.spec.watchdog
        self.guard = (StormGuard(shaper, wd.config(shaper.spec.dilated_by), self._by_ifindex, self._leaves)
                      if wd.enabled else None)
        self.stuck = StuckPeers()  # pause storms asked for (a stuck NIC), applied by the loop
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.frames_sent = 0
        self._frames = PauseFrames() if self.spec.frames else None
        self.polls = 0
        self.period_samples: list[tuple[float, float]] = []  # (when, time since the previous poll)
        self.poll_samples: list[tuple[float, float]] = []  # (when, how long the poll itself took)
        self.realtime = False  # whether the loop runs SCHED_FIFO (pfc_statefile.realtime)
        self._state: StateWriter | None = None  # the state file's writer, while the loop runs
        self.cpu_s = 0.0
        self.wall_s = 0.0
        self.samples: list[dict] = []  # time series: t, per-queue backlog (non-zero), paused ports
        self.holds_out = HeldElsewhere()  # the pauses we hold on other servers' ports
        self.holds_in: dict[str, set[Hold]] = {}  # server -> the pauses it holds on ours
        self._said_at = 0.0  # when the held pauses were last said to the other servers
        self.expired = 0  # times a silent server's pauses here were released
        self.resynced = 0  # model ingress: pauses set right from the kernel's accounts (_resync)
        self.error: str | None = None  # why the loop died, if it did: the verdict then says "unknown"
        self.stopped_at: float | None = None
        self.detect = "poll"  # how crossings are seen: kernel or poll (start() decides for auto)
        self.detect_why = ""  # why poll, when kernel was wanted or auto
        self.kernel: KernelQueues | None = kernel
        self._own_kernel = kernel is None
        self.reactions: list[tuple[float, float]] = []  # (when, seconds from a kernel crossing to the classes set)

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        self._choose_detect()
        run = self._run_kernel if self.kernel is not None else self._run
        self._state = StateWriter(self.state_file) if self.state_file is not None else None
        self._thread = threading.Thread(target=run, name="hpnlab-pfc", daemon=True)
        self._thread.start()

    def _choose_detect(self) -> None:
        """Kernel detection when asked for or auto and this machine can load it; poll otherwise, saying why
        (`detect: kernel` that cannot load is an error: the user asked for it)."""
        if self.kernel is None:
            from .kqueues import watch_queues

            self.kernel, self.detect_why = watch_queues(self.shaper, self.spec.detect)
        if self.kernel is None:
            return
        if not self.ingress:  # model ingress: the kernel's accounts cross their own thresholds
            self.kernel.pause_at({(key, prio): (qs.plan.xoff, qs.plan.xon) for (key, prio), qs in self.queues.items()
                                  if qs.upstream})  # a queue with nobody upstream pauses nobody: depth only
        self.detect = "kernel"

    def stop(self) -> None:
        self.stopped_at = time.monotonic()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.guard is not None:
            self.guard.stop(self.stopped_at)
        if self.kernel is not None:
            try:
                self._final_drops()
            finally:
                if self._own_kernel:
                    self.kernel.close()
                self.kernel = None
        if self._state is not None:  # its last write done before the file goes
            self._state.close()
        if self.state_file is not None:
            self.state_file.unlink(missing_ok=True)
        for server in self.holds_out.servers():  # the other servers release what we held there
            self.remote.send(server, [])
        now = time.monotonic()
        for (key, prio), st in self.pauses.items():
            if st.end(now):
                try:
                    self.shaper.set_paused(key, prio, False)
                except Exception:  # noqa: BLE001 - the port may be gone already
                    pass

    # -- the loop --------------------------------------------------------------------
    @contextlib.contextmanager
    def _accounted(self):
        """Around either loop: SCHED_FIFO where allowed, the loop's CPU and wall time, and why it died if it did
        (any error ends the loop, and the report must say so: the verdict is then "unknown")."""
        t_cpu0, t_wall0 = time.thread_time(), time.monotonic()
        self.realtime = realtime()
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - see above
            self.error = f"{type(exc).__name__}: {exc}"[:300]
            log.exception("PFC agent stopped")
        finally:
            self.cpu_s = time.thread_time() - t_cpu0
            self.wall_s = time.monotonic() - t_wall0

    def _run(self) -> None:
        dumpers: dict[str | None, QdiscDumper] = {}
        for p in self.shaper.ports.values():
            if p.netns not in dumpers:
                dumpers[p.netns] = dumper_in(p.netns)
        try:
            with self._accounted():
                self._poll_loop(dumpers)
        finally:
            for d in dumpers.values():
                d.close()

    def _poll_loop(self, dumpers: dict[str | None, QdiscDumper]) -> None:
        last = time.monotonic()
        next_at = last
        while not self._stop.is_set():
            now = time.monotonic()
            self.period_samples.append((now, now - last))
            last = now
            self.poll(dumpers, include_hosts=self.polls % self.host_every == 0)
            took = time.monotonic() - now
            self.poll_samples.append((now, took))
            self.polls += 1
            next_at += self.period
            delay = next_at - time.monotonic()
            if delay > 0:
                self._wait(delay)
            else:  # fell behind: no burst to catch up, and rest as long as the poll took (real-time: the
                next_at = time.monotonic() + took  # rest of the machine runs at least half the time)
                self._wait(took)

    def _run_kernel(self) -> None:
        """Sleep on the kernel's crossings (and the other servers' pause messages); act on each at once."""
        with self._accounted():
            self._event_loop()

    def _event_loop(self) -> None:
        waits = [self.kernel] + ([self.remote] if self.remote is not None else [])
        last = next_sample = time.monotonic()
        while not self._stop.is_set():
            ready = readable(waits, KERNEL_WAKE_S)
            now = time.monotonic()
            self.period_samples.append((now, now - last))
            last = now
            changed: set[str] = set()
            for c in self.kernel.crossings():
                self._crossing(c, changed)
            if self.ingress and now >= next_sample:
                self._resync(now, changed)
            self._storms(now, changed)
            if self.remote is not None:
                if self.remote in ready:
                    self.take_remote()
                self._say_remote(now, changed)
            if now >= next_sample:
                next_sample = now + KERNEL_WAKE_S
                self._sample_kernel(now)
            self.polls += 1

    def _crossing(self, c: Crossing, changed: set[str]) -> None:
        """One queue crossed XOFF (pause its upstream) or XON (release it); the reaction is timed from the
        packet that crossed, in the kernel, to the last class changed."""
        key = c.port, c.priority
        if not self.queues[key].crossed(c.xoff):
            return
        now = time.monotonic()
        self._upstream(key, c.xoff, now, changed)
        done = time.monotonic_ns()
        self.reactions.append((now, (done - c.t_ns) / 1e9))

    def _resync(self, now: float, changed: set[str]) -> None:
        """Model ingress: every account's pause as the kernel holds it now. Crossings come from every CPU and can
        reach the ring buffer out of order (an XON ahead of the XOFF it ends); this pass each wake-up period
        repairs what such a pair, or a lost one, left wrong, as a PAUSE refreshed or let expire would."""
        for key, qs in self.queues.items():
            if qs.upstream and self.kernel.ingress_paused(*key) != qs.xoff:
                self.resynced += 1
                qs.crossed(not qs.xoff)
                self._upstream(key, qs.xoff, now, changed)

    def _sample_kernel(self, now: float) -> None:
        """Depths from the kernel's shared memory (no system call): maxima, the time series, the state file."""
        backlog = {}
        for key, f in self.kernel.snapshot().items():
            qs = self.queues[key]
            qs.max_backlog = max(qs.max_backlog, f.max_backlog)
            if f.backlog:
                backlog[queue_key(*key)] = f.backlog
        self.samples.append({"t": now, "backlog": backlog, "paused": sorted(queue_key(*k) for k in self.shaper.paused)})
        if self.state_file is not None:
            self._write_state()

    def _final_drops(self) -> None:
        """The lossless queues' drops, read once from the qdiscs (the kernel programs see depths, not drops)."""
        for netns in {p.netns for p in self.shaper.ports.values()}:
            d = dumper_in(netns)
            try:
                for ifindex, handle, _backlog, drops, _sent in d.backlogs(self._handles):
                    port = self._by_ifindex.get((netns, ifindex))
                    if port is not None:
                        self.queues[port, self._leaves[handle]].drops = drops
            finally:
                d.close()

    def _wait(self, delay: float) -> None:
        """Until the next poll; pauses from other servers are applied the moment they arrive."""
        if self.remote is None:
            self._stop.wait(delay)
            return
        end = time.monotonic() + delay
        while (left := end - time.monotonic()) > 0 and not self._stop.is_set():
            if readable([self.remote], left):
                self.take_remote()

    def take_remote(self) -> None:
        """Apply what other servers said: each message is the whole set of pauses its sender holds here."""
        now = time.monotonic()
        for server, holds in self.remote.receive():
            new = {h for h in map(tuple, holds) if (h[0], h[1]) in self.pauses}
            self._apply_in(server, new, now)

    def _apply_in(self, server: str, new: set[Hold], now: float) -> None:
        old = self.holds_in.get(server, set())
        for key, prio, by in new - old:
            self._hold((key, prio), (f"{server}/{by}", prio), now)
        for key, prio, by in old - new:
            self._release((key, prio), (f"{server}/{by}", prio), now)
        self.holds_in[server] = new

    def _say_remote(self, now: float, changed: set[str]) -> None:
        """Tell each server whose set changed, and every server we hold something on again each refresh;
        release what a silent server held here (its agent gone, or its messages lost for expire_s)."""
        if now - self._said_at >= self.remote.refresh_s:
            self._said_at = now
            changed = changed | set(self.holds_out.servers())
        for server in changed:
            self.remote.send(server, self.holds_out.held(server))
        for server, holds in self.holds_in.items():
            if holds and now - self.remote.silent_since(server) > self.remote.expire_s:
                log.warning("PFC: no word from server %s for %.1f s: its %d pauses here released", server,
                            now - self.remote.silent_since(server), len(holds))
                self._apply_in(server, set(), now)
                self.expired += 1

    def poll(self, dumpers: dict[str | None, QdiscDumper], include_hosts: bool = True) -> None:
        now = time.monotonic()
        changed: set[str] = set()  # servers whose ports we now hold differently
        backlog: dict[tuple[str, int], int] = {}
        for netns, d in dumpers.items():
            if netns is not None and not include_hosts:
                continue
            for ifindex, handle, b, drops, _sent in d.backlogs(self._handles):
                port = self._by_ifindex.get((netns, ifindex))
                if port is not None:
                    key = port, self._leaves[handle]
                    backlog[key] = b
                    self.queues[key].drops = drops
        for key, b in backlog.items():
            above = self.queues[key].level(b)
            if above is not None:
                self._upstream(key, above, now, changed)
        self._storms(now, changed)
        if self.remote is not None:
            self._say_remote(now, changed)
        if self.polls % 20 == 0:
            self.samples.append({"t": now, "backlog": {queue_key(*k): v for k, v in backlog.items() if v},
                                 "paused": sorted(queue_key(*k) for k in self.shaper.paused)})
            if self.state_file is not None:
                self._write_state()

    def _storms(self, now: float, changed: set[str]) -> None:
        """Stuck peers asked for since the last pass (their pauses held or let go), then the watchdog's poll
        when it is due."""
        for port, on in self.stuck.taken():
            if port not in self.shaper.ports:  # not ours: nothing to pause (the network names its own ports)
                log.warning("PFC: a storm asked for on %s, not a port of this agent", port)
                continue
            for prio in self.priorities:
                (self._hold if on else self._release)((port, prio), (STUCK_PEER, prio), now, changed)
        if self.guard is not None and self.guard.due(now):
            self.guard.tick(now, self.pauses)

    def _gate(self, target: Key, paused: bool) -> None:
        """Stop or resume a port's priority, unless the watchdog holds its gate (a storm, mitigated)."""
        if self.guard is None or target not in self.guard.mitigated:
            self.shaper.set_paused(*target, paused)

    def _upstream(self, key: Key, above: bool, now: float, changed: set[str]) -> None:
        """The queue `key` crossed XOFF (`above`: it holds its upstream paused) or XON (it lets go)."""
        act = self._hold if above else self._release
        for up in self.queues[key].upstream:
            act((up, key[1]), key, now, changed)

    def _hold(self, target: Key, by: Key, now: float, changed: set[str] | None = None) -> None:
        if target not in self.pauses:  # another server's port: its agent pauses it
            server = self.remote.server_of(target[0])
            if self.holds_out.hold(server, target, by):
                self._frame(target, pause=True)
            changed.add(server)
        elif self.pauses[target].hold(by, now):
            self._gate(target, True)
            self._frame(target, pause=True)

    def _release(self, target: Key, by: Key, now: float, changed: set[str] | None = None) -> None:
        if target not in self.pauses:
            server = self.remote.server_of(target[0])
            if self.holds_out.release(server, target, by):
                self._frame(target, pause=False)
            changed.add(server)
        elif self.pauses[target].release(by, now):
            self._gate(target, False)
            self._frame(target, pause=False)

    def _frame(self, target: tuple[str, int], pause: bool) -> None:
        if self._frames is None:
            return
        port, prio = target
        p = self.all_ports[port]  # the paused sender; the frame comes from the switch at the other end (ours)
        self._frames.send(p.peer_ifname, prio, pause)
        self.frames_sent += 1

    # -- reporting -------------------------------------------------------------------
    def report(self, since: float | None = None) -> dict:
        """Counters and the poll period's statistics (only polls after `since`, a monotonic time, if given:
        the traffic's window, not the network's start-up): pfc_report.agent_report."""
        configured = self.spec.poll_ms if self.detect == "poll" else KERNEL_WAKE_S * 1000
        return agent_report(self, since, configured)

    def _write_state(self) -> None:
        pauses = self.pauses.items()
        state = {"paused": sorted(queue_key(*k) for k in self.shaper.paused),
                 "pause_events": {queue_key(*k): s.events for k, s in pauses if s.events},
                 "paused_by": {queue_key(*k): sorted(queue_key(*b) for b in s.by) for k, s in pauses if s.by}}
        self._state.put(state)

