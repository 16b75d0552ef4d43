"""failover.yaml in the VM, where soft-RoCE makes rdma the default transport. Its host port's flaps end the
queue pairs on that port (rxe has one device per port and no bond: the VM tier saw them flushed, "Failed status
5", at once; the Vagrant VM's run halted the same way, issue #30), so `auto` takes TCP for it and an explicit
rdma is refused before anything is built. A fabric link's failure alone the rdma jobs ride through."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HPNLAB = str(Path(sys.executable).parent / "hpnlab")
SPEC = (ROOT / "experiments" / "failover.yaml").read_text()
REJECTED = "Failed status 9: wr_id 0"  # perftest's client: its first write completed as a remote invalid request


def hpnlab_run(tmp_path: Path, text: str) -> tuple[subprocess.CompletedProcess, dict | None]:
    spec = tmp_path / "failover.yaml"
    spec.write_text(text)
    r = subprocess.run([HPNLAB, "run", str(spec), "--quick"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=1800)
    found = re.findall(r"^results: (\S+)$", r.stdout, re.M)
    return r, json.loads((tmp_path / found[-1] / "results.json").read_text())["runs"][0] if found else None


def delivered(run: dict) -> bool:
    return bool(run["ops"]) and all(o["bytes_delivered"] == o["bytes_expected"] > 0 for o in run["ops"])


def summary(run: dict) -> str:
    fired = [f for f in run["failures"] if f.get("wall_t") is not None]
    return (f"transport {run['transport']}, {len(run['ops'])} ops, every byte delivered: {delivered(run)}, "
            f"{len(fired)} of {len(run['failures'])} failures fired, halted {run['halted']}, dilation "
            f"{run['dilation']:g}, traffic {run['traffic_s']['virtual']:.1f} s virtual in "
            f"{run['traffic_s']['wall']:.1f} s")


def test_auto_takes_tcp_through_a_host_port_flap_and_rdma_is_refused(tmp_path):
    (tmp_path / "rdma").mkdir()
    refused, _ = hpnlab_run(tmp_path / "rdma", SPEC.replace("routing: ecmp", "routing: ecmp\ntransport: rdma"))
    said = (refused.stdout + refused.stderr).strip()
    print(f"\nfailover.yaml over rdma: exit {refused.returncode}: {said.splitlines()[-1:]}")
    assert refused.returncode != 0 and "transport" in said and "h5:nic0:p0" in said
    (tmp_path / "auto").mkdir()
    r, run = hpnlab_run(tmp_path / "auto", SPEC)
    assert r.returncode == 0 and run is not None, (r.stdout + r.stderr)[-3000:]
    print(f"failover.yaml as shipped: {summary(run)}")
    assert run["transport"] == "tcp" and run["halted"] is None and delivered(run)


def test_rdma_rides_through_a_fabric_links_failure(tmp_path):
    # one iteration: under TCG each step is a perftest process pair (~7 s), so the uplink's failure at 1 s and
    # its repair at 4 s both fall inside the first op, and four took 8 minutes. A fifth of the bytes: at 40 GB
    # the VM's CPU ran out (idle 0%), the PFC agent went unheard for 2.3 s and the lossless class dropped 1,393
    # frames, which rxe resends from the lost one on: 465 s of traffic, 532-678 s for the test (CI past 60
    # minutes); at 8 GB dilation auto took D = 4 (48.5 s of traffic in 194 s), at 4 GB D = 8 (18.7 s in 150 s):
    # the rest of the test's 370 s is the network and its soft-RoCE devices coming up under TCG
    text = SPEC.replace("routing: ecmp", "routing: ecmp\ntransport: rdma").replace("iters: 4", "iters: 1")
    text = text.replace("size: 40GB", "size: 4GB")
    assert "size: 4GB" in text and "iters: 1" in text, "failover.yaml changed: see the sizes above"
    text = "\n".join(line for line in text.splitlines() if "h5:nic0:p0" not in line) + "\n"
    (tmp_path / "1").mkdir()
    r, run = hpnlab_run(tmp_path / "1", text)
    assert r.returncode == 0 and run is not None, (r.stdout + r.stderr)[-3000:]
    print(f"\nfailover.yaml without the host port's flaps, over rdma: {summary(run)}")
    if run["halted"] is not None and REJECTED in run["halted"]["why"]:
        # Soft-RoCE under TCG, 1 run of 2 here (kernel 7.3.4): the responder NAKed a queue pair's first writes
        # as invalid requests (IBV_WC_REM_INV_REQ_ERR, none completed) and the job halted, as NCCL's would on a
        # QP in error. rxe's fault, not the fabric's: measured again once, and that run must ride through.
        (tmp_path / "2").mkdir()
        r, run = hpnlab_run(tmp_path / "2", text)
        assert r.returncode == 0 and run is not None, (r.stdout + r.stderr)[-3000:]
        print(f"rxe rejected a queue pair's first writes; again: {summary(run)}")
    assert run["transport"] == "rdma" and run["halted"] is None and delivered(run)
    assert all(f.get("wall_t") is not None for f in run["failures"])  # down and up again, during the traffic
