"""Benchmarks: run as modules from the checkout, e.g. `sudo .venv/bin/python -m bench.pfc_bench`."""
