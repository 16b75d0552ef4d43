"""Lab 5: your routing policy. `hpnlab lab check 5` places 8 flows on HPN with it and measures the links.

The controller's precise mode calls choose() once per flow, in order, with every
loop-free path the ECMP tables allow for that flow, and the number of flows
already placed on each directed link. Return the index of the path to use.

    flow        controllers.precise.FlowSpec: .src (host), .dst (IP), .proto, .sport, .dport
    candidates  list of controllers.precise.Path: .host_port (which NIC port: the plane) and
                .hops, a tuple of (switch, egress port) from the first ToR to the last
    load        dict {(node, egress port): flows already on that directed link}; the source
                host's own port is the link (flow.src, path.host_port)
"""


def choose(flow, candidates, load):
    # ---- edit below: return the index of the candidate path to use --------------------------------
    return 0
    # ---- edit above ----------------------------------------------------------------------------------
