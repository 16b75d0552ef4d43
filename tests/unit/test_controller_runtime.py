"""Which controller runtime a network starts, refused before anything starts when it cannot (no root)."""

from __future__ import annotations

import pytest

from testbed.net.controller import ControllerProcess, check_runtime
from topos import build
from topos.errors import InputError


def test_unknown_or_missing_runtime_is_refused(monkeypatch, tmp_path):
    with pytest.raises(InputError) as exc:
        check_runtime("floodlight")
    assert (exc.value.field, exc.value.value) == ("controller_runtime", "floodlight")
    monkeypatch.setenv("HPNLAB_RYU_MANAGER", str(tmp_path / "ryu-manager"))
    with pytest.raises(InputError, match="make ryu-venv"):
        check_runtime("ryu-manager")


def test_ryu_manager_gets_the_app_and_its_configuration(monkeypatch, tmp_path):
    fake = tmp_path / "ryu-manager"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("HPNLAB_RYU_MANAGER", str(fake))
    cp = ControllerProcess(build("hpn"), "precise", tmp_path, "asic", runtime="ryu-manager")
    cp.of_port, cp.token_file = 16653, tmp_path / "t.token"
    cmd = cp._command("topo.json", 18080)
    assert cmd == [str(fake), "--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port", "16653", "controllers.app"]
    env = cp._env("topo.json", 18080)
    assert (env["HPNLAB_MODE"], env["HPNLAB_HASHING"], env["HPNLAB_REST_PORT"]) == ("precise", "asic", "18080")
    assert env["HPNLAB_REST_TOKEN_FILE"] == str(tmp_path / "t.token") and env["HPNLAB_TOPOLOGY"].endswith("topo.json")
