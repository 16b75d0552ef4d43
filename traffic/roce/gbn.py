"""A reliable-connected queue pair's go-back-N, as RoCE NICs run it (pure code: no sockets, no clock).

The requester (`Requester`) sends a message as packets with consecutive 24-bit PSNs and keeps what the responder
has not acknowledged. The responder (`Responder`) takes only the PSN it expects: the next in order is accepted
(acknowledged when the requester asked, AckReq, or every `coalesce` packets), a later one is a sequence error,
answered by one NAK naming the expected PSN and then dropped like everything after it until that PSN comes (the
NIC keeps no out-of-order packet), and an earlier one is a duplicate, acknowledged again so a requester whose
ACK was lost moves on. The requester goes back to the NAK'd PSN and sends everything from there again; with
no answer for its timeout it goes back to the oldest unacknowledged PSN (the transport's retry timer, in the
fabric's time, is the caller's).

What a lost packet costs, then: everything the requester had sent after it before the NAK came back, sent
again (our VM test measured soft-RoCE resend 62 packets per packet lost), where TCP's SACK resends only the
lost one.
"""

from __future__ import annotations

from dataclasses import dataclass

from .frames import PSN_HALF, psn_add, psn_diff

NCCL_IB_TIMEOUT_S = 4.096e-6 * 2**18  # NCCL_IB_TIMEOUT 18: the retry timer NCCL gives its QPs, 1.07 s


@dataclass(frozen=True)
class Reply:
    """What the responder answers: an ACK up to `psn` inclusive, or a NAK with `psn` the one it expects."""

    nak: bool
    psn: int
    msn: int


@dataclass
class Requester:
    """One QP's packets `0 .. total-1` (PSN first_psn + i), sent in order, acknowledged cumulatively. `extend`
    posts more (the next message on the QP): a QP's PSNs run on across its messages and wrap at 2^24."""

    first_psn: int
    total: int = 0
    ack_every: int = 16  # AckReq on every n-th packet (the caller adds it on each message's last)
    next: int = 0  # the next packet to send
    una: int = 0  # the oldest unacknowledged
    sent: int = 0  # packets put on the wire, resends included
    resent: int = 0
    rewinds: int = 0  # go-back-N episodes (NAKs acted on, timeouts)
    high: int = 0  # one past the furthest packet ever sent

    def __post_init__(self):
        self.extend(0)

    def extend(self, n: int) -> None:
        """n packets more at the end."""
        if n < 0 or self.total + n - self.una >= PSN_HALF:
            raise ValueError(f"{self.total + n - self.una} packets outstanding: a QP's PSNs in flight must stay "
                             "under 2^23")
        self.total += n

    @property
    def done(self) -> bool:
        return self.una >= self.total

    def psn(self, i: int) -> int:
        return psn_add(self.first_psn, i)

    def take(self) -> tuple[int, int, bool] | None:
        """The next packet to put on the wire: (index, PSN, AckReq), or None when all are out, awaiting ACKs."""
        if self.next >= self.total:
            return None
        i = self.next
        self.next += 1
        self.sent += 1
        if i < self.high:
            self.resent += 1
        self.high = max(self.high, self.next)
        return i, self.psn(i), i == self.total - 1 or (i + 1) % self.ack_every == 0

    def _index(self, psn: int) -> int | None:
        """The packet a PSN names, or None when it names none of those in flight (stale, or never sent). Counted
        from the oldest unacknowledged, so PSNs may wrap over a long-lived QP."""
        i = self.una + psn_diff(psn, self.psn(self.una))
        return i if self.una - PSN_HALF < i < self.high and i >= 0 else None

    def on_reply(self, r: Reply) -> None:
        i = self._index(r.psn)
        if i is None:
            return
        if r.nak:  # everything before the expected PSN arrived; go back to it
            self.una = max(self.una, i)
            if self.next > i:
                self.next = max(i, self.una)
                self.rewinds += 1
        else:
            self.una = max(self.una, i + 1)
            self.next = max(self.next, self.una)

    def on_timeout(self) -> None:
        """Nothing heard for the retry timer: send again from the oldest unacknowledged packet."""
        if not self.done and self.next > self.una:
            self.next = self.una
            self.rewinds += 1


@dataclass
class Responder:
    """The receiving side of one QP: the PSN it expects and whether it has NAK'd the gap before it."""

    expected: int
    coalesce: int = 16  # an ACK at least every this many packets accepted, AckReq or not
    msn: int = 0  # messages completed (what ACKs carry)
    accepted: int = 0
    dropped: int = 0
    _nak_sent: bool = False
    _unacked: int = 0

    def on_packet(self, psn: int, ackreq: bool, last_of_message: bool = False) -> tuple[bool, Reply | None]:
        """(accepted, the reply to send if any) for a packet of this QP."""
        d = psn_diff(psn, self.expected)
        if d == 0:
            self.expected = psn_add(self.expected, 1)
            self.accepted += 1
            self._nak_sent = False
            self._unacked += 1
            if last_of_message:
                self.msn = (self.msn + 1) & 0xFFFFFF
            if ackreq or self._unacked >= self.coalesce:
                self._unacked = 0
                return True, Reply(False, psn, self.msn)
            return True, None
        self.dropped += 1
        if d > 0:  # a gap: one NAK per gap, then silence until the expected PSN comes
            if self._nak_sent:
                return False, None
            self._nak_sent = True
            return False, Reply(True, self.expected, self.msn)
        return False, Reply(False, psn_add(self.expected, -1), self.msn)  # a duplicate: acknowledge again
