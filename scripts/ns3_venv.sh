#!/usr/bin/env bash
# .venv-ns3: mainline ns-3 from PyPI for bench/dctcp_bench.py (the same DCTCP incast in a packet-level
# simulator), in a venv of its own (cppyy and ns-3's libraries stay out of the testbed's); pinned in
# requirements-ns3.txt. Only the benchmark uses it.
set -euo pipefail
exec bash "$(dirname "$0")/pinned_venv.sh" ns3 requirements-ns3.txt python -c "from ns import ns; ns.TcpDctcp"
