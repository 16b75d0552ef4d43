"""nccl-tests' output from collective results, read back the way nccl-tests' users parse it; size sweeps."""

from __future__ import annotations

import re
import statistics

import pytest

from topos.errors import InputError
from traffic.report import nccl_tests
from traffic.workload import size_sweep

# What scripts written for nccl-tests apply (e.g. Microsoft's superbench, cluster health checks): the average
# line, and a data row of 13 columns (size, count, type, redop, root, then time/algbw/busbw/#wrong twice).
AVG = re.compile(r"Avg bus bandwidth\s*:\s*([\d.]+)")
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)"
                 r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s*$")


def op(size: int, seconds: float, ranks: int = 8, delivered: int | None = None) -> dict:
    algbw = size * 8 / seconds
    expected = 2 * (ranks - 1) * size  # a ring all-reduce's bytes on the wire, all ranks
    return {"op": "allreduce", "ranks": ranks, "size": size, "seconds": seconds, "algbw_bps": algbw,
            "busbw_bps": algbw * 2 * (ranks - 1) / ranks, "bytes_expected": expected,
            "bytes_delivered": expected if delivered is None else delivered}


def test_rows_and_average_parse_like_nccl_tests():
    ops = [op(50_000, 0.040), op(50_000, 0.060), op(100_000, 0.100), op(100_000, 0.100)]
    text = nccl_tests(ops, scale=20_000, title="allreduce ring, 8 ranks")
    rows = [ROW.match(line) for line in text.splitlines() if not line.startswith("#")]
    assert len(rows) == 2 and all(rows)
    first, second = rows
    assert int(first.group(1)) == 1_000_000_000 and int(first.group(2)) == 250_000_000  # real bytes, floats
    assert (first.group(3), first.group(4), first.group(5)) == ("float", "sum", "-1")
    assert float(first.group(6)) == pytest.approx(50_000, abs=1)  # mean of 40 and 60 ms, in us
    assert float(first.group(7)) == pytest.approx(20.0, abs=0.01)  # 1 GB in 50 ms: 20 GB/s
    assert float(first.group(8)) == pytest.approx(35.0, abs=0.01)  # x 2(n-1)/n = 1.75
    assert first.group(9) == "0" and first.groups()[5:9] == first.groups()[9:13]  # in-place repeats
    assert float(second.group(8)) == pytest.approx(35.0, abs=0.01)  # 2 GB in 100 ms
    assert float(AVG.search(text).group(1)) == pytest.approx(35.0, abs=0.001)
    assert "# Out of bounds values : 0 OK" in text
    # the column header nccl-tests prints, so parsers that skip it by its words keep working
    assert re.search(r"^#\s+size\s+count\s+type\s+redop\s+root\s+time\s+algbw\s+busbw\s+#wrong", text, re.M)


def test_missing_bytes_are_wrong_elements():
    text = nccl_tests([op(1000, 0.01, ranks=2, delivered=2 * 1000 - 10)], scale=1, title="t")
    row = next(ROW.match(line) for line in text.splitlines() if not line.startswith("#"))
    assert row.group(9) == "3"  # 10 bytes short: 3 floats
    assert "# Out of bounds values : 3 FAILED" in text


def test_size_sweep_as_nccl_tests_b_e_f():
    assert size_sweep("1MB:8MB:x2") == [1_000_000, 2_000_000, 4_000_000, 8_000_000]
    assert size_sweep("1KB:3KB:+1KB") == [1000, 2000, 3000]
    assert size_sweep("4MB:4MB:x2") == [4_000_000]
    for bad in ("1MB:8MB", "8MB:1MB:x2", "1MB:8MB:x1", "1MB:8MB:*2", "1B:1GB:+1B", "a:b:x2"):
        with pytest.raises(InputError) as exc:
            size_sweep(bad)
        assert exc.value.field == "sizes"


def test_inspector_records_carry_the_plugins_fields_and_the_nccl_tests_figures():
    """One JSON line per op with the NCCL inspector plugin's header, metadata and coll_perf (format v4.0), whose
    size, time and bandwidths are the ones nccl-tests' table prints for the same ops; numbered per job."""
    import json

    from traffic.report import Dump, inspector_lines, rows

    ops = [op(50_000, 0.040) | {"job": "A", "label": "allreduce/ring", "ideal_busbw_bps": 1e7,
                                "fraction_of_ideal": 0.5},
           op(50_000, 0.060) | {"job": "A", "label": "allreduce/ring", "ideal_busbw_bps": 1e7,
                                "fraction_of_ideal": 0.4},
           op(100_000, 0.100, ranks=4) | {"job": "B", "label": "allreduce/ring", "ideal_busbw_bps": 1e7,
                                          "fraction_of_ideal": 0.3}]
    dump = Dump("abc1234", "lab-vm", 42, 1_700_000_000_000_000)
    recs = [json.loads(line) for line in inspector_lines(ops, 20_000, 2.5, {"A": 8, "B": 4}, dump,
                                                         {"variant": "v", "repetition": 0})]
    assert [set(r) for r in recs] == [{"header", "metadata", "coll_perf", "hpnlab"}] * 3
    first = recs[0]
    assert first["header"] == {"id": first["header"]["id"], "rank": 0, "n_ranks": 8, "nnodes": 8}
    assert first["metadata"] == {"inspector_output_format_version": "v4.0", "git_rev": "abc1234",
                                 "rec_mechanism": "hpnlab_emulation", "dump_timestamp_us": 1_700_000_000_000_000,
                                 "hostname": "lab-vm", "pid": 42}
    perf = first["coll_perf"]
    assert (perf["coll"], perf["coll_sn"], perf["coll_msg_size_bytes"], perf["coll_exec_time_us"]) == \
        ("AllReduce", 1, 1_000_000_000, 40_000)
    assert perf["coll_algobw_gbs"] == pytest.approx(25.0) and perf["coll_busbw_gbs"] == pytest.approx(43.75)
    assert [r["coll_perf"]["coll_sn"] for r in recs] == [1, 2, 1]  # per communicator (job)
    assert recs[0]["header"]["id"] == recs[1]["header"]["id"] != recs[2]["header"]["id"]
    assert first["hpnlab"] == {"variant": "v", "repetition": 0, "job": "A", "op": "allreduce/ring",
                               "fabric_s": 0.04, "wall_s": 0.1, "ideal_busbw_gbs": 25.0,
                               "fraction_of_ideal": 0.5, "bytes_ok": True}
    table = rows(ops[:2], 20_000)[0]  # nccl-tests' row of size 1 GB: the mean of the two records
    mean = statistics.mean(r["coll_perf"]["coll_exec_time_us"] for r in recs[:2])
    assert table["time_us"] == pytest.approx(mean) and table["size"] == perf["coll_msg_size_bytes"]
