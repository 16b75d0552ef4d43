#!/usr/bin/env bash
# .venv-ryu: the controller app under Ryu's own `ryu-manager controllers.app` (issue #17), in a venv of its
# own so Ryu's eventlet never meets the testbed's os-ken; pinned in requirements-ryu.txt. Not part of the VM
# image (the VM tier does not use it).
set -euo pipefail
exec bash "$(dirname "$0")/pinned_venv.sh" ryu requirements-ryu.txt ryu-manager --version
