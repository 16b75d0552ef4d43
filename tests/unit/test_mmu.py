"""The shared-buffer MMU (testbed/qos/mmu.py): ingress accounting, the dynamic threshold, headroom, PAUSE quanta."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.qos.mmu import MmuConfig, PauseTimer, SwitchMmu, alpha_shift, pause_s, refresh_s

SMALL = MmuConfig(buffer_bytes=1 << 20, reserve_bytes=4096, resume_offset_bytes=3072, alpha_shift=3)
FRAME = 1000


def mmu(ports: int = 4, headroom: int = 20_000, config: MmuConfig = SMALL) -> SwitchMmu:
    return SwitchMmu(config, {p: headroom for p in range(ports)})


def flood(m: SwitchMmu, port: int, prio: int = 3) -> tuple[int, int]:
    """Frames in through `port` and never out until one is refused: (bytes in when it paused, bytes in)."""
    paused_at, total = None, 0
    while m.admit(port, prio, FRAME):
        m.enqueue(port, prio, FRAME)
        total += FRAME
        if m.update(port, prio) == "pause":
            paused_at = total
    assert paused_at is not None, "refused before it ever paused"
    return paused_at, total


def test_a_flooded_port_pauses_then_its_headroom_takes_what_is_still_in_flight():
    m = mmu()
    paused_at, total = flood(m, 0)
    free = SMALL.buffer_bytes - 4 * (20_000 + 4096)
    # alone in the buffer: the shared part settles where shared = (free - shared) / 8, i.e. free / 9
    assert abs((paused_at - 4096) - free / 9) <= FRAME
    assert 20_000 - FRAME < total - paused_at <= 20_000  # then the headroom, and only then a drop
    assert m.shared_used == paused_at - 4096 and m.hdrm[(0, 3)] == total - paused_at


@pytest.mark.parametrize("n", [1, 2, 4])
def test_the_threshold_is_dynamic_n_ports_share_the_buffer_at_free_over_8_plus_n(n):
    m = mmu()
    at = {p: None for p in range(n)}
    while any(v is None for v in at.values()):  # round robin: each port one frame at a time, until each paused
        for p in [p for p, v in at.items() if v is None]:
            m.enqueue(p, 3, FRAME)
            if m.update(p, 3) == "pause":
                at[p] = m.shared_of(p, 3)
    free = SMALL.buffer_bytes - 4 * (20_000 + 4096)
    assert all(abs(v - free / (8 + n)) <= n * FRAME for v in at.values()), (at, free / (8 + n))


def test_only_the_port_holding_the_bytes_is_paused():
    m = mmu()
    flood(m, 1)
    for _ in range(3):  # a little from port 2: in its reserve
        m.enqueue(2, 3, FRAME)
    assert m.update(2, 3) is None and m.update(1, 3) is None and m.paused == {(1, 3)}
    m.enqueue(1, 5, FRAME)  # another priority of the paused port is its own account
    assert m.update(1, 5) is None and (1, 5) not in m.paused


def test_a_pause_is_released_past_the_resume_offset_and_not_before():
    m = mmu()
    flood(m, 0)
    resumed_at = None
    while resumed_at is None:
        m.dequeue(0, 3, FRAME)
        if m.update(0, 3) == "resume":
            resumed_at = m.shared_of(0, 3)
        else:
            assert m.hdrm[(0, 3)] > 0 or m.shared_of(0, 3) + 3072 > m.threshold(0)
    assert m.hdrm[(0, 3)] == 0 and resumed_at + 3072 <= m.threshold(0) < resumed_at + 3072 + 2 * FRAME


frames = st.lists(st.tuples(st.integers(0, 3), st.sampled_from([3, 4]), st.integers(64, 9000)), max_size=300)


@settings(max_examples=200, deadline=None)
@given(frames, st.integers(0, 2000))
def test_every_byte_is_accounted_once_and_leaves_nothing_behind(arrivals, seed):
    """Frames in (when admitted) and out in FIFO order per (port, priority), interleaved: the shared bytes in use
    are always the sum of every account's shared part, and once everything left nothing is held or paused."""
    tight = MmuConfig(buffer_bytes=256 << 10, reserve_bytes=4096, resume_offset_bytes=3072, alpha_shift=3)
    m, held, rnd = mmu(headroom=30_000, config=tight), {}, random.Random(seed)  # ~14 KB shared a port: headroom used
    for port, prio, size in arrivals:
        if m.admit(port, prio, size):
            m.enqueue(port, prio, size)
            held.setdefault((port, prio), []).append(size)
        live = sorted(k for k, v in held.items() if v)
        if live and rnd.random() < 0.4:
            key = rnd.choice(live)
            m.dequeue(*key, held[key].pop(0))
        assert m.shared_used == sum(m.shared_of(*k) for k in m.ingress) >= 0
        for key in held:
            m.update(*key)
    for key, sizes in held.items():
        for size in sizes:
            m.dequeue(*key, size)
        m.update(*key)
    assert m.shared_used == 0 and not any(m.ingress.values()) and not any(m.hdrm.values()) and not m.paused


def test_bytes_out_that_never_came_in_are_an_error():
    m = mmu()
    m.enqueue(0, 3, FRAME)
    with pytest.raises(ValueError, match="never came in"):
        m.dequeue(0, 3, 2 * FRAME)


def test_a_buffer_all_headroom_and_reserve_is_refused():
    with pytest.raises(ValueError, match="nothing is left to share"):
        SwitchMmu(SMALL, {p: SMALL.buffer_bytes // 4 for p in range(4)})


def test_alpha_grows_with_the_ports_rate_past_the_nics():
    assert alpha_shift(200e9, 200e9) == 3 and alpha_shift(400e9, 200e9) == 2 and alpha_shift(800e9, 200e9) == 1
    assert alpha_shift(100e9, 200e9) == 3 and alpha_shift(25_600e9, 200e9) == 0  # never below alpha 1


def test_the_buffer_scales_like_the_links():
    assert MmuConfig().scaled(1000) == MmuConfig(33_554, 4, 3, 3)


def test_a_pause_lasts_its_quanta_is_refreshed_before_it_runs_out_and_zero_resumes():
    assert pause_s(0xFFFF, 100e9) == pytest.approx(335.5e-6, rel=1e-3)
    t = PauseTimer(rate_bps=1e9)
    assert not t.stopped(0.0)
    t.frame(0.0, 100)  # 51.2 us at 1 Gbit/s
    assert t.stopped(51.1e-6) and not t.stopped(51.3e-6)
    t.frame(refresh_s(100, 1e9), 100)  # refreshed half way: stopped until 25.6 + 51.2 us
    assert t.stopped(76.7e-6) and not t.stopped(76.9e-6)
    t.frame(30e-6, 0)
    assert not t.stopped(30e-6)
    with pytest.raises(ValueError, match="0-65535"):
        pause_s(1 << 16, 1e9)
