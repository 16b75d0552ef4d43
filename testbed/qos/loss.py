"""Links that keep running but lose frames: gray failures in the kernel (bpf/loss.bpf.c), as this kernel has no
netem.

A `LossyLink` puts the program on the egress of both ends of one link (the ends' shaped ports: a host's in its
namespace, a switch's in the root one, beside ECN marking when that is on) and drops each frame with the given
probability; `counts()` reads per direction what was dropped and what went through, the figures a receiving
port's input-error and frame counters give an operator. `close()` takes the program off; a namespace already
gone took it with it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from testbed.system.bpf import BpfObject, build

from .ports import Port

SOURCE = Path(__file__).with_name("bpf") / "loss.bpf.c"
_DIRECTION = struct.Struct("=IIQQ")  # struct direction
_U32 = struct.Struct("=I")
ONE = 1 << 32
PROGRAMS = ("lose_ab", "lose_ba")  # slot 0: the link's a -> b, at a's end; slot 1: b -> a, at b's end


@dataclass(frozen=True)
class LossCount:
    dropped: int  # frames lost (the receiving port's input errors)
    passed: int


def threshold(rate: float) -> int:
    """The program's threshold for a loss probability: a random 32-bit number below it drops the frame."""
    if not 0 <= rate <= 1:
        raise ValueError(f"a loss rate is a probability, not {rate}")
    return min(ONE - 1, round(rate * ONE))


class LossyLink:
    """One link losing `rate` of its frames each way, from now until `close()`."""

    def __init__(self, link: str, ends: tuple[Port, Port], rate: float):
        """ends: the shaped egress ports of the link's a and b ends (already shaped: their ifindex is known)."""
        self.link, self.rate = link, rate
        self.ends = ends
        self.obj = BpfObject(build(SOURCE, {}), tc=PROGRAMS)
        try:
            for slot in (0, 1):
                self.obj.update("link", _U32.pack(slot), _DIRECTION.pack(threshold(rate), 0, 0, 0))
            for program, p in zip(PROGRAMS, ends, strict=True):
                # on clsact, never tcx: a lost frame is TC_ACT_STOLEN (gone, the sender told it left, as on a wire),
                # which tcx's verdicts lack (its drop is a local drop the sender's TCP sees). close() takes it off;
                # after a kill -9 it goes with the link's interfaces (`hpnlab clean`).
                self.obj.attach_tc(program, p.ifindex, p.netns, tcx=False)
        except BaseException:
            self.obj.close()
            raise

    def counts(self) -> tuple[LossCount, LossCount]:
        """(a -> b, b -> a) so far."""
        return tuple(LossCount(*_DIRECTION.unpack(self.obj.lookup("link", _U32.pack(slot), _DIRECTION.size))[2:])
                     for slot in (0, 1))

    def close(self) -> None:
        self.obj.close()
