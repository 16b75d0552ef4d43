#!/usr/bin/env bash
# The docs' pictures, taken the way the tests take them: the browser tests' screenshots (tests/emu/test_web.py:
# Debian's Chromium driven by Playwright, during a live run and on a finished run's folder) and the picture
# `hpnlab topo show` draws, and one experiment's plot. As root from the checkout (`make docs-images` installs the browser first); the
# pictures land in docs/img/, to be looked at and committed.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -f results/screenshots/*.png
.venv/bin/pytest -q -m "slow or not slow" tests/emu/test_web.py \
  -k "test_live_view_draws_the_fabric or test_run_shows_utilization"
mkdir -p docs/img
cp results/screenshots/live-allreduce.png docs/img/web-view.png
cp results/screenshots/live-link-failed.png docs/img/web-view-failed.png
cp results/screenshots/results.png docs/img/results-view.png
.venv/bin/hpnlab topo show hpn --png docs/img/topo-hpn.png >/dev/null
.venv/bin/hpnlab topo show dcn_plus --png docs/img/topo-dcn-plus.png >/dev/null
# one result figure: the busbw of the quick run of precise routing against ECMP
.venv/bin/hpnlab run --quick experiments/precise_vs_ecmp.yaml >/dev/null
run=$(ls -td results/*-precise_vs_ecmp-quick-* | head -1)
cp "$run/busbw.png" docs/img/precise-vs-ecmp-busbw.png
ls -l docs/img
