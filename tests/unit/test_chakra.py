"""Chakra execution traces as one training iteration (traffic/chakra.py). The traces are the project's own,
written with Chakra's schema classes (mlc-chakra's et_def_pb2) and framing, in the shapes public traces have:
one collective per rank, a data-parallel iteration whose gradient all-reduces hang off the backward compute by
control dependencies, a ring written out as sends and receives; and the pitfalls found in the wild."""

from __future__ import annotations

import pytest
from chakra.schema.protobuf.et_def_pb2 import ALL_GATHER, ALL_REDUCE, COMM_COLL_NODE, Node
from chakra.schema.protobuf.et_def_pb2 import AttributeProto as Attr
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.traces import coll, comp, dp_iteration, p2p, ring, write
from topos.errors import InputError
from traffic.chakra import load
from traffic.iteration import predict
from traffic.workload import trace_ranks


def test_one_collective_per_rank_is_one_blocking_op_over_every_rank(tmp_path):
    """The shape of ASTRA-sim's microbenchmarks: each of 4 ranks one all-reduce of 1 MB, nothing else."""
    wl = load(write(tmp_path / "ar", [[coll(0, ALL_REDUCE, 1 << 20)]] * 4))
    (step,) = wl.iteration
    assert (step.compute_s, step.overlap, step.op.op, step.op.size, step.op.group) == \
        (0.0, False, "allreduce", 1 << 20, (0, 1, 2, 3))
    assert wl.plan == {"ranks": 4}


def test_a_data_parallel_iteration_overlaps_its_gradient_all_reduces_with_the_backward_compute(tmp_path):
    wl = load(write(tmp_path / "dp", [dp_iteration()] * 2))
    comm = [(s.compute_s, s.op.size if s.op else None, s.overlap) for s in wl.iteration]
    # layer 1's all-reduce runs on under layer 0's backward; layer 0's is waited for by the optimizer
    assert comm == [(pytest.approx(400e-6), 8 << 20, True), (pytest.approx(200e-6), 4 << 20, False),
                    (pytest.approx(50e-6), None, False)]
    t = predict(wl.iteration, lambda op: op.size / 1e9)  # 1 GB/s: 8.4 and 4.2 ms
    # gpu 0.4 ms, ar1 8.4 ms from 0.4; gpu to 0.6; ar0 after ar1 (one network) to 13.0 ms; optimizer 13.05
    assert t.seconds == pytest.approx((400 + 8 * 1048.576 + 4 * 1048.576 + 50) * 1e-6, rel=1e-6)
    assert t.compute_s == pytest.approx(650e-6)


def test_the_slowest_ranks_compute_is_what_the_collective_waits_for(tmp_path):
    fast = [comp(1, 100), coll(2, ALL_GATHER, 1000, deps=[1])]
    slow = [comp(1, 300), coll(2, ALL_GATHER, 1000, deps=[1])]
    (step,) = load(write(tmp_path / "ag", [fast, slow, fast])).iteration
    assert step.compute_s == pytest.approx(300e-6) and step.op.op == "allgather"


def test_a_ring_written_as_sends_and_receives_is_one_step_sent_eagerly(tmp_path):
    """Even ranks send first and odd ranks receive first, as NCCL's p2p rings do: all the sends are one step."""
    n, size = 4, 65536
    ranks = ring(n, size)
    (step,) = load(write(tmp_path / "ring", ranks)).iteration
    assert step.op.op == "sendrecv" and step.op.size == size
    pairs = set(zip(step.op.group[::2], step.op.group[1::2], strict=True))
    assert pairs == {(0, 1), (1, 2), (2, 3), (3, 0)}
    hosts = ["h0", "h1", "h2", "h3"]
    groups = trace_ranks(step.op, hosts, 1)  # one GPU per host: every pair crosses the fabric, all at once
    assert sorted(groups) == sorted([[("h0", 0), ("h1", 0)], [("h1", 0), ("h2", 0)], [("h2", 0), ("h3", 0)],
                                     [("h3", 0), ("h0", 0)]])
    assert trace_ranks(step.op, ["h0", "h1"], 2) == [[("h0", 1), ("h1", 0)], [("h1", 1), ("h0", 0)]]  # NVLink out


def test_process_groups_come_from_the_groups_given_and_a_missing_one_is_named(tmp_path):
    ranks = [[coll(0, ALL_REDUCE, 4096, pg="tp0" if r < 2 else "tp1")] for r in range(4)]
    prefix = write(tmp_path / "pg", ranks)
    wl = load(prefix, {"tp0": [0, 1], "tp1": [2, 3]})
    assert wl.iteration[0].op.group == (0, 1)  # rank 0's group: every rank's k-th op is one step
    with pytest.raises(InputError, match="process group 'tp0' has no ranks given") as exc:
        load(prefix)
    assert exc.value.value == "pg.0.et node 0"
    with pytest.raises(InputError, match="not distinct ranks of the trace's 4") as exc:
        load(prefix, {"tp0": [0, 4], "tp1": [2, 3]})
    assert exc.value.field == "groups"


def test_a_trace_without_global_metadata_and_ordered_by_control_dependencies_only_reads(tmp_path):
    nodes = [coll(5, ALL_REDUCE, 2048, ctrl=[9]), comp(9, 10)]  # ids out of order, control deps only
    (step,) = load(write(tmp_path / "bare", [nodes] * 2, metadata=False)).iteration
    assert step.compute_s == pytest.approx(10e-6) and step.op.size == 2048


@pytest.mark.parametrize("ranks,says,where", [
    ([[comp(1, 10, deps=[7])]] * 2, "depends on node 7", "t.0.et node 1"),
    ([[comp(1, 10, deps=[2]), comp(2, 10, deps=[1])]] * 2, "dependency cycle", "t.0.et node 1"),
    ([[coll(0, ALL_REDUCE, 10)], [coll(0, ALL_GATHER, 10)]], "not on every rank", "t.0.et node 0"),
    ([[coll(0, ALL_REDUCE, 10)], []], "communications on rank 1", "t.1.et"),
    ([[coll(0, 9, 10)]] * 2, "comm_type 9", "t.0.et node 0"),  # BARRIER
    ([[p2p(0, True, 1, 10)], [p2p(0, False, 0, 20)]], "receives nothing of that size", "t.0.et node 0"),
    ([[Node(id=0, type=COMM_COLL_NODE, attr=[Attr(name="comm_type", int64_val=0)])]] * 2, "without comm_size",
     "t.0.et node 0"),
])
def test_a_bad_trace_is_refused_naming_the_file_and_node(tmp_path, ranks, says, where):
    with pytest.raises(InputError) as exc:
        load(write(tmp_path / "t", ranks))
    assert says in exc.value.what and exc.value.value == where, exc.value.line()
    assert "\n" not in exc.value.line()


def test_missing_ranks_files_and_other_files_are_refused(tmp_path):
    write(tmp_path / "t", [[coll(0, ALL_REDUCE, 10)]] * 3)
    (tmp_path / "t.1.et").unlink()
    with pytest.raises(InputError, match="rank 1's trace is missing"):
        load(tmp_path / "t")
    with pytest.raises(InputError, match="no trace files"):
        load(tmp_path / "nothing")
    (tmp_path / "junk.0.et").write_bytes(b"\x05hello")
    with pytest.raises(InputError, match="not a Chakra trace"):
        load(tmp_path / "junk")
    nodes = [Node(id=0, type=COMM_COLL_NODE, attr=[Attr(name="comm_type", int64_val=0),
                                                   Attr(name="comm_size", int64_val=8),
                                                   Attr(name="involved_dim", bool_list={"values": [True, False]})])]
    with pytest.raises(InputError, match="involved_dim"):
        load(write(tmp_path / "dims", [nodes] * 2))


def test_a_trace_with_more_ranks_than_the_job_has_gpus_is_refused():
    wl_op = type("O", (), {"group": (0, 1, 2, 3, 4), "op": "allreduce"})()
    with pytest.raises(InputError, match="the trace has 5 ranks, the job 4 GPUs"):
        trace_ranks(wl_op, ["h0", "h1"], 2)


def test_an_experiment_names_its_traces_by_prefix_beside_it_and_plans_them(tmp_path):
    from testbed.experiment.planning import plan
    from testbed.experiment.spec import from_dict, load

    write(tmp_path / "dp", [dp_iteration()] * 4)
    body = "name: t\ntopology: {name: hpn}\nqos: {scale: 10000}\nworkload: {chakra: dp, iterations: 2}\n"
    (tmp_path / "e.yaml").write_text(body)
    (p,) = plan(load(tmp_path / "e.yaml"), tmp_path, False, None)
    job = p.jobs[0]
    assert job.hosts == ["h0", "h1"] and job.iterations == 2  # 4 ranks: the first two hosts of 2 GPUs
    assert [o.op for o, _s in job.items] == ["allreduce"] * 4
    (tmp_path / "f.yaml").write_text(body.replace("chakra: dp", "chakra: nope"))
    with pytest.raises(InputError, match="workload file not found") as exc:
        load(tmp_path / "f.yaml")
    assert exc.value.field == "workload.chakra"
    with pytest.raises(InputError, match="groups name a Chakra trace's process groups"):
        from_dict({"name": "t", "workload": {"collective": {"op": "allreduce"}, "groups": {"tp": [0, 1]}}})
    write(tmp_path / "big", [[coll(0, ALL_REDUCE, 1 << 20)]] * 20)
    (tmp_path / "g.yaml").write_text(body.replace("chakra: dp", "chakra: big"))
    with pytest.raises(InputError, match="written for 20 GPUs") as exc:
        plan(load(tmp_path / "g.yaml"), tmp_path, False, None)
    assert exc.value.field == "workload.chakra"


def test_a_file_that_is_not_a_trace_is_refused_without_printing_what_it_holds(tmp_path):
    """Read as root through sudo: the error names the file, never its bytes."""
    secret = b"hunter2-db-password"
    (tmp_path / "s.0.et").write_bytes(bytes([len(secret)]) + secret)
    with pytest.raises(InputError) as exc:
        load(tmp_path / "s")
    assert "not a Chakra trace" in exc.value.what and secret.decode() not in exc.value.line()
    (tmp_path / "fifo.0.et").unlink(missing_ok=True)
    import os

    os.mkfifo(tmp_path / "fifo.0.et")  # a FIFO would block a read: refused before reading
    with pytest.raises(InputError, match="not a regular file"):
        load(tmp_path / "fifo")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "l.0.et").symlink_to(tmp_path / "s.0.et")  # a link out of the prefix's folder
    with pytest.raises(InputError, match="not a regular file in the prefix's folder"):
        load(tmp_path / "out" / "l")


KINDS = {0: "allreduce", 2: "allgather", 5: "broadcast", 6: "alltoall", 7: "reducescatter"}


@settings(max_examples=25, deadline=None)
@given(ranks=st.integers(2, 8), comms=st.lists(st.tuples(st.sampled_from(sorted(KINDS)),
                                                         st.integers(1 << 12, 1 << 24), st.integers(0, 500)),
                                               min_size=1, max_size=6))
def test_traces_not_seen_before_become_steps_whose_flows_carry_the_closed_forms_bytes(tmp_path_factory, ranks,
                                                                                      comms):
    """Random iterations (collectives of every kind Chakra names, any size, compute before each, 2 to 8 ranks):
    one step per collective with its compute, and placed on servers of 2 GPUs, flows whose bytes are the
    collective's closed form."""
    from traffic import closed_form
    from traffic.replay import op_schedule

    nodes = []
    for i, (kind, size, us) in enumerate(comms):
        nodes += [comp(2 * i, us, deps=[2 * i - 1] if i else []), coll(2 * i + 1, kind, size, deps=[2 * i])]
    wl = load(write(tmp_path_factory.mktemp("t") / "r", [nodes] * ranks))
    steps = [s for s in wl.iteration if s.op is not None]
    assert [(s.op.op, s.op.size, s.compute_s) for s in steps] == \
        [(KINDS[k], size, pytest.approx(us * 1e-6)) for k, size, us in comms]
    hosts = [f"h{i}" for i in range(4)]
    for s in steps:
        sched = op_schedule(s.op, hosts, 2, wl.plan, 2)
        if sched is None:  # every rank inside one server: NVLink
            assert ranks <= 2
            continue
        assert sum(f.bytes for step in sched.steps for f in step) == closed_form.of(sched)
