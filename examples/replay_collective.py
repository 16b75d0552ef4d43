"""Replay one ring all-reduce over shaped links with precise routing and report it like nccl-tests.

    sudo .venv/bin/python examples/replay_collective.py

8 ranks (rail 0 of every host), 8 MB per rank emulated (160 GB real at 1/20,000).
"""

from testbed import Network, QosSpec
from topos import build
from traffic.collectives import build_schedule
from traffic.replay import Replayer
from traffic.transports import make

topo = build("hpn")
ranks = [(h.name, 0) for h in topo.hosts]
schedule = build_schedule("allreduce", ranks, 8_000_000, "ring")
with Network(topo, routing="controller", mode="precise", qos=QosSpec(scale=20_000)) as net:
    transport = make("tcp", net, tos=net.qos_spec.lossless_dscp << 2)
    transport.start()
    replayer = Replayer(net, transport, channels=2, routing="precise")
    try:
        r = replayer.run(schedule)
    finally:
        replayer.close()
        transport.stop()
print(f"{r.op}/{r.algorithm}, {r.ranks} ranks, {r.size:,} B: {r.seconds:.2f} s, "
      f"busbw {r.busbw_bps / 1e6:.2f} Mbit/s = {r.fraction_of_ideal:.1%} of ideal")
print(f"bytes delivered {r.bytes_delivered:,} of {r.bytes_expected:,} (closed form 2(n-1)/n per rank)")
