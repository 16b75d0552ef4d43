#!/usr/bin/env bash
# A venv of its own for a tool the testbed must not share packages with, pinned by a requirements file:
#   scripts/pinned_venv.sh NAME REQUIREMENTS CHECK...
# makes .venv-NAME from REQUIREMENTS and runs CHECK (a command, relative to the venv's bin/) once it is in.
# Idempotent: seconds when the pins did not change (a stamp of their hash in the venv).
set -euo pipefail
name="$1" requirements="$2"
shift 2
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="$here/.venv-$name"
stamp="$venv/.hpnlab-installed"
want="$(sha256sum <"$here/$requirements" | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "[$name-venv] up to date: $venv"
  exit 0
fi
echo "[$name-venv] creating $venv (pins in $requirements)"
rm -rf "$venv"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r "$here/$requirements"
"$venv/bin/$1" "${@:2}"
echo "$want" >"$stamp"
