"""Build the default HPN, ping every pair, fail one host port, ping again.

    sudo .venv/bin/python examples/fail_a_port.py

Dual-ToR: the host's other port (on the other plane's ToR) keeps every pair
reachable, so both pings should lose nothing.
"""

from testbed import Network
from topos import build

topo = build("hpn")  # 8 hosts, 16 switches, 64 links
with Network(topo, routing="controller", mode="ecmp") as net:
    before = net.pingall()
    print(f"before: {before.received}/{before.sent} replies")
    net.set_link("h5:nic0:p0", up=False)  # h5's NIC 0, port 0 (to its plane-0 ToR)
    after = net.pingall()
    print(f"after failing h5:nic0:p0: {after.received}/{after.sent} replies")
    print(f"controller events: {[e['event'] + ' ' + e['link'] for e in net.controller.get('/events')]}")
