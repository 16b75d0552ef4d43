"""The Vagrant VM and the qemu image are provisioned by the same scripts and the same kernel package."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_vagrantfile_and_image_share_their_provisioning():
    vagrant = (ROOT / "Vagrantfile").read_text()
    image = (ROOT / "scripts" / "vm" / "build-image.sh").read_text()
    for script in ("scripts/vm/kernel.sh", "scripts/bootstrap.sh"):
        assert script in vagrant, f"Vagrantfile does not run {script}"
        assert f"/opt/hpnlab/{script}" in image, f"the image build does not run {script}"
    # kernel first (its reboot), then the testbed, in both
    assert vagrant.index("scripts/vm/kernel.sh") < vagrant.index("scripts/bootstrap.sh")
    assert image.index("/opt/hpnlab/scripts/vm/kernel.sh") < image.index("/opt/hpnlab/scripts/bootstrap.sh")
    assert re.search(r'config\.vm\.box_version = BOX_VERSION', vagrant)
    assert re.search(r'PUBLIC_BOX = "debian/trixie64"', vagrant)
    # pinned, overridable when Debian removes the pinned version, and the file says how
    assert re.search(r'BOX_VERSION = BOX == PUBLIC_BOX \? ENV\.fetch\("HPNLAB_BOX_VERSION", "13\.\d{8}\.\d+"\) : ""',
                     vagrant)
    assert "vagrant cloud box show debian/trixie64" in vagrant
    # a box made here (make vagrant-box) is taken by name, of the same release as the image and the public box
    assert 'BOX = ENV.fetch("HPNLAB_BOX", PUBLIC_BOX)' in vagrant and "make vagrant-box" in vagrant
    assert "suite=trixie" in image and "suite=trixie" in (ROOT / "scripts" / "vm" / "build-box.sh").read_text()


def test_one_kernel_package_named_in_one_place():
    kernel = (ROOT / "scripts" / "vm" / "kernel.sh").read_text()
    assert "KERNEL_SUITE=trixie-backports" in kernel and "KERNEL_PACKAGE=linux-image-amd64" in kernel
    for f in ("Vagrantfile", "scripts/vm/build-image.sh"):
        text = (ROOT / f).read_text()
        assert "linux-image-amd64" not in text and "-t trixie-backports" not in text, f"{f} names a kernel of its own"
    mods = kernel.split("MODULES=(")[1].split(")")[0].split()
    assert {"openvswitch", "rdma_rxe", "sch_netem", "sch_red"} <= set(mods)


def test_vm_scripts_parse_and_image_inputs_exist():
    image = (ROOT / "scripts" / "vm" / "build-image.sh").read_text()
    inputs = image.split("inputs=(")[1].split(")")[0].split()
    assert all((ROOT / i).exists() for i in inputs)
    for f in (ROOT / "scripts" / "vm").glob("*.sh"):
        r = subprocess.run(["bash", "-n", str(f)], capture_output=True, text=True)
        assert r.returncode == 0, f"{f.name}: {r.stderr}"


def test_offline_box_is_provisioned_by_the_same_scripts_and_cached_by_them():
    box, lib = ((ROOT / "scripts" / "vm" / f).read_text() for f in ("build-box.sh", "box.sh"))
    provision = lib.split("provision_guest() {")[1].split("\n}\n")[0]
    # the Vagrantfile's provisioners, in its order, where its synced folder puts the project
    assert provision.index("/vagrant/scripts/vm/kernel.sh") < provision.index("/vagrant/scripts/bootstrap.sh")
    offline = box.split("offline) inputs+=(")[1].split(")")[0].split()
    assert {"scripts/vm/kernel.sh", "scripts/bootstrap.sh", "requirements.txt", "pyproject.toml"} <= set(offline)
    assert all((ROOT / i).exists() for i in offline)
    # the venv the box carries survives `vagrant up`: the synced folder's rsync excludes it (so never deletes it)
    assert 'rsync__exclude: [".venv/"' in (ROOT / "Vagrantfile").read_text()
    r = subprocess.run(["bash", str(ROOT / "scripts" / "vm" / "build-box.sh"), "cloud"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "BOX=cloud" in r.stderr and "fix:" in r.stderr and "\n" not in r.stderr.strip()
