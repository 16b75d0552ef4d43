"""A benchmark stopped part-way leaves nothing behind (bench/scale_bench.py: Mininet's own API as the baseline)."""

from __future__ import annotations

import pytest


def test_the_mininet_baseline_stopped_while_adding_links_removes_what_it_made(monkeypatch, no_leftovers):
    from mininet.net import Mininet

    from bench import scale_bench

    real, added = Mininet.addLink, []

    def add_then_stop(self, *a, **kw):
        if len(added) == 10:  # a Ctrl-C (or the SIGTERM that exit_cleanly_on_signals turns into one) here
            raise KeyboardInterrupt
        added.append(real(self, *a, **kw))
        return added[-1]

    monkeypatch.setattr(Mininet, "addLink", add_then_stop)
    with pytest.raises(KeyboardInterrupt):
        scale_bench.mininet_lifecycle(8)
    assert len(added) == 10  # veths were made before the stop; no_leftovers checks they are gone
