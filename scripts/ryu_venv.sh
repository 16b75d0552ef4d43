#!/usr/bin/env bash
# .venv-ryu: the controller app under Ryu's own `ryu-manager controllers.app` (issue #17), in a venv of its
# own so Ryu's eventlet never meets the testbed's os-ken; pinned in requirements-ryu.txt. Idempotent:
# seconds when the pins did not change. Not part of the VM image (the VM tier does not use it).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="$here/.venv-ryu"
stamp="$venv/.hpnlab-installed"
want="$(sha256sum <"$here/requirements-ryu.txt" | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "[ryu-venv] up to date: $venv/bin/ryu-manager"
  exit 0
fi
echo "[ryu-venv] creating $venv (pins in requirements-ryu.txt)"
rm -rf "$venv"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements-ryu.txt"
"$venv/bin/ryu-manager" --version
echo "$want" >"$stamp"
