from __future__ import annotations

import json
import subprocess


def test_doctor_reports_what_it_finds(hpnlab, no_leftovers):
    r = hpnlab("doctor", "--json")
    assert r.returncode == 0, r.stderr
    caps = json.loads(r.stdout)
    # htb and tbf are in every kernel this runs on; the probe must find them.
    assert caps["qdiscs"]["htb"] is True and caps["qdiscs"]["tbf"] is True
    assert caps["root"] is True and caps["ovs_running"] is True
    assert caps["datapath"] == ("kernel" if caps["ovs_kernel_datapath"] else "user")
    # The probe's netem answer agrees with trying it by hand in a scratch namespace.
    by_hand = subprocess.run(["unshare", "--net", "sh", "-c",
                              "ip link add v0 type veth peer name v1 && tc qdisc add dev v0 root netem delay 1ms"],
                             capture_output=True).returncode == 0
    assert caps["qdiscs"]["netem"] is by_hand
    table = hpnlab("doctor")
    assert "OVS kernel datapath" in table.stdout and "qdisc netem" in table.stdout
    # this machine's kernel has BPF on the qdisc tracepoints (DESIGN.md): the PFC agent's programs load here
    assert caps["pfc_kernel_events"] == {"available": True, "why": None}
    assert caps["cc_bpf"] == {"available": True, "why": None}  # bpf_tcp_ca (DESIGN.md): DCTCP and DCQCN
    assert "BPF on the qdisc tracepoints" in table.stdout
    # tcp and roce run on any kernel, rdma where soft-RoCE works between namespaces (not this one)
    assert caps["transports"] == {"available": ["tcp", "roce", *(["rdma"] if caps["rxe_in_netns"] else [])],
                                  "auto": "rdma" if caps["rxe_in_netns"] else "tcp"}
    assert "tcp, roce" in table.stdout
