"""Property tests of every parser a user's file reaches: any input gives a valid object or one InputError line.

Never a traceback (TypeError, ZeroDivisionError, RecursionError, MemoryError...), never a multi-line error,
never the text of the file. What `hpnlab validate` runs (spec -> plan) is what is tested.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed.experiment.planning import plan
from testbed.experiment.spec import load
from topos import build_from
from topos.errors import InputError
from traffic.workload import load_simai, load_yaml

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Values of every kind a careless or hostile file holds: wrong types, signs, huge, non-finite, names with '/'.
odd = st.sampled_from([None, True, False, 0, 1, 2, 3, -1, 2.5, 1e11, 10**12, float("inf"), float("nan"), "",
                       "x", "../x", "1.2.3GB", "-5", "64MB", "rail0", "h0:0,h1:0", "h99:0", [], {}, [1], {"a": 1}])
small = st.integers(1, 4)


def one_line(exc: InputError) -> None:
    line = exc.line()
    assert "\n" not in line and len(line) < 400, line


def spec_text(data: dict) -> str:
    return yaml.safe_dump(data, allow_unicode=True)


topology = st.fixed_dictionaries({}, optional={
    "name": st.sampled_from(["hpn", "dcn_plus", "spine_leaf", "fat_tree", "rail_optimized", "moon"]) | odd,
    "preset": st.sampled_from(["mini", "paper", "nope"]),
    "params": st.dictionaries(st.sampled_from(["pods", "segments_per_pod", "hosts_per_segment", "rails", "k",
                                               "leaves", "aggs_per_plane", "tor_uplinks", "port_gbps", "dual_tor",
                                               "colour"]), small | odd, max_size=3),
})
collective = st.fixed_dictionaries({}, optional={
    "op": st.sampled_from(["allreduce", "allgather", "alltoall", "nope"]) | odd,
    "size": st.sampled_from(["1MB", "64KB", 4096]) | odd,
    "ranks": st.sampled_from(["rail0", "rail1", "h0:0,h1:0"]) | odd,
    "iters": small | odd, "algorithm": st.sampled_from(["ring", "tree", "nope"]) | odd,
})
failure = st.fixed_dictionaries({"at": st.floats(0, 5) | odd}, optional={
    "link": st.sampled_from(["h0:nic0:p0", "h3--tor-p0-s0-r0-b", "nope"]) | odd,
    "node": st.sampled_from(["agg-p0-pl0-0", "h0", "nope"]) | odd,
    "action": st.sampled_from(["down", "up", "flap", "explode"]), "period": st.floats(0.01, 2) | odd,
    "count": small | odd,
})
spec = st.fixed_dictionaries({"name": st.sampled_from(["t", "a.b-c_d"]) | odd}, optional={
    "topology": topology,
    "workload": st.fixed_dictionaries({}, optional={"collective": collective, "file": odd, "simai": odd}),
    "routing": st.sampled_from(["ecmp", "precise", "precise-host", "nope"]),
    "hashing": st.sampled_from(["ovs", "asic", "nope"]),
    "qos": st.fixed_dictionaries({}, optional={"scale": st.sampled_from(["auto", 20000]) | odd,
                                               "buffer_ms": odd, "weights": odd}),
    "failures": st.lists(failure, max_size=3),
    "random_failures": st.fixed_dictionaries({"link_down_per_min": st.floats(0.1, 5) | odd},
                                             optional={"repair_after": odd, "kinds": odd}),
    "repetitions": small | odd, "seed": small | odd, "horizon_s": st.floats(1, 60) | odd,
    "jobs": st.lists(st.fixed_dictionaries({"name": st.sampled_from(["A", "B"]) | odd, "collective": collective}),
                     max_size=2),
    "variants": st.lists(st.fixed_dictionaries({}, optional={"label": st.sampled_from(["a", "b"]) | odd,
                                                             "routing": st.sampled_from(["ecmp", "x"])}),
                         max_size=2),
    "paper": odd, "colour": odd,
})


@SETTINGS
@given(data=spec)
def test_any_experiment_file_validates_or_names_one_field(data):
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "e.yaml"
        f.write_text(spec_text(data))
        try:
            plan(load(f), Path(d), reduced=True)
        except InputError as exc:
            one_line(exc)


@SETTINGS
@given(name=st.sampled_from(["hpn", "dcn_plus", "spine_leaf", "fat_tree", "rail_optimized"]),
       params=st.dictionaries(st.sampled_from(["pods", "segments_per_pod", "hosts_per_segment", "rails", "k",
                                               "leaves", "spines", "hosts_per_leaf", "nics", "aggs_per_plane",
                                               "tor_uplinks", "backup_hosts_per_segment", "core_oversubscription",
                                               "port_gbps", "uplink_gbps", "dual_tor", "dual_plane", "name",
                                               "preset"]),
                              small | odd, max_size=4))
def test_any_topology_parameters_build_or_name_one_field(name, params):
    try:  # as a user gives them: an experiment's topology.params, or key=value on the command line
        topo = build_from(name, None, params)
    except InputError as exc:
        one_line(exc)
        return
    from topos.addressing import all_addresses

    assert all(0 <= int(octet) <= 255 for a in all_addresses(topo) for octet in a.ip.split("."))


ops = st.lists(st.fixed_dictionaries({}, optional={
    "op": st.sampled_from(["allreduce", "alltoall", "nope"]) | odd, "size": st.sampled_from(["1MB", 10]) | odd,
    "group": st.sampled_from(["dp", "tp", "xx"]) | odd, "repeat": small | odd, "label": odd, "extra": odd,
}), max_size=3)


@SETTINGS
@given(data=st.fixed_dictionaries({}, optional={"name": odd, "ops": ops | odd, "more": odd}) | odd)
def test_any_yaml_workload_loads_or_names_one_field(data):
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "w.yaml"
        f.write_text(yaml.safe_dump(data))
        try:
            load_yaml(f)
        except InputError as exc:
            one_line(exc)


token = st.sampled_from(["ALLREDUCE", "ALLGATHER_DP", "ALLTOALL_EP", "NONE", "BOGUS", "REDUCESCATTER_XX", "0", "1",
                         "-1", "100", "1048576", "x", "99999999999999999999", "1.5", ""])
header = st.lists(st.sampled_from(["HYBRID", "model_parallel_NPU_group:", "ep:", "pp:", "all_gpus:", "0", "1",
                                   "8", "16", "-2", "x"]), max_size=12).map(" ".join)


@SETTINGS
@given(head=header, count=token, rows=st.lists(st.lists(token, min_size=0, max_size=13).map(" ".join), max_size=4),
       raw=st.binary(max_size=40))
def test_any_simai_file_loads_or_names_the_line(head, count, rows, raw):
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "w.txt"
        f.write_bytes("\n".join([head, count, *rows]).encode() + raw)
        try:
            w = load_simai(f)
        except InputError as exc:
            one_line(exc)
            assert exc.value == str(f)  # the file is named; its text is never echoed
            return
        assert all(o.size > 0 for o in w.ops) and w.plan["dp"] >= 1


SHIPPED = sorted((Path(__file__).resolve().parents[2] / "experiments").glob("*.yaml"))
# What a careless or hostile edit of a shipped experiment does to a line: a value swapped for an odd one, the
# line dropped, doubled, cut short, or indented wrongly.
EDITS = ("value", "drop", "double", "cut", "indent")


def mutated(text: str, edits: list[tuple[int, str, object]]) -> str:
    lines = text.splitlines()
    for at, how, value in edits:
        if not lines:
            break
        i = at % len(lines)
        line = lines[i]
        if how == "value" and ":" in line:
            key = line.split(":", 1)[0]
            lines[i] = f"{key}: {yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}"
        elif how == "drop":
            del lines[i]
        elif how == "double":
            lines.insert(i, line)
        elif how == "cut":
            lines[i] = line[: len(line) // 2]
        elif how == "indent":
            lines[i] = "  " + line
    return "\n".join(lines) + "\n"


def _check_mutated(path: Path, edits: list) -> None:
    with tempfile.TemporaryDirectory() as d:
        for sibling in path.parent.iterdir():  # workload files the experiment names, beside it
            if sibling.is_dir():
                (Path(d) / sibling.name).symlink_to(sibling)
        f = Path(d) / path.name
        f.write_text(mutated(path.read_text(), edits))
        try:
            plan(load(f), Path(d), reduced=True)
        except InputError as exc:
            one_line(exc)


edits = st.lists(st.tuples(st.integers(0, 400), st.sampled_from(EDITS), odd), min_size=1, max_size=3)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(SHIPPED) - 1), edits=edits)
def test_a_shipped_experiment_edited_at_random_validates_or_names_one_field(index, edits):
    """What hpnlab validate and run do first, on a shipped experiment with one to three random edits: a valid
    experiment or one InputError line, never another exception (the CLI turns InputError into exit 2)."""
    _check_mutated(SHIPPED[index], edits)


@pytest.mark.slow
@settings(max_examples=600, deadline=5000, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(SHIPPED) - 1), edits=edits)
def test_many_more_random_edits_and_each_answers_within_5_s(index, edits):
    _check_mutated(SHIPPED[index], edits)
