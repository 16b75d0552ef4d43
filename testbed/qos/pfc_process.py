"""The PFC agent in a process of its own, so nothing else can hold it up.

    python -m testbed.qos.pfc_process        (started by PfcProcess; not a command for users)

In the hpnlab process the agent was a thread, and any other thread there (the
coordinator, the samplers, a test's own checks) held it behind Python's GIL:
in a full test run a thread dumping every qdisc each 20 ms held it for up to
166 ms, its reaction p99 went from 0.7 to 6 ms and 29 lossless packets were
dropped. Here it shares its process with nothing but this module's reader of
requests, which sleeps on its standard input; the agent's loop runs SCHED_FIFO.

The process that shaped the ports keeps everything it made: the qdiscs, and the
kernel programs that watch the queues (it loads them, and hands this process the
descriptors of their maps: the same memory, no second copy of the programs). This
process only pauses and resumes classes, reads the queues and writes the state
file. Protocol, one JSON line each way:

    first line in:  {"ports": [...], "spec": {...}, "state_file": path|null, "kernel": handoff|null,
                     "detect_why": str}
    first line out: {"pid": n, "detect": "kernel"|"poll"}            (the agent is running)
    then:           {"op": "report", "since": t|null} -> the agent's report (monotonic `since`: one clock
                                                          for every process of the machine)
                    {"op": "storm", "port": key, "on": bool} -> {} (the peer behind that port pauses it for good,
                                                          or lets go: a stuck NIC's pause storm)
                    {"op": "stop"} -> {} once the agent has stopped and released its pauses
It stops the agent and exits when its input ends: the parent closed it, or died (kill -9 included), so it never
outlives its run; SIGTERM does the same. It ignores SIGINT: a terminal's Ctrl-C is the parent's to act on.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.system.poll import json_lines, readable
from testbed.system.signals import exit_cleanly_on_signals

from .kqueues import (
    COUNTED,
    DISCARDED,
    DRAINED,
    LOST,
    NO_LEAF,
    UNFOLLOWED,
    UNNAMED,
    KernelQueues,
    QueueMaps,
    watch_queues,
)
from .pfc import PfcAgent
from .ports import ports_from_json, ports_to_json
from .shaper import Shaper
from .spec import QosSpec, polled_reaction_ms

if TYPE_CHECKING:
    from testbed.system.ownership import Ownership

log = logging.getLogger(__name__)

READY_S = 60  # for the process to import, attach to the ports and start the agent (a 128-host fabric, loaded)


class PfcProcess:
    """Starts, asks and stops the agent process; the same start/stop/report as PfcAgent."""

    def __init__(self, shaper: Shaper, state_file: Path | None, owner: Ownership,
                 kernel: KernelQueues | None = None):
        """kernel: queues the network already watches (ECN); without one, they are watched here when
        `pfc.detect` allows, and taken out at close()."""
        self.shaper, self.state_file, self.owner = shaper, state_file, owner
        self.kernel = kernel
        self._own_kernel: KernelQueues | None = None
        self.proc: subprocess.Popen | None = None
        self.detect = "poll"
        self.detect_why = ""
        self._owed = 0  # answers the process still owes (one per request sent)
        self._buf = b""  # what it said beyond the last answer taken
        self._torn = False  # a request was cut mid-line: nothing more may be written to the pipe

    def start(self) -> None:
        spec = self.shaper.spec
        if self.kernel is None:
            self.kernel, self.detect_why = watch_queues(self.shaper, spec.pfc.detect)
            self._own_kernel = self.kernel
        if self.kernel is None:  # decided here: the process must not try again
            if spec.pfc.detect == "auto" and spec.pfc.reaction_ms < polled_reaction_ms(spec.pfc.poll_ms):
                log.warning("the lossless headroom covers %.1f ms of ingress (kernel events) but the agent polls "
                            "every %g ms: pauses may come late (fix: qos.pfc.detect: poll sizes it for polling)",
                            spec.pfc.reaction_ms, spec.pfc.poll_ms)
            spec = spec.model_copy(update={"pfc": spec.pfc.model_copy(update={"detect": "poll"})})
        handoff = self.kernel.handoff() if self.kernel is not None else None
        self.proc = self.owner.spawn(
            [sys.executable, "-m", __name__], "hpnlab PFC agent", stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            pass_fds=[v for k, v in handoff.items() if k.endswith("_fd")] if handoff else [], start_new_session=True)
        ready = self._call({"ports": ports_to_json(list(self.shaper.ports.values())),
                            "spec": spec.model_dump(mode="json"),
                            "state_file": None if self.state_file is None else str(self.state_file),
                            "kernel": handoff, "detect_why": self.detect_why}, READY_S)
        if ready is None:
            raise RuntimeError(f"the PFC agent's process did not start (exit {self.proc.poll()}); see its error "
                               "above")
        self.detect = ready["detect"]
        log.info("PFC agent in process %d, detecting crossings by %s", ready["pid"], self.detect)

    def _call(self, request: dict, timeout: float = 30) -> dict | None:
        """One request and its answer; None when the process is gone or does not answer in time (the report
        is then missing, and the verdict says "unknown"). An answer still owed to a request cut short (a Ctrl-C
        while the process started) is read first, so each answer meets its own request."""
        if self.proc is None or self._torn or self.proc.poll() is not None:
            return None
        try:
            try:
                self.proc.stdin.write(json.dumps(request).encode() + b"\n")
                self.proc.stdin.flush()
            except BaseException:
                # Cut mid-line (a Ctrl-C in a 100 KB configuration): a request after it would run on from the
                # cut and the process would read one garbled line. The pipe now only closes (close()).
                self._torn = True
                raise
            self._owed += 1
            while self._owed:
                line = self._answer(request.get("op", "start"), timeout)
                if line is None:
                    return None
                self._owed -= 1
        except (BrokenPipeError, ValueError):  # its end closed; ValueError: ours already closed
            line = b""
        if not line:
            try:  # its exit status, if it is ending: what the error says
                code = self.proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                code = None
            log.error("the PFC agent's process ended its output (exit %s)", code)
            return None
        return json.loads(line)

    def _answer(self, op: str, timeout: float) -> bytes | None:
        """The next line from the process ("" at its end), None if none came in `timeout`. Read from the
        descriptor into our own buffer: a buffered reader may hold a second answer that select cannot see
        (two answers owed, both arrived: the second one waited out the timeout)."""
        end = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        chunks = [self._buf]
        while b"\n" not in chunks[-1]:  # a report may be megabytes: each chunk is looked at once
            if not readable([fd], end - time.monotonic()):
                self._buf = b"".join(chunks)
                log.error("the PFC agent's process did not answer %s in %.0f s", op, timeout)
                return None
            chunks.append(os.read(fd, 1 << 16))
            if not chunks[-1]:
                self._buf = b"".join(chunks)
                return b""
        line, self._buf = b"".join(chunks).split(b"\n", 1)
        return line

    def report(self, since: float | None = None) -> dict | None:
        """The agent's report, with the kernel programs' own counters over the network's life (this process
        loaded them): crossings the ring buffer dropped, and lossless leaves not found."""
        report = self._call({"op": "report", "since": since})
        if report is not None and self.kernel is not None:
            report["kernel_lost_events"] = self.kernel.counter(LOST)
            report["kernel_no_leaf"] = self.kernel.counter(NO_LEAF)
            if self.kernel.accounts is not None:  # model ingress: what each ingress port held, against what
                report["ingress"] = self.kernel.accounts.report() | {  # its headroom takes
                    "counted_bytes": self.kernel.counter(COUNTED), "drained_bytes": self.kernel.counter(DRAINED),
                    "discarded_bytes": self.kernel.counter(DISCARDED),
                    "unfollowed": self.kernel.counter(UNFOLLOWED),
                    "unnamed": self.kernel.counter(UNNAMED)}
        return report

    def storm(self, port: str, on: bool) -> bool:
        """The peer behind egress port `port` (a key) starts (`on`) or stops pausing it in every lossless
        priority; False when the process is gone."""
        return self._call({"op": "storm", "port": port, "on": on}) is not None

    def stop(self) -> None:
        """The agent stops and releases every pause it holds; its reports stay to be asked for until close()."""
        self._call({"op": "stop"})

    def close(self) -> None:
        """The process ended (its input closed: it stops the agent first if stop() did not) and what this
        loaded taken out of the kernel."""
        p, self.proc = self.proc, None
        if p is not None:
            try:
                p.stdin.close()
            except BrokenPipeError:
                pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log.warning("the PFC agent's process did not end in 10 s: killed")
                p.kill()
                p.wait()
            p.stdout.close()
        if self._own_kernel is not None:
            self._own_kernel.close()
            self._own_kernel = None
        self.kernel = None


def _agent(conf: dict) -> tuple[PfcAgent, Shaper, QueueMaps | None]:
    spec = QosSpec.model_validate(conf["spec"])
    shaper = Shaper(ports_from_json(conf["ports"]), spec)
    shaper.attach()
    maps = QueueMaps.from_handoff(conf["kernel"]) if conf["kernel"] else None
    state_file = Path(conf["state_file"]) if conf["state_file"] else None
    return PfcAgent(shaper, state_file, kernel=maps), shaper, maps


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_cleanly_on_signals()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s hpnlab PFC agent: %(message)s")
    answers = os.fdopen(os.dup(1), "w")  # the protocol's own descriptor: a library's print goes to stderr
    os.dup2(2, 1)
    requests = json_lines(sys.stdin)
    conf = next(requests, None)
    if conf is None:
        return
    agent, shaper, maps = _agent(conf)
    # What is here now lives as long as the process: out of the collector's sight, so that a full collection
    # scans only what the agent made since (without this a poll took up to 15-18 ms at times, against 2 ms as
    # a thread of the hpnlab process, whose many long-lived objects made full collections rare).
    gc.freeze()
    stopped = False
    try:
        agent.start()
        if conf["detect_why"]:
            agent.detect_why = conf["detect_why"]
        _say(answers, {"pid": os.getpid(), "detect": agent.detect})
        for req in requests:
            if req["op"] == "report":
                _say(answers, agent.report(req["since"]))
            elif req["op"] == "storm":
                agent.stuck.ask(req["port"], req["on"])
                _say(answers, {})
            elif req["op"] == "stop":
                if not stopped:
                    agent.stop()
                    stopped = True
                _say(answers, {})
    finally:
        if not stopped:
            agent.stop()
        shaper.close()
        if maps is not None:
            maps.close()


def _say(out, data: dict) -> None:
    out.write(json.dumps(data) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
