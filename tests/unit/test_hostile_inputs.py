"""What a hostile user or student can leave where hpnlab writes or reads (issue #42): links planted at the names
of files it writes, devices, FIFOs and folders where a lab expects a picture, numbers too large for a float,
policies that exit or never return, parameters that clash with the builder's own arguments, output paths
that cannot be written. Each gets a one-line refusal or a failed check with its hint; nothing is written
through a link, nothing hangs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.labs.checks import lab1, lab5
from testbed.labs.evidence import Evidence, number
from testbed.labs.registry import LABS, prepare
from tests.records import a_run, an_op, results_json
from topos.errors import InputError
from topos.inputs import open_output, save_figure, write_file
from traffic.simai import Plan

ROOT = Path(__file__).resolve().parents[2]
HPNLAB = str(Path(sys.executable).parent / "hpnlab")
SECRET = "the victim's own content\n"


def hpnlab(cwd: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([HPNLAB, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def one_line_error(r: subprocess.CompletedProcess, *words: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpnlab: error: ") and "Traceback" not in r.stderr, r.stderr
    assert all(w in lines[0] for w in words), lines[0]


def simai_text(rows: list[str], plan: Plan, count: str | None = None) -> str:
    """A SimAI file with traffic/simai.py's header and rows as given (odd on purpose), `count` as line 2."""
    return "\n".join([plan.header(), str(len(rows)) if count is None else count, *rows]) + "\n"


@pytest.fixture
def victim(tmp_path) -> Path:
    v = tmp_path / "victim"
    v.write_text(SECRET)
    return v


def test_writing_refuses_a_link_a_device_a_fifo_a_folder_and_a_hard_link(tmp_path, victim):
    link = tmp_path / "link"
    link.symlink_to(victim)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    hard = tmp_path / "hard"
    os.link(victim, hard)
    for path, says in ((link, "symbolic link"), (Path("/dev/full"), "not a regular file"), (fifo, "not a regular"),
                       (tmp_path, "not a regular file"), (hard, "hard links"), (tmp_path / "no" / "x", "cannot write")):
        with pytest.raises(InputError, match=says) as exc:
            write_file(path, "x", "out")
        assert exc.value.field == "out" and exc.value.value == str(path)
    assert victim.read_text() == SECRET


def test_writing_makes_a_new_file_empties_an_old_one_and_appends_when_asked(tmp_path):
    p = tmp_path / "f"
    write_file(p, "a long first content", "out")
    write_file(p, "short", "out")
    assert p.read_text() == "short"
    with open_output(p, "out", append=True) as f:
        f.write(b"+more")
    assert p.read_text() == "short+more"


def test_a_figure_is_written_as_png_through_the_same_door(tmp_path, victim):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure()
    try:
        save_figure(fig, tmp_path / "f.png", "png")
        (tmp_path / "l.png").symlink_to(victim)
        with pytest.raises(InputError, match="symbolic link"):
            save_figure(fig, tmp_path / "l.png", "png")
    finally:
        plt.close(fig)
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG" and victim.read_text() == SECRET


# Every primitive that creates or writes a file by name, outside the one door (topos/inputs.py)
WRITES = re.compile(r"\.write_text\(|\.write_bytes\(|\.savefig\((?!buf)|\bopen\([^)]*[\"'][wax]b?[\"']|"
                    r"shutil\.copy(?!fileobj)|os\.open\(")


def test_every_file_hpnlab_writes_goes_through_one_door():
    """results, logs, pictures, records, outputs the user names: no write primitive outside topos/inputs.py
    (reads go through its read_text; /proc, /sys and namespaces are the kernel's, opened read-only)."""
    found = []
    for pkg in ("topos", "controllers", "traffic", "testbed"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path == ROOT / "topos" / "inputs.py":
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if WRITES.search(line) and "O_RDONLY" not in line:
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == [], "\n".join(found)


def test_cli_outputs_refuse_links_devices_and_missing_folders_in_one_line(tmp_path, victim):
    (tmp_path / "results" / "topo").mkdir(parents=True)
    (tmp_path / "results" / "topo" / "hpn-mini.png").symlink_to(victim)
    one_line_error(hpnlab(tmp_path, "topo", "show", "hpn"), "--png", "symbolic link")
    (tmp_path / "out.json").symlink_to(victim)
    one_line_error(hpnlab(tmp_path, "topo", "export", "hpn", "-o", "out.json"), "--output", "symbolic link")
    one_line_error(hpnlab(tmp_path, "topo", "export", "hpn", "-o", "/dev/full"), "--output", "not a regular file")
    one_line_error(hpnlab(tmp_path, "topo", "export", "hpn", "-o", "/nonexistent/dir/x.json"), "--output",
                   "No such file or directory")
    one_line_error(hpnlab(tmp_path, "topo", "show", "hpn", "--png", "x.txt"), "--png", "ending in .png")
    os.mkfifo(tmp_path / "fifo.png")
    one_line_error(hpnlab(tmp_path, "topo", "show", "hpn", "--png", "fifo.png"), "--png", "not a regular file")
    assert victim.read_text() == SECRET
    r = hpnlab(tmp_path, "topo", "show", "hpn", "--png", "mine.png")
    assert r.returncode == 0 and (tmp_path / "mine.png").read_bytes()[:4] == b"\x89PNG", r.stderr


@pytest.mark.parametrize("args", [("topo", "show", "hpn", "name=x", "--no-png"),
                                  ("topo", "show", "hpn", "preset=paper", "--no-png"),
                                  ("topo", "export", "hpn", "preset=paper")])
def test_name_or_preset_as_a_parameter_is_an_unknown_parameter(tmp_path, args):
    one_line_error(hpnlab(tmp_path, *args), "unknown parameter")


@pytest.mark.parametrize("param", ["name", "preset"])
def test_an_experiments_topology_parameter_called_name_or_preset_is_refused(tmp_path, param):
    (tmp_path / "e.yaml").write_text(f"name: e\ntopology: {{name: hpn, params: {{{param}: x}}}}\n"
                                     "workload: {collective: {op: allreduce, size: 1MB, ranks: rail0}}\n")
    one_line_error(hpnlab(tmp_path, "validate", "e.yaml"), "unknown parameter", param)


@pytest.mark.parametrize("plant", ["dev-zero", "fifo", "folder", "link-to-a-png-elsewhere-is-read"])
def test_lab1_picture_that_is_not_a_regular_file_fails_its_check(tmp_path, plant):
    work = tmp_path / "lab-work"
    prepare(LABS[1], work)
    pic = work / "hpn.png"
    if plant == "dev-zero":
        pic.symlink_to("/dev/zero")
    elif plant == "fifo":
        os.mkfifo(pic)
    elif plant == "folder":
        pic.mkdir()
    else:
        (tmp_path / "real.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 100)
        pic.symlink_to(tmp_path / "real.png")
    (c,) = [c for c in lab1(Evidence(work)) if c.name == f"picture {pic}"]
    assert c.ok == (plant == "link-to-a-png-elsewhere-is-read")
    if not c.ok:
        assert "hpnlab topo show hpn --png" in c.hint


@pytest.mark.parametrize("value", ["1" * 400, "1e400", "-1e999", ".nan", "inf%", "-.inf"])
def test_an_answer_too_large_for_a_float_is_no_answer(value):
    assert number({"k": value}, "k") is None
    import yaml

    assert number(yaml.safe_load(f"k: {value}"), "k") is None


def test_lab1_with_a_400_digit_answer_fails_with_its_hint(tmp_path):
    prepare(LABS[1], tmp_path / "lab-work")
    (tmp_path / "lab-work" / "lab1.yaml").write_text(f"hpn_paths: {'9' * 400}\n")
    r = hpnlab(tmp_path, "lab", "check", "1")
    assert r.returncode == 1 and "FAIL answer 'hpn_paths'" in r.stdout and "Traceback" not in r.stderr, r.stderr


POLICIES = {
    "exits 0": "import sys\ndef choose(flow, candidates, load):\n    sys.exit(0)\n",
    "exits at import": "import os\nos._exit(0)\ndef choose(flow, candidates, load):\n    return 0\n",
    "loops": "def choose(flow, candidates, load):\n    while True:\n        pass\n",
    "answers a string": "def choose(flow, candidates, load):\n    return 'best'\n",
    "raises": "def choose(flow, candidates, load):\n    raise KeyboardInterrupt\n",
}


@pytest.mark.parametrize("kind", sorted(POLICIES))
def test_lab5_a_policy_that_exits_loops_or_answers_nonsense_is_a_failed_step(tmp_path, monkeypatch, kind):
    from testbed.labs import sandbox

    monkeypatch.setattr(sandbox, "CALL_TIMEOUT_S", 3.0)  # the loop's wait, shortened
    work = tmp_path / "lab-work"
    prepare(LABS[5], work)
    (work / "lab5_policy.py").write_text(POLICIES[kind])
    (c,) = lab5(Evidence(work))
    assert c.name == "your policy runs" and not c.ok, c
    assert {"exits 0": "ended (exit 0)", "exits at import": "ended (exit 0)", "loops": "did not return within 3 s",
            "answers a string": "must return an index", "raises": "KeyboardInterrupt"}[kind] in c.hint, c.hint


def test_lab5_a_policy_that_exits_makes_lab_check_fail_not_pass(tmp_path):
    work = tmp_path / "lab-work"
    prepare(LABS[5], work)
    (work / "lab5_policy.py").write_text(POLICIES["exits 0"])
    r = hpnlab(tmp_path, "lab", "check", "5")
    assert r.returncode == 1 and "FAIL your policy runs" in r.stdout, (r.stdout, r.stderr)


def test_lab5_the_students_code_runs_without_roots_rights(tmp_path, monkeypatch):
    """Run by root without sudo, the child is nobody's (under sudo, the caller's): its euid is in what it says."""
    import pwd

    monkeypatch.delenv("SUDO_UID", raising=False)
    work = tmp_path / "lab-work"
    prepare(LABS[5], work)
    (work / "lab5_policy.py").write_text("import os\ndef choose(flow, candidates, load):\n"
                                         "    raise RuntimeError(f'euid {os.geteuid()} groups {os.getgroups()}')\n")
    (c,) = lab5(Evidence(work))
    root = os.geteuid() == 0
    nobody = pwd.getpwnam("nobody").pw_uid
    assert f"euid {nobody if root else os.geteuid()} " in c.hint, c.hint
    if root:
        assert "groups []" in c.hint, c.hint


@pytest.mark.parametrize("rows", [["layer\t-1\t100\tNONE\t0\t1\tNONE\t0\t1\tNONE\t0\t100"],
                                  ["layer\t-1\t100\tALLREDUCE\t0\t1\tNONE\t0\t1\tNONE\t0\t100"]])
def test_a_workload_that_sends_nothing_is_refused_alike_by_validate_and_run(tmp_path, rows):
    (tmp_path / "w.txt").write_text(simai_text(rows, Plan(tp=1, gpus=8)))
    (tmp_path / "e.yaml").write_text("name: e\ntopology: {name: hpn}\nworkload: {simai: w.txt}\n")
    for cmd in ("validate", "run"):
        one_line_error(hpnlab(tmp_path, cmd, "e.yaml"), "workload=", "sends nothing over the network")
    assert not (tmp_path / "results").exists()


def test_an_error_never_prints_what_a_refused_file_holds(tmp_path):
    """A 0600 file given to hpnlab (run through sudo, it reads what root reads): the line names the field and the
    value's type, never the value."""
    secret = "hunter2-db-password"
    files = {"secret.yaml": f"db_password: {secret}\nname: x\n",
             "op.yaml": f"name: x\nworkload: {{collective: {{op: {secret}}}}}\n",
             "wl.yaml": f"ops: {secret}\n",
             "simai.txt": f"HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: {secret}\n1\nx\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        os.chmod(tmp_path / name, 0o600)
    for args in (("validate", "secret.yaml"), ("validate", "op.yaml"), ("traffic", "run", "--workload", "wl.yaml"),
                 ("traffic", "run", "--simai", "simai.txt")):
        r = hpnlab(tmp_path, *args)
        assert r.returncode == 2 and secret not in r.stdout + r.stderr, (args, r.stderr)
        assert "from the file>" in r.stderr or "line 1" in r.stderr, (args, r.stderr)


PAPER = ("name: big\ntopology: {name: hpn, preset: paper}\n"
         "workload: {collective: {op: allreduce, size: 64MB, ranks: rail0}}\n")
H256 = ("name: h256\ntopology: {name: hpn, params: {hosts_per_segment: 64, segments_per_pod: 4}}\n"
        "workload: {collective: {op: allreduce, size: 64MB, ranks: rail0}}\n")


def test_a_fabric_larger_than_this_testbed_emulates_is_refused_before_planning(tmp_path):
    """The paper's pod (2,040 hosts) planned a ring of 8 million flows before any answer; it is refused at once,
    by validate and run alike, while `topo show` still draws it."""
    (tmp_path / "paper.yaml").write_text(PAPER)
    for cmd in ("validate", "run"):
        one_line_error(hpnlab(tmp_path, cmd, "paper.yaml"), "topology=", "2,040 hosts", "more than the 256")
    assert hpnlab(tmp_path, "topo", "show", "hpn", "--preset", "paper", "--no-png").returncode == 0


def test_planning_reads_each_flow_once_per_op():
    """ideal_s sums every rank's bytes in one pass (it rescanned every flow for each rank: quadratic)."""
    from testbed.experiment.jobs import ideal_s
    from topos import build
    from traffic.collectives import build_schedule

    topo = build("hpn", hosts_per_segment=8)
    sched = build_schedule("allreduce", [(h.name, 0) for h in topo.hosts], 16_000_000)
    reads = 0

    class Counted:  # a flow whose bytes count their reads
        def __init__(self, f):
            self.src, self.dst, self._bytes = f.src, f.dst, f.bytes

        @property
        def bytes(self):
            nonlocal reads
            reads += 1
            return self._bytes

    counted = [[Counted(f) for f in step] for step in sched.steps]
    expect = ideal_s(sched, topo, 2)
    sched.steps = counted
    assert ideal_s(sched, topo, 2) == expect
    assert reads == 2 * sum(len(s) for s in counted)  # bytes out and bytes in, once each


@pytest.mark.timing
@pytest.mark.parametrize("spec", [PAPER, H256], ids=["paper-refused", "256-hosts-valid"])
def test_validate_answers_within_5_s(tmp_path, spec):
    import time

    (tmp_path / "e.yaml").write_text(spec)
    t = time.monotonic()
    r = hpnlab(tmp_path, "validate", "e.yaml")
    took = time.monotonic() - t
    assert r.returncode in (0, 2) and "Traceback" not in r.stderr, r.stderr
    assert took < 5, f"validate took {took:.1f} s"


def _simai(rows: int, count: str | None = None) -> str:
    row = "layer\t-1\t556\tALLREDUCE\t1048576\t1\tNONE\t0\t1\tALLREDUCE\t1048576\t100"
    return simai_text([row] * rows, Plan(tp=8, gpus=16), count)


@pytest.mark.parametrize("case,says", [
    ("rows", "10,001 rows, more than the 10,000"),
    ("bytes", "more than the 4194304 an input file may have"),
    ("count 1_0", "expected the number of rows"),
    ("count in other digits", "expected the number of rows"),
    ("iters", "70,000 ops, more than the 10,000"),
    ("repeat", "more than the 10,000 ops"),
])
def test_inputs_within_the_old_limits_that_took_minutes_are_refused_at_once(tmp_path, case, says):
    """A 200,000-row SimAI file planned for over 5 minutes in 9 GB; 10,000 iterations of a 7-size sweep 12 s."""
    files = {"rows": ("w.txt", _simai(10_001)), "bytes": ("w.txt", _simai(1) + "#" * (4 << 20)),
             "count 1_0": ("w.txt", _simai(10, "1_0")), "count in other digits": ("w.txt", _simai(1, "١"))}
    if case in files:
        name, text = files[case]
        (tmp_path / name).write_text(text)
        workload = "{simai: w.txt}"
    elif case == "iters":
        workload = "{collective: {op: allreduce, iters: 10000, size: [1MB, 2MB, 4MB, 8MB, 16MB, 32MB, 64MB]}}"
    else:
        (tmp_path / "w.yaml").write_text("ops:\n" + "  - {op: allreduce, size: 1MB, repeat: 6000}\n" * 2)
        workload = "{file: w.yaml}"
    (tmp_path / "e.yaml").write_text(f"name: e\ntopology: {{name: hpn}}\nworkload: {workload}\n")
    one_line_error(hpnlab(tmp_path, "validate", "e.yaml"), says)


LAX = {
    "a key twice": ("name: x\nname: y\n", "a key given twice in one mapping (line 4)"),
    "qos scale true": ("qos: {scale: true}\n", "qos.scale"),
    "qos scale '5'": ("qos: {scale: \"5\"}\n", "qos.scale"),
    "variants in a variant": ("variants:\n  - {label: a, variants: [{label: b}]}\n", "variants[0].variants"),
}


@pytest.mark.parametrize("case", sorted(LAX))
def test_what_was_taken_silently_is_refused(tmp_path, case):
    extra, says = LAX[case]
    base = "topology: {name: hpn}\nworkload: {collective: {op: allreduce, size: 1MB}}\n"
    (tmp_path / "e.yaml").write_text(("" if extra.startswith("name") else "name: e\n") + base + extra)
    one_line_error(hpnlab(tmp_path, "validate", "e.yaml"), says)


def test_a_nul_in_a_simai_file_is_refused(tmp_path):
    (tmp_path / "w.txt").write_text(_simai(2).replace("layer", "lay\x00er", 1))
    (tmp_path / "e.yaml").write_text("name: e\ntopology: {name: hpn}\nworkload: {simai: w.txt}\n")
    one_line_error(hpnlab(tmp_path, "validate", "e.yaml"), "line 3: a NUL character")


def test_rest_refuses_a_nul_in_a_name_and_the_same_flow_twice():
    from controllers import rest

    with pytest.raises(rest.ApiError, match="printable"):
        rest._text("name", "jo\x00b")

    class Precise:
        state = type("S", (), {"mode": "precise"})()

        def declare(self, flows):
            raise AssertionError("declared")

    handler = object.__new__(rest._Handler)
    handler.app = Precise()
    f = {"src": "h0", "dst": "10.0.0.5", "proto": "udp", "sport": 5000, "dport": 7000}
    handler._body = lambda: {"flows": [f, dict(f)]}
    with pytest.raises(rest.ApiError, match="named twice in one request"):
        handler.post_flows({})


def test_compare_refuses_a_busbw_that_is_not_a_number(tmp_path):

    for name, bw in (("20260101-000000-a-x", "1e6"), ("20260101-000001-b-x", "NaN")):
        (tmp_path / "results" / name).mkdir(parents=True)
        text = results_json({"name": "e"}, [a_run(variant="v", ops=[an_op(busbw_bps=123.25)])])
        (tmp_path / "results" / name / "results.json").write_text(text.replace("123.25", bw))
    one_line_error(hpnlab(tmp_path, "compare", "20260101-000000-a-x", "20260101-000001-b-x"), "finite number",
                   "busbw_bps")


def test_compare_refuses_a_link_planted_at_its_picture(tmp_path, victim):

    names = ("20260101-000000-a-x", "20260101-000001-b-x")
    for name in names:
        (tmp_path / "results" / name).mkdir(parents=True)
        (tmp_path / "results" / name / "results.json").write_text(results_json({"name": "e"}, [
            a_run(variant="v", ops=[an_op(busbw_bps=1e6, fraction_of_ideal=0.5)])]))
    (tmp_path / "results" / f"compare-{names[0]}-vs-{names[1]}.png").symlink_to(victim)
    one_line_error(hpnlab(tmp_path, "compare", *names), "compare picture", "symbolic link")
    assert victim.read_text() == SECRET
