from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from topos.errors import InputError
from traffic.replay import concurrent, op_schedule
from traffic.transports import choose
from traffic.workload import Op, from_plan, in_host_gpus, load_simai, load_yaml, map_groups, parse_size

WORKLOADS = Path(__file__).resolve().parents[1] / "data"  # written by traffic/simai.py (test_simai.py checks)


def test_parse_size():
    assert parse_size("64MB") == 64_000_000 and parse_size("1GiB") == 1 << 30 and parse_size(4096) == 4096
    with pytest.raises(InputError) as exc:
        parse_size("lots", "ops[0].size")
    assert exc.value.field == "ops[0].size"


def test_yaml_workload(tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text("name: demo\nops:\n  - {op: allreduce, size: 8MB, group: dp, repeat: 2}\n"
                 "  - {op: alltoall, size: 1MB, group: [h0:0, h1:0, h2:0]}\n")
    w = load_yaml(f)
    assert [o.op for o in w.ops] == ["allreduce", "alltoall"] and w.ops[0].repeat == 2
    assert w.ops[1].group == (("h0", 0), ("h1", 0), ("h2", 0))
    assert w.scaled(1000).ops[0].size == 8000


@pytest.mark.parametrize("text,field", [
    ("ops:\n  - {op: gather, size: 1MB}\n", "ops[0].op"),
    ("ops:\n  - {op: allreduce, size: big}\n", "ops[0].size"),
    ("ops:\n  - {op: allreduce, size: 1MB, group: mp}\n", "ops[0].group"),
    ("ops:\n  - {op: allreduce, size: 1MB, color: red}\n", "ops[0].color"),
    ("ops:\n  - {op: allreduce, size: 1MB, repeat: 0}\n", "ops[0].repeat"),
    ("ops:\n  - {op: allreduce, size: 1MB, group: [h0-0]}\n", "ops[0].group"),
    ("opz: []\n", "ops"),
])
def test_yaml_errors_name_the_field(tmp_path, text, field):
    f = tmp_path / "w.yaml"
    f.write_text(text)
    with pytest.raises(InputError) as exc:
        load_yaml(f)
    assert exc.value.field == field


def test_simai_files_import():
    w = load_simai(WORKLOADS / "simai_tp8_dp8_64g.txt")
    assert w.plan == {"tp": 8, "ep": 1, "pp": 1, "ga": 1, "all_gpus": 64, "dp": 8}
    dp = [o for o in w.ops if o.group == "dp"]
    # 7e9 parameters x 2 bytes over TP 8: the gradients' reduce-scatter, the parameters' all-gather at half
    assert [(o.op, o.size) for o in dp] == [("allgather", 875_000_000), ("reducescatter", 1_750_000_000)]
    tp = [o for o in w.ops if o.group == "tp"]
    # 8 layers x (attention, MLP) x (column, row) x (forward, input gradient), one all-reduce at the end
    assert Counter(o.op for o in tp) == {"allgather": 32, "reducescatter": 32, "allreduce": 1}
    assert {o.size for o in tp} == {2048 * 4096 * 2}
    micro = load_simai(WORKLOADS / "simai_allreduce_8g.txt")
    assert [(o.op, o.size, o.group) for o in micro.ops] == [("allreduce", 16777216, "tp"),
                                                             ("allreduce", 67108864, "tp")]
    moe = load_simai(WORKLOADS / "simai_moe_tp2_pp2_ep4_32g.txt")
    assert moe.plan == {"tp": 2, "ep": 4, "pp": 2, "ga": 1, "all_gpus": 32, "dp": 8}
    groups = Counter((o.op, o.group) for o in moe.ops)
    # 2 layers per stage x (dispatch, combine) x (forward, input gradient); _DP_EP rows land in dp
    assert groups[("alltoall", "ep")] == 8 and groups[("allgather", "dp")] == 2 == groups[("reducescatter", "dp")]


def test_simai_errors_give_the_line(tmp_path):
    head = "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 8 ep: 1 pp: 1 all_gpus: 16\n"
    bad_type = tmp_path / "a.txt"
    bad_type.write_text(head + "1\nlayer -1 1 ALLMIX 100 1 NONE 0 1 NONE 0 100\n")
    with pytest.raises(InputError, match="line 3") as exc:
        load_simai(bad_type)
    assert exc.value.field == "file" and "ALLMIX" not in str(exc.value)  # never the file's text
    short = tmp_path / "b.txt"
    short.write_text(head + "2\nlayer -1 1 ALLREDUCE 100 1 NONE 0 1 NONE 0 100\nbroken -1 1\n")
    with pytest.raises(InputError, match="line 4"):
        load_simai(short)
    count = tmp_path / "c.txt"
    count.write_text(head + "3\nlayer -1 1 ALLREDUCE 100 1 NONE 0 1 NONE 0 100\n")
    with pytest.raises(InputError) as exc:
        load_simai(count)
    assert "announces 3 rows" in str(exc.value)


SECRET = "root:$y$j9T$secret-hash:19000:0:99999:7:::"


@pytest.mark.parametrize("text", [
    SECRET + "\n" + SECRET + "\n",  # any file root can read: its text is never echoed
    "HYBRID model_parallel_NPU_group: 0 ep: 1 pp: 1 all_gpus: 16\n1\n",  # was a ZeroDivisionError
    "HYBRID model_parallel_NPU_group: 8 ep: 1 pp: 0 all_gpus: 16\n1\n",
    "HYBRID model_parallel_NPU_group: 8 ep: 1 pp: 1 all_gpus: 4\n1\n",
    "HYBRID model_parallel_NPU_group: -8 ep: 1 pp: 1 all_gpus: 16\n1\n",
    "HYBRID model_parallel_NPU_group: 8 ep: 1 pp: 1 all_gpus: 16\n1\nl -1 1 ALLREDUCE 99999999999999999999 1 NONE 0 1 "
    "NONE 0 100\n",
])
def test_bad_simai_files_give_one_line_errors(tmp_path, text):
    f = tmp_path / "w.txt"
    f.write_text(text)
    with pytest.raises(InputError) as exc:
        load_simai(f)
    assert "secret" not in str(exc.value) and "\n" not in str(exc.value) and exc.value.value == str(f)


def test_non_utf8_fifo_and_huge_files_are_refused(tmp_path):
    import os

    from topos import inputs

    f = tmp_path / "latin1.txt"
    f.write_bytes(b"HYBRID model_parallel_NPU_group: 8\n\xe9\xff\n")
    with pytest.raises(InputError, match=r"not UTF-8 text \(line 2\)"):
        load_simai(f)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        load_yaml(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        load_simai("/dev/zero")
    big = tmp_path / "big.yaml"
    big.write_bytes(b" " * 2048)
    with pytest.raises(InputError, match="more than the 1024"):
        inputs.read_text(big, "file", max_bytes=1024)


def test_groups_on_the_fabric():
    hosts = [f"h{i}" for i in range(8)]
    assert map_groups(Op("allreduce", 10, "dp"), hosts, 2) == [[(h, 0) for h in hosts], [(h, 1) for h in hosts]]
    assert map_groups(Op("allgather", 10, "tp"), hosts, 8, {"tp": 8}) == []  # fits a host: NVLink
    tp = map_groups(Op("allgather", 10, "tp"), hosts, 2, {"tp": 8})  # 4 hosts x 2 rails per group
    assert tp == [[(h, r) for h in hosts[i:i + 4]] for i in (0, 4) for r in (0, 1)]
    s = op_schedule(Op("allreduce", 800, "dp"), hosts, 2)
    assert s.groups == 2 and len(s.steps) == 14 and s.total_bytes == 2 * 2 * 7 * 800
    assert concurrent([s]) is s


def test_groups_that_fit_a_server_stay_on_nvlink():
    """Megatron's order: a DP or EP group at a stride of TP fits a server of 8 GPUs when TP x its size does."""
    hosts = [f"h{i}" for i in range(4)]
    plan = {"tp": 2, "ep": 4, "dp": 8, "pp": 1}
    assert map_groups(Op("alltoall", 10, "ep"), hosts, 8, plan, gpus=8) == []  # 2 x 4 = 8 GPUs: one server
    assert map_groups(Op("alltoall", 10, "ep"), hosts, 2, plan, gpus=2) != []  # servers of 2 GPUs: the fabric
    assert map_groups(Op("allreduce", 10, "dp"), hosts, 8, plan, gpus=8) != []  # 2 x 8 = 16: across servers
    assert map_groups(Op("allreduce", 10, "dp"), ["h0"], 8, plan, gpus=8) == []  # a job on one server
    assert in_host_gpus(Op("alltoall", 10, "ep"), plan, 8) == 4 and in_host_gpus(Op("allgather", 1, "tp"), plan, 8) == 2


def test_plan_generator():
    w = from_plan(tp=8, pp=2, dp=4, ep=2, params_b=7, layers=32)
    kinds = {(o.op, o.group) for o in w.ops}
    assert kinds == {("allgather", "tp"), ("reducescatter", "tp"), ("alltoall", "ep"), ("sendrecv", "pp"),
                     ("reducescatter", "dp"), ("allgather", "dp")}
    dp = next(o for o in w.ops if o.group == "dp")
    assert dp.size == int(7e9 * 2 / (8 * 2))
    with pytest.raises(InputError) as exc:
        from_plan(tp=0, pp=1, dp=1)
    assert exc.value.field == "tp"


def test_transport_choice():
    assert choose("auto", False) == "tcp" and choose("auto", True) == "rdma"
    # roce is the agents' own: any kernel, any number of servers, whatever fails
    assert choose("roce", False, servers=3, host_ports_fail=["h5:nic0:p0"]) == "roce"
    with pytest.raises(InputError) as exc:
        choose("rdma", False)
    assert "VM" in exc.value.fix and "lacks" in str(exc.value)
    # where the probe tried and failed, the error says what failed instead of blaming the kernel
    with pytest.raises(InputError) as exc:
        choose("rdma", False, rxe_failure="ib_write_bw exited 1: Couldn't connect")
    assert "Couldn't connect" in str(exc.value) and "lacks" not in str(exc.value)
    # a host port that goes down ends soft-RoCE's queue pairs on it (no bond): auto takes tcp, rdma is refused
    assert choose("auto", True, host_ports_fail=["h5:nic0:p0"]) == "tcp"
    assert choose("tcp", True, host_ports_fail=["h5:nic0:p0"]) == "tcp"
    with pytest.raises(InputError) as exc:
        choose("rdma", True, host_ports_fail=["h5:nic0:p0", "h1:nic0:p1"])
    assert exc.value.field == "transport" and "h5:nic0:p0" in str(exc.value) and "tcp" in exc.value.fix
    assert "\n" not in str(exc.value)
