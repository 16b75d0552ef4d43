"""The DCTCP incast in ns-3 (mainline, from PyPI): run by bench/dctcp_bench.py with .venv-ns3's Python.

    .venv-ns3/bin/python bench/ns3_dctcp.py '{"senders": 4, "rate_bps": 2e7, "delay_s": 2.5e-4, "k_bytes": 24224,
                                              "buffer_bytes": 400000, "seconds": 10, "sample_s": 0.05}'

N senders and one receiver on one switch, every link at `rate_bps` with a one-way delay of `delay_s`; the
switch's port toward the receiver a RED queue disc that marks ECN-capable packets CE at and above `k_bytes`
(DCTCP's step: MinTh = MaxTh = K, instantaneous queue, no gentle mode, no hard drop) and holds at most
`buffer_bytes`; DCTCP at every sender, each with one bulk TCP flow to the receiver for `seconds`. Prints, as
one JSON object: the bytes the receiver got, and the queue disc's backlog in bytes every `sample_s`.
Imports nothing from the testbed (it runs in another venv).
"""

from __future__ import annotations

import json
import sys

MSS = 1448  # a 1,500-byte IP packet with TCP timestamps, as the emulated hosts send


def configure(c: dict, ns) -> None:
    ns.Config.SetDefault("ns3::TcpL4Protocol::SocketType", ns.StringValue("ns3::TcpDctcp"))
    ns.Config.SetDefault("ns3::TcpSocket::SegmentSize", ns.UintegerValue(MSS))
    for buf in ("SndBufSize", "RcvBufSize"):
        ns.Config.SetDefault(f"ns3::TcpSocket::{buf}", ns.UintegerValue(4 << 20))
    red = {"UseEcn": ns.BooleanValue(True), "UseHardDrop": ns.BooleanValue(False), "Gentle": ns.BooleanValue(False),
           "QW": ns.DoubleValue(1.0), "MinTh": ns.DoubleValue(c["k_bytes"]), "MaxTh": ns.DoubleValue(c["k_bytes"]),
           "MeanPktSize": ns.UintegerValue(1500),
           "MaxSize": ns.QueueSizeValue(ns.QueueSize(f"{int(c['buffer_bytes'])}B"))}
    for name, value in red.items():
        ns.Config.SetDefault(f"ns3::RedQueueDisc::{name}", value)


def sampler(cppyy) -> object:
    """A C++ function that records a queue disc's bytes every period (Python cannot be scheduled in ns-3)."""
    cppyy.cppdef("""
    #include "ns3/queue-disc.h"
    #include "ns3/simulator.h"
    namespace hpnlab {
    std::vector<uint32_t> backlog;
    void Sample(ns3::Ptr<ns3::QueueDisc> q, ns3::Time every) {
        backlog.push_back(q->GetNBytes());
        ns3::Simulator::Schedule(every, &Sample, q, every);
    }
    void StartSampling(ns3::Ptr<ns3::QueueDisc> q, ns3::Time at, ns3::Time every) {
        ns3::Simulator::Schedule(at, &Sample, q, every);
    }
    }
    """)
    return cppyy.gbl.hpnlab


def build(c: dict, ns):
    """The star: senders 0..N-1, the switch, the receiver; returns (receiver's address, its queue disc, nodes)."""
    n = c["senders"]
    nodes = ns.NodeContainer()
    nodes.Create(n + 2)
    switch, receiver = nodes.Get(n), nodes.Get(n + 1)
    ns.InternetStackHelper().Install(nodes)
    p2p = ns.PointToPointHelper()
    p2p.SetDeviceAttribute("DataRate", ns.DataRateValue(ns.DataRate(int(c["rate_bps"]))))
    p2p.SetChannelAttribute("Delay", ns.TimeValue(ns.Seconds(c["delay_s"])))
    p2p.SetQueue("ns3::DropTailQueue", "MaxSize", ns.QueueSizeValue(ns.QueueSize("1p")))  # the queue is the disc's
    addresses = ns.Ipv4AddressHelper()
    for i in range(n):
        addresses.SetBase(ns.Ipv4Address(f"10.{i + 1}.0.0"), ns.Ipv4Mask("255.255.255.0"))
        addresses.Assign(p2p.Install(nodes.Get(i), switch))
    down = p2p.Install(switch, receiver)
    tc = ns.TrafficControlHelper()
    tc.SetRootQueueDisc("ns3::RedQueueDisc")
    discs = tc.Install(down.Get(0))  # before the addresses: they would install the default disc
    addresses.SetBase(ns.Ipv4Address("10.0.0.0"), ns.Ipv4Mask("255.255.255.0"))
    to_receiver = addresses.Assign(down).GetAddress(1)
    ns.Ipv4GlobalRoutingHelper.PopulateRoutingTables()
    return to_receiver, discs.Get(0), nodes


def main() -> None:
    from ns import ns  # noqa: I001  (ns-3's bindings: only in .venv-ns3)
    import cppyy

    c = json.loads(sys.argv[1])
    configure(c, ns)
    to_receiver, disc, nodes = build(c, ns)
    n, start, port = c["senders"], 0.1, 9000
    sink = ns.PacketSinkHelper("ns3::TcpSocketFactory",
                               ns.InetSocketAddress(ns.Ipv4Address.GetAny(), port).ConvertTo())
    sinks = sink.Install(nodes.Get(n + 1))
    sinks.Start(ns.Seconds(0.0))
    bulk = ns.BulkSendHelper("ns3::TcpSocketFactory", ns.InetSocketAddress(to_receiver, port).ConvertTo())
    bulk.SetAttribute("MaxBytes", ns.UintegerValue(0))
    for i in range(n):
        app = bulk.Install(nodes.Get(i))
        app.Start(ns.Seconds(start))
        app.Stop(ns.Seconds(start + c["seconds"]))
    recorder = sampler(cppyy)
    recorder.StartSampling(disc, ns.Seconds(start), ns.Seconds(c["sample_s"]))
    ns.Simulator.Stop(ns.Seconds(start + c["seconds"]))
    ns.Simulator.Run()
    received = ns.DynamicCast[ns.PacketSink](sinks.Get(0)).GetTotalRx()
    stats = disc.GetStats()
    print(json.dumps({"received_bytes": int(received), "backlog": [int(b) for b in recorder.backlog],
                      "marked": int(stats.GetNMarkedPackets("Forced mark") + stats.GetNMarkedPackets("Unforced mark")),
                      "dropped": int(stats.nTotalDroppedPackets)}))
    ns.Simulator.Destroy()


if __name__ == "__main__":
    main()
